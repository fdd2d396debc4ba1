"""The Events a plan posts: a Warning when a condition newly tells a problem, and one for
each drained instance and each instance the scheduler newly cannot place."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import (
    COND_INSTANCES_HEALTHY,
    COND_KV_LAYOUT_COMPATIBLE,
    COND_MODEL_RESOLVED,
    COND_NPU_PREFLIGHT,
    COND_PLACEMENT_FEASIBLE,
    COND_RATIO_CONSTRAINED,
    COND_READY,
    COND_VALIDATED,
    REASON_ENV_CONTRACT_MISMATCH,
    REASON_INSPECTING,
    REASON_INSTANCE_DRAINED,
    REASON_INSTANCE_UNSCHEDULABLE,
    REASON_LAUNCH_REFUSED,
    REASON_NOT_READY,
    REASON_PLACED,
    REASON_ROLLOUT_IN_PROGRESS,
    REASON_SGLANG_VERSION_MISMATCH,
    ROLES,
    role_ready_condition,
    role_status,
)
from ascend_pd_operator.decisions.recovery import (
    parse_time,
)

#: Conditions whose False status (with a reason worth telling) posts a Warning Event.
EVENT_CONDITIONS = (
    COND_VALIDATED, COND_KV_LAYOUT_COMPATIBLE, COND_MODEL_RESOLVED, COND_READY,
    COND_INSTANCES_HEALTHY, COND_NPU_PREFLIGHT, COND_PLACEMENT_FEASIBLE,
)  # fmt: skip
#: Reasons that are progress, not a problem: no Event. A rollout is one: it posted a Warning
#: at each step of every rollout, and one when an upgraded operator's apply moved the
#: router Deployment's generation for a moment (the upgrade tier caught it).
QUIET_REASONS = (REASON_INSPECTING, REASON_NOT_READY, REASON_ROLLOUT_IN_PROGRESS)
#: Role conditions' reasons that post a Warning Event: a pod's launcher refused to start.
EVENT_REASONS = (
    REASON_LAUNCH_REFUSED, REASON_ENV_CONTRACT_MISMATCH, REASON_SGLANG_VERSION_MISMATCH,
)  # fmt: skip


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str
    #: the role it concerns, where one does (the metrics count drains per role)
    role: str = ""


def unscheduled_events(previous: Json, waiting: Mapping[str, list[str]]) -> Iterator[Event]:
    """A Warning ``InstanceUnschedulable`` Event for each instance whose pod kube-scheduler
    newly cannot place, naming the instance, the pod and the scheduler's words (``waiting``:
    ``role_status.unscheduled_waits``), once: a wait the previous role condition already said is
    not told again."""
    said = {c["type"]: c.get("message", "") for c in previous.get("conditions") or []}
    for role, waits in waiting.items():
        before = said.get(role_ready_condition(role), "")
        for wait in waits:
            if wait not in before:
                yield Event("Warning", REASON_INSTANCE_UNSCHEDULABLE, wait)


def drained_events(previous: Json, status: Json, now: str, grace: int) -> Iterator[Event]:
    """An Event for each instance the previous status listed as draining and this one no
    longer does, saying how long its drain took: ``InstanceDrained``, Normal within the grace
    period, Warning past it (forced: the kubelet ended what it still held)."""
    end = parse_time(now)
    for role in ROLES:
        still = {d["instance"] for d in role_status(status, role).get("draining") or []}
        for d in role_status(previous, role).get("draining") or []:
            if d["instance"] in still:
                continue
            start = parse_time(d.get("since", ""))
            took = (end - start).total_seconds() if start and end else None
            if took is None:
                yield Event("Normal", REASON_INSTANCE_DRAINED, f"{d['instance']} drained", role)
            elif took > grace:
                yield Event(
                    "Warning",
                    REASON_INSTANCE_DRAINED,
                    f"{d['instance']} drained in {took:.0f} s, longer than "
                    f"drainTimeoutSeconds {grace}: the kubelet ended it (forced)",
                    role,
                )
            else:
                yield Event(
                    "Normal",
                    REASON_INSTANCE_DRAINED,
                    f"{d['instance']} drained in {took:.0f} s, within drainTimeoutSeconds",
                    role,
                )


def events(previous: Json, status: Json) -> list[Event]:
    """A Warning Event when a rule rejects the spec or the layout, a write fails, or a pod's
    launcher refuses to start (SGLang refused its command line, or the env contract's
    version): once per message (the previous status has it)."""
    before = {c["type"]: c for c in previous.get("conditions") or []}
    # Ready False names the first condition it waits for by that one's reason: that
    # condition tells its own Event (or none, being progress), Ready does not repeat it.
    told = {c["reason"] for c in status["conditions"]
            if c["type"] != COND_READY and c["status"] != "True"}  # fmt: skip
    out = []
    for cond in status["conditions"]:
        if cond["type"] == COND_READY and cond["reason"] in told:
            continue
        if cond["type"] == COND_PLACEMENT_FEASIBLE and cond["status"] == "True":
            # a domain chosen (or a preference given up): said once, as a Normal Event
            old = before.get(cond["type"]) or {}
            if cond["reason"] != REASON_PLACED and old.get("message") != cond["message"]:
                out.append(Event("Normal", cond["reason"], cond["message"]))
            continue
        if cond["type"] == COND_RATIO_CONSTRAINED:
            old = before.get(cond["type"]) or {}
            if cond["status"] == "True" and old.get("message") != cond["message"]:
                out.append(Event("Normal", cond["reason"], cond["message"]))
            continue
        if cond["type"] not in EVENT_CONDITIONS and cond["reason"] not in EVENT_REASONS:
            continue
        if cond["status"] != "False" or cond["reason"] in QUIET_REASONS:
            continue
        old = before.get(cond["type"])
        if old and old.get("message") == cond["message"] and old.get("status") == "False":
            continue
        out.append(Event("Warning", cond["reason"], f"{cond['type']}: {cond['message']}"))
    return out
