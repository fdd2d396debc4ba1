"""The applier honours Retry-After: a throttled request is sent again after it, not sooner."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ascend_pd_operator.kubeio import sender, wire
from ascend_pd_operator.kubeio.errors import KubeError, wait_at_least
from ascend_pd_operator.kubeio.sender import retry_after
from tests.json_server import serving
from tests.unit.operator.local_api import local_kube as _kube


def test_retry_after_rule() -> None:
    assert retry_after(429, "2") == 2.0
    assert retry_after(503, "1") == 1.0
    assert retry_after(429, "600") == sender.MAX_RETRY_AFTER_SECONDS
    assert retry_after(429, None) is None  # no header: the caller's own retry decides
    assert retry_after(500, "1") is None
    assert retry_after(409, "1") is None
    assert retry_after(429, "Wed, 21 Oct 2015 07:28:00 GMT") is None


@pytest.fixture
def throttling_server() -> Iterator[tuple[str, list[str], list[int]]]:
    """Answers 429 + Retry-After for the first ``plan[0]`` requests, then 200."""
    seen: list[str] = []
    plan = [1]

    def answer(method: str, path: str, query: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        seen.append(method)
        if len(seen) <= plan[0]:
            body = {"kind": "Status", "code": 429, "reason": "TooManyRequests",
                    "message": "slow down"}  # fmt: skip
            return 429, {"Retry-After": "1"}, body
        return 200, {}, {"kind": "ConfigMap", "metadata": {"name": "x"}}

    with serving(answer) as url:
        yield url, seen, plan


def test_throttled_apply_waits_retry_after_then_succeeds(
    throttling_server: tuple[str, list[str], list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen, _ = throttling_server
    slept: list[float] = []
    monkeypatch.setattr(sender.time, "sleep", slept.append)
    manifest = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "x", "namespace": "ns"}}  # fmt: skip
    assert _kube(url).apply(manifest)["metadata"]["name"] == "x"
    assert seen == ["PATCH", "PATCH"]
    assert slept == [1.0]


def test_gives_up_after_the_attempts(
    throttling_server: tuple[str, list[str], list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen, plan = throttling_server
    plan[0] = 100
    monkeypatch.setattr(sender.time, "sleep", lambda _: None)
    manifest = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "x", "namespace": "ns"}}  # fmt: skip
    with pytest.raises(KubeError) as raised:
        _kube(url).apply(manifest)
    assert raised.value.status == 429
    # (urllib3 retries throttled GETs on its own, never PATCH or POST: those are ours)
    assert seen == ["PATCH"] * sender.THROTTLE_ATTEMPTS


def test_a_get_still_throttled_hands_retry_after_to_whoever_retries(
    throttling_server: tuple[str, list[str], list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GET is throttled by us alone, as a PATCH is: before, urllib3 retried it on its own
    and then raised a bare MaxRetryError, so the work queue came back sooner than asked."""
    url, seen, plan = throttling_server
    plan[0] = 100
    slept: list[float] = []
    monkeypatch.setattr(sender.time, "sleep", slept.append)
    with pytest.raises(KubeError) as raised:
        _kube(url).get("ConfigMap", "ns", "x")
    assert raised.value.status == 429
    assert raised.value.retry_after == 1.0
    assert wait_at_least(raised.value) == 1.0
    assert seen == ["GET"] * sender.THROTTLE_ATTEMPTS
    assert slept == [1.0] * (sender.THROTTLE_ATTEMPTS - 1)


def test_the_operator_connections_leave_throttling_to_request() -> None:
    reconciler = wire.Connection.for_url("http://127.0.0.1:9")
    watches = reconciler.with_pool(3, "watches")
    for each in (reconciler, watches):
        assert each.http.connection_pool_kw["retries"].respect_retry_after_header is False
    assert watches.http.connection_pool_kw["maxsize"] == 5  # one per watch, and room
    # two parts of the operator that may send the same request say who they are
    assert reconciler.user_agent == "ascend-pd-operator (reconciler)"
    assert watches.user_agent == "ascend-pd-operator (watches)"


def test_no_write_leaves_a_replica_that_may_not_write() -> None:
    # nothing listens on port 9: a request that went out would fail with a connection error
    kube = _kube("http://127.0.0.1:9")
    kube.may_write = lambda: False
    manifest = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "x", "namespace": "ns"}}  # fmt: skip
    with pytest.raises(KubeError) as raised:
        kube.apply(manifest)
    assert raised.value.reason == "NotLeader"
    with pytest.raises(KubeError, match="leader lease"):
        kube.delete("ConfigMap", "ns", "x")


def test_a_kind_whose_api_is_not_served_is_not_listed_again_every_reconcile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every reconcile lists the PodGroups it may prune; without Volcano each LIST was a 404
    round trip (one request in ~18 per deployment). Now one 404 stands for a while, an
    apply of the kind (Volcano installed meanwhile) asks again at once, and so does the
    passing of ``ABSENT_RECHECK_SECONDS``."""
    from ascend_pd_operator.kubeio import kube as kube_module

    seen: list[dict[str, Any]] = []
    served = [False]

    def answer(method: str, path: str, query: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        if "podgroups" in path and not served[0]:
            return 404, {}, b"404 page not found"
        if method == "PATCH":
            return 200, {}, {"kind": "PodGroup", "metadata": {"name": "x"}}
        return 200, {}, {"kind": "List", "items": [{"metadata": {"name": path}}],
                         "metadata": {"resourceVersion": "7"}}  # fmt: skip

    now = [1000.0]
    monkeypatch.setattr(kube_module.time, "monotonic", lambda: now[0])
    with serving(answer, seen=seen) as url:
        kube = _kube(url)
        gets = lambda: sum(1 for s in seen if s["method"] == "GET")  # noqa: E731
        assert [*kube.list("PodGroup", "llm")] == [] and gets() == 1
        assert [*kube.list("PodGroup", "llm")] == [] and gets() == 1  # not asked again
        assert len([*kube.list("StatefulSet", "llm")]) == 1 and gets() == 2  # others are
        now[0] += kube_module.ABSENT_RECHECK_SECONDS
        assert [*kube.list("PodGroup", "llm")] == [] and gets() == 3  # asked again
        served[0] = True
        pg = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
              "metadata": {"name": "x", "namespace": "llm"}}  # fmt: skip
        kube.apply(pg)  # Volcano is there now
        assert len([*kube.list("PodGroup", "llm")]) == 1 and gets() == 4
