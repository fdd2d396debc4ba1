"""Observation → Plan: everything one reconcile decides, with no I/O.

The reconciler reads the world into an ``Observation`` (``reconciler.observe``), this
module turns it into a ``Plan`` and the reconciler's executor carries the plan out.
``ascend-pd render`` and the reliability audit call the same ``plan``, so the model facts,
the layout and the children are chosen in one place for all three.

A plan says, in the order the executor performs them:

1. the model inspector's writes (start its Job; restart it: delete the Job and the stored
   facts; store the facts it found),
2. the children to apply (the apply order of ``desired.with_children``), and a scaled
   role's PDRoleScaler to create (created once: its spec.replicas is then its scaler's),
3. the children to delete (owned, of a pruned kind, no longer desired; the inspector's
   Job and facts ConfigMap are kept across spec changes; and a workload whose label
   selector, which the API server never lets change, differs from the desired one: it is
   deleted here and created anew by the reconcile its deletion triggers),
4. the instances to update or restart: all pods of each deleted together (``rollout.decide``,
   ``recovery.recover``), pods on a lost node with grace period 0,
5. the leader label on instance leaders (the router's discovery, the scalers' selector),
6. the status, and each PDRoleScaler's,
7. the Warning Events.

A rejected spec, unusable model facts or an incompatible layout plan no child write: the
running children stay exactly as they were. The status in a plan describes the children as
observed; once the executor has written, ``conclude`` recomputes status and events from
what the API server answered (a created StatefulSet exists, an edited one has a new
generation) and from the step that failed, if one did.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import Scaling
from ascend_pd_operator.api.vocabulary import (
    COMPONENT_FACTS,
    COMPONENT_INSPECTOR,
    COND_PLACEMENT_FEASIBLE,
    LABEL_COMPONENT,
    LABEL_DEPLOYMENT,
    LABEL_DRAINING,
    LABEL_INSTANCE,
    LABEL_ROLE,
    REASON_APPLY_FAILED,
    REASON_INSTANCE_RESTARTED,
    REASON_PODS_FORCE_DELETED,
    REASON_PRUNE_FAILED,
    REASON_TRANSFER_PROTOCOL_MISMATCH,
    ROLES,
    SCALER_KIND,
    Owner,
    gang_name,
    inspector_name,
    instance_name,
    router_name,
    scaler_name,
)
from ascend_pd_operator.api.vocabulary import model_facts_name as facts_cm_name
from ascend_pd_operator.builders.desired import (
    Desired,
    Indices,
    Validation,
    child_key,
    desired_layout,
    validate,
    with_children,
)
from ascend_pd_operator.builders.model_source import (
    FactsResolution,
    inspector_job,
    inspector_state,
    model_facts_configmap,
    resolve_facts,
)
from ascend_pd_operator.builders.pinning import Pin, pin_of
from ascend_pd_operator.builders.scaler import scaler, scaler_status
from ascend_pd_operator.builders.volcano import PODGROUP_CRD
from ascend_pd_operator.decisions.drain import (
    Roster,
    roster,
    surge_indices,
)
from ascend_pd_operator.decisions.drain import step as drain_step
from ascend_pd_operator.decisions.events import Event, drained_events, events, unscheduled_events
from ascend_pd_operator.decisions.findings import Findings
from ascend_pd_operator.decisions.observation import (
    Observation,
    observed_pods,
    router_generations,
    router_pods,
    runtime_pods,
)
from ascend_pd_operator.decisions.operator_updates import Held, Hold, Inputs, hold, trigger
from ascend_pd_operator.decisions.placement import (
    RETRY_SECONDS,
    PlacementDecision,
    placement_status,
)
from ascend_pd_operator.decisions.placement import decide as decide_placement
from ascend_pd_operator.decisions.recovery import (
    DEFAULT_POLICY,
    Recovery,
    RecoveryPolicy,
    parse_time,
    recover,
)
from ascend_pd_operator.decisions.role_status import unscheduled_waits
from ascend_pd_operator.decisions.rollout import (
    Decision,
    Instance,
    decide,
    instances,
    observed_instances,
)
from ascend_pd_operator.decisions.scaling import ScaleDecision, decide_scale, with_effective
from ascend_pd_operator.decisions.status import (
    compute_status,
    merge_patch,
    status_changed,
    without_empty,
)
from ascend_pd_operator.decisions.transfer import implied_mismatch
from ascend_pd_operator.decisions.writes import (
    Failure,
    Outcome,
    Write,
    apply,
    delete,
    label,
    restart,
)
from ascend_pd_runtime.plan import layout_fingerprint

#: Kinds of children the operator prunes when no longer desired.
PRUNED_KINDS = (
    "StatefulSet", "Service", "Deployment", "ConfigMap", "PodGroup",
    "ServiceAccount", "Role", "RoleBinding", "PodDisruptionBudget", SCALER_KIND,
)  # fmt: skip
#: Kinds whose live objects the status reads (instance and router readiness, and a
#: Volcano PodGroup's phase while it holds an instance's pods).
STATUS_KINDS = ("StatefulSet", "Deployment", "PodGroup")
#: Components kept across spec changes (they cache the model inspection).
KEPT_COMPONENTS = (COMPONENT_FACTS, COMPONENT_INSPECTOR)


@dataclass(frozen=True)
class Plan:
    observation: Observation
    now: str
    validation: Validation
    facts: FactsResolution | None
    desired: Desired | None
    #: Step 1: the model inspector's writes.
    inspector: tuple[Write, ...]
    #: Step 2: the children to apply, in apply order.
    applies: tuple[Write, ...]
    #: Step 3: the children no longer desired.
    deletes: tuple[Write, ...]
    #: Step 6: the status (camelCase, as stored).
    status: Json
    #: Step 7: the Warning Events to post.
    events: tuple[Event, ...]
    #: Step 4: the pods of the instances updated now, deleted together.
    restarts: tuple[Write, ...] = ()
    #: Step 5: leader labels set on instance leaders.
    routing: tuple[Write, ...] = ()
    #: Step 6: the PDRoleScalers' status writes.
    scaler_status: tuple[Write, ...] = ()
    #: Each role's asked and effective instance count (None: no children are written).
    scale: ScaleDecision | None = None
    #: The rollout as decided (None: no children are written).
    rollout: Decision | None = None
    #: The failed instances restarted now, and the recovery records.
    recovery: Recovery | None = None
    #: Per role the instances it keeps, the one it drains now and the drains under way.
    rosters: Mapping[str, Roster] | None = None
    #: spec.placement's decision on the instances to create (None: no spec.placement), and
    #: the pin of every instance built (the running ones' as their StatefulSets record it).
    placement: PlacementDecision | None = None
    pins: Mapping[tuple[str, int], Pin] = field(default_factory=dict)
    #: The operator-made template changes that wait for the user (None: none written).
    held: Held | None = None
    #: (kind, name) of workloads whose live template must be read, then planned again.
    needs_templates: tuple[tuple[str, str], ...] = ()
    #: (kind, name) of the workloads not applied: their update waits for the user.
    kept: frozenset[tuple[str, str]] = frozenset()

    @property
    def requeue_after(self) -> float | None:
        """Reconcile again after this long (a restart waiting for its backoff; an instance
        waiting for a placement domain: a node added or freed is seen within it, since no
        pod of the waiting instance is on a node whose change would queue it)."""
        waits = [self.recovery.requeue_after if self.recovery else None]
        if self.placement is not None and self.placement.blocked:
            waits.append(RETRY_SECONDS)
        found = [w for w in waits if w is not None]
        return min(found) if found else None

    @property
    def needs_usage(self) -> bool:
        """A placement choice is due and the pods' usage was not read: the reconciler reads
        it and plans again."""
        return self.placement is not None and self.placement.needs_usage

    @property
    def ok(self) -> bool:
        """Children are written: the spec, model facts and layout all passed."""
        return self.desired is not None and self.desired.ok


def choose_facts(obs: Observation, spec: Any) -> FactsResolution:
    """The model facts: the one place the operator, render and the audit choose them."""
    state = None
    if obs.inspector_job is not None:
        state = inspector_state(obs.inspector_job, obs.inspector_pods)
    return resolve_facts(
        spec,
        local_facts=obs.local_facts,
        user_configmap=obs.user_configmap,
        facts_configmap=obs.facts_configmap,
        inspector=state,
        generation=obs.owner.generation,
    )


def plan(obs: Observation, now: str, policy: RecoveryPolicy = DEFAULT_POLICY) -> Plan:
    """The plan for one observation at time ``now``, under the operator's recovery
    ``policy`` (its configuration: the same for every observation)."""
    owner = obs.owner
    validation = validate(owner, obs.resource.get("spec"))
    spec = validation.spec
    facts = desired = None
    inspector: tuple[Write, ...] = ()
    if spec is not None:
        facts = choose_facts(obs, spec)
        if facts.start_inspector:
            inspector = (apply(inspector_job(owner, spec)),)
        elif facts.restart_inspector:
            inspector = (
                delete("Job", inspector_name(owner)),
                delete("ConfigMap", facts_cm_name(owner)),
            )
        elif facts.store_config is not None:
            inspector = (apply(model_facts_configmap(owner, spec, facts.store_config)),)
        if facts.facts is not None:
            desired = desired_layout(spec, facts.facts)
    if spec is None or desired is None or not desired.ok:
        # no children are written (the status says why)
        return conclude(
            Plan(obs, now, validation, facts, desired, inspector, (), (), {}, ()), Outcome()
        )
    assert desired.layout is not None
    pods = observed_pods(obs)
    scale = decide_scale(spec, scalers_by_role(obs), obs.previous)
    spec = with_effective(spec, scale)
    seen = observed_instances(owner, spec, obs.owned("StatefulSet"), pods)
    rosters = {r: roster(r, seen[r], spec.role(r).replicas) for r in ROLES}
    by_role = instances(owner, spec, obs.owned("StatefulSet"), pods,
                        {r: rosters[r].own for r in ROLES})  # fmt: skip
    router = next((d for d in obs.owned("Deployment")
                   if d["metadata"]["name"] == router_name(owner)), None)  # fmt: skip
    decision = decide(
        spec, by_role, layout_fingerprint(desired.layout), router, router_generations(obs)
    )
    gone = runtime_pods(obs.gone_pods) + [p for p in pods if p["metadata"].get(
        "deletionTimestamp")]  # fmt: skip
    recovery = recover(
        by_role, gone, obs.our_deletions, obs.previous.get("recovery") or [],
        parse_time(now) or dt.datetime.now(dt.UTC), policy,
        obs.nodes, spec.recovery.force_delete_after_seconds,
    )  # fmt: skip
    indices = {
        r: Indices(rosters[r].own,
                   surge_indices(seen[r], rosters[r].own, decision.surge.get(r, 0)))
        for r in ROLES
    }  # fmt: skip
    placed, pins = _placement(obs, spec, indices)
    if placed is not None and placed.blocked:
        # no domain fits them: they are not created (the running ones are kept)
        indices = {
            r: Indices(tuple(i for i in ix.own if (r, i) not in placed.blocked),
                       tuple(i for i in ix.surge if (r, i) not in placed.blocked))
            for r, ix in indices.items()
        }  # fmt: skip
    desired = with_children(desired, owner, spec, indices,
                            decision.serving, decision.discovery, pins)  # fmt: skip
    waits = _hold(obs, spec, desired, decision)
    replaced = [k for k in _selector_changed(obs, desired) if k not in waits.kept]
    applies = tuple(apply(m) for m in waits.children if child_key(m)[1:] not in replaced)
    applies += tuple(
        Write("create", SCALER_KIND, scaler_name(owner, r.role),
              scaler(owner, r.role, r.seed))
        for r in scale.roles.values() if r.seed is not None
    )  # fmt: skip
    kept_scalers = {(SCALER_KIND, scaler_name(owner, r.role))
                    for r in scale.roles.values() if r.scaled}  # fmt: skip
    drains = _drains(rosters, spec.scaling.drain_grace_seconds)
    deletes = _prunes(obs, desired, kept_scalers | _drained_children(rosters))
    deletes += tuple(delete(*k) for k in replaced) + drains.releases
    scaler_writes = _scaler_status(owner, scale, by_role)
    # A failed group restarts whatever the rollout's budget: it serves nothing.
    restarted = recovery.restarts + tuple(
        r for r in decision.restarts if r[0] not in {n for n, _ in recovery.restarts}
    )
    restarts = _restarts(restarted, recovery.force_deletes, pods) + drains.deletes
    routing = drains.marks + tuple(label("Pod", pod, dict.fromkeys(keys, "true"))
                                   for pod, keys in decision.routing)  # fmt: skip
    draft = Plan(obs, now, validation, facts, desired, inspector, applies, deletes, {}, (),
                 restarts, routing, scaler_writes, scale, decision, recovery,
                 rosters, placed, pins, waits.held, waits.needs_templates,
                 waits.kept)  # fmt: skip
    return conclude(draft, Outcome())


def _hold(obs: Observation, spec: Any, desired: Desired, decision: Decision) -> Hold:
    """``operator_updates.hold`` of this reconcile's children: what waits for the user."""
    inputs = Inputs(
        owner=obs.owner,
        trigger=trigger(obs.resource),
        router_inputs=f"{decision.serving}/{decision.discovery}",
        observed_generation=int(obs.previous.get("observedGeneration") or 0),
        rolling=spec.rollout.operator_updates == "Rolling",
    )
    live = {(kind, o["metadata"]["name"]): o
            for kind in IMMUTABLE_SELECTOR_KINDS for o in obs.owned(kind)}  # fmt: skip
    return hold(inputs, desired.children, live, obs.templates)


def _instance_key(sts: Json) -> tuple[str, int] | None:
    labels = sts["metadata"].get("labels") or {}
    role, index = labels.get(LABEL_ROLE), str(labels.get(LABEL_INSTANCE, ""))
    return (str(role), int(index)) if role in ROLES and index.isdigit() else None


def _placement(
    obs: Observation, spec: Any, indices: Mapping[str, Indices]
) -> tuple[PlacementDecision | None, dict[tuple[str, int], Pin]]:
    """spec.placement's decision on the instances to create, and the pin of every instance
    to build. A running instance keeps the pin its StatefulSet records, whatever the spec
    says now (``pinning``): with spec.placement or without, it is never pinned anew."""
    running: dict[tuple[str, int], Pin | None] = {}
    for sts in obs.owned("StatefulSet"):
        key = _instance_key(sts)
        if key is not None:
            running[key] = pin_of(sts)
    wanted = [(r, i) for r in ROLES for i in indices[r].own + indices[r].surge]
    pins = {k: pin for k in wanted if (pin := running.get(k)) is not None}
    if spec.placement is None:
        return None, pins
    new = [k for k in wanted if k not in running]
    placed = decide_placement(obs.owner, spec, new, running, obs.nodes, obs.node_usage,
                              obs.previous)  # fmt: skip
    gang = gang_name(obs.owner) if deployment_gang(spec, obs.podgroup_subgroups) else ""
    # Only a pin made now joins the deployment's gang: a running instance keeps its group.
    pins.update({k: replace(pin, gang=gang) for k, pin in placed.pins.items()})
    return placed, pins


def deployment_gang(spec: Any, subgroups: bool | None) -> bool:
    """Whether new instances join the deployment's Volcano PodGroup: placement scope
    Deployment with scheduling.gang volcano, where the installed CRD has subGroupPolicy."""
    placement = spec.placement
    return bool(spec.scheduling.gang == "volcano" and placement is not None
                and placement.scope == "Deployment" and subgroups)  # fmt: skip


def gang_note(spec: Any, owner: Owner, subgroups: bool | None) -> str:
    """status.placement.gang: how Volcano gangs a scope Deployment (empty otherwise)."""
    placement = spec.placement
    if spec.scheduling.gang != "volcano" or placement is None or placement.scope != "Deployment":
        return ""
    if subgroups:
        return (f"new instances join PodGroup {gang_name(owner)}, one gang of the deployment "
                "with a subgroup per instance")  # fmt: skip
    if subgroups is False:
        why = ("the installed PodGroup CRD (scheduling.volcano.sh/v1beta1) has no "
               "spec.subGroupPolicy (Volcano before 1.14)")  # fmt: skip
    else:
        why = f"the PodGroup CRD {PODGROUP_CRD} is not installed or could not be read"
    return (f"each instance has its own PodGroup, not one of the deployment: {why}; the "
            "deployment's domain is kept by node affinity alone")  # fmt: skip


#: Workload kinds whose ``spec.selector`` the API server refuses to change.
IMMUTABLE_SELECTOR_KINDS = ("Deployment", "StatefulSet")


def _selector_changed(obs: Observation, desired: Desired) -> list[tuple[str, str]]:
    """(kind, name) of owned workloads whose live selector is not the desired one (e.g. the
    router's, after the component label replaced the role label): an apply would be refused
    as immutable, so they are replaced."""
    out = []
    for manifest in desired.children:
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        if kind not in IMMUTABLE_SELECTOR_KINDS:
            continue
        for item in obs.owned(kind):
            live = (item.get("spec") or {}).get("selector")
            if item["metadata"]["name"] == name and live and live != manifest["spec"]["selector"]:
                out.append((kind, name))
    return out


@dataclass(frozen=True)
class DrainWrites:
    """The drains' writes, in the steps they belong to: marks (5), releases (3), pod
    deletions with the drain's grace period (4)."""

    marks: tuple[Write, ...] = ()
    releases: tuple[Write, ...] = ()
    deletes: tuple[Write, ...] = ()


def _drains(rosters: Mapping[str, Roster], grace: int) -> DrainWrites:
    marks, releases, deletes = [], [], []
    for r in rosters.values():
        todo = [drain_step(i) for i in r.drains]
        if r.victim is not None:
            todo.append(drain_step(r.victim, marking=True))
        for s in todo:
            marks += [label(kind, name, {LABEL_DRAINING: "true"}) for kind, name in s.mark]
            if s.release:
                releases.append(Write("delete", "StatefulSet", s.release, orphan=True))
            deletes += [Write("delete", "Pod", name, {"metadata": {"uid": uid}}, grace)
                        for name, uid in s.delete_pods]  # fmt: skip
    return DrainWrites(tuple(marks), tuple(releases), tuple(deletes))


def _drained_children(rosters: Mapping[str, Roster]) -> set[tuple[str, str]]:
    """A draining instance's objects, which the drain removes in its order, never a prune."""
    return {
        (kind, name)
        for r in rosters.values()
        for name in r.draining_names
        for kind in ("StatefulSet", "Service", "PodGroup")
    }


def scalers_by_role(obs: Observation) -> dict[str, Json]:
    """The live PDRoleScalers of this deployment, by role."""
    owner = obs.owner
    names = {scaler_name(owner, role): role for role in ROLES}
    return {
        names[s["metadata"]["name"]]: s
        for s in obs.owned(SCALER_KIND)
        if s["metadata"]["name"] in names
    }


def _scaler_status(
    owner: Owner, scale: ScaleDecision, by_role: Mapping[str, list[Instance]]
) -> tuple[Write, ...]:
    """Step 6's writes of the scalers' status, where it changed: ``replicas`` counts what
    the selector matches (each existing instance's leader), never more."""
    writes = []
    for role, r in scale.roles.items():
        if r.scaler is None:
            continue
        live = [i for i in by_role[role] if i.leader() is not None]
        note = ""
        if r.effective != r.asked:
            note = f"runs {r.effective} of the {r.asked} asked for: " + (
                scale.ratio_change or "the role's [minReplicas, maxReplicas]"
            )
        generation = int(r.scaler["metadata"].get("generation", 0) or 0)
        status = scaler_status(owner, role, len(live), sum(i.ready for i in live), r.effective,
                               note, generation)  # fmt: skip
        # Only the keys this status has are compared and patched: status.planner is the
        # PD planner's (kubeio.pd_planner) and must never be nulled here.
        old = {k: v for k, v in (r.scaler.get("status") or {}).items() if k in status}
        new = without_empty(status)
        if status_changed(old, new):
            # a merge patch: what the new status no longer has is set to null
            patch = merge_patch(old, new)
            writes.append(Write("status", SCALER_KIND, r.scaler["metadata"]["name"],
                                {"status": patch}))  # fmt: skip
    return tuple(writes)


def _prunes(
    obs: Observation, desired: Desired, kept: set[tuple[str, str]] | None = None
) -> tuple[Write, ...]:
    wanted = {child_key(m)[1:] for m in desired.children} | (kept or set())
    out = []
    for kind in PRUNED_KINDS:
        for item in obs.owned(kind):
            component = (item["metadata"].get("labels") or {}).get(LABEL_COMPONENT)
            name = item["metadata"]["name"]
            if component not in KEPT_COMPONENTS and (kind, name) not in wanted:
                out.append(delete(kind, name))
    return tuple(out)


def conclude(draft: Plan, outcome: Outcome) -> Plan:
    """The plan with status and events for what the writes produced (or where they failed)."""
    obs = draft.observation
    live = {(kind, o["metadata"]["name"]): o for kind in STATUS_KINDS for o in obs.owned(kind)}
    live.update({key: obj for key, obj in outcome.live.items() if key[0] in STATUS_KINDS})
    failure = outcome.failure
    spec = draft.validation.spec
    if spec is not None and draft.scale is not None:
        spec = with_effective(spec, draft.scale)
    findings = Findings(
        owner=obs.owner,
        spec=spec,
        scale=draft.scale,
        rosters=draft.rosters,
        validation_error=draft.validation.error,
        facts=draft.facts,
        desired=draft.desired,
        children=live,
        previous=obs.previous,
        write_error=failure.message() if failure else "",
        write_error_reason=_failure_reason(failure),
        pods=runtime_pods(obs.pods),
        router_pods=router_pods(obs.pods),
        rollout=draft.rollout,
        recovery=draft.recovery,
        events=obs.events,
        held=draft.held,
        **_placement_findings(draft, spec),
    )
    status = compute_status(findings, now=draft.now)
    recovery = draft.recovery or Recovery()
    restarted = tuple(
        Event("Warning", REASON_INSTANCE_RESTARTED, message) for _, message in recovery.events
    ) + tuple(Event("Warning", REASON_PODS_FORCE_DELETED, message)
              for _, message in recovery.force_events)  # fmt: skip
    # the model's default where the spec was refused (the drain then ran under the last one)
    grace = (spec.scaling if spec is not None else Scaling.model_validate({})).drain_grace_seconds
    drained = tuple(drained_events(obs.previous, status, draft.now, grace))
    waiting = unscheduled_waits(findings, spec) if spec is not None else {}
    unplaced = tuple(unscheduled_events(obs.previous, waiting))
    return replace(draft, status=status, events=tuple(events(obs.previous, status))
                   + restarted + drained + unplaced)  # fmt: skip


def _placement_findings(draft: Plan, spec: Any) -> dict[str, Any]:
    """What the status says of spec.placement: its condition, status.placement and the
    instances waiting for a domain."""
    placed = draft.placement
    if spec is not None and spec.placement is None and draft.ok:
        # no placement: what the spec's shape says of the transfer's domains (not blocking)
        implied = implied_mismatch(spec)
        return {"placement_condition": {
            "type": COND_PLACEMENT_FEASIBLE, "status": "False",
            "reason": REASON_TRANSFER_PROTOCOL_MISMATCH, "message": implied,
        }} if implied else {}  # fmt: skip
    if placed is None or spec is None or spec.placement is None:
        return {}
    obs = draft.observation
    condition = {"type": COND_PLACEMENT_FEASIBLE, "status": placed.status,
                 "reason": placed.reason, "message": placed.message}  # fmt: skip
    status = placement_status(spec, obs.owner, placed, draft.pins, obs.previous, draft.now)
    if note := gang_note(spec, obs.owner, obs.podgroup_subgroups):
        status["gang"] = note
    return {
        "placement_condition": condition,
        "placement_status": status,
        "placement_blocked": {instance_name(obs.owner, r, i): placed.reason
                              for r, i in sorted(placed.blocked)},
    }  # fmt: skip


def _failure_reason(failure: Failure | None) -> str:
    if failure is None:
        return ""
    return (
        REASON_PRUNE_FAILED if failure.write.verb in ("delete", "restart") else REASON_APPLY_FAILED
    )


def _restarts(
    restarted: tuple[tuple[str, tuple[tuple[str, str], ...]], ...],
    forced: tuple[tuple[str, str], ...],
    pods: list[Json],
) -> tuple[Write, ...]:
    """Step 4: each instance restarted now, as one request that deletes all its pods (by the
    instance's labels: an operator that dies mid-step cannot leave half an instance
    restarted), then each pod on a lost node once, by uid, with grace period 0."""
    labels = {p["metadata"]["name"]: p["metadata"].get("labels") or {} for p in pods}
    writes = []
    for name, members in restarted:
        member = next(labels[pod] for pod, _ in members if pod in labels)
        selector = {k: member[k] for k in (LABEL_DEPLOYMENT, LABEL_ROLE, LABEL_INSTANCE)}
        writes.append(restart(name, selector))
    writes += [Write("delete", "Pod", name, {"metadata": {"uid": uid}}, 0) for name, uid in forced]
    return tuple(writes)
