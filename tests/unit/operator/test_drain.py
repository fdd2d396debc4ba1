"""Scale-down drains: which instance goes, and the drain's steps, one reconcile each.

The world is built as the API server would hold it (StatefulSets the planner applied, their
pods with the StatefulSet controller's labels); each step feeds the previous plan's writes
back as the API server would carry them out. The expectations are the issue's rules, written
out by hand: NotReady first, then the highest index; mark, release, leader, workers, gone.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import Owner
from ascend_pd_operator.decisions.drain import roster, surge_indices
from ascend_pd_operator.decisions.observation import Observation
from ascend_pd_operator.decisions.planner import Plan, plan
from ascend_pd_operator.decisions.rollout import observed_instances

UID = "uid-1"
T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:40Z"
OWNER = Owner("dsv3", "llm", UID)


def _spec() -> Any:
    from ascend_pd_operator.api.models import parse_spec
    from tests.unit.operator.conftest import load_example

    return parse_spec(load_example("deepseek-v3-pp2.yaml")["spec"])  # 2 nodes per instance


def _sts(role: str, index: int, labels: Json | None = None) -> Json:
    name = f"dsv3-{role}-{index}"
    return {
        "kind": "StatefulSet",
        "metadata": {"name": name, "uid": f"u-{name}", "generation": 1,
                     "ownerReferences": [{"uid": UID}],
                     "labels": {"ascendpd.io/deployment": "dsv3", "ascendpd.io/role": role,
                                "ascendpd.io/instance": str(index), **(labels or {})}},
        "spec": {"replicas": 2},
        "status": {"observedGeneration": 1, "updateRevision": f"{name}-r",
                   "replicas": 2, "readyReplicas": 2},
    }  # fmt: skip


def _pods(role: str, index: int, ready: bool = True, labels: Json | None = None) -> list[Json]:
    name = f"dsv3-{role}-{index}"
    return [
        {
            "kind": "Pod",
            "metadata": {"name": f"{name}-{k}", "uid": f"u-{name}-{k}",
                         "labels": {"ascendpd.io/deployment": "dsv3", "ascendpd.io/role": role,
                                    "ascendpd.io/instance": str(index),
                                    "controller-revision-hash": f"{name}-r",
                                    **({"ascendpd.io/leader": "true"} if k == 0 else {}),
                                    **(labels or {})}},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True" if ready else "False"}]},
        }
        for k in range(2)
    ]  # fmt: skip


def test_the_victim_is_a_notready_instance_first_then_the_highest_index() -> None:
    statefulsets = [_sts("decode", i) for i in range(4)]
    pods = [p for i in range(4) for p in _pods("decode", i, ready=i != 1)]
    seen = observed_instances(OWNER, _spec(), statefulsets, pods)["decode"]
    chosen = roster("decode", seen, 3)
    assert chosen.victim is not None and chosen.victim.name == "dsv3-decode-1"
    assert chosen.own == (0, 2, 3)
    # all Ready: the highest index
    pods = [p for i in range(4) for p in _pods("decode", i)]
    seen = observed_instances(OWNER, _spec(), statefulsets, pods)["decode"]
    assert roster("decode", seen, 3).victim.name == "dsv3-decode-3"  # type: ignore[union-attr]


def test_prefill_0_holds_the_store_and_is_never_the_victim_while_prefill_runs() -> None:
    statefulsets = [_sts("prefill", i) for i in range(2)]
    pods = _pods("prefill", 0, ready=False) + _pods("prefill", 1)
    seen = observed_instances(OWNER, _spec(), statefulsets, pods)["prefill"]
    assert roster("prefill", seen, 1).victim.name == "dsv3-prefill-1"  # type: ignore[union-attr]


def test_one_drain_at_a_time_and_scale_up_fills_the_lowest_free_indices() -> None:
    draining = {"ascendpd.io/draining": "true"}
    statefulsets = [_sts("decode", 0), _sts("decode", 2), _sts("decode", 3, draining)]
    pods = _pods("decode", 0) + _pods("decode", 2) + _pods("decode", 3, labels=draining)
    seen = observed_instances(OWNER, _spec(), statefulsets, pods)["decode"]
    # one of the role's instances drains: no next victim, the excess stays for now
    held = roster("decode", seen, 1)
    assert held.victim is None and held.own == (0, 2)
    assert [d.name for d in held.drains] == ["dsv3-decode-3"]
    # up to 4: index 1 is free, 3 is still taken by the drain, so 1 and 4
    assert roster("decode", seen, 4).own == (0, 1, 2, 4)
    # a rollout's surge is numbered after everything that exists
    assert surge_indices(seen, (0, 1, 2, 4), 1) == (5,)


def _world(replicas: int, drain_timeout: int | None = 90) -> tuple[Json, list[Json], list[Json]]:
    from tests.unit.operator.conftest import load_example

    cr = copy.deepcopy(load_example("deepseek-v3-pp2.yaml"))
    cr["metadata"].update(namespace="llm", uid=UID, generation=1)
    cr["spec"]["decode"]["replicas"] = replicas
    if drain_timeout is not None:
        cr["spec"]["scaling"] = {"drainTimeoutSeconds": drain_timeout}
    statefulsets = [_sts("prefill", 0), _sts("prefill", 1)] + [_sts("decode", i) for i in range(3)]
    pods = [p for r, n in (("prefill", 2), ("decode", 3)) for i in range(n) for p in _pods(r, i)]
    return cr, statefulsets, pods


def _service(name: str) -> Json:
    meta = {"name": name, "ownerReferences": [{"uid": UID}],
            "labels": {"ascendpd.io/deployment": "dsv3"}}  # fmt: skip
    return {"kind": "Service", "metadata": meta}


def _step(
    cr: Json, statefulsets: list[Json], pods: list[Json], now: str, scalers: tuple[Json, ...] = ()
) -> Plan:
    services = [_service(f"dsv3-{r}-{i}") for r, n in (("prefill", 2), ("decode", 3))
                for i in range(n)]  # fmt: skip
    children = {"StatefulSet": statefulsets, "Service": services, "PDRoleScaler": list(scalers)}
    return plan(Observation(resource=cr, children=children, pods=pods), now)


def _carry_out(p: Plan, statefulsets: list[Json], pods: list[Json]) -> None:
    """The API server's side of the drain's writes."""
    for w in p.routing:
        for obj in statefulsets + pods:
            if obj["kind"] == w.kind and obj["metadata"]["name"] == w.name:
                obj["metadata"]["labels"].update(w.manifest["metadata"]["labels"])  # type: ignore[index]
    for w in p.deletes:
        if w.kind == "StatefulSet" and w.orphan:
            statefulsets[:] = [s for s in statefulsets if s["metadata"]["name"] != w.name]
    for w in p.restarts:
        if w.kind == "Pod" and w.verb == "delete":
            pods[:] = [p for p in pods if p["metadata"]["name"] != w.name]


def test_a_scale_down_marks_releases_deletes_the_leader_then_the_workers() -> None:
    cr, statefulsets, pods = _world(replicas=2)
    # 1. mark: labels on the StatefulSet and both pods; nothing deleted
    first = _step(cr, statefulsets, pods, T0)
    marked = sorted((w.kind, w.name) for w in first.routing
                    if "ascendpd.io/draining" in w.manifest["metadata"]["labels"])  # type: ignore[index]  # fmt: skip
    assert marked == [("Pod", "dsv3-decode-2-0"), ("Pod", "dsv3-decode-2-1"),
                      ("StatefulSet", "dsv3-decode-2")]  # fmt: skip
    assert not [w for w in first.deletes + first.restarts if "decode-2" in w.name]
    assert first.status["roles"]["decode"]["draining"] == [
        {"instance": "dsv3-decode-2", "since": T0}
    ]
    cr["status"] = first.status
    _carry_out(first, statefulsets, pods)
    # 2. release: the StatefulSet goes, its pods stay (orphaned)
    second = _step(cr, statefulsets, pods, T0)
    releases = [(w.kind, w.name, w.orphan) for w in second.deletes if "decode-2" in w.name]
    assert releases == [("StatefulSet", "dsv3-decode-2", True)]
    _carry_out(second, statefulsets, pods)
    # 3. the leader alone, with the drain's grace period
    third = _step(cr, statefulsets, pods, T0)
    gone = [(w.name, w.grace_period_seconds) for w in third.restarts if "decode-2" in w.name]
    assert gone == [("dsv3-decode-2-0", 90)]
    _carry_out(third, statefulsets, pods)
    # 4. then the workers
    fourth = _step(cr, statefulsets, pods, T0)
    gone = [(w.name, w.grace_period_seconds) for w in fourth.restarts if "decode-2" in w.name]
    assert gone == [("dsv3-decode-2-1", 90)]
    assert fourth.status["roles"]["decode"]["draining"] == [
        {"instance": "dsv3-decode-2", "since": T0}
    ]
    _carry_out(fourth, statefulsets, pods)
    # 5. gone: its Service is pruned now, and an Event tells how long it took
    fifth = _step(cr, statefulsets, pods, T1)
    assert ("Service", "dsv3-decode-2") in [(w.kind, w.name) for w in fifth.deletes]
    assert "draining" not in fifth.status["roles"]["decode"]
    (drained,) = [e for e in fifth.events if e.reason == "InstanceDrained"]
    assert (drained.type, drained.role) == ("Warning", "decode")
    assert drained.message == (
        "dsv3-decode-2 drained in 100 s, longer than drainTimeoutSeconds 90: the kubelet "
        "ended it (forced)"
    )


def test_unset_a_drain_deletes_with_the_default_grace_period() -> None:
    cr, statefulsets, pods = _world(replicas=2, drain_timeout=None)
    for _ in range(2):  # mark, release
        step = _step(cr, statefulsets, pods, T0)
        cr["status"] = step.status
        _carry_out(step, statefulsets, pods)
    leader = _step(cr, statefulsets, pods, T0)
    gone = [(w.name, w.grace_period_seconds) for w in leader.restarts if "decode-2" in w.name]
    assert gone == [("dsv3-decode-2-0", 600)]


@pytest.mark.parametrize("replicas", [3, 4])
def test_no_drain_without_a_scale_down(replicas: int) -> None:
    cr, statefulsets, pods = _world(replicas)
    p = _step(cr, statefulsets, pods, T0)
    assert not [w for w in p.routing if "ascendpd.io/draining" in w.manifest["metadata"]["labels"]]  # type: ignore[index]
    assert not [w for w in p.deletes if w.kind == "StatefulSet"]


def test_an_instance_whose_statefulset_was_deleted_keeps_its_index() -> None:
    """A user deleted decode-0's StatefulSet; its pods are still being removed: the role
    applies decode-0 again (drift is restored in place), it does not add decode-1."""
    statefulsets = [_sts("decode", 1)]
    pods = _pods("decode", 0) + _pods("decode", 1)
    seen = observed_instances(OWNER, _spec(), statefulsets, pods)["decode"]
    kept = roster("decode", seen, 2)
    assert kept.own == (0, 1) and kept.victim is None


def test_an_index_whose_pods_are_only_terminating_is_free_again() -> None:
    statefulsets = [_sts("decode", 1)]
    pods = _pods("decode", 0) + _pods("decode", 1)
    for pod in pods[:2]:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    seen = observed_instances(OWNER, _spec(), statefulsets, pods)["decode"]
    assert roster("decode", seen, 2).own == (0, 1)


def test_a_count_held_by_the_ratio_bounds_is_no_missing_instance() -> None:
    """Decode asks 3 while prefill:decode must stay >= 1 with 2 prefill: the operator runs
    2, and DecodeReady counts out of those 2 (it said 2/3 ready, an instance missing)."""
    cr, statefulsets, pods = _world(replicas=3)
    cr["spec"]["scaling"]["prefillPerDecode"] = {"min": "1"}
    cr["spec"]["decode"]["scaling"] = {"mode": "External", "minReplicas": 1, "maxReplicas": 4}
    scaler = {"kind": "PDRoleScaler", "spec": {"replicas": 3},
              "metadata": {"name": "dsv3-decode", "namespace": "llm", "generation": 1,
                           "ownerReferences": [{"uid": UID, "kind": "PDDeployment"}]}}  # fmt: skip
    p = _step(cr, statefulsets, pods, T0, (scaler,))
    decode = p.status["roles"]["decode"]
    assert (decode["replicas"], decode["effectiveReplicas"]) == (3, 2)
    (ready,) = [c for c in p.status["conditions"] if c["type"] == "DecodeReady"]
    assert ready["message"].startswith("2/2 instances ready (")
    assert "3 asked, held by the ratio bounds" in ready["message"]
