"""The rate-limited work queue, and the worker's retries: conflicts and transient API errors
are retried per key with backoff and never reach the PDDeployment's status."""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

import pytest
import urllib3

from ascend_pd_operator.api import models
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.kubeio.kube import KubeError
from ascend_pd_operator.kubeio.live_cache import LiveCache
from ascend_pd_operator.kubeio.workqueue import RateLimitedQueue
from ascend_pd_operator.wiring.handlers import WorkQueue, worker
from ascend_pd_operator.wiring.reconciler import Reconciler
from tests.unit.operator import test_reconcile_writes as _writes

FakeKube = _writes.FakeKube
WATCHED = _writes.WATCHED
watch_everything = _writes.watch_everything
run_workload_controllers = _writes.run_workload_controllers
new_world = _writes.new_world


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# --- the queue ------------------------------------------------------------------------------


def test_a_queued_key_is_queued_once() -> None:
    queue: RateLimitedQueue[str] = RateLimitedQueue()
    for key in ["a", "a", "b", "a"]:
        queue.add(key)
    assert len(queue) == 2
    assert [queue.get(0), queue.get(0), queue.get(0)] == ["a", "b", None]


def test_a_key_is_never_handed_to_two_workers() -> None:
    queue: RateLimitedQueue[str] = RateLimitedQueue()
    queue.add("a")
    assert queue.get(0) == "a"
    queue.add("a")  # an event while a worker reconciles "a"
    queue.add("a")
    assert queue.get(0) is None  # a second worker must not get it now
    queue.done("a")
    assert queue.get(0) == "a"  # once, after the first worker is done
    queue.done("a")
    assert queue.get(0) is None


def test_concurrent_workers_never_process_one_key_at_once() -> None:
    queue: RateLimitedQueue[int] = RateLimitedQueue()
    active: set[int] = set()
    overlaps: list[int] = []
    processed: list[int] = []
    guard = threading.Lock()
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            key = queue.get(timeout=0.05)
            if key is None:
                continue
            with guard:
                if key in active:
                    overlaps.append(key)
                active.add(key)
            time.sleep(0.001)  # hold the key while others add it again
            with guard:
                active.discard(key)
                processed.append(key)
            queue.done(key)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for i in range(2000):
        queue.add(i % 3)
    deadline = time.monotonic() + 60
    while (len(queue) or queue.waiting()) and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    for thread in threads:
        thread.join()
    assert overlaps == []
    assert set(processed) == {0, 1, 2}


def test_failures_back_off_exponentially_per_key_and_forget_resets() -> None:
    clock = Clock()
    queue: RateLimitedQueue[str] = RateLimitedQueue(
        base_delay=1.0, max_delay=8.0, clock=clock, jitter=0.0
    )
    delays = [queue.add_rate_limited("a") for _ in range(5)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert queue.add_rate_limited("b") == 1.0  # per key
    queue.forget("a")
    assert queue.failures("a") == 0 and queue.add_rate_limited("a") == 1.0


def test_keys_failing_together_come_back_spread_within_ten_percent() -> None:
    queue: RateLimitedQueue[int] = RateLimitedQueue(base_delay=1.0, max_delay=8.0, clock=Clock())
    delays = [queue.add_rate_limited(key) for key in range(50)]
    assert all(1.0 <= d <= 1.1 for d in delays) and len(set(delays)) > 40
    capped = [queue.add_rate_limited(0) for _ in range(6)][-1]
    assert capped == 8.0  # never above the cap


def test_a_throttled_key_waits_at_least_retry_after() -> None:
    queue: RateLimitedQueue[str] = RateLimitedQueue(base_delay=0.1, clock=Clock(), jitter=0.0)
    assert queue.add_rate_limited("a", at_least=1.0) == 1.0
    assert queue.add_rate_limited("a", at_least=0.05) == 0.2  # the backoff is longer


def test_the_worker_retries_a_throttled_reconcile_after_retry_after(dsv3: Json) -> None:
    kube, cache, reconciler = ready_world(dsv3)
    replicas = drift(kube, cache)
    kube.fail_applies = [KubeError(429, "TooManyRequests", "slow down", retry_after=0.5)]
    delays: list[float] = []

    class Recording(WorkQueue):  # type: ignore[misc, valid-type]
        def add_rate_limited(self, key: tuple[str, str], at_least: float = 0.0) -> float:
            delay: float = super().add_rate_limited(key, at_least)
            delays.append(delay)
            return delay

    queue = Recording(base_delay=0.01)
    queue.add(("llm", "dsv3"))
    sts = ("StatefulSet", "llm", "dsv3-decode-0")
    run_worker_until(queue, reconciler, lambda: kube.objects[sts]["spec"]["replicas"] == replicas)
    assert delays == [0.5]


def test_a_delayed_key_comes_back_when_due_and_once() -> None:
    clock = Clock()
    queue: RateLimitedQueue[str] = RateLimitedQueue(base_delay=2.0, clock=clock, jitter=0.0)
    queue.add_rate_limited("a")
    queue.add_rate_limited("a")  # two failures pending: still one key
    assert queue.get(0) is None and queue.waiting() == 2
    clock.now += 2.0
    assert queue.get(0) == "a"
    clock.now += 10.0
    assert queue.get(0) is None  # the second entry is folded into the one being processed
    queue.done("a")
    assert queue.get(0) == "a"


def test_a_plain_add_is_not_delayed_by_the_backoff() -> None:
    clock = Clock()
    queue: RateLimitedQueue[str] = RateLimitedQueue(base_delay=30.0, clock=clock)
    queue.add_rate_limited("a")
    queue.add("a")  # a new event or the resync
    assert queue.get(0) == "a"


def test_get_wakes_up_for_a_delayed_key() -> None:
    queue: RateLimitedQueue[str] = RateLimitedQueue(base_delay=0.2)
    queue.add_rate_limited("a")
    started = time.monotonic()
    assert queue.get(timeout=30) == "a"
    assert time.monotonic() - started >= 0.2


# --- the worker's retries -------------------------------------------------------------------


class FlakyKube(FakeKube):  # type: ignore[misc, valid-type]
    """The fake API server, answering chosen applies with an error (once each)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_applies: list[BaseException] = []

    def apply(self, manifest: Json) -> Json:
        if self.fail_applies:
            self.calls.append(("APPLY-FAILED", manifest["kind"]))
            raise self.fail_applies.pop(0)
        result: Json = super().apply(manifest)
        return result


def ready_world(dsv3: Json) -> tuple[Any, LiveCache, Reconciler]:
    """A reconciled PDDeployment whose workloads report every pod ready: phase Ready."""
    kube, cache, reconciler = new_world(dsv3, FlakyKube())
    # reconcile, controllers create the pods, reconcile labels the leaders routable: Ready
    for _ in range(3):
        reconciler.reconcile("llm", "dsv3")
        run_workload_controllers(kube)
        watch_everything(kube, cache)
    reconciler.reconcile("llm", "dsv3")
    assert kube.objects[(models.KIND, "llm", "dsv3")]["status"]["phase"] == "Ready"
    return kube, cache, reconciler


def drift(kube: Any, cache: LiveCache) -> int:
    """A user scales a StatefulSet (the next reconcile applies it again): its replicas."""
    sts = kube.objects[("StatefulSet", "llm", "dsv3-decode-0")]
    replicas = int(sts["spec"]["replicas"])
    sts["spec"] = {**sts["spec"], "replicas": replicas + 1}
    kube._store(sts, True)
    watch_everything(kube, cache)
    return replicas


def run_worker_until(queue: WorkQueue, reconciler: Reconciler, done: Any) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=worker, args=(queue, reconciler, stop), daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    try:
        while not done() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join(10)
    assert done(), "the worker did not get there"


@pytest.mark.parametrize(
    "error",
    [
        KubeError(409, "Conflict", "the object has been modified"),
        KubeError(500, "InternalError", "etcdserver: request timed out"),
        KubeError(429, "TooManyRequests", "slow down"),
        urllib3.exceptions.MaxRetryError(None, "/apis", reason=ConnectionRefusedError(111)),
    ],
    ids=["409", "500", "429", "connection-refused"],
)
def test_a_transient_error_is_retried_and_leaves_a_ready_status_alone(
    dsv3: Json, error: BaseException
) -> None:
    kube, cache, reconciler = ready_world(dsv3)
    status_before = copy.deepcopy(kube.objects[(models.KIND, "llm", "dsv3")]["status"])
    replicas = drift(kube, cache)
    kube.fail_applies = [error, error]  # twice in a row
    kube.calls.clear()
    queue = WorkQueue(base_delay=0.01)
    queue.add(("llm", "dsv3"))
    sts = ("StatefulSet", "llm", "dsv3-decode-0")
    run_worker_until(queue, reconciler, lambda: kube.objects[sts]["spec"]["replicas"] == replicas)
    # retried by the queue, without waiting for another event, until the apply went through
    applies = [c for c in kube.calls if c[0].startswith("APPLY")]
    assert applies[:3] == [
        ("APPLY-FAILED", "StatefulSet"), ("APPLY-FAILED", "StatefulSet"), ("APPLY", "StatefulSet"),
    ]  # fmt: skip
    # while the API failed, the status was not written: it stayed the Ready one (after the
    # apply the StatefulSet rolls out, which the status may then truthfully report)
    succeeded = kube.calls.index(("APPLY", "StatefulSet"))
    assert ("PATCH_STATUS", models.KIND) not in kube.calls[:succeeded]
    assert status_before["phase"] == "Ready"
    wait = time.monotonic() + 30
    while queue.failures(("llm", "dsv3")) and time.monotonic() < wait:
        time.sleep(0.01)
    assert queue.failures(("llm", "dsv3")) == 0  # forgotten after the success


def test_a_spec_the_cluster_refuses_still_becomes_a_condition(dsv3: Json) -> None:
    kube, cache, reconciler = ready_world(dsv3)
    drift(kube, cache)
    kube.fail_applies = [KubeError(422, "Invalid", "spec.replicas: Invalid value: -1")]
    queue = WorkQueue(base_delay=0.01)
    queue.add(("llm", "dsv3"))
    run_worker_until(queue, reconciler, lambda: ("PATCH_STATUS", models.KIND) in kube.calls)
    status = kube.objects[(models.KIND, "llm", "dsv3")]["status"]
    assert status["phase"] != "Ready"
    assert any("Invalid value: -1" in c.get("message", "") for c in status["conditions"])


# --- the resync sees drift no watch event reported --------------------------------------------


class ListingFakeKube(FakeKube):  # type: ignore[misc, valid-type]
    """The fake API server, also answering existence selectors (``key`` alone)."""

    def list(self, kind: str, namespace: str | None, selector: str = "") -> list[Json]:
        if selector and "=" not in selector:
            self.calls.append(("LIST", kind))
            return [copy.deepcopy(o) for (k, ns, _), o in self.objects.items()
                    if k == kind and ns == namespace
                    and selector in o["metadata"].get("labels", {})]  # fmt: skip
        found: list[Json] = super().list(kind, namespace, selector)
        return found


def test_the_resync_repairs_a_child_whose_edit_no_watch_event_reported(dsv3: Json) -> None:
    from ascend_pd_operator.api.vocabulary import LABEL_DEPLOYMENT
    from ascend_pd_operator.wiring.handlers import resync_once

    kube, cache, reconciler = new_world(dsv3, ListingFakeKube())
    reconciler.reconcile("llm", "dsv3")
    watch_everything(kube, cache)
    # a user removes our deployment label from the router Service: the child watches filter
    # on that label, so the operator's handlers never see this edit
    svc = kube.objects[("Service", "llm", "dsv3-router")]
    del svc["metadata"]["labels"][LABEL_DEPLOYMENT]
    kube._store(svc, False)
    kube.calls.clear()
    reconciler.reconcile("llm", "dsv3")  # an event-triggered reconcile cannot tell
    assert kube.writes() == []
    queue = WorkQueue()
    resync_once(queue, kube, ["llm"], cache)
    assert queue.get(0) == ("llm", "dsv3")
    result = reconciler.reconcile("llm", "dsv3")
    assert ("APPLY", "Service") in kube.writes() and result.applied == 1
    assert (
        kube.objects[("Service", "llm", "dsv3-router")]["metadata"]["labels"][LABEL_DEPLOYMENT]
        == "dsv3"
    )
    # and an idle resync changes nothing
    watch_everything(kube, cache)
    kube.calls.clear()
    resync_once(queue, kube, ["llm"], cache)
    reconciler.reconcile("llm", "dsv3")
    assert kube.writes() == []
