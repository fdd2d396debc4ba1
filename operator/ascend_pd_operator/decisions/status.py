"""Pure status computation: conditions, phase, KV layout summary and readiness.

``compute_status`` takes what one reconcile learnt (``Findings``) (validation, model facts,
desired state, the children as the cluster reports them) and the previous
status, and returns the new status. A condition keeps its lastTransitionTime
while its status stays the same, so an unchanged world gives an equal status
and the reconciler skips the patch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import PDDeploymentSpec
from ascend_pd_operator.api.rules.scaling import bounds_apply
from ascend_pd_operator.api.vocabulary import (
    COND_DECODE_READY,
    COND_INSTANCES_HEALTHY,
    COND_KV_LAYOUT_COMPATIBLE,
    COND_MODEL_RESOLVED,
    COND_NPU_PREFLIGHT,
    COND_PLACEMENT_FEASIBLE,
    COND_PREFILL_READY,
    COND_RATIO_CONSTRAINED,
    COND_READY,
    COND_ROUTER_READY,
    COND_VALIDATED,
    LABEL_INSTANCE,
    LABEL_ROLE,
    PHASE_DEGRADED,
    PHASE_INVALID,
    PHASE_PENDING,
    PHASE_PROGRESSING,
    PHASE_READY,
    REASON_APPLY_FAILED,
    REASON_COMPATIBLE,
    REASON_CONFIGMAP_KEY_MISSING,
    REASON_DISABLED,
    REASON_ENV_CONTRACT_MISMATCH,
    REASON_HEALTHY,
    REASON_INSPECTION_FAILED,
    REASON_INSTANCES_NOT_READY,
    REASON_INSTANCES_READY,
    REASON_INVALID_MODEL_CONFIG,
    REASON_INVALID_SPEC,
    REASON_LAUNCH_REFUSED,
    REASON_MODEL_NOT_RESOLVED,
    REASON_NO_PREFLIGHT_FAILURE,
    REASON_NOT_APPLIED,
    REASON_NOT_READY,
    REASON_NOT_VALIDATED,
    REASON_RATIO_BOUNDED,
    REASON_READY,
    REASON_RESTART_LOOP,
    REASON_ROLLOUT_IN_PROGRESS,
    REASON_ROUTER_NOT_READY,
    REASON_ROUTER_READY,
    REASON_SGLANG_VERSION_MISMATCH,
    REASON_VALID,
    REASON_WITHIN_BOUNDS,
    ROLES,
    STATUS_ROLES,
    Owner,
    endpoint,
    instance_name,
    role_ready_condition,
    role_status,
    router_name,
    scaler_name,
)
from ascend_pd_operator.builders.desired import Desired
from ascend_pd_operator.builders.model_source import FactsResolution
from ascend_pd_operator.builders.pinning import pin_of
from ascend_pd_operator.decisions.drain import Roster
from ascend_pd_operator.decisions.recovery import Recovery
from ascend_pd_operator.decisions.rollout import Decision
from ascend_pd_operator.decisions.scaling import ScaleDecision
from ascend_pd_runtime.env_contract import (
    EXIT_ARGS_REFUSED,
    EXIT_CONTRACT_VERSION,
    EXIT_PREFLIGHT,
    EXIT_SGLANG_VERSION,
    LAUNCHER_EXITS,
    preflight_reason,
)
from ascend_pd_runtime.layout import KVLayout
from ascend_pd_runtime.plan import layout_fingerprint

INVALID_MODEL_REASONS = (
    REASON_INVALID_MODEL_CONFIG,
    REASON_INSPECTION_FAILED,
    REASON_ENV_CONTRACT_MISMATCH,  # the inspector's: the image or the operator must change
    REASON_SGLANG_VERSION_MISMATCH,  # the inspector's: the image or the spec must change
    REASON_CONFIGMAP_KEY_MISSING,
)
#: A role's reason when its pods' launchers refused to start, by exit code, the first found
#: told: an SGLang other than the spec's explains a parser's refusal too.
REFUSAL_REASONS = (
    (EXIT_SGLANG_VERSION, REASON_SGLANG_VERSION_MISMATCH),
    (EXIT_ARGS_REFUSED, REASON_LAUNCH_REFUSED),
    (EXIT_CONTRACT_VERSION, REASON_ENV_CONTRACT_MISMATCH),
)


@dataclass(frozen=True)
class Findings:
    """What the status is computed from (``planner.conclude`` gathers it); ``children``
    maps (kind, name) to the live object."""

    owner: Owner
    spec: PDDeploymentSpec | None
    validation_error: str = ""
    facts: FactsResolution | None = None
    desired: Desired | None = None
    children: dict[tuple[str, str], Json] = field(default_factory=dict)
    previous: Json = field(default_factory=dict)
    #: Why writing the children failed (the API server refused a write), if it did.
    write_error: str = ""
    #: The Ready condition's reason for ``write_error`` (ApplyFailed or PruneFailed).
    write_error_reason: str = REASON_APPLY_FAILED
    #: The runtime pods.
    pods: list[Json] = field(default_factory=list)
    #: The rollout as decided for these children (None: none written).
    rollout: Decision | None = None
    #: Group recovery's restarts and records (None: none written).
    recovery: Recovery | None = None
    #: The StatefulSet controller's FailedCreate Events of our instances (slim, as
    #: ``child_watch.slim_event`` keeps them): why an instance has fewer pods than it wants.
    events: list[Json] = field(default_factory=list)
    #: Each role's asked and effective count (``spec`` already runs the effective ones).
    scale: ScaleDecision | None = None
    #: Per role the instances it keeps and its drains (None: 0 to replicas - 1, none).
    rosters: Mapping[str, Roster] | None = None
    #: The router's pods: why its Deployment is not ready.
    router_pods: list[Json] = field(default_factory=list)
    #: With spec.placement (``placement``): the PlacementFeasible condition, status.placement
    #: and the instances not created for want of a domain (name -> the condition's reason).
    #: Without it the condition alone, when the spec's transfer protocol cannot cross the
    #: servers it implies (``transfer.implied_mismatch``).
    placement_condition: Json | None = None
    placement_status: Json | None = None
    placement_blocked: Mapping[str, str] = field(default_factory=dict)


def _condition(type_: str, status: str, reason: str, message: str) -> Json:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def layout_summary(layout: KVLayout) -> Json:
    def stages(role: str) -> list[Json]:
        r = layout.prefill if role == "prefill" else layout.decode
        return [
            {"ppRank": s.pp_rank, "startLayer": s.start_layer, "endLayer": s.end_layer}
            for s in r.stages
        ]

    return {
        "totalKvLayers": layout.facts.total_kv_layers,
        "kvBufGroups": layout.facts.kv_buf_groups,
        "prefillDraftLayers": layout.prefill.draft_layers,
        "decodeDraftLayers": layout.decode.draft_layers,
        "prefillStages": stages("prefill"),
        "decodeStages": stages("decode"),
        "fingerprint": layout_fingerprint(layout),
    }


def instance_ready(sts: Json | None) -> bool:
    """All pods of the instance ready, at the StatefulSet's current generation."""
    if not sts:
        return False
    status = sts.get("status") or {}
    want = (sts.get("spec") or {}).get("replicas", 0)
    generation = (sts.get("metadata") or {}).get("generation", 0)
    return bool(
        status.get("observedGeneration", 0) >= generation
        and status.get("readyReplicas", 0) >= want
        and status.get("updatedReplicas", want) >= want
    )


def launch_refusal(pod: Json, code: int = EXIT_ARGS_REFUSED) -> str:
    """The launcher's termination message when a container of this pod ended, now or before
    its restart, with exit ``code``: by default SGLang's parser refused the command
    (``EXIT_ARGS_REFUSED``); ``EXIT_CONTRACT_VERSION``: the image speaks another env
    contract than the operator; ``EXIT_SGLANG_VERSION``: its SGLang is not the spec's."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        for key in ("state", "lastState"):
            ended = (container.get(key) or {}).get("terminated") or {}
            if ended.get("exitCode") == code:
                message = str(ended.get("message") or "").strip()
                return message or f"{LAUNCHER_EXITS[code]} (no message)"
    return ""


def launch_refusals(pods: list[Json], role: str, code: int = EXIT_ARGS_REFUSED) -> list[str]:
    """``pod <name>: <message>`` for every pod of ``role`` whose launcher exited ``code``."""
    found = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        if (pod["metadata"].get("labels") or {}).get(LABEL_ROLE) != role:
            continue
        message = launch_refusal(pod, code)
        if message:
            found.append(f"pod {pod['metadata']['name']}: {message}")
    return found


def _refused_condition(role: str, refusals: list[str], reason: str = REASON_LAUNCH_REFUSED) -> Json:
    more = f" (and {len(refusals) - 1} more pods)" if len(refusals) > 1 else ""
    return _condition(role_ready_condition(role), "False", reason, refusals[0] + more)


# --- why an instance is not ready ------------------------------------------------------

#: A role's condition names at most this many instances that are not ready (the rest are
#: counted), and quotes at most ``QUOTE_CHARS`` of each message it passes on: it is read by
#: people, and a cluster's text (a scheduler's per-node list, a webhook's answer) must not
#: grow the status without bound. ``ROLE_MESSAGE_CHARS`` caps the whole.
LISTED_INSTANCES = 3
QUOTE_CHARS = 240
ROLE_MESSAGE_CHARS = 1536
#: How much a cause tells (lower: more). An instance names its most telling one: a refused
#: pod or a failing container, not the pods that only wait behind it.
(RANK_NOT_CREATED, RANK_EXITED, RANK_WAITING, RANK_GANG, RANK_UNSCHEDULED, RANK_NODE,
 RANK_CREATING, RANK_LOADING, RANK_TERMINATING) = range(9)  # fmt: skip
#: The StatefulSet controller's words before the API server's refusal of a pod: "create Pod"
#: on 1.20, "Create Pod" on 1.36.
_FAILED_CREATE_PREFIX = re.compile(r"^[Cc]reate Pod \S+ in StatefulSet \S+ failed error: ")
#: The fix for a refused pod, by the words of the admission that refused it.
FAILED_CREATE_FIXES = (
    ("violates PodSecurity", "the namespace's Pod Security level does not admit the runtime "
     "pods' host network, host ports and hostPath: label the namespace "
     "pod-security.kubernetes.io/enforce=privileged (docs/security.md)"),
    ("unable to validate against any pod security policy", "no PodSecurityPolicy admits the "
     "runtime pods' host network, host ports and hostPath: let the namespace's default "
     "ServiceAccount use a privileged one (docs/security.md)"),
    ("exceeded quota", "a ResourceQuota of the namespace refuses the pods: raise it, or free "
     "what it counts"),
)  # fmt: skip
#: The fix for a refused router pod (the runtime pods' fixes name their host network).
ROUTER_FAILED_CREATE_FIXES = (
    ("violates PodSecurity", "the namespace's Pod Security level refuses the router pod: give "
     "spec.router.podSecurityContext and containerSecurityContext what the level asks, or "
     "label the namespace for a level that admits it (docs/security.md)"),
    *(fix for fix in FAILED_CREATE_FIXES if fix[0] == "exceeded quota"),
)  # fmt: skip
#: What a pod that runs and is not ready yet waits for: a runtime pod, its instance's model;
#: the router, its readiness probe.
LOADING_WEIGHTS = (
    "loading weights: running since {since}, ready once its instance leader's SGLang answers "
    "/health"
)
ROUTER_STARTING = "starting: running since {since}, ready once the router answers /health"
#: Signals a container's exit code above 128 may carry.
SIGNALS = {6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}


def quoted(text: Any, limit: int = QUOTE_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters (cut ones end in "...")."""
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def exit_meaning(code: Any, has_message: bool) -> str:
    """What a container's exit code says: the launcher's own codes (it always leaves a
    termination message; without one, exit 1 is more likely SGLang's after the exec), or the
    signal that ended it."""
    if code in LAUNCHER_EXITS and has_message:
        return f"launcher: {LAUNCHER_EXITS[code]}"
    if isinstance(code, int) and code > 128:
        signal = SIGNALS.get(code - 128, f"signal {code - 128}")
        return f"killed by {signal}" + (": out of memory, or killed" if code == 137 else "")
    return ""


def exit_text(ended: Json) -> str:
    """``exit <code> [reason] (<meaning>): <termination message>`` of a terminated state."""
    code = ended.get("exitCode")
    message = quoted(ended.get("message"))
    reason = str(ended.get("reason") or "")
    meaning = exit_meaning(code, bool(message))
    text = f"exit {code}" + (f" {reason}" if reason not in ("", "Error") else "")
    return text + (f" ({meaning})" if meaning else "") + (f": {message}" if message else "")


def _pod_condition(pod: Json, type_: str) -> Json:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == type_), {})


def _pod_ready(pod: Json) -> bool:
    return _pod_condition(pod, "Ready").get("status") == "True"


def _said(cond: Json) -> str:
    """``(<reason>): <message>`` of a condition, as far as it says them."""
    reason, message = cond.get("reason"), quoted(cond.get("message"))
    return (f" ({reason})" if reason else "") + (f": {message}" if message else "")


def pod_wait(pod: Json, running: str = LOADING_WEIGHTS) -> tuple[int, str] | None:
    """Why ``pod`` is not ready, and how much that tells (a ``RANK_*``); None when it is
    ready. From what the pod's status says, in the order Kubernetes gets a pod going:
    scheduled, its image pulled and container created, started, ready (``running``: what
    a started container waits for, with ``{since}``)."""
    name = pod["metadata"]["name"]
    if pod["metadata"].get("deletionTimestamp"):
        return RANK_TERMINATING, f"pod {name} terminating"
    if _pod_ready(pod):
        return None
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    states = [(c, c.get("state") or {}) for c in containers]
    if status.get("phase") == "Failed":
        ended = next((s["terminated"] for _, s in states if "terminated" in s), None)
        text = f"pod {name} failed" + _said(status)
        return RANK_EXITED, text + (f", its container {exit_text(ended)}" if ended else "")
    if not (pod.get("spec") or {}).get("nodeName"):
        scheduled = _pod_condition(pod, "PodScheduled")
        if scheduled.get("status") == "False":
            return RANK_UNSCHEDULED, f"pod {name} not scheduled{_said(scheduled)}"
        return RANK_CREATING, f"pod {name} not scheduled yet"
    for container, state in states:
        last = (container.get("lastState") or {}).get("terminated")
        if "terminated" in state:
            return RANK_EXITED, f"pod {name} {exit_text(state['terminated'])}"
        waiting = state.get("waiting")
        if waiting is None:
            continue
        reason = str(waiting.get("reason") or "Waiting")
        if last:  # between restarts (CrashLoopBackOff): the last exit says why
            return RANK_EXITED, f"pod {name} {reason}, last {exit_text(last)}"
        said = f"pod {name} {reason}" + (f": {quoted(waiting['message'])}"
                                          if waiting.get("message") else "")  # fmt: skip
        creating = reason in ("ContainerCreating", "PodInitializing")
        return (RANK_CREATING if creating else RANK_WAITING), said
    ready = _pod_condition(pod, "Ready")
    if ready.get("reason") == "NodeNotReady":
        return RANK_NODE, f"pod {name} not ready{_said(ready)}"
    for container, state in states:
        since = (state.get("running") or {}).get("startedAt")
        if since is None:
            continue
        last = (container.get("lastState") or {}).get("terminated")
        again = f"; restarted after {exit_text(last)}" if last else ""
        return RANK_LOADING, f"pod {name} {running.format(since=since)}{again}"
    return RANK_CREATING, f"pod {name} {status.get('phase') or 'Pending'}"


def _refused(what: str, message: str, fixes: tuple[tuple[str, str], ...]) -> str:
    """``<what> cannot create pods (FailedCreate): <message>[; <fix>]``."""
    fix = next((fix for words, fix in fixes if words in message), "")
    return f"{what} cannot create pods (FailedCreate): {quoted(message)}" + (
        f"; {fix}" if fix else ""
    )


def failed_create(sts: Json, events: Iterable[Json]) -> str:
    """Why the StatefulSet controller could not create ``sts``'s pods (its latest
    FailedCreate Event of this StatefulSet, not of an older one of the same name), with the
    fix where the refusal's words tell it; "" when it has not said."""
    meta = sts.get("metadata") or {}
    name, uid = meta.get("name"), meta.get("uid")
    mine = [
        e for e in events
        if e.get("reason") == "FailedCreate"
        and (e.get("involvedObject") or {}).get("name") == name
        and (not uid or (e.get("involvedObject") or {}).get("uid") in (None, "", uid))
    ]  # fmt: skip
    if not mine:
        return ""
    latest = max(mine, key=lambda e: (str(e.get("lastTimestamp") or ""), int(e.get("count") or 0)))
    message = _FAILED_CREATE_PREFIX.sub("", str(latest.get("message") or ""))
    return _refused(f"StatefulSet {name}", message, FAILED_CREATE_FIXES)


def replica_failure(deployment: Json) -> str:
    """Why the router's ReplicaSet could not create pods: the Deployment's ReplicaFailure
    condition (the Deployment controller copies its ReplicaSet's), or ""."""
    name = (deployment.get("metadata") or {}).get("name")
    for cond in (deployment.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            message = str(cond.get("message") or cond.get("reason") or "")
            return _refused(f"Deployment {name}", message, ROUTER_FAILED_CREATE_FIXES)
    return ""


def podgroup_wait(podgroup: Json | None) -> str:
    """Why Volcano holds an instance's pods (its PodGroup not yet Running), or ""."""
    if not podgroup:
        return ""
    name = podgroup["metadata"]["name"]
    status = podgroup.get("status") or {}
    phase = status.get("phase")
    if not phase:
        return f"PodGroup {name} has no phase yet: is Volcano's scheduler running?"
    if phase not in ("Pending", "Inqueue"):
        return ""
    said = [c for c in status.get("conditions") or []
            if c.get("type") == "Unschedulable" and c.get("status") == "True"]  # fmt: skip
    return (
        f"PodGroup {name} {phase}"
        + (_said(said[-1]) if said else "")
        + (" (Volcano starts an instance's pods together, once all of them fit)")
    )


def instance_wait(
    name: str,
    want: int,
    sts: Json | None,
    pods: list[Json],
    podgroup: Json | None = None,
    events: Iterable[Json] = (),
) -> str:
    """``<instance> (<ready>/<want> pods ready): <why>`` for an instance that is not ready
    (``pods_wait``; a refused pod and a Volcano gang are its StatefulSet's causes)."""
    if sts is None:
        return f"{name}: StatefulSet not created yet"
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    head = f"{name} ({sum(_pod_ready(p) for p in live)}/{want} pods ready)"
    causes: list[tuple[int, str]] = []
    if len(live) < want:
        refused = failed_create(sts, events)
        if refused:
            causes.append((RANK_NOT_CREATED, refused))
    if any(not (p.get("spec") or {}).get("nodeName") for p in live):
        gang = podgroup_wait(podgroup)
        if gang:
            causes.append((RANK_GANG, gang))
    return f"{head}: {pods_wait('StatefulSet', want, pods, causes)}"


def pods_wait(
    kind: str,
    want: int,
    pods: list[Json],
    causes: Iterable[tuple[int, str]] = (),
    running: str = LOADING_WEIGHTS,
) -> str:
    """Why a workload (an instance's StatefulSet, the router's Deployment) of ``want`` pods
    is not ready: its most telling cause (``RANK_*``; among equals, its lowest pod) among
    its pods' (``pod_wait``) and its controller's ``causes``, and how many other pods are
    not ready."""
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    waits = [w for p in sorted(pods, key=lambda p: p["metadata"]["name"])
             if (w := pod_wait(p, running)) is not None]  # fmt: skip
    found = sorted([*causes, *waits], key=lambda f: f[0])  # stable: the lowest pod first
    if not found:
        if len(live) < want:
            return f"{want - len(live)} of its pods not created yet"
        return f"its {kind}'s status has not caught up yet"
    others = len(waits) - (found[0] in waits)
    return found[0][1] + (f" (and {_count(others, 'more pod')} not ready)" if others else "")


def router_wait(obs: Findings, spec: PDDeploymentSpec) -> str:
    """Why the router is not ready, as ``pods_wait`` tells an instance's: its pods, or its
    ReplicaSet's refused create."""
    name = router_name(obs.owner)
    dep = obs.children.get(("Deployment", name))
    if not dep:
        return f"Deployment {name} not created yet"
    want = spec.router.replicas
    live = [p for p in obs.router_pods if not p["metadata"].get("deletionTimestamp")]
    refused = replica_failure(dep) if len(live) < want else ""
    causes = [(RANK_NOT_CREATED, refused)] if refused else []
    return pods_wait("Deployment", want, obs.router_pods, causes, ROUTER_STARTING)


def own_indices(obs: Findings, spec: PDDeploymentSpec, role: str) -> tuple[int, ...]:
    """The indices of the instances ``role`` keeps."""
    if obs.rosters is None:
        return tuple(range(spec.role(role).replicas))
    return obs.rosters[role].own


def role_waits(obs: Findings, spec: PDDeploymentSpec, role: str) -> list[str]:
    """``instance_wait`` of every instance of ``role`` that is not ready, by index."""
    r = spec.role(role)
    pods: dict[str, list[Json]] = {}
    for pod in obs.pods:
        labels = pod["metadata"].get("labels") or {}
        if labels.get(LABEL_ROLE) == role:
            pods.setdefault(str(labels.get(LABEL_INSTANCE)), []).append(pod)
    out = []
    for index in own_indices(obs, spec, role):
        name = instance_name(obs.owner, role, index)
        sts = obs.children.get(("StatefulSet", name))
        if sts is None and name in obs.placement_blocked:
            out.append(f"{name}: not created, no placement domain fits "
                       f"({obs.placement_blocked[name]})")  # fmt: skip
        elif not instance_ready(sts):
            # An instance in the deployment's gang waits on that PodGroup (its pin says).
            pin = pin_of(sts)
            group = obs.children.get(("PodGroup", pin.gang if pin and pin.gang else name))
            out.append(instance_wait(name, r.nodes_per_instance, sts, pods.get(str(index), []),
                                     group, obs.events))  # fmt: skip
    return out


#: what ``pod_wait`` says of a pod the scheduler could not place (its condition follows)
UNSCHEDULED = " not scheduled ("


def unscheduled_waits(obs: Findings, spec: PDDeploymentSpec) -> dict[str, list[str]]:
    """Per role, the waits its Ready condition lists that are the scheduler's: an instance
    whose most telling cause is a pod kube-scheduler could not place, in its words."""
    return {
        role: [w for w in role_waits(obs, spec, role)[:LISTED_INSTANCES] if UNSCHEDULED in w]
        for role in ROLES
    }


def waits_text(waits: list[str]) -> str:
    """The first ``LISTED_INSTANCES`` waits, the rest counted."""
    text = "; ".join(waits[:LISTED_INSTANCES])
    rest = len(waits) - LISTED_INSTANCES
    return text + (f"; and {_count(rest, 'more instance')} not ready" if rest > 0 else "")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _role_status(
    obs: Findings, spec: PDDeploymentSpec, role: str, now: str = ""
) -> tuple[Json, bool, bool]:
    """(role status, every instance exists, every instance ready); ``now`` starts a drain
    first seen."""
    r = spec.role(role)
    states = [
        obs.children.get(("StatefulSet", instance_name(obs.owner, role, i)))
        for i in own_indices(obs, spec, role)
    ]
    ready = sum(instance_ready(s) for s in states)
    scaled = obs.scale.roles[role] if obs.scale is not None else None
    status: Json = {
        "replicas": scaled.asked if scaled is not None else r.replicas,
        "effectiveReplicas": r.replicas,
        "readyReplicas": ready,
        # readyReplicas/effectiveReplicas: a printer column shows a field, it computes none
        "ready": f"{ready}/{r.replicas}",
        "nodesPerInstance": r.nodes_per_instance,
    }
    if scaled is not None and scaled.scaled:
        status["scaler"] = scaler_name(obs.owner, role)
    if obs.rosters is not None and obs.rosters[role].draining_names:
        before = {d["instance"]: d.get("since", "")
                  for d in role_status(obs.previous, role).get("draining") or []}  # fmt: skip
        status["draining"] = [{"instance": name, "since": before.get(name) or now}
                              for name in obs.rosters[role].draining_names]  # fmt: skip
    rolled = obs.rollout.roles.get(role) if obs.rollout else None
    if rolled is not None:
        status.update(
            updatedReplicas=rolled.updated,
            availableReplicas=rolled.available,
            surgeReplicas=rolled.surge,
        )
    return status, all(s is not None for s in states), ready >= r.replicas


def _router_status(obs: Findings, spec: PDDeploymentSpec) -> tuple[Json, bool, str]:
    """(router status, ready, ``<ready>/<want> replicas ready[: <why not>]``)."""
    if not spec.router.enabled:
        return {"replicas": 0, "readyReplicas": 0, "ready": "0/0"}, True, "router disabled"
    dep = obs.children.get(("Deployment", router_name(obs.owner))) or {}
    ready = int((dep.get("status") or {}).get("readyReplicas", 0) or 0)
    want = spec.router.replicas
    ok = bool(dep) and ready >= want
    text = f"{ready}/{want} replicas ready"
    if not ok:
        text = quoted(f"{text}: {router_wait(obs, spec)}", ROLE_MESSAGE_CHARS)
    return {"replicas": want, "readyReplicas": ready, "ready": f"{ready}/{want}"}, ok, text


@dataclass
class _Draft:
    """The status being built by ``compute_status``'s stages, and what they found."""

    status: Json
    conds: list[Json] = field(default_factory=list)
    #: the spec, the model or the layout needs the user's fix
    invalid: bool = False
    exists: bool = True
    ready: bool = False
    #: the first instance that is not ready and why: the Ready condition's message says it
    first_wait: str = ""
    #: the time of this status
    now: str = ""


def _check_spec(obs: Findings, draft: _Draft) -> None:
    """Validated, ModelResolved and KVLayoutCompatible (and the layout summary)."""
    spec, facts, desired = obs.spec, obs.facts, obs.desired
    if spec is None:
        draft.invalid = True
        draft.conds.append(
            _condition(COND_VALIDATED, "False", REASON_INVALID_SPEC, obs.validation_error)
        )
    else:
        draft.conds.append(
            _condition(COND_VALIDATED, "True", REASON_VALID, "spec follows every rule")
        )
    if spec is None or facts is None:
        draft.conds.append(
            _condition(COND_MODEL_RESOLVED, "Unknown", REASON_NOT_VALIDATED, "spec is invalid")
        )
    else:
        draft.conds.append(
            _condition(COND_MODEL_RESOLVED, facts.status, facts.reason, facts.message)
        )
        # A model that cannot be read needs the user's fix, like a rejected spec.
        draft.invalid = draft.invalid or facts.reason in INVALID_MODEL_REASONS
    if desired is None:
        draft.conds.append(_condition(COND_KV_LAYOUT_COMPATIBLE, "Unknown",
                                      REASON_MODEL_NOT_RESOLVED, "no model facts yet"))  # fmt: skip
    elif not desired.ok:
        draft.invalid = True
        draft.conds.append(
            _condition(COND_KV_LAYOUT_COMPATIBLE, "False", desired.reason, desired.message)
        )
    else:
        assert desired.layout is not None
        summary = draft.status["kvLayout"] = layout_summary(desired.layout)
        facts_ = desired.layout.facts
        draft.conds.append(_condition(
            COND_KV_LAYOUT_COMPATIBLE, "True", REASON_COMPATIBLE,
            f"{facts_.total_kv_layers} KV layers × {facts_.kv_buf_groups} buffer groups, "
            f"prefill PP {desired.layout.prefill.pp} → decode PP {desired.layout.decode.pp}, "
            f"fingerprint {summary['fingerprint']}",
        ))  # fmt: skip


def _check_role(obs: Findings, spec: PDDeploymentSpec, role: str, draft: _Draft) -> None:
    """<Role>Ready and the role's status (status.roles.<role>): what is ready, or why not."""
    mine, role_exists, role_ready = _role_status(obs, spec, role, draft.now)
    # a new mapping: the one carried over is the previous status's
    draft.status[STATUS_ROLES] = {**(draft.status.get(STATUS_ROLES) or {}), role: mine}
    draft.exists = draft.exists and role_exists
    draft.ready = draft.ready and role_ready
    for code, reason in [] if role_ready else REFUSAL_REASONS:
        found = launch_refusals(obs.pods, role, code)
        if found:
            draft.conds.append(_refused_condition(role, found, reason))
            draft.first_wait = draft.first_wait or found[0]
            return
    waits = [] if role_ready else role_waits(obs, spec, role)
    draft.first_wait = draft.first_wait or (waits[0] if waits else "")
    # out of the instances it runs: a count the ratio bounds hold back is no missing instance
    runs, asked = mine["effectiveReplicas"], mine["replicas"]
    held = f"; {asked} asked, held by the ratio bounds" if asked != runs else ""
    message = (f"{mine['readyReplicas']}/{runs} instances ready "
               f"({mine['nodesPerInstance']} nodes each{held})")  # fmt: skip
    draft.conds.append(_condition(
        role_ready_condition(role),
        "True" if role_ready else "False",
        REASON_INSTANCES_READY if role_ready else REASON_INSTANCES_NOT_READY,
        quoted(message + (f": {waits_text(waits)}" if waits else ""), ROLE_MESSAGE_CHARS),
    ))  # fmt: skip


def preflight_failures(pods: list[Json]) -> list[tuple[str, str]]:
    """(reason, ``pod <name> on node <node>: <message>``) of every pod whose launcher
    ended, now or before its restart, with a failed NPU preflight check: exit
    ``EXIT_PREFLIGHT`` and a termination message naming the reason (an exit 7 without one
    is not the launcher's). A ready pod passed its checks since: its lastState is history."""
    found = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        if _pod_ready(pod):
            continue
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            ended = next(
                (t for key in ("state", "lastState")
                 if (t := (container.get(key) or {}).get("terminated") or {})
                 and t.get("exitCode") == EXIT_PREFLIGHT
                 and preflight_reason(str(t.get("message") or ""))),
                None,
            )  # fmt: skip
            if ended is None:
                continue
            message = str(ended.get("message") or "")
            node = (pod.get("spec") or {}).get("nodeName") or "no node"
            text = f"pod {pod['metadata']['name']} on node {node}: {quoted(message)}"
            found.append((preflight_reason(message), text))
            break
    return found


def _check_preflight(obs: Findings, draft: _Draft, roles_ready: bool) -> None:
    """NPUPreflight: False naming the first pod whose launcher's preflight failed (its
    reason is the check's); it stays False until every instance is ready again (group
    recovery replaces the pods that told it), then True."""
    failures = preflight_failures(obs.pods)
    if failures:
        reason, text = failures[0]
        more = f" (and {_count(len(failures) - 1, 'more pod')})" if len(failures) > 1 else ""
        draft.conds.append(_condition(COND_NPU_PREFLIGHT, "False", reason, text + more))
        return
    before = _find(obs.previous.get("conditions") or [], COND_NPU_PREFLIGHT)
    if before is not None and before.get("status") == "False" and not roles_ready:
        draft.conds.append({k: before.get(k, "") for k in ("type", "status", "reason", "message")})
        return
    passed = "no runtime pod reports a failed NPU preflight check"
    draft.conds.append(_condition(COND_NPU_PREFLIGHT, "True", REASON_NO_PREFLIGHT_FAILURE, passed))


def _check_router(obs: Findings, spec: PDDeploymentSpec, draft: _Draft) -> None:
    """RouterReady, the router's status and the endpoint."""
    router_status, router_ok, router_text = _router_status(obs, spec)
    draft.status["router"] = router_status
    draft.ready = draft.ready and router_ok
    if not router_ok:
        reason = REASON_ROUTER_NOT_READY
        # Ready names the router's cause when no instance has one to tell.
        draft.first_wait = draft.first_wait or f"router {router_text}"
    else:
        reason = REASON_ROUTER_READY if spec.router.enabled else REASON_DISABLED
    draft.conds.append(
        _condition(COND_ROUTER_READY, "True" if router_ok else "False", reason, router_text)
    )
    if spec.router.enabled:
        draft.status["endpoint"] = endpoint(obs.owner, spec.router.port)
    else:
        draft.status.pop("endpoint", None)


def _not_applied(prev: Json, draft: _Draft) -> None:
    """The readiness conditions while no child is written: a rejected change keeps what
    the last applied spec's children said (they run on), else Unknown."""
    kinds = (COND_PREFILL_READY, COND_DECODE_READY, COND_ROUTER_READY, COND_NPU_PREFLIGHT)
    for type_ in kinds:
        previous = _find(prev.get("conditions") or [], type_)
        if draft.invalid and previous:
            draft.conds.append({k: previous[k] for k in ("type", "status", "reason", "message")})
        else:
            draft.conds.append(
                _condition(type_, "Unknown", REASON_NOT_APPLIED, "children not applied")
            )


def _check_recovery(recovery: Recovery, draft: _Draft) -> None:
    """InstancesHealthy and the recovery records."""
    if recovery.records:
        draft.status["recovery"] = [dict(r) for r in recovery.records]
    else:
        draft.status.pop("recovery", None)
    looping = recovery.looping
    draft.conds.append(
        _condition(COND_INSTANCES_HEALTHY, "False", REASON_RESTART_LOOP,
                   "; ".join(message for _, message in looping))
        if looping
        else _condition(COND_INSTANCES_HEALTHY, "True", REASON_HEALTHY,
                        "no instance is in a restart loop")
    )  # fmt: skip


def _check_ratio(obs: Findings, spec: PDDeploymentSpec, draft: _Draft) -> None:
    """RatioConstrained, where counts are bounded at all (a scaled role, or a ratio)."""
    if obs.scale is None or not bounds_apply(spec):
        return
    change = obs.scale.ratio_change
    if change:
        draft.conds.append(_condition(COND_RATIO_CONSTRAINED, "True", REASON_RATIO_BOUNDED, change))
    else:
        counts = ", ".join(f"{role} {obs.scale.effective(role)}" for role in ROLES)
        draft.conds.append(_condition(COND_RATIO_CONSTRAINED, "False", REASON_WITHIN_BOUNDS,
                                      f"the asked counts hold: {counts}"))  # fmt: skip


def _check_placement(obs: Findings, applied: bool, draft: _Draft) -> None:
    """PlacementFeasible and status.placement, with spec.placement (without it only
    PlacementFeasible, when the spec's protocol cannot cross the servers it implies:
    ``transfer.implied_mismatch``); while a change is
    refused (nothing applied) they stay as the last applied spec left them."""
    previous = _find(obs.previous.get("conditions") or [], COND_PLACEMENT_FEASIBLE)
    if obs.placement_condition is not None:
        draft.conds.append(dict(obs.placement_condition))
    elif not applied and previous is not None:
        draft.conds.append({k: previous.get(k, "") for k in ("type", "status", "reason",
                                                             "message")})  # fmt: skip
    if obs.placement_status is not None:
        draft.status["placement"] = obs.placement_status
    elif applied:
        draft.status.pop("placement", None)


#: Conditions that say how things stand without holding Ready back (RatioConstrained is
#: False while the asked counts hold, True while the bounds hold a count back).
ADVISORY = (COND_RATIO_CONSTRAINED,)


def _check_ready(obs: Findings, rolling: bool, draft: _Draft) -> None:
    """Ready: every instance and the router, with no write failing and no rollout left."""
    if obs.write_error:
        draft.ready = False
        draft.conds.append(_condition(COND_READY, "False", obs.write_error_reason, obs.write_error))
    elif draft.ready and rolling:
        # The new spec is not Ready until every instance runs it (no premature success).
        draft.ready = False
        assert obs.rollout is not None
        draft.conds.append(_condition(COND_READY, "False", REASON_ROLLOUT_IN_PROGRESS,
                                      rollout_message(obs.rollout)))  # fmt: skip
    elif draft.ready:
        draft.conds.append(
            _condition(COND_READY, "True", REASON_READY, "every instance and the router ready")
        )
    else:
        waiting = [c for c in draft.conds if c["status"] != "True" and c["type"] not in ADVISORY]
        # The first instance's cause too: `kubectl describe` users read Ready first.
        why = f": {quoted(draft.first_wait, QUOTE_CHARS * 2)}" if draft.first_wait else ""
        # The reason is the first condition's it waits for (`kubectl get pdd` shows it): the
        # cause in one word, where NotReady would only repeat the READY column.
        reason = waiting[0]["reason"] if waiting else REASON_NOT_READY
        draft.conds.append(_condition(
            COND_READY, "False", reason,
            f"waiting for {', '.join(c['type'] for c in waiting)}{why}",
        ))  # fmt: skip


def compute_status(obs: Findings, now: str) -> Json:
    """The new status (camelCase, as stored) for one observation at time ``now``: the
    spec's conditions, each role's and the router's readiness, recovery, the rollout, and
    Ready over all of them."""
    prev = obs.previous or {}
    # Children keep running as they were when the spec is rejected, so readiness is
    # reported against the last spec that was applied (carried in the previous status).
    # Nothing else is carried over: a key of the previous status the new one lacks is nulled
    # by the merge patch, so status.prefill and status.decode, where operators before
    # status.roles kept each role's status, go at an upgrade's first status write.
    draft = _Draft({"observedGeneration": obs.owner.generation}, now=now)
    for key in ("kvLayout", STATUS_ROLES, "router", "endpoint", "recovery", "placement"):
        if key in prev:
            draft.status[key] = prev[key]
    _check_spec(obs, draft)
    spec, desired = obs.spec, obs.desired
    applied = spec is not None and desired is not None and desired.ok
    draft.ready = applied
    if spec is not None and applied:
        for role in ROLES:
            _check_role(obs, spec, role, draft)
        roles_ready = draft.ready
        _check_router(obs, spec, draft)
        _check_preflight(obs, draft, roles_ready)
        _check_ratio(obs, spec, draft)
    else:
        _not_applied(prev, draft)
    if applied and obs.recovery is not None:
        _check_recovery(obs.recovery, draft)
    _check_placement(obs, applied, draft)
    rolling = applied and obs.rollout is not None and not obs.rollout.complete
    if applied and obs.rollout is not None:
        draft.status["rollout"] = {**obs.rollout.summary(),
                                   "message": rollout_message(obs.rollout)}  # fmt: skip
    else:
        draft.status.pop("rollout", None)
    _check_ready(obs, rolling, draft)
    status = draft.status
    status["conditions"] = _with_times(draft.conds, prev.get("conditions") or [], now, obs)
    previous_phase = PHASE_PROGRESSING if rolling else prev.get("phase")
    status["phase"] = _phase(draft.invalid, draft.conds, applied, draft.exists, draft.ready,
                             previous_phase)  # fmt: skip
    result: Json = without_empty(status)
    return result


def without_empty(value: Any) -> Any:
    """``value`` without empty strings (an absent field reads as ""): the API server turns
    an empty string in a merge patch into null, which the schema's ``type: string``
    refuses (seen on 1.20)."""
    if isinstance(value, dict):
        return {k: without_empty(v) for k, v in value.items() if v != ""}
    if isinstance(value, list):
        return [without_empty(v) for v in value]
    return value


def merge_patch(old: Json, new: Json) -> Json:
    """The JSON merge patch (RFC 7386) from ``old`` to ``new``: removed keys become null,
    nested objects are patched key by key, anything else is replaced whole."""
    patch: Json = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            inner = merge_patch(before, value)
            if inner:
                patch[key] = inner
        elif value != before:
            patch[key] = value
    return patch


def rollout_message(decision: Decision) -> str:
    """Where the rollout stands, per role, and what a generation change costs."""
    if decision.complete:
        return f"every instance runs the current spec (fingerprint {decision.target})"
    parts = [
        f"{role} {r.updated}/{r.replicas} updated, {r.available} serving"
        + (f", {r.surge} surge" if r.surge else "")
        for role, r in decision.roles.items()
    ]
    text = "rolling out: " + "; ".join(parts)
    if decision.serving != decision.target:
        text += (
            f"; KV-layout generation {decision.serving or 'none'} serves until "
            f"{decision.target} has a Ready prefill and decode instance"
        )
        if not any(r.surge for r in decision.roles.values()):
            text += " (no maxSurge: instances taken down for the new generation serve nothing "
            text += "until then)"
    return text


def _phase(
    invalid: bool, conds: list[Json], applied: bool, exists: bool, ready: bool, prev: Any
) -> str:
    if invalid:
        return PHASE_INVALID
    if ready:
        return PHASE_READY
    if not applied or not exists:
        return PHASE_PENDING
    if prev in (PHASE_READY, PHASE_DEGRADED):
        return PHASE_DEGRADED
    return PHASE_PROGRESSING


def _find(conditions: list[Json], type_: str) -> Json | None:
    return next((c for c in conditions if c.get("type") == type_), None)


def _with_times(conds: list[Json], previous: list[Json], now: str, obs: Findings) -> list[Json]:
    out = []
    for cond in conds:
        before = _find(previous, cond["type"])
        same = before is not None and before.get("status") == cond["status"]
        stamp = before.get("lastTransitionTime", now) if same and before else now
        out.append(
            {**cond, "lastTransitionTime": stamp, "observedGeneration": obs.owner.generation}
        )
    return out


def status_changed(old: Json | None, new: Json) -> bool:
    """Whether patching is needed (the kopf bookkeeping key is not ours to compare)."""
    old = {k: v for k, v in (old or {}).items() if k != "kopf"}
    return old != new
