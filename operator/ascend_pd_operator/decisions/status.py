"""Pure status computation: conditions, phase, KV layout summary and readiness.

``compute_status`` takes what one reconcile learnt (``Findings``) (validation, model facts,
desired state, the children as the cluster reports them) and the previous
status, and returns the new status. A condition keeps its lastTransitionTime
while its status stays the same, so an unchanged world gives an equal status
and the reconciler skips the patch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ascend_pd_operator.api.models import PDDeploymentSpec
from ascend_pd_operator.api.vocabulary import (
    COND_DECODE_READY,
    COND_INSTANCES_HEALTHY,
    COND_KV_LAYOUT_COMPATIBLE,
    COND_MODEL_RESOLVED,
    COND_PREFILL_READY,
    COND_READY,
    COND_ROUTER_READY,
    COND_VALIDATED,
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
    REASON_HEALTHY,
    REASON_INSPECTION_FAILED,
    REASON_INSTANCES_NOT_READY,
    REASON_INSTANCES_READY,
    REASON_INVALID_MODEL_CONFIG,
    REASON_INVALID_SPEC,
    REASON_LAUNCH_REFUSED,
    REASON_MODEL_NOT_RESOLVED,
    REASON_NOT_APPLIED,
    REASON_NOT_READY,
    REASON_NOT_VALIDATED,
    REASON_READY,
    REASON_RESTART_LOOP,
    REASON_ROLLOUT_IN_PROGRESS,
    REASON_ROUTER_NOT_READY,
    REASON_ROUTER_READY,
    REASON_VALID,
    ROLES,
    Owner,
    endpoint,
    instance_name,
    role_ready_condition,
    router_name,
)
from ascend_pd_operator.builders.desired import Desired
from ascend_pd_operator.builders.model_source import FactsResolution
from ascend_pd_operator.decisions.recovery import Recovery
from ascend_pd_operator.decisions.rollout import Decision
from ascend_pd_runtime.env_contract import EXIT_ARGS_REFUSED
from ascend_pd_runtime.layout import KVLayout
from ascend_pd_runtime.plan import layout_fingerprint

Json = dict[str, Any]

INVALID_MODEL_REASONS = (
    REASON_INVALID_MODEL_CONFIG,
    REASON_INSPECTION_FAILED,
    REASON_CONFIGMAP_KEY_MISSING,
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


def launch_refusal(pod: Json) -> str:
    """The launcher's termination message when SGLang's parser refused this pod's command
    (a container terminated, now or before its restart, with ``EXIT_ARGS_REFUSED``)."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        for key in ("state", "lastState"):
            ended = (container.get(key) or {}).get("terminated") or {}
            if ended.get("exitCode") == EXIT_ARGS_REFUSED:
                message = str(ended.get("message") or "").strip()
                return message or "SGLang's parser refused the command line (no message)"
    return ""


def launch_refusals(pods: list[Json], role: str) -> list[str]:
    """``pod <name>: <message>`` for every pod of ``role`` whose command SGLang refused."""
    found = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        if (pod["metadata"].get("labels") or {}).get(LABEL_ROLE) != role:
            continue
        message = launch_refusal(pod)
        if message:
            found.append(f"pod {pod['metadata']['name']}: {message}")
    return found


def _refused_condition(role: str, refusals: list[str]) -> Json:
    more = f" (and {len(refusals) - 1} more pods)" if len(refusals) > 1 else ""
    return _condition(
        role_ready_condition(role), "False", REASON_LAUNCH_REFUSED, refusals[0] + more
    )


def _role_status(obs: Findings, spec: PDDeploymentSpec, role: str) -> tuple[Json, bool, bool]:
    """(role status, every instance exists, every instance ready)."""
    r = spec.role(role)
    states = [
        obs.children.get(("StatefulSet", instance_name(obs.owner, role, i)))
        for i in range(r.replicas)
    ]
    ready = sum(instance_ready(s) for s in states)
    status = {
        "replicas": r.replicas,
        "readyReplicas": ready,
        "nodesPerInstance": r.nodes_per_instance,
    }
    rolled = obs.rollout.roles.get(role) if obs.rollout else None
    if rolled is not None:
        status.update(
            updatedReplicas=rolled.updated,
            availableReplicas=rolled.available,
            surgeReplicas=rolled.surge,
        )
    return status, all(s is not None for s in states), ready == r.replicas


def _router_status(obs: Findings, spec: PDDeploymentSpec) -> tuple[Json, bool, str]:
    if not spec.router.enabled:
        return {"replicas": 0, "readyReplicas": 0}, True, "router disabled"
    dep = obs.children.get(("Deployment", router_name(obs.owner))) or {}
    ready = int((dep.get("status") or {}).get("readyReplicas", 0) or 0)
    want = spec.router.replicas
    ok = bool(dep) and ready >= want
    return {"replicas": want, "readyReplicas": ready}, ok, f"{ready}/{want} replicas ready"


def compute_status(obs: Findings, now: str) -> Json:
    """The new status (camelCase, as stored) for one observation at time ``now``."""
    prev = obs.previous or {}
    status: Json = {"observedGeneration": obs.owner.generation}
    conds: list[Json] = []
    invalid = False
    # Children keep running as they were when the spec is rejected, so readiness is
    # reported against the last spec that was applied (carried in the previous status).
    for key in ("kvLayout", "prefill", "decode", "router", "endpoint", "recovery"):
        if key in prev:
            status[key] = prev[key]

    spec = obs.spec
    if spec is None:
        invalid = True
        conds.append(_condition(COND_VALIDATED, "False", REASON_INVALID_SPEC, obs.validation_error))
    else:
        conds.append(_condition(COND_VALIDATED, "True", REASON_VALID, "spec follows every rule"))

    facts = obs.facts
    if spec is None or facts is None:
        conds.append(
            _condition(COND_MODEL_RESOLVED, "Unknown", REASON_NOT_VALIDATED, "spec is invalid")
        )
    else:
        conds.append(_condition(COND_MODEL_RESOLVED, facts.status, facts.reason, facts.message))
        # A model that cannot be read needs the user's fix, like a rejected spec.
        invalid = invalid or facts.reason in INVALID_MODEL_REASONS

    desired = obs.desired
    if desired is None:
        conds.append(
            _condition(
                COND_KV_LAYOUT_COMPATIBLE,
                "Unknown",
                REASON_MODEL_NOT_RESOLVED,
                "no model facts yet",
            )
        )
    elif not desired.ok:
        invalid = True
        conds.append(
            _condition(COND_KV_LAYOUT_COMPATIBLE, "False", desired.reason, desired.message)
        )
    else:
        assert desired.layout is not None
        status["kvLayout"] = layout_summary(desired.layout)
        groups = desired.layout.facts.kv_buf_groups
        layers = desired.layout.facts.total_kv_layers
        conds.append(
            _condition(
                COND_KV_LAYOUT_COMPATIBLE,
                "True",
                REASON_COMPATIBLE,
                f"{layers} KV layers × {groups} buffer groups, prefill PP "
                f"{desired.layout.prefill.pp} → decode PP {desired.layout.decode.pp}, "
                f"fingerprint {status['kvLayout']['fingerprint']}",
            )
        )

    applied = spec is not None and desired is not None and desired.ok
    exists = True
    all_ready = applied
    if applied:
        assert spec is not None
        for role in ROLES:
            role_status, role_exists, role_ready = _role_status(obs, spec, role)
            status[role] = role_status
            exists = exists and role_exists
            all_ready = all_ready and role_ready
            ready_text = f"{role_status['readyReplicas']}/{role_status['replicas']} instances ready"
            refusals = [] if role_ready else launch_refusals(obs.pods, role)
            if refusals:
                conds.append(_refused_condition(role, refusals))
                continue
            conds.append(
                _condition(
                    role_ready_condition(role),
                    "True" if role_ready else "False",
                    REASON_INSTANCES_READY if role_ready else REASON_INSTANCES_NOT_READY,
                    f"{ready_text} ({role_status['nodesPerInstance']} nodes each)",
                )
            )
        router_status, router_ok, router_text = _router_status(obs, spec)
        status["router"] = router_status
        all_ready = all_ready and router_ok
        reason = (
            (REASON_DISABLED if not spec.router.enabled else REASON_ROUTER_READY)
            if router_ok
            else REASON_ROUTER_NOT_READY
        )
        conds.append(
            _condition(COND_ROUTER_READY, "True" if router_ok else "False", reason, router_text)
        )
        if spec.router.enabled:
            status["endpoint"] = endpoint(obs.owner, spec.router.port)
        else:
            status.pop("endpoint", None)
    else:
        for type_ in (COND_PREFILL_READY, COND_DECODE_READY, COND_ROUTER_READY):
            previous = _find(prev.get("conditions") or [], type_)
            if invalid and previous:
                conds.append({k: previous[k] for k in ("type", "status", "reason", "message")})
            else:
                conds.append(
                    _condition(type_, "Unknown", REASON_NOT_APPLIED, "children not applied")
                )

    if applied and obs.recovery is not None:
        if obs.recovery.records:
            status["recovery"] = [dict(r) for r in obs.recovery.records]
        else:
            status.pop("recovery", None)
        looping = obs.recovery.looping
        conds.append(
            _condition(COND_INSTANCES_HEALTHY, "False", REASON_RESTART_LOOP,
                       "; ".join(message for _, message in looping))
            if looping
            else _condition(COND_INSTANCES_HEALTHY, "True", REASON_HEALTHY,
                            "no instance is in a restart loop")
        )  # fmt: skip
    rolling = applied and obs.rollout is not None and not obs.rollout.complete
    if applied and obs.rollout is not None:
        status["rollout"] = {**obs.rollout.summary(), "message": rollout_message(obs.rollout)}
    else:
        status.pop("rollout", None)
    if obs.write_error:
        all_ready = False
        conds.append(_condition(COND_READY, "False", obs.write_error_reason, obs.write_error))
    elif all_ready and rolling:
        # The new spec is not Ready until every instance runs it (no premature success).
        all_ready = False
        assert obs.rollout is not None
        conds.append(
            _condition(
                COND_READY, "False", REASON_ROLLOUT_IN_PROGRESS, rollout_message(obs.rollout)
            )
        )
    elif all_ready:
        conds.append(
            _condition(COND_READY, "True", REASON_READY, "every instance and the router ready")
        )
    else:
        waiting = [c["type"] for c in conds if c["status"] != "True"]
        conds.append(
            _condition(COND_READY, "False", REASON_NOT_READY, f"waiting for {', '.join(waiting)}")
        )

    status["conditions"] = _with_times(conds, prev.get("conditions") or [], now, obs)
    previous_phase = PHASE_PROGRESSING if rolling else prev.get("phase")
    status["phase"] = _phase(invalid, conds, applied, exists, all_ready, previous_phase)
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
