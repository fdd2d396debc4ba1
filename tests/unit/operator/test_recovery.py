"""Group recovery decided from hand-built pods: which instance restarts, when (backoff), and
what the status and condition say; expectations derived by hand from ``recovery``'s rules."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ascend_pd_operator.recovery import RecoveryPolicy, recover
from ascend_pd_operator.rollout import Instance

FAILURE_LIMIT = RecoveryPolicy().failure_limit

Json = dict[str, Any]
NOW = dt.datetime(2026, 12, 1, 12, 0, 0, tzinfo=dt.UTC)


def stamp(seconds_ago: float) -> str:
    return (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, created_ago: float = 600, restarts: int = 0, **status: Any) -> Json:
    container: Json = {"name": "sglang", "ready": True, "restartCount": restarts}
    if restarts:
        container["lastState"] = {"terminated": {"reason": "Error", "exitCode": 137,
                                                 "message": "HCCL timeout on rank 1"}}  # fmt: skip
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": stamp(created_ago)},
        "status": {"phase": "Running", "containerStatuses": [container],
                   "conditions": [{"type": "Ready", "status": "True"}], **status},
    }  # fmt: skip


def node(ready: str, changed_ago: float, taint_ago: float | None = None, **why: str) -> Json:
    """A node as the node watch keeps it: Ready ``ready`` since ``changed_ago`` seconds, and
    an out-of-service taint added ``taint_ago`` seconds ago (None: none)."""
    taints = (
        [
            {
                "key": "node.kubernetes.io/out-of-service",
                "value": "nodeshutdown",
                "effect": "NoExecute",
                "timeAdded": stamp(taint_ago),
            }
        ]
        if taint_ago
        else []
    )
    return {"metadata": {"name": "n"}, "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": ready,
                                       "lastTransitionTime": stamp(changed_ago), **why}]}}  # fmt: skip


def instance(name: str, *pods: Json) -> Instance:
    return Instance("prefill", int(name[-1]), name, 2, None, tuple(pods))


def world(*instances: Instance) -> dict[str, list[Instance]]:
    return {"prefill": list(instances), "decode": []}


def test_a_restarted_container_restarts_its_whole_instance_and_no_other() -> None:
    sick = instance("dsv3-prefill-1", pod("dsv3-prefill-1-0"), pod("dsv3-prefill-1-1", restarts=1))
    well = instance("dsv3-prefill-0", pod("dsv3-prefill-0-0"), pod("dsv3-prefill-0-1"))
    out = recover(world(well, sick), [], frozenset(), [], NOW)
    assert out.restarts == (
        ("dsv3-prefill-1", (("dsv3-prefill-1-0", "uid-dsv3-prefill-1-0"),
                            ("dsv3-prefill-1-1", "uid-dsv3-prefill-1-1"))),
    )  # fmt: skip
    (record,) = out.records
    assert record["instance"] == "dsv3-prefill-1" and record["restarts"] == 1
    assert record["firstFailure"] == {"pod": "dsv3-prefill-1-1", "container": "sglang",
                                      "reason": "Error", "exitCode": 137,
                                      "message": "HCCL timeout on rank 1"}  # fmt: skip
    assert "HCCL timeout on rank 1" in out.events[0][1] and out.looping == ()


def test_the_next_restart_waits_for_its_backoff() -> None:
    sick = instance("dsv3-prefill-1", pod("dsv3-prefill-1-0", restarts=1), pod("dsv3-prefill-1-1"))
    previous = [{"instance": "dsv3-prefill-1", "restarts": 2, "lastRestartTime": stamp(5),
                 "windowStart": stamp(60), "windowRestarts": 2}]  # fmt: skip
    out = recover(world(sick), [], frozenset(), previous, NOW)
    # 20 s after the second restart, plus a second: the stamps have whole seconds
    assert out.restarts == () and out.requeue_after == RecoveryPolicy().backoff(2) + 1 - 5 == 16.0
    sooner = recover(world(sick), [], frozenset(), previous, NOW + dt.timedelta(seconds=15))
    assert sooner.restarts == ()  # 20 s after a restart stamped 12:00:55 might be 19.1 s
    later = recover(world(sick), [], frozenset(), previous, NOW + dt.timedelta(seconds=17))
    assert [name for name, _ in later.restarts] == ["dsv3-prefill-1"]
    assert later.records[0]["restarts"] == 3


def test_a_pod_deleted_by_someone_else_restarts_the_survivors() -> None:
    # pod 1 was deleted (asked 10 s ago, 30 s grace); pod 0 is from before: a survivor
    gone = pod("dsv3-prefill-1-1")
    gone["metadata"].update(deletionTimestamp=stamp(-20), deletionGracePeriodSeconds=30)
    inst = instance("dsv3-prefill-1", pod("dsv3-prefill-1-0", created_ago=600))
    out = recover(world(inst), [gone], frozenset(), [], NOW)
    assert [name for name, _ in out.restarts] == ["dsv3-prefill-1"]
    assert out.records[0]["firstFailure"]["reason"] == "Deleted"
    # deleted by the operator itself: no failure
    assert recover(world(inst), [gone], frozenset({"uid-dsv3-prefill-1-1"}), [], NOW).restarts == ()


def test_replacements_made_after_a_deletion_are_no_survivors() -> None:
    gone = pod("dsv3-prefill-1-0")
    gone["metadata"].update(
        deletionTimestamp=stamp(20), deletionGracePeriodSeconds=30
    )  # asked 50 s ago
    inst = instance("dsv3-prefill-1", pod("dsv3-prefill-1-0", created_ago=40),
                    pod("dsv3-prefill-1-1", created_ago=45))  # fmt: skip
    assert recover(world(inst), [gone], frozenset(), [], NOW).restarts == ()


def test_a_failed_pod_counts() -> None:
    failed = pod("dsv3-prefill-0-1", phase="Failed", reason="Evicted", message="node low on memory")
    failed["status"]["containerStatuses"] = []
    inst = instance("dsv3-prefill-0", pod("dsv3-prefill-0-0"), failed)
    out = recover(world(inst), [], frozenset(), [], NOW)
    assert out.records[0]["firstFailure"]["reason"] == "Evicted"


def test_a_restart_loop_sets_the_condition_naming_the_first_failure() -> None:
    sick = instance("dsv3-prefill-1", pod("dsv3-prefill-1-0", restarts=3), pod("dsv3-prefill-1-1"))
    first = {"pod": "dsv3-prefill-1-1", "container": "sglang", "reason": "Error", "exitCode": 1,
             "message": "out of NPU memory"}  # fmt: skip
    previous = [{"instance": "dsv3-prefill-1", "restarts": FAILURE_LIMIT - 1,
                 "lastRestartTime": stamp(400), "windowStart": stamp(500),
                 "windowRestarts": FAILURE_LIMIT - 1, "firstFailure": first}]  # fmt: skip
    out = recover(world(sick), [], frozenset(), previous, NOW)
    assert [name for name, _ in out.restarts] == ["dsv3-prefill-1"]
    ((name, message),) = out.looping
    assert name == "dsv3-prefill-1"
    assert "restarted 5 times within 600 s" in message
    assert "pod dsv3-prefill-1-1 container sglang: Error exit code 1: out of NPU memory" in message


def test_a_healthy_instance_keeps_its_record_and_a_removed_one_loses_it() -> None:
    well = instance("dsv3-prefill-0", pod("dsv3-prefill-0-0"), pod("dsv3-prefill-0-1"))
    previous = [{"instance": "dsv3-prefill-0", "restarts": 1},
                {"instance": "dsv3-prefill-9", "restarts": 4}]  # fmt: skip
    out = recover(world(well), [], frozenset(), previous, NOW)
    assert out.restarts == () and [r["instance"] for r in out.records] == ["dsv3-prefill-0"]


def test_a_pod_on_a_node_that_is_not_ready_restarts_its_instance() -> None:
    on_bad = pod("dsv3-prefill-0-1")
    on_bad["spec"] = {"nodeName": "npu-3"}
    inst = instance("dsv3-prefill-0", pod("dsv3-prefill-0-0"), on_bad)
    unready = {"npu-3": node("Unknown", 30, reason="NodeStatusUnknown",
                             message="Kubelet stopped posting node status.")}  # fmt: skip
    out = recover(world(inst), [], frozenset(), [], NOW, nodes=unready)
    assert [name for name, _ in out.restarts] == ["dsv3-prefill-0"]
    first = out.records[0]["firstFailure"]
    assert first["reason"] == "NodeNotReady" and first["pod"] == "dsv3-prefill-0-1"
    assert first["message"] == (
        "node npu-3 is Ready=Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)"
    )
    # other nodes' trouble is not this instance's
    assert (
        recover(world(inst), [], frozenset(), [], NOW, nodes={"npu-9": node("False", 30)}).restarts
        == ()
    )
