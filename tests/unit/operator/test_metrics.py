"""The operator's metrics: each hook moves the series it should, the per-PDDeployment
gauges follow the status and the children, and a deleted PDDeployment's series vanish.

Expectations are derived by hand from the objects fed in; the exposition is read back
through prometheus_client's own text parser from the real HTTP endpoint.
"""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.kubeio import metrics
from ascend_pd_operator.kubeio.kube import Connection, Kube, KubeError
from ascend_pd_operator.kubeio.metrics import REGISTRY, DeploymentCollector
from ascend_pd_operator.kubeio.workqueue import RateLimitedQueue
from ascend_pd_operator.wiring.handlers import worker
from ascend_pd_operator.wiring.reconciler import Result
from tests.json_server import serving


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def scrape(collector: DeploymentCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in collector.collect():
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def labels(**kv: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kv.items()))


def test_request_verb_and_kind() -> None:
    sts = "/apis/apps/v1/namespaces/ns/statefulsets"
    assert metrics.request_verb("GET", sts, [], "") == "list"
    assert metrics.request_verb("GET", sts + "/a", [], "") == "get"
    assert metrics.request_verb("GET", sts, [("watch", "true")], "") == "watch"
    assert metrics.request_verb("PATCH", sts + "/a", [], "application/apply-patch+yaml") == "apply"
    assert metrics.request_verb("PATCH", sts + "/a/status", [], "application/merge-patch+json") == (
        "patch"
    )
    assert metrics.request_verb("DELETE", sts + "/a", [], "") == "delete"
    assert metrics.request_verb("POST", "/api/v1/namespaces/ns/events", [], "") == "create"
    assert metrics.request_kind(sts + "/a") == "StatefulSet"
    # a namespace named like a resource does not confuse the parser
    assert metrics.request_kind("/api/v1/namespaces/pods/configmaps/x") == "ConfigMap"
    assert metrics.request_kind("/apis/ascendpd.io/v1alpha1/pddeployments") == "PDDeployment"
    assert metrics.request_kind("/version") == "other"


@pytest.fixture
def throttling_server() -> Iterator[str]:
    """An API server answering the first request 429 (Retry-After: 1), the rest 200."""
    seen: list[str] = []

    def answer(method: str, path: str, query: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        seen.append(method)
        if len(seen) == 1:
            return 429, {"Retry-After": "1"}, {"kind": "Status", "code": 429}
        return 200, {}, {"metadata": {"name": "x"}}

    with serving(answer) as url:
        yield url


def _kube(url: str) -> Kube:
    return Kube(Connection.for_url(url))


def test_kube_requests_counted_by_verb_kind_and_code(
    throttling_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ascend_pd_operator.kubeio import sender

    url = throttling_server
    monkeypatch.setattr(sender.time, "sleep", lambda _: None)
    before = {code: value("ascend_pd_operator_api_requests_total", verb="apply",
                          kind="ConfigMap", code=code) for code in ("429", "200")}  # fmt: skip
    applies = value("ascend_pd_operator_applies_total", kind="ConfigMap")
    manifest = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "x", "namespace": "ns"}}  # fmt: skip
    _kube(url).apply(manifest)  # answered 429 once, then 200
    for code in ("429", "200"):
        after = value("ascend_pd_operator_api_requests_total", verb="apply", kind="ConfigMap",
                      code=code)  # fmt: skip
        assert after == before[code] + 1, code
    assert value("ascend_pd_operator_applies_total", kind="ConfigMap") == applies + 1


def test_unreachable_api_counted_as_error() -> None:
    before = value("ascend_pd_operator_api_requests_total", verb="get", kind="Job", code="error")
    with pytest.raises(Exception):  # noqa: B017 - urllib3's connection error, whatever its class
        _kube("http://127.0.0.1:1").get("Job", "ns", "j")
    after = value("ascend_pd_operator_api_requests_total", verb="get", kind="Job", code="error")
    assert after == before + 1


def test_workqueue_depth_wait_and_retries() -> None:
    now = [100.0]
    queue: RateLimitedQueue[str] = RateLimitedQueue(clock=lambda: now[0])
    waits = value("ascend_pd_operator_workqueue_wait_seconds_count")
    waited = value("ascend_pd_operator_workqueue_wait_seconds_sum")
    retries = value("ascend_pd_operator_workqueue_retries_total")
    queue.add("a")
    queue.add("b")
    assert value("ascend_pd_operator_workqueue_depth") == 2
    now[0] += 2.5
    assert queue.get(timeout=0) == "a"
    assert value("ascend_pd_operator_workqueue_depth") == 1
    assert value("ascend_pd_operator_workqueue_wait_seconds_count") == waits + 1
    assert value("ascend_pd_operator_workqueue_wait_seconds_sum") == pytest.approx(waited + 2.5)
    queue.add_rate_limited("a")
    assert value("ascend_pd_operator_workqueue_retries_total") == retries + 1
    assert value("ascend_pd_operator_workqueue_delayed") == 1
    queue.done("a")
    now[0] += 1.0  # past the 0.1 s backoff: get moves it to the queue
    assert queue.get(timeout=0) == "b"
    assert value("ascend_pd_operator_workqueue_delayed") == 0


class ScriptedReconciler:
    """Answers each reconcile from a script: a Result, None (gone) or an exception; an event
    queues the key again until the script ends, which stops the worker."""

    def __init__(
        self,
        script: list[Result | Exception | None],
        stop: threading.Event,
        queue: RateLimitedQueue[tuple[str, str]],
    ) -> None:
        self.script = script
        self.stop = stop
        self.queue = queue

    def reconcile(self, namespace: str, name: str) -> Result | None:
        step = self.script.pop(0)
        if self.script:
            self.queue.add((namespace, name))
        else:
            self.stop.set()
        if isinstance(step, Exception):
            raise step
        return step


def _status(ready: int, compatible: str = "True") -> Json:
    return {
        "roles": {
            "prefill": {"replicas": 2, "readyReplicas": ready},
            "decode": {"replicas": 1, "readyReplicas": 1},
        },
        "kvLayout": {
            "fingerprint": "abc123",
            "totalKvLayers": 61,
            "kvBufGroups": 3,
            "prefillStages": [{"ppRank": 0}, {"ppRank": 1}],
        },
        "conditions": [{"type": "KVLayoutCompatible", "status": compatible}],
    }


def test_worker_observes_results_and_deployment_lifecycle() -> None:
    results = {r: value("ascend_pd_operator_reconcile_duration_seconds_count", result=r)
               for r in metrics.RECONCILE_RESULTS}  # fmt: skip
    stop = threading.Event()
    script: list[Result | Exception | None] = [
        Result(_status(ready=1), 0, 0),
        KubeError(409, "Conflict", "x"),
        KubeError(503, "ServiceUnavailable", "x"),
        KubeError(422, "Invalid", "x"),
        RuntimeError("bug"),
        Result(_status(ready=2), 0, 0),
    ]
    queue: RateLimitedQueue[tuple[str, str]] = RateLimitedQueue(base_delay=0.0)
    queue.add(("ns", "pd"))
    metrics.DEPLOYMENTS.deployment_spec("ns", "pd", {"runtime": {"sglangVersion": "0.5.10"}})
    worker(queue, ScriptedReconciler(script, stop, queue), stop)  # type: ignore[arg-type]
    expected = {"ok": 2, "conflict": 1, "transient": 1, "error": 2, "gone": 0}
    for result, count in expected.items():
        got = value("ascend_pd_operator_reconcile_duration_seconds_count", result=result)
        assert got == results[result] + count, result
    assert value("ascend_pd_instances_ready", namespace="ns", pddeployment="pd",
                 role="prefill") == 2  # fmt: skip
    assert value("ascend_pd_deployment_info", namespace="ns", pddeployment="pd",
                 fingerprint="abc123", total_kv_layers="61", kv_buf_groups="3", prefill_pp="2",
                 sglang_version="0.5.10") == 1  # fmt: skip
    # the PDDeployment is deleted: the next reconcile finds nothing and its series go
    stop.clear()
    queue.add(("ns", "pd"))
    worker(queue, ScriptedReconciler([None], stop, queue), stop)  # type: ignore[arg-type]
    assert value("ascend_pd_operator_reconcile_duration_seconds_count", result="gone") == (
        results["gone"] + 1
    )
    assert (
        REGISTRY.get_sample_value(
            "ascend_pd_instances_ready",
            {"namespace": "ns", "pddeployment": "pd", "role": "prefill"},
        )
        is None
    )


def _sts(name: str, role: str, index: int, *, current: str, update: str, ready: int) -> Json:
    return {
        "kind": "StatefulSet",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "generation": 2,
            "labels": {
                "ascendpd.io/deployment": "pd",
                "ascendpd.io/role": role,
                "ascendpd.io/instance": str(index),
            },
        },
        "spec": {"replicas": 2},
        "status": {
            "observedGeneration": 2,
            "readyReplicas": ready,
            "updatedReplicas": 2,
            "currentRevision": current,
            "updateRevision": update,
        },
    }


def _pod(name: str, role: str, index: int, restarts: list[int]) -> Json:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {
                "ascendpd.io/deployment": "pd",
                "ascendpd.io/role": role,
                "ascendpd.io/instance": str(index),
            },
        },
        "status": {"containerStatuses": [{"restartCount": r} for r in restarts]},
    }


def test_instances_rollout_restarts_and_forgetting() -> None:
    c = DeploymentCollector()
    c.deployment_status("ns", "pd", _status(ready=1, compatible="False"))
    c.child_seen("StatefulSet", _sts("pd-prefill-0", "prefill", 0, current="r1", update="r1",
                                     ready=2))  # fmt: skip
    c.child_seen("StatefulSet", _sts("pd-prefill-1", "prefill", 1, current="r1", update="r2",
                                     ready=1))  # fmt: skip
    c.child_seen("Pod", _pod("pd-prefill-1-0", "prefill", 1, [2, 1]))
    c.child_seen("Pod", _pod("pd-prefill-1-1", "prefill", 1, [4]))
    c.child_seen("Pod", {"metadata": {"name": "other", "namespace": "ns", "labels": {}}})
    got = scrape(c)
    base = {"namespace": "ns", "pddeployment": "pd"}
    assert got[("ascend_pd_instances_updated", labels(**base, role="prefill"))] == 1
    assert got[("ascend_pd_instances_desired", labels(**base, role="prefill"))] == 2
    assert got[("ascend_pd_rollout_in_progress", labels(**base))] == 1
    assert got[("ascend_pd_kv_layout_compatible", labels(**base))] == 0
    key = ("ascend_pd_instance_restarts", labels(**base, role="prefill", instance="pd-prefill-1"))
    assert got[key] == 7
    # a pod replaced: its restarts no longer count
    c.child_gone("Pod", "ns", "pd-prefill-1-1")
    assert scrape(c)[key] == 3
    # the rollout ends
    c.child_seen("StatefulSet", _sts("pd-prefill-1", "prefill", 1, current="r2", update="r2",
                                     ready=2))  # fmt: skip
    assert scrape(c)[("ascend_pd_rollout_in_progress", labels(**base))] == 0
    # deleted: nothing of it is left
    c.deployment_spec("ns", "pd", None)
    assert not [k for k in scrape(c) if ("pddeployment", "pd") in k[1]]


def test_conditions_are_one_series_each_and_follow_the_status() -> None:
    """``ascend_pd_condition``: one series of value 1 per condition of the last status, so an
    alert can match the operator's own verdict (InstancesHealthy=False RestartLoop)."""
    c = DeploymentCollector()
    looping = {"conditions": [
        {"type": "InstancesHealthy", "status": "False", "reason": "RestartLoop",
         "message": "instance pd-decode-1 restarted 5 times within 600 s"},
        {"type": "Ready", "status": "True", "reason": "Ready"},
    ]}  # fmt: skip
    c.deployment_status("ns", "pd", looping)
    c.deployment_status("other", "pd", {})
    base = {"namespace": "ns", "pddeployment": "pd"}
    conditions = {k: v for k, v in scrape(c).items() if k[0] == "ascend_pd_condition"}
    assert conditions == {
        ("ascend_pd_condition", labels(**base, type="InstancesHealthy", status="False",
                                       reason="RestartLoop")): 1,
        ("ascend_pd_condition", labels(**base, type="Ready", status="True", reason="Ready")): 1,
    }  # fmt: skip
    # healthy again: the RestartLoop series is gone at the next scrape, not left at 0
    c.deployment_status("ns", "pd", {"conditions": [
        {"type": "InstancesHealthy", "status": "True", "reason": "Healthy"}]})  # fmt: skip
    assert [k[1] for k in scrape(c) if k[0] == "ascend_pd_condition"] == [
        labels(**base, type="InstancesHealthy", status="True", reason="Healthy")
    ]
    c.deployment_status("ns", "pd", None)
    assert not [k for k in scrape(c) if k[0] == "ascend_pd_condition"]


def test_served_on_its_own_port_and_parsed_by_prometheus_client() -> None:
    server, thread = metrics.serve(0, host="127.0.0.1")
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
        names = {f.name for f in text_string_to_metric_families(text)}
        assert {"ascend_pd_operator_reconcile_duration_seconds",
                "ascend_pd_operator_api_requests", "ascend_pd_operator_workqueue_depth",
                "process_resident_memory_bytes"} <= names  # fmt: skip
    finally:
        server.shutdown()
        thread.join(timeout=10)


def test_elastic_roles_asked_run_draining_and_drains_by_outcome() -> None:
    """A count held by the ratio bounds, a drain under way, and drains counted from the
    reconcile's Events, per role and outcome; every pair at 0 from the first status, so the
    first forced drain is an increase Prometheus sees."""
    from ascend_pd_operator.decisions.events import Event

    c = DeploymentCollector()
    status = {"roles": {"decode": {"replicas": 4, "effectiveReplicas": 2, "readyReplicas": 2,
                                   "draining": [{"instance": "pd-decode-2", "since": "t"}]},
                        "prefill": {"replicas": 1, "readyReplicas": 1}}}  # fmt: skip
    c.deployment_status("ns", "pd", status)
    base = {"namespace": "ns", "pddeployment": "pd"}
    got = scrape(c)
    assert got[("ascend_pd_instances_desired", labels(**base, role="decode"))] == 4
    assert got[("ascend_pd_instances_effective", labels(**base, role="decode"))] == 2
    assert got[("ascend_pd_instances_effective", labels(**base, role="prefill"))] == 1
    assert got[("ascend_pd_instances_draining", labels(**base, role="decode"))] == 1
    drains = {k[1]: v for k, v in got.items() if k[0] == "ascend_pd_drains_total"}
    assert set(drains.values()) == {0} and len(drains) == 4
    c.deployment_status("ns", "pd", status, (
        Event("Warning", "InstanceDrained", "pd-decode-3 drained in 700 s (forced)", "decode"),
        Event("Normal", "InstanceDrained", "pd-decode-2 drained in 20 s", "decode"),
        Event("Normal", "InstanceDrained", "pd-decode-1 drained in 10 s", "decode"),
        Event("Warning", "InstanceRestarted", "pd-prefill-0 restarted", "prefill"),
    ))  # fmt: skip
    got = scrape(c)
    key = "ascend_pd_drains_total"
    assert got[(key, labels(**base, role="decode", outcome="forced"))] == 1
    assert got[(key, labels(**base, role="decode", outcome="clean"))] == 2
    assert got[(key, labels(**base, role="prefill", outcome="forced"))] == 0
