"""The recording router's bookkeeping: sglang-router's discovery rule, and when a request
counts as cut. Hand-built pods; the expectations come from the rule as the docstring
states it."""

from __future__ import annotations

from typing import Any

import pytest

from ascend_pd_dev.testtools.recording_router import Requests, selector_of

SELECTOR = {"ascendpd.io/role": "decode", "ascendpd.io/leader": "true"}


def pod(name: str, leader: bool = True, ready: bool = True, deleting: bool = False) -> Any:
    labels = {"ascendpd.io/role": "decode", **({"ascendpd.io/leader": "true"} if leader else {})}
    meta = {"name": name, "uid": f"uid-{name}", "labels": labels}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cond = {"type": "Ready", "status": "True" if ready else "False"}
    return {"metadata": meta, "status": {"phase": "Running", "conditions": [cond]}}


def instance(n: int, **leader: bool) -> list[Any]:
    return [pod(f"d-{n}-0", **leader), pod(f"d-{n}-1", leader=False)]


def test_the_selector_is_read_from_the_router_arguments() -> None:
    args = ["--pd-disaggregation", "--prefill-selector", "a=1", "--decode-selector",
            "ascendpd.io/role=decode", "x=y=z", "--policy", "random"]  # fmt: skip
    assert selector_of(args, "decode") == {"ascendpd.io/role": "decode", "x": "y=z"}
    with pytest.raises(ValueError, match="--decode-selector"):
        selector_of(["--policy", "random"], "decode")


def test_workers_join_ready_and_leave_only_when_deleted() -> None:
    r = Requests(SELECTOR, duration=1.0, pods_per_instance=2)
    r.observe(instance(0) + instance(1, ready=False), 0.0)
    assert set(r.workers.values()) == {"d-0"}  # not Ready: not yet
    r.observe(instance(0, ready=False) + instance(1), 1.0)
    assert set(r.workers.values()) == {"d-0", "d-1"}  # NotReady later: kept
    r.observe(instance(0, deleting=True) + instance(1), 2.0)
    assert set(r.workers.values()) == {"d-1"}


def test_a_drain_that_lets_the_leader_finish_loses_nothing() -> None:
    r = Requests(SELECTOR, duration=1.0, pods_per_instance=2)
    r.observe(instance(0) + instance(1), 0.0)
    sent = [r.send(0.0), r.send(0.0)]
    assert {s.instance for s in sent if s} == {"d-0", "d-1"}
    r.observe(instance(0, deleting=True) + instance(1), 0.5)  # the drain deletes d-0's leader
    assert r.send(0.5).instance == "d-1"  # type: ignore[union-attr]
    r.observe(instance(0, deleting=True) + instance(1), 1.2)  # its request ended at 1.0
    r.observe(instance(1), 1.4)  # then the leader went, then its worker
    assert r.lost() == [] and len(r.completed(2.0)) == 3


@pytest.mark.parametrize(
    ("left", "cut"),
    [
        ([pod("d-0-0")], "a rank ended"),  # the worker first
        ([pod("d-0-1", leader=False)], "its leader ended"),  # the leader before its request
        ([], "its leader ended"),  # both, between two looks
    ],
)
def test_an_instance_that_ends_under_a_request_cuts_it(left: list[Any], cut: str) -> None:
    r = Requests(SELECTOR, duration=1.0, pods_per_instance=2)
    r.observe(instance(0), 0.0)
    r.send(0.0)
    r.observe(left, 0.9)
    (lost,) = r.lost()
    assert cut in lost.lost and lost.instance == "d-0"


def test_a_pod_gone_after_its_request_ended_cut_nothing() -> None:
    r = Requests(SELECTOR, duration=1.0, pods_per_instance=2)
    r.observe(instance(0), 0.0)
    r.send(0.0)
    r.observe(instance(0), 1.1)
    r.observe([], 1.2)
    assert r.lost() == [] and r.workers == {}
