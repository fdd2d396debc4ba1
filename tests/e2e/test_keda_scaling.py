"""The real KEDA scales a role through its PDRoleScaler: a ScaledObject with a ``prometheus``
trigger, on a query a real Prometheus answers from a metric the test controls.

KEDA 2.21 (``controlplane.build_keda``: the operator and its metrics adapter built from the
release's Go module; ``testtools.keda``: installed and run as its chart would, the adapter
registered for ``external.metrics.k8s.io`` through the aggregation layer) against the dev
cluster; Prometheus 2.42 scrapes a gauge this test serves every second. The chain under test
is the one a user's cluster runs: Prometheus -> KEDA's operator (the trigger) -> the adapter
-> the HPA controller of kube-controller-manager (the HPA KEDA made) -> ``/scale`` of the
PDRoleScaler -> our operator, which adds or drains whole decode instances.

The oracles are the API server's objects: the scaler's ``spec.replicas`` (what the HPA
wrote through ``/scale``), its ``status.replicas`` and the decode StatefulSets the operator
made (what it did about it); never KEDA's own objects. Marker ``prometheus``: the
``prometheus-e2e`` tier, whose ``prepare`` step builds KEDA once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pdd_e2e import apply, example, get, pdd_doc
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from ascend_pd_dev.controlplane import build_keda, prometheus
from ascend_pd_dev.testtools.keda import Keda
from ascend_pd_dev.testtools.prometheus_server import PrometheusServer

pytestmark = [pytest.mark.prometheus, pytest.mark.simulated, pytest.mark.local,
              pytest.mark.timeout(1500)]  # fmt: skip

NAME = "dsv2-lite"
SCALER = f"{NAME}-decode"
METRIC = "ascend_pd_test_decode_queue"
#: the queue per decode instance KEDA aims at: 35 queued asks for ceil(35 / 10) = 4
PER_INSTANCE = 10


class Exporter:
    """One gauge, served at ``http://127.0.0.1:<port>/metrics`` from a thread."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.gauge = Gauge(METRIC, "queued requests (test fixture)", registry=self.registry)
        registry = self.registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Exporter:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def keda(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keda]:
    # built by the tier's prepare step; a plain pytest run builds it here (once, cached)
    keda_dir = build_keda.ensure_keda()
    with Keda(keda_dir, cluster.kubeconfig, tmp_path_factory.mktemp("keda")) as running:
        yield running


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[tuple[Exporter, PrometheusServer]]:
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [],
    }
    with Exporter() as exporter:
        config["scrape_configs"] = [{"job_name": "queue", "static_configs": [
            {"targets": [f"127.0.0.1:{exporter.port}"]}]}]  # fmt: skip
        binary = prometheus.ensure() / "prometheus"
        with PrometheusServer(binary, config, tmp_path / "prom") as prom:
            yield exporter, prom


def _settled_at(kubectl: Any, namespace: str, n: int) -> Any:
    """The HPA asked for ``n`` decode instances through ``/scale`` and the operator runs
    them: the scaler's spec and status say ``n``, and ``n`` decode StatefulSets exist."""

    def check() -> Any:
        scaler = get(kubectl, namespace, f"pdrolescaler/{SCALER}") or {}
        spec, st = scaler.get("spec") or {}, scaler.get("status") or {}
        items = (get(kubectl, namespace, "statefulsets") or {}).get("items", [])
        instances = sorted(
            i["metadata"]["name"] for i in items
            if i["metadata"]["name"].startswith(f"{NAME}-decode-")
            and not i["metadata"].get("deletionTimestamp")
        )  # fmt: skip
        if spec.get("replicas") != n or st.get("replicas") != n or len(instances) != n:
            return None
        return instances

    return check


def test_a_keda_scaledobject_scales_decode_with_a_prometheus_query(
    kubectl: Any, namespace: str, operator: Any, keda: Keda, queue: Any, wait_until: Any
) -> None:
    exporter, prom = queue
    docs = example("deepseek-v2-lite.yaml", namespace)
    pdd_doc(docs)["spec"]["decode"]["scaling"] = {"mode": "External", "minReplicas": 1,
                                                   "maxReplicas": 4}  # fmt: skip
    apply(kubectl, docs)
    # the scaler starts from the role's replicas (2)
    wait_until(_settled_at(kubectl, namespace, 2), "2 decode before KEDA", timeout=300)

    # an empty queue: Prometheus has scraped it before KEDA asks
    exporter.gauge.set(0)
    query = f"max({METRIC})"
    wait_until(lambda: prom.query(query)["data"]["result"], "Prometheus scraped the queue")
    scaled_object = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": SCALER, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "ascendpd.io/v1alpha1", "kind": "PDRoleScaler",
                               "name": SCALER},
            "pollingInterval": 1,
            "minReplicaCount": 1,
            "maxReplicaCount": 4,
            # follow the metric at once both ways (the HPA's default waits 5 minutes
            # before it scales down)
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
                "scaleDown": {"stabilizationWindowSeconds": 0,
                              "policies": [{"type": "Percent", "value": 100, "periodSeconds": 1}]},
                "scaleUp": {"stabilizationWindowSeconds": 0},
            }}},
            "triggers": [{"type": "prometheus", "metadata": {
                "serverAddress": prom.base, "query": query, "threshold": str(PER_INSTANCE)}}],
        },
    }  # fmt: skip
    apply(kubectl, [scaled_object])

    # nothing queued: down to the ScaledObject's minimum
    instances = wait_until(_settled_at(kubectl, namespace, 1), "KEDA: 1 decode", timeout=600)
    assert instances == [f"{NAME}-decode-0"]

    # the queue rises: ceil(35 / 10) = 4 instances
    exporter.gauge.set(35)
    instances = wait_until(_settled_at(kubectl, namespace, 4), "KEDA: 4 decode", timeout=600)
    assert instances == [f"{NAME}-decode-{i}" for i in range(4)]
    # through the external metrics API: the HPA controller says what it rescaled on (KEDA's
    # operator itself only ever scales between zero and the minimum)
    events = (get(kubectl, namespace, "events", "--field-selector",
                  "reason=SuccessfulRescale") or {}).get("items", [])  # fmt: skip
    messages = [e["message"] for e in events]
    assert any("New size: 4" in m and "external metric" in m for m in messages), messages

    # and drains: back to 1 (the newest instances go)
    exporter.gauge.set(0)
    instances = wait_until(_settled_at(kubectl, namespace, 1), "KEDA: back to 1", timeout=600)
    assert instances == [f"{NAME}-decode-0"]

    kubectl("delete", "scaledobject", SCALER, "-n", namespace)
