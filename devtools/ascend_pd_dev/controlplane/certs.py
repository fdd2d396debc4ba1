"""Credentials of the dev cluster: a CA, the API server's serving certificate, the service-account
key pair, and static bearer tokens for its users, made once with the ``openssl`` command line.

Everything lives in ``.dev/pki`` and is reused by later ``dev up`` runs, so kubeconfigs and
service-account tokens stay valid across restarts. Users are token users (``--token-auth-file``):

- ``admin`` in ``system:masters``: the kubeconfig printed by ``dev up``;
- ``system:kube-controller-manager`` and ``system:kube-scheduler``: bound by the API server's
  bootstrap RBAC policy;
- ``ascend-pd:kubelet-sim`` in ``system:masters``: the simulated kubelet (it creates nodes and
  writes pod status, which no single bootstrap role grants without the Node authorizer);
- ``ascend-pd:nobody``: authenticated, no role at all, so tests can show RBAC refusing it.

The aggregation layer has a CA of its own (``front-proxy-ca``, as kubeadm makes it): the API
server proxies a request to an extension API server (KEDA's metrics adapter, for
``external.metrics.k8s.io``) with the ``front-proxy-client`` certificate and the user in
request headers, which the extension server trusts because that CA signed the certificate.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ascend_pd_dev.controlplane.paths import UnderRoot

#: the in-cluster name of the API server's Service ClusterIP (first IP of the service range)
#: 4094 ClusterIPs: the operator benchmark's 300 deployments each have a router Service
#: (a /24 ran out: "failed to allocate a serviceIP: range is full").
SERVICE_CIDR = "10.0.0.0/20"
SERVICE_IP = "10.0.0.1"

#: the common name of the API server's client certificate for the aggregation layer (the only
#: name the extension API servers accept request headers from: ``--requestheader-allowed-names``)
FRONT_PROXY_CLIENT = "front-proxy-client"

#: user -> groups; the order is the order of tokens.csv
USERS: dict[str, tuple[str, ...]] = {
    "admin": ("system:masters",),
    "system:kube-controller-manager": (),
    "system:kube-scheduler": (),
    "ascend-pd:kubelet-sim": ("system:masters",),
    "ascend-pd:nobody": (),
}

SERVING_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


class CertError(RuntimeError):
    """openssl failed; the message carries its stderr."""


@dataclass(frozen=True)
class Pki:
    """Paths of the generated credentials."""

    root: Path

    ca_crt = UnderRoot("ca.crt")
    ca_key = UnderRoot("ca.key")
    serving_crt = UnderRoot("apiserver.crt")
    serving_key = UnderRoot("apiserver.key")
    sa_key = UnderRoot("service-account.key")
    sa_pub = UnderRoot("service-account.pub")
    tokens_csv = UnderRoot("tokens.csv")
    tokens_json = UnderRoot("tokens.json")
    front_proxy_ca_crt = UnderRoot("front-proxy-ca.crt")
    front_proxy_ca_key = UnderRoot("front-proxy-ca.key")
    front_proxy_client_crt = UnderRoot("front-proxy-client.crt")
    front_proxy_client_key = UnderRoot("front-proxy-client.key")

    def tokens(self) -> dict[str, str]:
        """user -> bearer token."""
        loaded: dict[str, str] = json.loads(self.tokens_json.read_text())
        return loaded


def serving_extensions() -> str:
    """The openssl extension section of the API server's serving certificate."""
    names = [f"DNS:{n}" for n in SERVING_NAMES] + ["IP:127.0.0.1", f"IP:{SERVICE_IP}"]
    return (
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        f"subjectAltName={','.join(names)}\n"
    )


def tokens_csv(tokens: dict[str, str]) -> str:
    """``--token-auth-file`` content: ``token,user,uid,"group1,group2"`` per user."""
    lines = []
    for user, groups in USERS.items():
        line = f"{tokens[user]},{user},{user}"
        if groups:
            line += ',"' + ",".join(groups) + '"'
        lines.append(line)
    return "\n".join(lines) + "\n"


def _openssl(*args: str) -> None:
    done = subprocess.run(
        ["openssl", *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False
    )
    if done.returncode != 0:
        raise CertError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def ensure_pki(root: Path) -> Pki:
    """Create whatever credential is missing under ``root``; keep what exists."""
    pki = Pki(root)
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    if not (pki.ca_crt.is_file() and pki.ca_key.is_file()):
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "3650",
            "-subj", "/CN=ascend-pd-dev-ca", "-keyout", str(pki.ca_key), "-out", str(pki.ca_crt),
        )  # fmt: skip
        # a new CA invalidates every certificate signed by the old one
        pki.serving_crt.unlink(missing_ok=True)
    if not (pki.serving_crt.is_file() and pki.serving_key.is_file()):
        csr = root / "apiserver.csr"
        ext = root / "apiserver.ext"
        ext.write_text(serving_extensions())
        _openssl(
            "req", "-new", "-newkey", "rsa:2048", "-nodes", "-sha256",
            "-subj", "/CN=kube-apiserver", "-keyout", str(pki.serving_key), "-out", str(csr),
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(pki.ca_crt), "-CAkey", str(pki.ca_key),
            "-CAcreateserial", "-days", "3650", "-sha256", "-extfile", str(ext),
            "-out", str(pki.serving_crt),
        )  # fmt: skip
        csr.unlink()
    if not (pki.sa_key.is_file() and pki.sa_pub.is_file()):
        _openssl(
            "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
            "-out", str(pki.sa_key),
        )  # fmt: skip
        _openssl("pkey", "-in", str(pki.sa_key), "-pubout", "-out", str(pki.sa_pub))
    _ensure_front_proxy(pki)
    tokens: dict[str, str] = {}
    if pki.tokens_json.is_file():
        tokens = pki.tokens()
    if set(tokens) != set(USERS):
        tokens = {user: tokens.get(user) or secrets.token_hex(24) for user in USERS}
        pki.tokens_json.write_text(json.dumps(tokens, indent=2) + "\n")
    pki.tokens_csv.write_text(tokens_csv(tokens))
    for path in root.iterdir():
        path.chmod(0o600)
    return pki


def _ensure_front_proxy(pki: Pki) -> None:
    """The aggregation layer's CA and the API server's client certificate signed by it (a
    state directory older than them gets them on the next start)."""
    if not (pki.front_proxy_ca_crt.is_file() and pki.front_proxy_ca_key.is_file()):
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "3650",
            "-subj", "/CN=ascend-pd-dev-front-proxy-ca", "-keyout", str(pki.front_proxy_ca_key),
            "-out", str(pki.front_proxy_ca_crt),
        )  # fmt: skip
        pki.front_proxy_client_crt.unlink(missing_ok=True)
    if pki.front_proxy_client_crt.is_file() and pki.front_proxy_client_key.is_file():
        return
    csr = pki.root / "front-proxy-client.csr"
    ext = pki.root / "front-proxy-client.ext"
    ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                   "extendedKeyUsage=clientAuth\n")  # fmt: skip
    _openssl(
        "req", "-new", "-newkey", "rsa:2048", "-nodes", "-sha256",
        "-subj", f"/CN={FRONT_PROXY_CLIENT}", "-keyout", str(pki.front_proxy_client_key),
        "-out", str(csr),
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(pki.front_proxy_ca_crt),
        "-CAkey", str(pki.front_proxy_ca_key), "-CAcreateserial", "-days", "3650", "-sha256",
        "-extfile", str(ext), "-out", str(pki.front_proxy_client_crt),
    )  # fmt: skip
    csr.unlink()
