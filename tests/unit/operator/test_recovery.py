"""Group recovery decided from hand-built pods: which instance restarts, when (backoff), and
what the status and condition say; expectations derived by hand from ``recovery``'s rules."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.decisions.recovery import RecoveryPolicy, recover
from ascend_pd_operator.decisions.rollout import Instance

FAILURE_LIMIT = RecoveryPolicy().failure_limit

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
    ready_condition = {"type": "Ready", "status": ready, "lastTransitionTime": stamp(changed_ago)}
    return {"metadata": {"name": "n"}, "spec": {"taints": taints},
            "status": {"conditions": [{**ready_condition, **why}]}}  # fmt: skip


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


# --- lost nodes: force-deletion ------------------------------------------------------
# dsv3-prefill-0 has pod 0 on npu-1 (healthy) and pod 1 on npu-3 (lost).
HEALTHY = node("True", 3600)


def on(node_name: str, p: Json, deleted_ago: float | None = None) -> Json:
    p["spec"] = {"nodeName": node_name}
    if deleted_ago is not None:  # deleted by the operator's restart, with a 30 s grace period
        p["metadata"].update(deletionTimestamp=stamp(deleted_ago - 30),
                             deletionGracePeriodSeconds=30)  # fmt: skip
    return p


def restarted_at_loss(seconds_ago: float) -> list[Json]:
    """The record of the restart group recovery made when npu-3 became unreachable."""
    return [{"instance": "dsv3-prefill-0", "restarts": 1, "lastRestartTime": stamp(seconds_ago),
             "windowStart": stamp(seconds_ago), "windowRestarts": 1}]  # fmt: skip


def after_restart(deleted_ago: float) -> Instance:
    """Pod 0 replaced on a healthy node; pod 1 Terminating on npu-3 since the restart."""
    return instance("dsv3-prefill-0", on("npu-1", pod("dsv3-prefill-0-0", created_ago=5)),
                    on("npu-3", pod("dsv3-prefill-0-1"), deleted_ago=deleted_ago))  # fmt: skip


def test_an_unreachable_nodes_terminating_pod_is_force_deleted_once_the_timer_expires() -> None:
    # npu-3 turned Unknown 299 s ago; the restart then left pod 1 Terminating there
    nodes = {"npu-1": HEALTHY, "npu-3": node("Unknown", 299)}
    ours = frozenset({"uid-dsv3-prefill-0-1"})
    early = recover(world(after_restart(298)), [], ours, restarted_at_loss(298), NOW,
                    nodes=nodes, force_delete_after_seconds=300)  # fmt: skip
    assert early.force_deletes == () and early.force_events == () and early.restarts == ()
    assert early.requeue_after == 1.0  # due at 300 s: the reconcile comes back then
    assert "forceDeletions" not in early.records[0]
    later = NOW + dt.timedelta(seconds=1)
    due = recover(world(after_restart(298)), [], ours, restarted_at_loss(298), later,
                  nodes=nodes, force_delete_after_seconds=300)  # fmt: skip
    assert due.force_deletes == (("dsv3-prefill-0-1", "uid-dsv3-prefill-0-1"),)
    assert due.restarts == ()  # the instance was restarted at the loss: not again
    (record,) = due.records
    assert record["restarts"] == 1 and record["forceDeletions"] == 1
    assert record["lastForceDeletion"] == {
        "time": "2026-12-01T12:00:01Z", "node": "npu-3", "reason": "NodeUnreachable",
        "goneSeconds": 300, "pods": ["dsv3-prefill-0-1"],
    }  # fmt: skip
    assert due.force_events == ((
        "dsv3-prefill-0",
        "force-deleting pod dsv3-prefill-0-1 of instance dsv3-prefill-0: node npu-3 unreachable "
        "(Ready=Unknown) for 300 s, past spec.recovery.forceDeleteAfterSeconds (300)",
    ),)  # fmt: skip
    assert due.requeue_after is None


def test_without_the_field_an_unreachable_nodes_pods_stay_terminating() -> None:
    nodes = {"npu-1": HEALTHY, "npu-3": node("Unknown", 3 * 86400)}
    out = recover(world(after_restart(3 * 86400)), [], frozenset(), restarted_at_loss(3 * 86400),
                  NOW, nodes=nodes)  # fmt: skip
    assert out.force_deletes == () and out.force_events == () and out.requeue_after is None
    assert "lastForceDeletion" not in out.records[0]


def test_a_not_ready_but_reachable_node_is_never_lost() -> None:
    # Ready=False: its kubelet runs and ends the pod itself, however long it takes
    nodes = {"npu-1": HEALTHY, "npu-3": node("False", 3600, reason="KubeletNotReady")}
    out = recover(world(after_restart(3600)), [], frozenset(), restarted_at_loss(3600), NOW,
                  nodes=nodes, force_delete_after_seconds=60)  # fmt: skip
    assert out.force_deletes == () and out.requeue_after is None


def test_an_unreachable_node_that_gives_no_transition_time_is_never_timed() -> None:
    unknown = node("Unknown", 0)
    del unknown["status"]["conditions"][0]["lastTransitionTime"]
    nodes = {"npu-1": HEALTHY, "npu-3": unknown}
    out = recover(world(after_restart(3600)), [], frozenset(), restarted_at_loss(3600), NOW,
                  nodes=nodes, force_delete_after_seconds=60)  # fmt: skip
    assert out.force_deletes == () and out.requeue_after is None


def test_the_out_of_service_taint_restarts_and_force_deletes_at_once_even_with_the_field_off() -> (
    None
):
    # an admin tainted npu-3 (still Ready: it was tainted before its shutdown) 7 s ago
    inst = instance("dsv3-prefill-0", on("npu-1", pod("dsv3-prefill-0-0")),
                    on("npu-3", pod("dsv3-prefill-0-1")))  # fmt: skip
    nodes = {"npu-1": HEALTHY, "npu-3": node("True", 3600, taint_ago=7)}
    out = recover(world(inst), [], frozenset(), [], NOW, nodes=nodes)
    # the whole instance restarts; the pod on the tainted node goes with grace period 0
    members = (("dsv3-prefill-0-0", "uid-dsv3-prefill-0-0"),
               ("dsv3-prefill-0-1", "uid-dsv3-prefill-0-1"))  # fmt: skip
    assert out.restarts == (("dsv3-prefill-0", members),)
    assert out.force_deletes == (("dsv3-prefill-0-1", "uid-dsv3-prefill-0-1"),)
    (record,) = out.records
    assert record["firstFailure"]["reason"] == "NodeOutOfService"
    assert record["firstFailure"]["message"] == (
        "node npu-3 is tainted node.kubernetes.io/out-of-service, Ready=True"
    )
    assert record["lastForceDeletion"]["reason"] == "NodeOutOfService"
    assert record["lastForceDeletion"]["goneSeconds"] == 7  # since the taint: still Ready
    assert out.force_events[0][1].endswith(
        "node npu-3 is tainted node.kubernetes.io/out-of-service, gone for 7 s"
    )


def test_an_out_of_service_node_gone_for_long_counts_from_when_it_left_ready() -> None:
    nodes = {"npu-1": HEALTHY, "npu-3": node("Unknown", 900, taint_ago=2)}
    out = recover(world(after_restart(900)), [], frozenset(), restarted_at_loss(900), NOW,
                  nodes=nodes)  # fmt: skip
    assert out.force_deletes == (("dsv3-prefill-0-1", "uid-dsv3-prefill-0-1"),)
    assert out.records[0]["lastForceDeletion"]["goneSeconds"] == 900


def test_a_live_pod_on_a_lost_node_waits_for_its_instances_restart() -> None:
    # the node went unreachable 400 s ago while the instance's restart waits for its backoff
    # (restarted 5 s ago for another failure): force-deleting the pod now would split it
    inst = instance("dsv3-prefill-0", on("npu-1", pod("dsv3-prefill-0-0")),
                    on("npu-3", pod("dsv3-prefill-0-1")))  # fmt: skip
    nodes = {"npu-1": HEALTHY, "npu-3": node("Unknown", 400)}
    waiting = recover(world(inst), [], frozenset(), restarted_at_loss(5), NOW, nodes=nodes,
                      force_delete_after_seconds=300)  # fmt: skip
    assert waiting.restarts == () and waiting.force_deletes == ()
    assert waiting.requeue_after == RecoveryPolicy().backoff(1) + 1 - 5
    later = NOW + dt.timedelta(seconds=6)
    out = recover(world(inst), [], frozenset(), restarted_at_loss(5), later, nodes=nodes,
                  force_delete_after_seconds=300)  # fmt: skip
    assert [name for name, _ in out.restarts] == ["dsv3-prefill-0"]
    assert out.force_deletes == (("dsv3-prefill-0-1", "uid-dsv3-prefill-0-1"),)
    assert out.records[0]["restarts"] == 2 and out.records[0]["forceDeletions"] == 1
