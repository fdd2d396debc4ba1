"""Fixtures of the cluster e2e suite (marker ``e2e``; every test under ``tests/e2e`` gets it).

Which cluster:

- ``$KUBECONFIG`` naming a reachable cluster other than this project's dev cluster: the suite
  runs against it unchanged. Tests marked ``simulated`` (they need kubelet-sim's nodes, e.g. to
  see pods become Ready, or to use the ``kubelet-sim.ascend-pd.dev/outcome`` annotation) are
  skipped there unless ``ASCEND_PD_E2E_SIMULATED=1``. ``local`` tests (they need the dev
  cluster's own credentials or its version) are skipped there always.
- otherwise the local control plane (``ascend-pd-dev cluster up``): started once per session
  (the first run builds it, ~4 min on 2 cores, progress on stderr) and stopped at the end only if
  this session started it and no other pytest session still uses it; a cluster that was already up
  is reused and left up.

Fixtures (all session-scoped except ``namespace``):

- ``cluster`` -> ``E2ECluster``: ``kubeconfig`` (Path), ``local`` (the dev cluster?),
  ``simulated`` (kubelet-sim nodes available?), ``server_version`` ((major, minor)),
  ``api_client`` (a ``kubernetes.client.ApiClient``), ``layout`` (the dev cluster's
  ``cluster.Layout`` when local, else None).
- ``kubectl(*args, input=None, check=True, kubeconfig=None) -> CompletedProcess[str]``: runs the
  project's kubectl (``ascend_pd_dev.testtools.kubectl.kubectl_path()``) against the cluster;
  with ``check`` a non-zero exit fails the test showing stderr.
- ``api_client``: the ``kubernetes.client.ApiClient`` of ``cluster``.
- ``namespace`` (function scope): a fresh namespace named after the test, deleted afterwards
  (without waiting for the namespace controller). On the dev cluster it comes with what an
  administrator gives a team: a PersistentVolume kept for its ``models`` claim, and the claim
  itself (``examples/models-pvc.yaml``) unless the test is marked ``no_models_claim``
  (``ascend_pd_dev.testtools.volumes``).
- ``wait_until(predicate, what, timeout=180.0, interval=0.3)``: polls until ``predicate()``
  returns something truthy and returns it; fails naming ``what`` and the last value otherwise.
  The timeout only bounds a hung test; nothing asserts on durations.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_pd_dev.controlplane import cluster as dev_cluster
from ascend_pd_dev.controlplane import paths
from ascend_pd_dev.controlplane.certs import Pki
from ascend_pd_dev.testtools import volumes
from ascend_pd_dev.testtools.faultproxy import STATS_PATH, FaultPlan, FaultProxy
from ascend_pd_dev.testtools.kubectl import install_crd, kubectl_path
from ascend_pd_dev.testtools.local_run import OperatorProcess

E2E_DIR = Path(__file__).resolve().parent
#: kube-scheduler gives each runtime pod in the host network a node of its own (the same host
#: ports): a rollout with surge of the PP example takes 10 whole nodes at once
E2E_NODES = 12


@dataclass
class E2ECluster:
    kubeconfig: Path
    local: bool
    simulated: bool
    server_version: tuple[int, int]
    api_client: Any
    layout: dev_cluster.Layout | None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "simulated: needs kubelet-sim's simulated Ascend nodes (the dev cluster)"
    )
    config.addinivalue_line("markers", "local: needs the dev cluster itself (its credentials)")
    config.addinivalue_line(
        "markers", "no_models_claim: the namespace gets the models volume but not its claim"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


def _progress(message: str) -> None:
    # straight to the terminal: the first build takes minutes and pytest captures output
    print(f"ascend-pd-dev cluster: {message}", file=sys.__stderr__, flush=True)


def _reachable(kubeconfig: Path) -> bool:
    done = subprocess.run(
        [str(kubectl_path()), "--kubeconfig", str(kubeconfig), "--request-timeout=5s",
         "get", "--raw", "/version"],
        capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return done.returncode == 0


def _server_version(kubeconfig: Path) -> tuple[int, int]:
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    info = client.VersionApi(api_client).get_code()
    minor = re.match(r"\d+", info.minor or "0")
    return int(info.major), int(minor.group(0)) if minor else 0


@pytest.fixture(scope="session")
def cluster() -> Iterator[E2ECluster]:
    from kubernetes import config

    layout = dev_cluster.Layout(paths.test_cluster_state_dir())
    env_config = os.environ.get("KUBECONFIG", "")
    external = (
        Path(env_config)
        if env_config and ":" not in env_config and Path(env_config).is_file()
        else None
    )
    if external is not None and external.resolve() != layout.kubeconfig.resolve():
        if _reachable(external):
            simulated = os.environ.get("ASCEND_PD_E2E_SIMULATED") == "1"
            yield E2ECluster(
                external,
                False,
                simulated,
                _server_version(external),
                config.new_client_from_config(config_file=str(external)),
                None,
            )
            return
        _progress(f"KUBECONFIG={external} is unreachable; using the local control plane")

    with dev_cluster.session(
        layout, lambda: dev_cluster.fresh(layout, nodes=E2E_NODES, ascend_per_node=8,
                                        progress=_progress, domains=2),
        lambda: dev_cluster.down(layout, _progress),
    ):  # fmt: skip
        kubeconfig = layout.kubeconfig
        api_client = config.new_client_from_config(config_file=str(kubeconfig))
        yield E2ECluster(kubeconfig, True, True, _server_version(kubeconfig), api_client, layout)


@pytest.fixture(autouse=True)
def _skip_by_cluster_kind(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("simulated") or request.node.get_closest_marker("local"):
        info: E2ECluster = request.getfixturevalue("cluster")
        if request.node.get_closest_marker("local") and not info.local:
            pytest.skip("needs the local dev cluster (ascend-pd-dev cluster up)")
        if request.node.get_closest_marker("simulated") and not info.simulated:
            pytest.skip(
                "needs simulated Ascend nodes (set ASCEND_PD_E2E_SIMULATED=1 if the "
                "cluster runs kubelet-sim)"
            )


Kubectl = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="session")
def kubectl(cluster: E2ECluster) -> Kubectl:
    binary = str(kubectl_path())

    def run(
        *args: str, input: str | None = None, check: bool = True, kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        cmd = [binary, "--kubeconfig", str(kubeconfig or cluster.kubeconfig), *args]
        done = subprocess.run(cmd, input=input, capture_output=True, text=True, check=False,
                              timeout=300)  # fmt: skip
        if check and done.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
        return done

    return run


@pytest.fixture(scope="session")
def api_client(cluster: E2ECluster) -> Any:
    return cluster.api_client


@pytest.fixture
def namespace(
    request: pytest.FixtureRequest, kubectl: Kubectl, cluster: E2ECluster
) -> Iterator[str]:
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"e2e-{base}-{uuid.uuid4().hex[:5]}"
    kubectl("create", "namespace", name)
    if cluster.local:
        claim = not request.node.get_closest_marker("no_models_claim")
        docs = volumes.for_namespace(paths.project_root(), name, claim)
        kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    yield name
    kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)
    if cluster.local:
        kubectl("delete", "pv", volumes.volume_name(name), "--wait=false", "--ignore-not-found",
                check=False)  # fmt: skip


WaitUntil = Callable[..., Any]


def _wait_until(
    predicate: Callable[[], Any], what: str, timeout: float = 180.0, interval: float = 0.3
) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            pytest.fail(f"gave up waiting for {what} after {timeout:.0f}s; last value: {last!r}")
        time.sleep(interval)


@pytest.fixture(scope="session")
def wait_until() -> WaitUntil:
    return _wait_until


@pytest.fixture
def counting_proxy(cluster: E2ECluster) -> Iterator[FaultProxy]:
    """The fault proxy in front of the dev cluster with every fault rate zero: it only counts
    the requests that pass (``proxy_stats``)."""
    assert cluster.layout is not None
    state = dev_cluster.load_state(cluster.layout)
    assert state is not None
    started = FaultProxy(state.server, FaultPlan(), ca_file=str(Pki(cluster.layout.pki).ca_crt))
    yield started.start()
    started.stop()


@pytest.fixture
def proxy_stats(counting_proxy: FaultProxy) -> Callable[[], dict[str, Any]]:
    def read() -> dict[str, Any]:
        url = counting_proxy.url + STATS_PATH
        with urllib.request.urlopen(url, timeout=10) as response:
            result: dict[str, Any] = json.loads(response.read())
        return result

    return read


@pytest.fixture
def proxied_operator(
    cluster: E2ECluster, namespace: str, counting_proxy: FaultProxy, tmp_path: Path
) -> Iterator[Callable[[float], OperatorProcess]]:
    """Start ``ascend-pd run`` for the test's namespace behind the counting proxy, with the
    given resync period; the test fails if the operator logged a traceback."""
    started: list[tuple[OperatorProcess, Path]] = []

    def start(resync_seconds: float) -> OperatorProcess:
        install_crd(cluster.kubeconfig, "e2e-operator")
        doc = yaml.safe_load(cluster.kubeconfig.read_text())
        for entry in doc["clusters"]:
            entry["cluster"] = {"server": counting_proxy.url}
        kubeconfig = tmp_path / "proxy.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(doc))
        log = tmp_path / "operator.log"
        args = ["--namespace", namespace, "--resync-seconds", f"{resync_seconds:g}"]
        operator = OperatorProcess(args, kubeconfig, log)
        started.append((operator, log))
        return operator

    yield start
    for operator, log in started:
        operator.stop()
        assert "Traceback" not in log.read_text(), log.read_text()[-4000:]


@pytest.fixture
def get_json(kubectl: Kubectl, namespace: str) -> Callable[..., dict[str, Any]]:
    """``kubectl get WHAT -n <the test's namespace> -o json`` as a dict ({} if absent)."""

    def get(*what: str) -> dict[str, Any]:
        done = kubectl("get", *what, "-n", namespace, "-o", "json", check=False)
        return json.loads(done.stdout) if done.returncode == 0 else {}

    return get


@pytest.fixture(scope="module")
def crd(cluster: E2ECluster, kubectl: Kubectl) -> None:
    """The PDDeployment CRD, with CEL where the server has it."""
    install_crd(cluster.kubeconfig, "e2e-operator")


@pytest.fixture
def operator(cluster: E2ECluster, crd: None, namespace: str, tmp_path: Path) -> Iterator[Any]:
    """``ascend-pd run --namespace <the test's namespace>`` as a local process."""
    from pdd_e2e import Operator

    op = Operator(cluster.kubeconfig, namespace, tmp_path / "operator.log")
    try:
        yield op
    finally:
        op.stop()
