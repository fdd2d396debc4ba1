"""Dev-cluster credentials made with the real openssl."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ascend_pd_dev.controlplane import certs

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def test_tokens_csv_lists_every_user_with_its_groups() -> None:
    tokens = {user: f"t-{i}" for i, user in enumerate(certs.USERS)}
    lines = certs.tokens_csv(tokens).splitlines()
    assert lines[0] == 't-0,admin,admin,"system:masters"'
    assert "t-2,system:kube-scheduler,system:kube-scheduler" in lines
    assert "t-4,ascend-pd:nobody,ascend-pd:nobody" in lines


def test_pki_is_made_once_and_the_serving_cert_names_loopback(tmp_path: Path) -> None:
    pki = certs.ensure_pki(tmp_path / "pki")
    text = subprocess.run(
        ["openssl", "x509", "-in", str(pki.serving_crt), "-noout", "-text"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "IP Address:127.0.0.1" in text and "DNS:kubernetes.default.svc" in text
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(pki.ca_crt), str(pki.serving_crt)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verify.returncode == 0, verify.stderr
    before = {p.name: p.read_bytes() for p in pki.root.iterdir()}
    again = certs.ensure_pki(tmp_path / "pki")
    assert {p.name: p.read_bytes() for p in again.root.iterdir()} == before
    assert set(pki.tokens()) == set(certs.USERS)
    assert len(set(pki.tokens().values())) == len(certs.USERS)
    assert (pki.root.stat().st_mode & 0o077) == 0


def test_the_aggregation_layer_gets_a_client_cert_of_its_own_ca(tmp_path: Path) -> None:
    pki = certs.ensure_pki(tmp_path / "pki")

    def verify(ca: Path) -> int:
        return subprocess.run(
            ["openssl", "verify", "-purpose", "sslclient", "-CAfile", str(ca),
             str(pki.front_proxy_client_crt)],
            capture_output=True, text=True, check=False,
        ).returncode  # fmt: skip

    # a client certificate of the front-proxy CA, not of the cluster CA: a client that the
    # cluster CA trusts could otherwise send any user in X-Remote-User
    assert verify(pki.front_proxy_ca_crt) == 0
    assert verify(pki.ca_crt) != 0
    subject = subprocess.run(
        ["openssl", "x509", "-in", str(pki.front_proxy_client_crt), "-noout", "-subject"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert subject.strip().endswith(f"CN = {certs.FRONT_PROXY_CLIENT}"), subject
    # an older state directory gets them on its next start, the rest kept
    for path in (pki.front_proxy_ca_crt, pki.front_proxy_client_crt):
        path.unlink()
    serving = pki.serving_crt.read_bytes()
    certs.ensure_pki(pki.root)
    assert verify(pki.front_proxy_ca_crt) == 0 and pki.serving_crt.read_bytes() == serving
