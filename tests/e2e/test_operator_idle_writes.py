"""An idle operator makes no API writes across many resyncs, yet still repairs drift.

The operator (``ascend-pd run``) talks to the API server through the fault proxy with
every fault rate at zero, so the proxy only counts its requests per verb. Once the
example is Ready, several resync periods pass: reads go on (each resync reconciles),
writes must not. Then a user edits a managed field and adds a label of their own: the
next reconcile restores the field and keeps the label.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_pd_dev import cluster as dev_cluster
from ascend_pd_dev.certs import Pki
from ascend_pd_dev.faultproxy import STATS_PATH, FaultPlan, FaultProxy
from ascend_pd_dev.kubectl import install_crd
from ascend_pd_dev.local_run import OperatorProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RESYNC_SECONDS = 2
# the proxy forwards the admin bearer token of the dev cluster; it needs kubelet-sim for Ready
pytestmark = [pytest.mark.local, pytest.mark.simulated, pytest.mark.timeout(600)]


@pytest.fixture
def proxy(cluster: Any) -> Iterator[FaultProxy]:
    state = dev_cluster.load_state(cluster.layout)
    assert state is not None
    started = FaultProxy(state.server, FaultPlan(), ca_file=str(Pki(cluster.layout.pki).ca_crt))
    yield started.start()
    started.stop()


@pytest.fixture
def operator_log(
    cluster: Any, kubectl: Any, namespace: str, proxy: FaultProxy, tmp_path: Path
) -> Iterator[Path]:
    install_crd(cluster.kubeconfig, cluster.server_version >= (1, 25), "e2e-operator")
    doc = yaml.safe_load(cluster.kubeconfig.read_text())
    for entry in doc["clusters"]:
        entry["cluster"] = {"server": proxy.url}
    kubeconfig = tmp_path / "proxy.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(doc))
    log = tmp_path / "operator.log"
    operator = OperatorProcess(
        ["--namespace", namespace, "--resync-seconds", str(RESYNC_SECONDS)], kubeconfig, log
    )
    try:
        yield log
    finally:
        operator.stop()
        assert "Traceback" not in log.read_text(), log.read_text()[-4000:]


def stats(proxy: FaultProxy) -> dict[str, Any]:
    with urllib.request.urlopen(proxy.url + STATS_PATH, timeout=10) as response:
        result: dict[str, Any] = json.loads(response.read())
    return result


def get(kubectl: Any, namespace: str, *what: str) -> dict[str, Any]:
    done = kubectl("get", *what, "-n", namespace, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def test_idle_resyncs_make_no_writes_and_drift_is_still_repaired(
    kubectl: Any, namespace: str, proxy: FaultProxy, operator_log: Path, wait_until: Any
) -> None:
    docs = [d for d in yaml.safe_load_all((EXAMPLES / "deepseek-v2-lite.yaml").read_text()) if d]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    wait_until(
        lambda: (
            (get(kubectl, namespace, "pdd", "dsv2-lite").get("status") or {}).get("phase")
            == "Ready"
        ),
        "dsv2-lite Ready",
    )

    # Settled: a whole resync period passes without a single write.
    def quiet_period() -> dict[str, Any] | None:
        before = stats(proxy)
        time.sleep(RESYNC_SECONDS * 1.5)
        after = stats(proxy)
        return after if after["write_total"] == before["write_total"] else None

    before = wait_until(quiet_period, "a resync period without writes", timeout=120)
    time.sleep(RESYNC_SECONDS * 5)  # five more resyncs
    after = stats(proxy)
    assert after["requests"] > before["requests"], "no reads: the resyncs did not run"
    writes = {v: n - before["writes"].get(v, 0) for v, n in after["writes"].items()}
    assert not any(writes.values()), f"idle operator wrote: {writes}"

    # Drift is still repaired: a managed field edited back, a user's label kept.
    kubectl("label", "service", "dsv2-lite-decode-0", "-n", namespace, "team=inference")
    kubectl("scale", "statefulset", "dsv2-lite-decode-0", "-n", namespace, "--replicas=3")
    wait_until(
        lambda: (
            get(kubectl, namespace, "statefulset", "dsv2-lite-decode-0")["spec"]["replicas"] == 1
        ),
        "replicas restored",
    )
    kubectl("delete", "service", "dsv2-lite-prefill-0", "-n", namespace)
    wait_until(lambda: get(kubectl, namespace, "service", "dsv2-lite-prefill-0"), "restored")
    labels = get(kubectl, namespace, "service", "dsv2-lite-decode-0")["metadata"]["labels"]
    assert labels["team"] == "inference"
