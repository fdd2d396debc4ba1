"""The session's CRD checker: the default release's kube-apiserver (built once, cached per
user), started alone on free loopback ports with its own etcd data directory, the CEL CRD
installed, and everything stopped at the end."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ascend_pd_dev.controlplane import crd_server

# pytest runs with --import-mode=importlib: the helper module is importable once its folder
# is on sys.path, the ``reliability`` package (the bad-input corpus) once the repository is
sys.path.insert(0, str(Path(__file__).parent))
if str(Path(__file__).resolve().parents[2]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from crd_env import CEL_CRD, CRD_NAME, CRD_PATH, RESOURCES, Json, Kubectl


def _progress(message: str) -> None:
    print(f"crd-server: {message}", flush=True)


@pytest.fixture(scope="session")
def crd_server_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[crd_server.CrdServer]:
    root = tmp_path_factory.mktemp("crd-server")
    try:
        server = crd_server.start(root, _progress)
        yield server
    finally:
        crd_server.stop(root, _progress)


@pytest.fixture(scope="session")
def kubectl(crd_server_up: crd_server.CrdServer) -> Kubectl:
    return Kubectl(crd_server_up.kubeconfig)


def established(server: crd_server.CrdServer) -> Json | None:
    status, body = server.request("GET", CRD_PATH)
    if status != 200:
        return None
    conditions = {c["type"]: c for c in (body.get("status") or {}).get("conditions") or []}
    return body if conditions.get("Established", {}).get("status") == "True" else None


@pytest.fixture(scope="session")
def server(crd_server_up: crd_server.CrdServer, kubectl: Kubectl) -> crd_server.CrdServer:
    """The server with the shipped CEL CRD created and Established, and its resources served."""
    done = kubectl("create", "-f", str(CEL_CRD))
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if established(crd_server_up) and crd_server_up.request("GET", RESOURCES)[0] == 200:
            return crd_server_up
        time.sleep(0.2)
    _, body = crd_server_up.request("GET", CRD_PATH)
    pytest.fail(f"{CRD_NAME} not Established and served within 60s: {json.dumps(body)[:2000]}")
