"""Child watches: list+watch bookkeeping, 410 re-list, backoff, and the wire format.

The reflector logic runs against a scripted fake transport (lists and watch streams as the
API server would answer them); ``Kube.watch`` itself is exercised against a local HTTP server
that streams chunked watch events, so the query it sends and its parsing are checked too.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import LABEL_DEPLOYMENT
from ascend_pd_operator.kubeio.backoff import Streak
from ascend_pd_operator.kubeio.child_watch import (
    ChildWatch,
    EventWatch,
    Expired,
    NodeWatch,
    Synced,
    WatchError,
    child_watches,
    pod_with_news,
    selector_for,
)
from ascend_pd_operator.kubeio.kept import slim_pod
from ascend_pd_operator.kubeio.kube import Connection, Kube, KubeError, Listing, iter_lines
from ascend_pd_operator.kubeio.live_cache import LiveCache
from tests.json_server import Chunked, serving


def obj(name: str, rv: str, owner: str | None = "dsv3", ns: str = "ns") -> Json:
    labels = {LABEL_DEPLOYMENT: owner} if owner else {}
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "labels": labels}}


def event(type_: str, o: Json) -> Json:
    return {"type": type_, "object": o}


def gone_410() -> Json:
    return {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                        "message": "too old resource version: 5 (90)"}}  # fmt: skip


class Queue:
    def __init__(self) -> None:
        self.keys: list[tuple[str, str]] = []

    def add(self, key: tuple[str, str]) -> None:
        self.keys.append(key)


class Stop(threading.Event):
    """A stop event whose waits return at once; waits before the stop are recorded (the
    backoff delays)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        if not self.is_set():
            self.waits.append(timeout or 0.0)
        return self.is_set()


class FakeTransport:
    """Answers lists and watches from scripts (an exception in a script is raised); a call
    after its script ran out sets ``stop`` and ends the run."""

    def __init__(self, lists: list[Any], watches: list[Any], stop: threading.Event) -> None:
        self.lists = lists
        self.watches = watches
        self.stop = stop
        self.calls: list[tuple[str, ...]] = []

    def list(
        self, kind: str, namespace: str | None, selector: str = "", field_selector: str = ""
    ) -> Listing:
        fields = (field_selector,) if field_selector else ()
        self.calls.append(("list", kind, str(namespace), selector, *fields))
        if not self.lists:
            self.stop.set()
            raise RuntimeError("end of the list script")
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        items, rv = answer
        return Listing.of(items, rv)

    def watch(
        self,
        kind: str,
        namespace: str | None,
        selector: str,
        rv: str,
        timeout: int,
        field_selector: str = "",
    ) -> Iterator[Json]:
        fields = (field_selector,) if field_selector else ()
        self.calls.append(("watch", kind, str(namespace), selector, rv, *fields))
        if not self.watches:
            self.stop.set()
            return iter(())
        script = self.watches.pop(0)
        if isinstance(script, Exception):
            raise script
        return iter(script)


def make(lists: list[Any], watches: list[Any], kind: str = "Service") -> tuple[
    ChildWatch, FakeTransport, Queue, LiveCache, Stop
]:  # fmt: skip
    stop = Stop()
    transport = FakeTransport(lists, watches, stop)
    queue, cache = Queue(), LiveCache()
    watch = ChildWatch(kind, "ns", transport, queue, cache, backoff=Streak(rng=_NoJitter()))
    return watch, transport, queue, cache, stop


class _NoJitter:
    def random(self) -> float:
        return 0.0


def cached(cache: LiveCache, kind: str = "Service") -> list[str]:
    return sorted(o["metadata"]["name"] for o in cache.listed(kind, "ns", {}))


def test_selectors_ask_the_server_for_our_label() -> None:
    assert selector_for("ConfigMap") == "ascendpd.io/deployment"
    assert selector_for("StatefulSet") == "ascendpd.io/deployment"
    assert selector_for("Pod") == "ascendpd.io/deployment"


def _pod(name: str, rv: str, component: str = "prefill", exit_code: int | None = None) -> Json:
    pod = obj(name, rv)
    pod["metadata"]["labels"]["app.kubernetes.io/component"] = component
    if component in ("prefill", "decode"):
        pod["metadata"]["labels"]["ascendpd.io/role"] = component
    if exit_code is not None:
        ended = {"exitCode": exit_code, "message": "unrecognized arguments: --foo"}
        pod["status"] = {"containerStatuses": [{"lastState": {"terminated": ended}}]}
    return pod


def test_runtime_router_and_inspector_pods_are_kept_slim_and_other_pods_are_not() -> None:
    refused = _pod("dsv3-prefill-0-0", "2", exit_code=5)
    router = _pod("dsv3-other-abc", "7", "something-else")
    watch, _, queue, cache, _ = make(
        lists=[
            (
                [_pod("dsv3-prefill-0-1", "1"), refused, _pod("i", "3", "model-inspector"), router],
                "4",
            )
        ],
        watches=[],
        kind="Pod",
    )
    watch.relist()
    assert cached(cache, "Pod") == ["dsv3-prefill-0-0", "dsv3-prefill-0-1", "i"]
    assert pod_with_news(_pod("dsv3-router-abc", "7", "router"))  # its generation matters
    assert queue.keys == [("ns", "dsv3")] * 3
    # what the cache holds of a pod: no spec beyond the node, no managed fields
    refused["spec"] = {"containers": [{"name": "x", "image": "big"}], "nodeName": "n1"}
    refused["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    refused["metadata"]["resourceVersion"] = "8"
    watch.handle(event("MODIFIED", refused))
    name = refused["metadata"]["name"]
    kept = next(p for p in cache.listed("Pod", "ns", {}) if p["metadata"]["name"] == name)
    assert kept["spec"] == {"nodeName": "n1"} and "managedFields" not in kept["metadata"]
    assert kept["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 5
    # a pod of no component of ours is neither cached nor queued
    before = len(queue.keys)
    watch.handle(event("MODIFIED", {**router, "metadata": {**router["metadata"],
                                                          "resourceVersion": "9"}}))  # fmt: skip
    assert len(queue.keys) == before


def test_one_watch_per_kind_and_namespace_or_per_kind_cluster_wide() -> None:
    t = FakeTransport([], [], threading.Event())
    scoped = child_watches(["Pod", "Job"], ["a", "b"], t, Queue())
    assert sorted((w.kind, w.namespace) for w in scoped) == [
        ("Job", "a"), ("Job", "b"), ("Pod", "a"), ("Pod", "b")]  # fmt: skip
    assert [(w.kind, w.namespace) for w in child_watches(["Pod"], None, t, Queue())] == [
        ("Pod", None)
    ]


def test_list_then_events_feed_cache_and_queue_and_track_the_resource_version() -> None:
    watch, transport, queue, cache, stop = make(
        lists=[([obj("a", "10"), obj("b", "11", owner="other")], "12")],
        watches=[[
            event("MODIFIED", obj("a", "13")),
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}},
            event("DELETED", obj("b", "21", owner="other")),
            event("ADDED", obj("c", "22")),
        ]],
    )  # fmt: skip
    watch.run(stop)
    # the watch continued from the list's version, with our selector
    assert transport.calls[:2] == [
        ("list", "Service", "ns", "ascendpd.io/deployment"),
        ("watch", "Service", "ns", "ascendpd.io/deployment", "12"),
    ]
    assert watch.resource_version == "22"
    assert cached(cache) == ["a", "c"]
    assert cache.listed("Service", "ns", {})[0]["kind"] == "Service"  # list items lack kind
    # a bookmark enqueues nothing; every change of an object enqueues its owner
    assert queue.keys == [("ns", "dsv3"), ("ns", "other"), ("ns", "dsv3"), ("ns", "other"),
                          ("ns", "dsv3")]  # fmt: skip


def test_a_quiet_watch_continues_from_the_bookmark() -> None:
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "50"}}}
    watch, transport, queue, _, stop = make(lists=[([], "7")], watches=[[bookmark]])
    watch.run(stop)
    assert [c[-1] for c in transport.calls if c[0] == "watch"] == ["7", "50"]
    assert queue.keys == []


def test_410_relists_and_reports_what_vanished_meanwhile() -> None:
    watch, transport, queue, cache, stop = make(
        lists=[([obj("a", "10"), obj("b", "11")], "12"),
               # after the 410: b was deleted and a changed while the watch was away
               ([obj("a", "40")], "41")],
        watches=[[event("MODIFIED", obj("a", "13")), gone_410()]],
    )  # fmt: skip
    watch.run(stop)
    assert [c[0] for c in transport.calls] == ["list", "watch", "list", "watch"]
    assert transport.calls[-1][-1] == "41"  # the new list's version, not the expired one
    assert cached(cache) == ["a"]
    assert cache.listed("Service", "ns", {})[0]["metadata"]["resourceVersion"] == "40"
    assert queue.keys[-2:] == [("ns", "dsv3"), ("ns", "dsv3")]  # a changed, b gone
    assert stop.waits == []  # the first 410 re-lists at once


def test_an_http_410_on_the_watch_request_relists_too() -> None:
    watch, transport, _, _, stop = make(
        lists=[([], "5"), ([], "90")], watches=[KubeError(410, "Expired", "too old")]
    )
    watch.run(stop)
    assert [c[0] for c in transport.calls] == ["list", "watch", "list", "watch"]
    assert transport.calls[-1][-1] == "90"


def test_a_relist_of_unchanged_objects_enqueues_nothing() -> None:
    watch, _, queue, _, stop = make(
        lists=[([obj("a", "10")], "12"), ([obj("a", "10")], "30")],
        watches=[ConnectionResetError("reset by peer")],
    )
    watch.run(stop)
    assert queue.keys == [("ns", "dsv3")]  # from the first list only


def test_failures_back_off_exponentially_up_to_the_cap_and_relist_each_time() -> None:
    failures: list[Any] = [OSError("connection refused")] * 9
    watch, transport, _, _, stop = make(lists=[*failures, ([], "1")], watches=[])
    watch.run(stop)
    assert stop.waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert [c[0] for c in transport.calls] == ["list"] * 10 + ["watch"]


def test_a_throttled_watch_waits_at_least_retry_after() -> None:
    throttled = KubeError(429, "TooManyRequests", "slow down", retry_after=3.0)
    watch, transport, _, _, stop = make(lists=[([], "1"), ([], "2")], watches=[throttled])
    watch.run(stop)
    assert stop.waits == [3.0]  # not the 0.5 s of the backoff
    assert [c[0] for c in transport.calls] == ["list", "watch", "list", "watch"]


def test_a_working_watch_resets_the_backoff() -> None:
    watch, _, _, _, stop = make(
        lists=[OSError("down"), OSError("down"), ([], "1"), ([], "2")],
        watches=[[event("ADDED", obj("a", "3"))], OSError("cut")],
    )
    watch.run(stop)
    assert stop.waits == [0.5, 1.0, 0.5]


def test_error_events_other_than_410_raise_and_unknown_types_too() -> None:
    watch, *_ = make([], [])
    with pytest.raises(Expired):
        watch.handle(gone_410())
    with pytest.raises(WatchError, match="500 InternalError: etcd"):
        watch.handle({"type": "ERROR", "object": {"code": 500, "reason": "InternalError",
                                                  "message": "etcd"}})  # fmt: skip
    with pytest.raises(WatchError, match="unknown watch event type 'SURPRISE'"):
        watch.handle({"type": "SURPRISE", "object": obj("a", "1")})


def test_an_object_whose_report_failed_is_reported_by_the_next_list() -> None:
    watch, transport, _, cache, stop = make(lists=[([obj("a", "1")], "2")] * 2, watches=[])
    puts: list[tuple[str, str]] = []

    class FlakyQueue:
        def add(self, key: tuple[str, str]) -> None:
            if not puts:
                puts.append(("failed", ""))
                raise RuntimeError("queue unavailable")
            puts.append(key)

    watch.ledger.queue = FlakyQueue()
    watch.run(stop)
    assert puts == [("failed", ""), ("ns", "dsv3")]
    assert stop.waits == [0.5]
    assert [c[0] for c in transport.calls] == ["list", "list", "watch"]
    assert cached(cache) == ["a"]


def test_run_returns_when_stopped_and_can_run_again() -> None:
    watch, transport, queue, _, stop = make(lists=[([obj("a", "1")], "2")], watches=[])
    watch.run(stop)
    assert queue.keys == [("ns", "dsv3")]
    # started again (as a supervisor would): it lists afresh, the object is not new
    again = Stop()
    transport.stop = again
    transport.lists = [([obj("a", "1"), obj("b", "3")], "4")]
    watch.run(again)
    assert queue.keys == [("ns", "dsv3"), ("ns", "dsv3")]  # only b is new
    assert transport.calls[-1] == ("watch", "Service", "ns", "ascendpd.io/deployment", "4")


def test_backoff_is_capped_and_jittered_within_ten_percent() -> None:
    b = Streak()
    delays = [b.next() for _ in range(12)]
    assert all(d <= b.backoff.cap for d in delays)
    assert 0.5 <= delays[0] <= 0.55
    assert delays[-1] == b.backoff.cap == 30.0
    b.reset()
    assert b.next() <= 0.55


def test_iter_lines_reassembles_events_split_anywhere() -> None:
    data = b'{"type":"ADDED","n":1}\n{"type":"MODIFIED","n":2}\n\n{"type":"DELETED"}'
    for cut in range(1, len(data)):
        chunks = [data[:cut], data[cut:]]
        assert [json.loads(x)["type"] for x in iter_lines(chunks)] == [
            "ADDED", "MODIFIED", "DELETED"]  # fmt: skip


# --- Kube.watch on the wire ------------------------------------------------------------


@pytest.fixture
def watch_server() -> Iterator[tuple[str, list[dict[str, list[str]]], list[int]]]:
    """Streams two events and a bookmark as chunks; answers 410 while ``status[0]`` is 410."""
    queries: list[dict[str, list[str]]] = []
    status = [200]

    def answer(method: str, path: str, query: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        queries.append({key: [value] for key, value in query.items()})
        if status[0] != 200:
            return 410, {}, {"kind": "Status", "code": 410, "reason": "Gone",
                             "message": "too old resource version"}  # fmt: skip
        lines = [
            event("ADDED", obj("a", "5")),
            event("MODIFIED", obj("a", "6")),
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
        ]
        payload = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
        # events split anywhere
        return 200, {}, Chunked([payload[:7], payload[7:40], payload[40:]])

    with serving(answer) as url:
        yield url, queries, status


def _kube(url: str) -> Kube:
    return Kube(Connection.for_url(url))


def test_kube_watch_sends_selector_version_and_bookmarks_and_parses_chunks(
    watch_server: tuple[str, list[dict[str, list[str]]], list[int]],
) -> None:
    url, queries, _ = watch_server
    kube = _kube(url)
    events = list(kube.watch("ConfigMap", "ns", "ascendpd.io/deployment", "4", 300))
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "BOOKMARK"]
    assert queries == [{
        "watch": ["true"], "allowWatchBookmarks": ["true"], "timeoutSeconds": ["300"],
        "labelSelector": ["ascendpd.io/deployment"], "resourceVersion": ["4"]}]  # fmt: skip
    # the connection went back to the pool: a second watch works on it
    assert len(list(kube.watch("ConfigMap", "ns", "x", "9", 300))) == 3


def test_kube_watch_answered_410_relists_through_child_watch(
    watch_server: tuple[str, list[dict[str, list[str]]], list[int]],
) -> None:
    url, _queries, status = watch_server
    status[0] = 410
    kube = _kube(url)
    with pytest.raises(KubeError) as raised:
        list(kube.watch("Service", "ns", "ascendpd.io/deployment", "1", 300))
    assert raised.value.status == 410
    watch = ChildWatch("Service", "ns", kube, Queue())
    watch.resource_version = "1"
    with pytest.raises(Expired):
        watch.watch_once(threading.Event())


def _node(name: str, rv: str, ready: str = "True") -> Json:
    return {"metadata": {"name": name, "resourceVersion": rv},
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
                                      {"type": "Ready", "status": ready,
                                       "lastHeartbeatTime": f"t{rv}"}]}}  # fmt: skip


def _node_watch() -> tuple[NodeWatch, Queue, LiveCache]:
    """A node watch whose cache holds one pod of ns/dsv3, on npu-3."""
    queue, cache = Queue(), LiveCache()
    pod = _pod("dsv3-prefill-0-1", "1")
    pod["spec"] = {"nodeName": "npu-3"}
    cache.seen({**slim_pod(pod), "kind": "Pod"})
    return NodeWatch(FakeTransport([], [], Stop()), queue, cache), queue, cache


def test_a_node_turning_not_ready_queues_the_deployments_with_pods_on_it_and_nothing_else() -> None:
    watch, queue, cache = _node_watch()
    watch.handle(event("ADDED", _node("npu-3", "5")))
    watch.handle(event("ADDED", _node("npu-4", "6")))
    assert queue.keys == [("ns", "dsv3")]  # first sight of npu-3; nothing runs on npu-4
    watch.handle(event("MODIFIED", _node("npu-3", "7")))  # a heartbeat: nothing new
    assert queue.keys == [("ns", "dsv3")]
    watch.handle(event("MODIFIED", _node("npu-3", "8", ready="Unknown")))
    assert queue.keys == [("ns", "dsv3")] * 2
    kept = cache.listed_one("Node", "", "npu-3")
    assert kept is not None and kept["status"]["conditions"] == [
        {"type": "Ready", "status": "Unknown"}
    ]
    assert watch.selector == ""  # every node, cluster-wide


def test_an_out_of_service_taint_queues_the_deployments_on_the_node_and_is_kept() -> None:
    watch, queue, cache = _node_watch()
    lost = _node("npu-3", "5", ready="Unknown")
    lost["status"]["conditions"][1]["lastTransitionTime"] = "2026-12-01T08:00:00Z"
    watch.handle(event("ADDED", lost))
    assert queue.keys == [("ns", "dsv3")]
    taint = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown",
             "effect": "NoExecute", "timeAdded": "2026-12-01T08:05:00Z"}  # fmt: skip
    other = {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}
    soft = {"key": "example.com/busy", "effect": "PreferNoSchedule"}
    tainted = {**lost, "metadata": {"name": "npu-3", "resourceVersion": "6"},
               "spec": {"taints": [other, soft, taint]}}  # fmt: skip
    watch.handle(event("MODIFIED", tainted))
    assert queue.keys == [("ns", "dsv3")] * 2  # an admin took the node out of service
    kept = cache.listed_one("Node", "", "npu-3")
    assert kept is not None
    # the taint recovery reads, and those that keep new pods off (placement), no other
    assert kept["spec"] == {"taints": [other, taint]}
    assert kept["status"]["conditions"] == [
        {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-12-01T08:00:00Z"}
    ]


def test_a_slim_pod_keeps_when_its_deletion_was_requested():
    """Group recovery dates a deletion by deletionTimestamp minus the grace period; the
    cached (slim) pod dropped the grace period, which moved the request 30 s later."""
    from ascend_pd_operator.decisions.recovery import deletion_requested

    pod = {
        "metadata": {
            "name": "dsv3-prefill-0-1", "namespace": "llm", "uid": "u1",
            "labels": {"ascendpd.io/role": "prefill"},
            "deletionTimestamp": "2026-12-01T08:00:30Z", "deletionGracePeriodSeconds": 30,
        },
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running"},
    }  # fmt: skip
    assert str(deletion_requested(slim_pod(pod))) == "2026-12-01 08:00:00+00:00"


def _failed_create(sts: str, rv: str, message: str = "exceeded quota: q", count: int = 1) -> Json:
    """A FailedCreate Event as the StatefulSet controller records it (recorded on 1.20; the
    1.29 and 1.30 sources record the same core/v1 fields and words)."""
    return {
        "metadata": {"name": f"{sts}.16a8f", "namespace": "ns", "resourceVersion": rv,
                     "managedFields": [{"manager": "kube-controller-manager"}]},
        "involvedObject": {"kind": "StatefulSet", "namespace": "ns", "name": sts,
                           "uid": f"uid-{sts}", "apiVersion": "apps/v1",
                           "resourceVersion": "77"},
        "reason": "FailedCreate", "type": "Warning", "count": count,
        "message": f"create Pod {sts}-0 in StatefulSet {sts} failed error: {message}",
        "source": {"component": "statefulset-controller"},
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z",
    }  # fmt: skip


def test_the_event_watch_asks_the_server_for_failed_creates_and_keeps_those_of_our_instances():
    stop = Stop()
    foreign = _failed_create("web", "3")  # a StatefulSet of no PDDeployment
    transport = FakeTransport(
        lists=[([_failed_create("dsv3-prefill-0", "1"), foreign], "5")],
        watches=[[event("MODIFIED", _failed_create("dsv3-decode-1", "6", count=4)),
                  event("DELETED", _failed_create("dsv3-prefill-0", "7"))]],
        stop=stop,
    )  # fmt: skip
    queue, cache = Queue(), LiveCache()
    watch = EventWatch("ns", transport, queue, cache)
    watch.run(stop)
    # no label selector (Events carry none): the fields select, on the server
    fields = "involvedObject.kind=StatefulSet,reason=FailedCreate"
    assert transport.calls[:2] == [("list", "Event", "ns", "", fields),
                                   ("watch", "Event", "ns", "", "5", fields)]  # fmt: skip
    assert queue.keys == [("ns", "dsv3")] * 3  # the foreign one queues nothing
    kept = cache.listed("Event", "ns", {LABEL_DEPLOYMENT: "dsv3"})
    assert [e["involvedObject"]["name"] for e in kept] == ["dsv3-decode-1"]
    assert kept[0] == {
        "kind": "Event",
        "metadata": {"name": "dsv3-decode-1.16a8f", "namespace": "ns", "resourceVersion": "6",
                     "labels": {LABEL_DEPLOYMENT: "dsv3"}},
        "involvedObject": {"kind": "StatefulSet", "name": "dsv3-decode-1",
                           "uid": "uid-dsv3-decode-1"},
        "type": "Warning", "reason": "FailedCreate", "count": 4,
        "lastTimestamp": "2026-01-01T00:01:00Z",
        "message": "create Pod dsv3-decode-1-0 in StatefulSet dsv3-decode-1 failed error: "
                   "exceeded quota: q",
    }  # fmt: skip
    assert cache.listed("Event", "ns", {LABEL_DEPLOYMENT: "web"}) == []


def test_a_slim_pod_keeps_what_says_why_it_waits() -> None:
    pod = _pod("dsv3-prefill-0-0", "1")
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": 'persistentvolumeclaim "models" not found'}  # fmt: skip
    ready = {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
    pod["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "Initialized", "status": "True"}, ready, scheduled],
        "containerStatuses": [{"name": "runtime", "ready": False, "started": False,
                               "restartCount": 0, "image": "big", "imageID": "",
                               "state": {"waiting": {"reason": "ImagePullBackOff"}}}],
    }  # fmt: skip
    slim = slim_pod(pod)
    assert slim["status"]["conditions"] == [ready, scheduled]
    assert slim["status"]["containerStatuses"] == [
        {"name": "runtime", "ready": False, "restartCount": 0,
         "state": {"waiting": {"reason": "ImagePullBackOff"}}}]  # fmt: skip
    # once scheduled, the condition says nothing the node name does not
    pod["status"]["conditions"][2] = {**scheduled, "status": "True"}
    assert slim_pod(pod)["status"]["conditions"] == [ready]


def test_kube_list_and_watch_send_a_field_selector(
    watch_server: tuple[str, list[dict[str, list[str]]], list[int]],
) -> None:
    url, queries, _ = watch_server
    kube = _kube(url)
    fields = "involvedObject.kind=StatefulSet,reason=FailedCreate"
    list(kube.watch("Event", "ns", "", "4", 300, field_selector=fields))
    assert queries[-1]["fieldSelector"] == [fields] and "labelSelector" not in queries[-1]


def test_the_operator_watches_failed_creates_once_per_scope_beside_its_children() -> None:
    from ascend_pd_operator.kubeio.child_watch import start_child_watches

    api = Connection.for_url("http://127.0.0.1:9")
    scoped = start_child_watches(["Pod", "Job"], ["a", "b"], api, Queue(), LiveCache())
    assert sorted((w.kind, w.namespace) for w in scoped if isinstance(w, EventWatch)) == [
        ("Event", "a"), ("Event", "b")]  # fmt: skip
    assert [w.name for w in scoped if w.kind == "Event"] == ["watch Event in a", "watch Event in b"]
    cluster = start_child_watches(["Pod"], None, api, Queue(), LiveCache())
    assert [(w.kind, w.namespace) for w in cluster] == [("Pod", None), ("Node", None),
                                                        ("Event", None)]  # fmt: skip


def test_the_workers_wait_until_every_child_watch_but_the_events_has_listed_once() -> None:
    """A reconcile before the pod watch listed saw Ready instances without pods: an upgraded
    or restarted operator reported them not ready, with a Warning Event (the upgrade tier
    caught it). ``Synced`` is what the workers wait for."""
    pods, _, _, _, _ = make([([], "5")], [], kind="Pod")
    services, _, _, _, _ = make([RuntimeError("refused"), ([], "7")], [])
    events = EventWatch("ns", FakeTransport([], [], Stop()), Queue(), LiveCache())
    synced = Synced()
    assert not synced()  # the watches are not started yet
    synced.expect([pods, services, events])
    assert not synced()
    pods.relist()
    with pytest.raises(RuntimeError):
        services.relist()  # a failed list is no list
    assert not synced()
    services.relist()
    assert synced()  # the Events' watch never listed: not waited for
