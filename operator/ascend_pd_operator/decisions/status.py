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

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import PDDeploymentSpec
from ascend_pd_operator.api.rules.scaling import bounds_apply
from ascend_pd_operator.api.vocabulary import (
    COMPONENT_ROUTER,
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
    COND_UPDATE_PENDING,
    COND_VALIDATED,
    PHASE_DEGRADED,
    PHASE_INVALID,
    PHASE_PENDING,
    PHASE_PROGRESSING,
    PHASE_READY,
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
    endpoint,
    role_ready_condition,
)
from ascend_pd_operator.decisions.findings import Findings
from ascend_pd_operator.decisions.operator_updates import condition as update_condition
from ascend_pd_operator.decisions.operator_updates import listed
from ascend_pd_operator.decisions.recovery import Recovery
from ascend_pd_operator.decisions.role_status import (
    role_state,
    role_waits,
    router_state,
    waits_text,
)
from ascend_pd_operator.decisions.rollout import Decision
from ascend_pd_operator.decisions.waits import (
    QUOTE_CHARS,
    ROLE_MESSAGE_CHARS,
    counted,
    launch_refusals,
    preflight_failures,
    quoted,
)
from ascend_pd_runtime.env_contract import (
    EXIT_ARGS_REFUSED,
    EXIT_CONTRACT_VERSION,
    EXIT_SGLANG_VERSION,
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


def _refused_condition(role: str, refusals: list[str], reason: str = REASON_LAUNCH_REFUSED) -> Json:
    more = f" (and {len(refusals) - 1} more pods)" if len(refusals) > 1 else ""
    return _condition(role_ready_condition(role), "False", reason, refusals[0] + more)


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
    mine, role_exists, role_ready = role_state(obs, spec, role, draft.now)
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


def _check_preflight(obs: Findings, draft: _Draft, roles_ready: bool) -> None:
    """NPUPreflight: False naming the first pod whose launcher's preflight failed (its
    reason is the check's); it stays False until every instance is ready again (group
    recovery replaces the pods that told it), then True."""
    failures = preflight_failures(obs.pods)
    if failures:
        reason, text = failures[0]
        more = f" (and {counted(len(failures) - 1, 'more pod')})" if len(failures) > 1 else ""
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
    router_status, router_ok, router_text = router_state(obs, spec)
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


def _check_updates(obs: Findings, draft: _Draft) -> None:
    """UpdatePending, each role's and the router's updatePending, and the roles waiting
    (the UPDATES column). While no child is written, the last condition stands."""
    if obs.held is None:
        previous = _find(obs.previous.get("conditions") or [], COND_UPDATE_PENDING)
        if previous:
            draft.conds.append({k: previous[k] for k in ("type", "status", "reason", "message")})
        return
    for role in ROLES:
        found = obs.held.changes.get(role)
        mine = (draft.status.get(STATUS_ROLES) or {}).get(role)
        if found and mine is not None:
            mine["updatePending"] = listed(found)
    if (found := obs.held.changes.get(COMPONENT_ROUTER)) and "router" in draft.status:
        draft.status["router"]["updatePending"] = listed(found)
    draft.status["updatePending"] = obs.held.summary()
    draft.conds.append(update_condition(obs.owner, obs.held))


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
#: False while the asked counts hold, True while the bounds hold a count back; an update
#: that waits for the user leaves the old template running, which serves).
ADVISORY = (COND_RATIO_CONSTRAINED, COND_UPDATE_PENDING)


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
    _check_updates(obs, draft)
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
    """``value`` without empty strings (an absent field reads as ""): an API server has
    been seen to turn an empty string in a merge patch into null, which the schema's
    ``type: string`` refuses, and leaving it out says the same on every release."""
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
