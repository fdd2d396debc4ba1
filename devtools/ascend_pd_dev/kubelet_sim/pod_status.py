"""Pod lifecycle, the pure part: the status a kubelet would report for a pod at a moment, from
its spec, its annotations (``knobs``), the status it has and its node's readiness.

``desired_status`` decides the pod's phase and readiness from its outcome and requests, each
container's entry (``containers``), then the conditions and the pod's reason and message.
Times already in the status are kept, so an unchanged pod yields an unchanged status
(``status_signature`` says whether a write is due).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ascend_pd_dev.kubelet_sim import check_runs, knobs
from ascend_pd_dev.kubelet_sim.containers import (
    PodView,
    container_status,
    init_container_statuses,
    never_pulled,
)
from ascend_pd_dev.kubelet_sim.knobs import Failure, Requests
from ascend_pd_dev.kubelet_sim.objects import Obj, condition, parse_iso

_OUTCOMES: dict[str, tuple[str, bool, str | None, str | None]] = {
    # outcome: (phase, ready, reason, message)
    "ready": ("Running", True, None, None),
    "unready": ("Running", False, "ContainersNotReady",
                "kubelet-sim: outcome 'unready' (a failing readiness probe)"),
    "crash": ("Running", False, "ContainersNotReady",
              "kubelet-sim: outcome 'crash' (containers in CrashLoopBackOff)"),
    "succeed": ("Succeeded", False, "PodCompleted", None),
    "fail": ("Failed", False, "PodFailed", None),
}  # fmt: skip


@dataclass
class Verdict:
    """The pod's phase and readiness, and why, as the decision goes along."""

    phase: str
    ready: bool
    reason: str | None
    message: str | None
    failure: Failure | None = None
    #: the failure's pod reason (``Evicted`` unless asked otherwise)
    pod_reason: str | None = None
    #: what the pod's own message says (not its conditions')
    pod_message: str | None = None


def _verdict(outcome: str, asked: Requests, policy: str) -> Verdict:
    """What the outcome annotation and the requests make of the pod, before its containers."""
    if outcome in _OUTCOMES:
        verdict = Verdict(*_OUTCOMES[outcome], failure=asked.failure)
    else:
        verdict = Verdict("Failed", False, "InvalidSimulatedOutcome", (
            f"kubelet-sim: annotation {knobs.OUTCOME}={outcome!r} is not one of "
            f"{', '.join(knobs.OUTCOMES)}"), failure=asked.failure)  # fmt: skip
    failure = verdict.failure
    if verdict.phase == "Running" and asked.invalid:
        verdict.phase, verdict.ready, verdict.reason = "Failed", False, "InvalidSimulationRequest"
        verdict.message, verdict.failure = asked.invalid, None
    elif verdict.phase == "Running" and failure is not None:
        # restart policy Never: the containers' exit ended the pod, and a kubelet says no more;
        # any other policy would restart them, so a kubelet fails such a pod only by evicting it
        verdict.phase, verdict.ready, verdict.reason = "Failed", False, "PodFailed"
        if failure.pod_reason or policy != "Never":
            verdict.pod_reason = failure.pod_reason or "Evicted"
            verdict.message = failure.pod_message or (
                f"kubelet-sim: the pod was failed on request ({knobs.FAIL})"
            )
        else:
            verdict.message = failure.pod_message
    verdict.pod_message = verdict.message
    return verdict


def _pod_view(pod: Obj, timestamp: str, checked: Mapping[str, check_runs.View],
              asked: Requests, verdict: Verdict,
              namespace_annotations: Mapping[str, str] | None = None) -> PodView:  # fmt: skip
    spec = pod.get("spec", {})
    containers = spec.get("containers") or []
    current = pod.get("status") or {}
    previous = {c.get("name"): c for c in current.get("containerStatuses") or []}
    outcome = knobs.outcome_of(pod)
    crash = asked.crash
    target = None
    if crash is not None and verdict.phase == "Running" and outcome != "crash":
        target = crash.container or (containers[0].get("name") if containers else None)
    return PodView(
        meta=pod.get("metadata", {}), timestamp=timestamp, now=parse_iso(timestamp) or 0.0,
        start=current.get("startTime") or timestamp, policy=spec.get("restartPolicy") or "Always",
        outcome=outcome, phase=verdict.phase, ready=verdict.ready, delay=asked.delay,
        failure=verdict.failure, crash=crash, crash_target=target, handled=asked.handled,
        checked=checked, previous=previous,
        pulling=frozenset(never_pulled(
            containers, knobs.unpullable_images(pod, namespace_annotations), previous)),
    )  # fmt: skip


def _ended_with_containers(verdict: Verdict, statuses: list[Obj], all_checked: bool) -> None:
    """Every container ended for good (restart policy Never): so does the pod."""
    codes = [int((e["state"].get("terminated") or {}).get("exitCode", 1)) for e in statuses]
    if any(codes):
        verdict.phase, verdict.reason = "Failed", "PodFailed"
    else:
        verdict.phase, verdict.reason = "Succeeded", "PodCompleted"
    verdict.ready, verdict.message = False, None
    verdict.pod_message = None
    if all_checked:
        verdict.pod_message = "kubelet-sim: the launcher check failed (restart policy Never)"


def _waiting_for_images(verdict: Verdict, pulling: frozenset[str]) -> None:
    """A container never created: the pod has not started running (a kubelet: Pending)."""
    verdict.phase, verdict.ready, verdict.reason = "Pending", False, "ContainersNotReady"
    verdict.message = f"containers with unready status: [{' '.join(sorted(pulling))}]"


def not_ready_node_message(node: str, readiness: str) -> str:
    what = "unreachable" if readiness == "Unknown" else "NotReady"
    return (f"kubelet-sim: node {node} is {what} (its pods are marked NotReady, as the node "
            "lifecycle controller would)")  # fmt: skip


def _conditions(
    current: Obj, view: PodView, verdict: Verdict, containers_ready: tuple[bool, Any, Any]
) -> list[Obj]:
    old_conditions = {c.get("type"): c for c in current.get("conditions") or []}

    def cond(kind: str, status: bool, why: str | None = None, text: str | None = None) -> Obj:
        old = old_conditions.get(kind) or {}
        same = old.get("status") == ("True" if status else "False")
        since = old.get("lastTransitionTime") if same and old.get("lastTransitionTime") else None
        fallback = view.start if kind in ("Initialized", "PodScheduled") else view.timestamp
        return condition(kind, status, since or fallback, why, text)

    ready, (together, why, text) = verdict.ready, containers_ready
    return [
        cond("Initialized", True),
        cond("Ready", ready, None if ready else verdict.reason,
             None if ready else verdict.message),
        cond("ContainersReady", together, None if together else why,
             None if together else text),
        cond("PodScheduled", True),
    ]  # fmt: skip


def _reason_and_message(
    verdict: Verdict, ended: bool, outcome: str, pulling: bool
) -> tuple[Any, Any]:
    """The pod's own ``status.reason`` and ``status.message`` (``pulling``: a container
    waits for its image)."""
    if verdict.failure is not None and verdict.phase == "Failed":
        return verdict.pod_reason, verdict.message
    if ended:
        # the containers ended on their own: a kubelet gives the pod no reason
        return (verdict.reason if verdict.pod_message else None), verdict.pod_message
    if pulling and verdict.phase == "Pending":
        return None, None  # a kubelet gives a pod waiting for its image no reason
    if verdict.phase != "Running" or verdict.pod_message:
        return verdict.reason, verdict.pod_message or f"kubelet-sim: outcome {outcome!r}"
    return None, None


def desired_status(
    pod: Obj,
    host_ip: str,
    pod_ip: str,
    timestamp: str,
    checked: Mapping[str, check_runs.View] | None = None,
    ready_after: float = 0.0,
    node_readiness: str = "True",
    namespace_annotations: Mapping[str, str] | None = None,
) -> Obj:
    """The status a kubelet would report for ``pod`` at ``timestamp`` under its annotations
    (and its namespace's, ``namespace_annotations``, for the knobs a namespace may carry).

    ``checked``: the containers whose launcher check kubelet-sim runs (``check_runs``),
    by name; their state comes from the check while the pod would be Running.
    ``ready_after``: seconds from a container's start to its readiness, unless the pod's
    ``knobs.READY_AFTER`` annotation says otherwise. ``node_readiness``: the node's Ready
    condition status; a NotReady node's pods report Ready=False.
    Times already in the pod's status are kept, so an unchanged pod yields an unchanged status;
    the whole state machine (crash, back-off, readiness) is read back from the status, so a
    restarted kubelet-sim carries on where it stopped.
    """
    checked = checked or {}
    spec, current = pod.get("spec", {}), pod.get("status") or {}
    containers = spec.get("containers") or []
    asked = knobs.requests_of(pod, containers, ready_after)
    verdict = _verdict(knobs.outcome_of(pod), asked, spec.get("restartPolicy") or "Always")
    view = _pod_view(pod, timestamp, checked, asked, verdict, namespace_annotations)
    results = [container_status(view, c) for c in containers]
    statuses = [entry for entry, _ in results]
    ended = verdict.phase == "Running" and bool(results) and all(e for _, e in results)
    if ended:
        all_checked = all(c.get("name", "") in checked for c in containers)
        _ended_with_containers(verdict, statuses, all_checked)
    elif verdict.phase == "Running" and verdict.ready and not all(e["ready"] for e in statuses):
        waiting = [e["name"] for e in statuses if not e["ready"]]
        verdict.ready, verdict.reason = False, "ContainersNotReady"
        verdict.message = f"containers with unready status: [{' '.join(waiting)}]"
    pulling = verdict.phase == "Running" and bool(view.pulling)
    if pulling:
        _waiting_for_images(verdict, view.pulling)
    containers_ready = (verdict.ready, verdict.reason, verdict.message)
    if verdict.phase == "Running" and node_readiness != "True":
        # the node lifecycle controller flips only the pod's Ready condition
        verdict.ready, verdict.reason = False, "NodeNotReady"
        verdict.message = not_ready_node_message(str(spec.get("nodeName", "")), node_readiness)
    status: Obj = {
        "phase": verdict.phase,
        "hostIP": host_ip,
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": view.start,
        "qosClass": current.get("qosClass", "BestEffort"),
        "conditions": _conditions(current, view, verdict, containers_ready),
        "containerStatuses": statuses,
    }
    status["reason"], status["message"] = _reason_and_message(verdict, ended, view.outcome, pulling)
    if spec.get("initContainers"):
        status["initContainerStatuses"] = init_container_statuses(view, spec["initContainers"])
    return status


def mark_not_ready(status: Obj, node: str, readiness: str, timestamp: str) -> Obj | None:
    """What the node lifecycle controller writes for a pod of an unreachable node: its Ready
    condition False, nothing else (None when it already is)."""
    conditions = status.get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") == "False":
        return None
    return {"conditions": [condition("Ready", False, timestamp, "NodeNotReady",
                                     not_ready_node_message(node, readiness))]}  # fmt: skip


def _state_key(state: Obj | None) -> tuple[Any, ...]:
    return tuple(sorted((kind, (body or {}).get("reason"), (body or {}).get("exitCode"))
                        for kind, body in (state or {}).items()))  # fmt: skip


def status_signature(status: Obj) -> tuple[Any, ...]:
    """What decides whether a pod's status must be written (timestamps excluded)."""
    conditions = tuple(sorted(
        (c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or []
    ))  # fmt: skip
    containers = tuple(
        (c.get("name"), c.get("ready"), _state_key(c.get("state")), _state_key(c.get("lastState")),
         c.get("restartCount"), c.get("image"))
        for c in status.get("containerStatuses") or []
    )  # fmt: skip
    return (status.get("phase"), status.get("podIP"), status.get("hostIP"), conditions,
            containers, status.get("message"))  # fmt: skip
