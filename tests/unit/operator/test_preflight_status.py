"""NPUPreflight: a runtime pod whose launcher's NPU preflight failed (exit 7 and its
termination message), as the kubelet reports it in the pod's status, becomes
``NPUPreflight=False`` with the check's reason naming pod and node, and a Warning Event.

The pods here are written by hand as a kubelet writes them; the messages are the
launcher's (``env_contract.preflight_message``, the one writer of that format)."""

from __future__ import annotations

import dataclasses
from typing import Any

import ascend_pd_runtime.env_contract as ec
from ascend_pd_operator.decisions.observation import Observation
from ascend_pd_operator.decisions.planner import conclude, plan
from ascend_pd_operator.decisions.status import compute_status
from ascend_pd_operator.decisions.writes import Outcome
from tests.unit.operator.findings import findings_for
from tests.unit.operator.test_planner import owned, resource
from tests.unit.operator.test_status import OWNER, T0, T1, all_children, conditions

Json = dict[str, Any]
NOW = "2026-01-01T00:00:00Z"

LINK_DOWN = (
    "NPU preflight failed (LinkDown, check links): device davinci5: hccn_tool -i 5 -link -g "
    "says link status DOWN (expected UP): check the NPU's network port, cable and switch port"
)
STORE = (
    "NPU preflight failed (StoreUnreachable, check store): the memfabric store "
    "tcp://dsv3-prefill-0-0.dsv3-prefill-0.llm.svc:24666 (10.0.3.7:24666) did not answer over "
    "TCP within 600 s (41 attempts; last: No route to host): it is prefill instance 0's "
    "leader; may this node reach that node?"
)


def pod(name: str, node: str, state: Json, last: Json | None = None, role: str = "prefill") -> Json:
    """A runtime pod as the kubelet reports it: between restarts (CrashLoopBackOff, the exit
    in lastState) or just ended (the exit in state)."""
    return {
        "metadata": {"name": name, "labels": {"ascendpd.io/deployment": "dsv3",
                                              "ascendpd.io/role": role,
                                              "ascendpd.io/instance": name.split("-")[2]}},
        "spec": {"nodeName": node},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [{
                "name": "sglang", "ready": False, "restartCount": 1 if last else 0,
                "state": state, "lastState": last or {},
            }],
        },
    }  # fmt: skip


def ended(code: int, message: str) -> Json:
    return {"terminated": {"exitCode": code, "reason": "Error", "message": message,
                           "startedAt": "2026-01-01T00:00:00Z",
                           "finishedAt": "2026-01-01T00:00:03Z"}}  # fmt: skip


BACKOFF = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting"}}


def test_a_link_down_is_npu_preflight_false_naming_pod_and_node(dsv3: Json) -> None:
    pods = [
        pod("dsv3-prefill-1-1", "sim-ascend-3", BACKOFF, ended(ec.EXIT_PREFLIGHT, LINK_DOWN)),
        pod("dsv3-prefill-1-0", "sim-ascend-2", {"running": {"startedAt": T0}}),
    ]
    obs = findings_for(OWNER, dsv3, all_children(ready=False), {}, pods=pods)
    status = compute_status(obs, T0)
    cond = conditions(status)["NPUPreflight"]
    assert (cond["status"], cond["reason"]) == ("False", "LinkDown")
    assert cond["message"] == f"pod dsv3-prefill-1-1 on node sim-ascend-3: {LINK_DOWN}"
    # the role says it too, with the launcher's meaning of the exit code
    prefill = conditions(status)["PrefillReady"]["message"]
    assert "last exit 7 (launcher: an NPU preflight check failed): NPU preflight" in prefill
    assert "NPUPreflight" in conditions(status)["Ready"]["message"]


def test_each_reason_and_the_count_of_more_pods(dsv3: Json) -> None:
    pods = [
        pod("dsv3-decode-0-1", "n7", ended(ec.EXIT_PREFLIGHT, STORE), role="decode"),
        pod("dsv3-prefill-1-1", "n3", BACKOFF, ended(ec.EXIT_PREFLIGHT, LINK_DOWN)),
    ]
    obs = findings_for(OWNER, dsv3, all_children(ready=False), {}, pods=pods)
    cond = conditions(compute_status(obs, T0))["NPUPreflight"]
    assert cond["reason"] == "StoreUnreachable"
    assert cond["message"].startswith("pod dsv3-decode-0-1 on node n7: NPU preflight failed")
    assert cond["message"].endswith("(and 1 more pod)")
    for check, reason in ec.PREFLIGHT_REASONS.items():
        message = ec.preflight_message(check, "detail")
        one = [pod("dsv3-prefill-1-1", "n3", ended(ec.EXIT_PREFLIGHT, message))]
        got = conditions(compute_status(dataclasses.replace(obs, pods=one), T0))
        assert got["NPUPreflight"]["reason"] == reason


def test_other_exits_are_no_preflight_failure(dsv3: Json) -> None:
    pods = [
        # exit 7 without the launcher's words: not ours (SGLang's own, after the exec)
        pod("dsv3-prefill-1-0", "n1", ended(ec.EXIT_PREFLIGHT, "")),
        pod("dsv3-prefill-1-1", "n2", BACKOFF, ended(ec.EXIT_ARGS_REFUSED, LINK_DOWN)),
        pod("dsv3-decode-0-0", "n3", ended(137, "OOMKilled"), role="decode"),
    ]
    # a pod that failed once and is ready now passed its checks since
    again = pod("dsv3-decode-0-1", "n4", {"running": {}}, ended(ec.EXIT_PREFLIGHT, STORE), "decode")
    again["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    pods.append(again)
    obs = findings_for(OWNER, dsv3, all_children(ready=False), {}, pods=pods)
    cond = conditions(compute_status(obs, T0))["NPUPreflight"]
    assert (cond["status"], cond["reason"]) == ("True", "NoPreflightFailure")


def test_it_stays_false_until_the_instances_are_ready_again(dsv3: Json) -> None:
    failing = [pod("dsv3-prefill-1-1", "n3", BACKOFF, ended(ec.EXIT_PREFLIGHT, LINK_DOWN))]
    obs = findings_for(OWNER, dsv3, all_children(ready=False), {}, pods=failing)
    first = compute_status(obs, T0)
    # group recovery replaced the pods: new ones run their checks, nothing ended yet
    fresh = [pod("dsv3-prefill-1-1", "n4", {"running": {"startedAt": T1}})]
    second = compute_status(dataclasses.replace(obs, pods=fresh, previous=first), T1)
    kept = conditions(second)["NPUPreflight"]
    assert (kept["status"], kept["reason"]) == ("False", "LinkDown")
    assert kept["message"] == conditions(first)["NPUPreflight"]["message"]
    assert kept["lastTransitionTime"] == T0
    ready = findings_for(OWNER, dsv3, all_children(ready=True), second, pods=[])
    cond = conditions(compute_status(ready, T1))["NPUPreflight"]
    assert (cond["status"], cond["reason"]) == ("True", "NoPreflightFailure")


def _created(dsv3: Json) -> tuple[Json, list[Json]]:
    """The resource with the status of its first reconcile, and the StatefulSets it
    created (as the API server returns them)."""
    cr = resource(dsv3)
    applied = plan(Observation(cr), NOW)
    cr["status"] = conclude(
        applied, Outcome(live={(w.kind, w.name): w.manifest or {} for w in applied.applies})
    ).status
    return cr, [owned(w.manifest or {}) for w in applied.applies if w.kind == "StatefulSet"]


def test_a_warning_event_once_per_failure(dsv3: Json) -> None:
    cr, sts = _created(dsv3)
    pods = [pod("dsv3-prefill-1-1", "sim-ascend-3", BACKOFF, ended(ec.EXIT_PREFLIGHT, LINK_DOWN))]
    p = plan(Observation(cr, children={"StatefulSet": sts}, pods=pods), NOW)
    warnings = [e for e in p.events if e.reason == "LinkDown"]
    assert [(e.type, e.message) for e in warnings] == [
        ("Warning", f"NPUPreflight: pod dsv3-prefill-1-1 on node sim-ascend-3: {LINK_DOWN}")
    ]
    cr["status"] = p.status
    again = plan(Observation(cr, children={"StatefulSet": sts}, pods=pods), NOW)
    assert [e for e in again.events if e.reason == "LinkDown"] == []


def test_group_recovery_restarts_the_instance_with_backoff(dsv3: Json) -> None:
    """A failed preflight is a crash like any other: the whole instance restarts, and the
    next restart waits for the backoff."""
    cr, sts = _created(dsv3)
    pods = [pod("dsv3-prefill-1-1", "n3", BACKOFF, ended(ec.EXIT_PREFLIGHT, LINK_DOWN)),
            pod("dsv3-prefill-1-0", "n2", {"running": {"startedAt": T0}})]  # fmt: skip
    for p_ in pods:
        p_["metadata"]["uid"] = "uid-" + p_["metadata"]["name"]
    first = plan(Observation(cr, children={"StatefulSet": sts}, pods=pods), NOW)
    assert [w.name for w in first.restarts] == ["dsv3-prefill-1"]
    assert first.recovery is not None and first.recovery.records
    cr["status"] = first.status
    # the replacement failed again at once: the restart waits for its backoff
    pods[0]["metadata"]["uid"] = "uid-again"
    again = plan(Observation(cr, children={"StatefulSet": sts}, pods=pods), NOW)
    assert again.restarts == () and again.requeue_after is not None
