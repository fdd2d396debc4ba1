"""Rollouts of whole instances, KV-layout generations and routing: pure decisions.

An instance (one StatefulSet, one multi-node SGLang group) is the unit of update: its
StatefulSet uses ``updateStrategy: OnDelete``, so a new pod template reaches no pod until
the operator deletes the instance's pods, all of them together, and the StatefulSet
controller recreates them from the new template. ``decide`` chooses which instances to
update now:

- an instance whose pods run two templates (one pod was replaced alone) is updated at
  once: such a group cannot run;
- an outdated instance that serves nothing (not Ready, or of a generation that no longer
  serves) is updated at once: taking it down costs no capacity;
- an outdated instance that serves is updated only while the role keeps at least
  ``replicas - maxUnavailable`` serving instances (surge instances count);
- roles go in ``rollout.roleOrder``, the next when the previous is complete, except for a
  KV-layout change, which moves both roles at once: a new generation serves only when it
  has a Ready prefill and a Ready decode instance.

Every runtime pod carries its layout fingerprint as a label, and the router's selectors
name one generation (``router.discovery_selector``): the serving one, which the router
Deployment carries as a label. It moves to the target fingerprint once the target has a
Ready instance of each role; the router Deployment then rolls (its new pod serves the new
generation while the old pod still serves the old one), and until that rollout is done the
old generation's instances still count as serving. Leaders get ``LABEL_LEADER`` as soon
as they exist: only leaders are ever discovered. A router of a build before 9f74067 (main
before the 0.1.0 release) selects on the legacy label; it keeps doing so until every leader
carries the new one (``discovery_label``), so upgrading the operator leaves no moment where
the router discovers fewer leaders.

``maxSurge`` adds instances (indices ``replicas`` and up) with the new template while a
role's rollout is in progress; they serve like any other and are removed once the role's
own instances are updated and Ready.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import PDDeploymentSpec
from ascend_pd_operator.api.vocabulary import (
    DISCOVERY_LEADER,
    LABEL_DRAINING,
    LABEL_FINGERPRINT,
    LABEL_INSTANCE,
    LABEL_LEADER,
    LABEL_LEGACY_ROUTABLE,
    LABEL_REVISION,
    LABEL_ROLE,
    LABEL_ROUTER_DISCOVERY,
    ROLES,
    Owner,
    instance_name,
)

ROLLOUT_COMPLETE = "Complete"
ROLLOUT_PROGRESSING = "Progressing"


def _ready(pod: Json) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _terminating(pod: Json) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _labels(pod: Json) -> Mapping[str, str]:
    labels: Mapping[str, str] = pod["metadata"].get("labels") or {}
    return labels


@dataclass(frozen=True)
class Instance:
    """One instance as observed: its StatefulSet (None: not created yet) and live pods."""

    role: str
    index: int
    name: str
    nodes: int
    statefulset: Json | None
    pods: tuple[Json, ...] = ()
    #: Not one of the role's own instances: a rollout's surge (or one left over).
    surge: bool = False

    @property
    def live_pods(self) -> list[Json]:
        return [p for p in self.pods if not _terminating(p)]

    @property
    def members(self) -> tuple[tuple[str, str], ...]:
        """(name, uid) of each live pod: what restarting the instance deletes."""
        pods = self.live_pods
        return tuple(
            sorted((p["metadata"]["name"], str(p["metadata"].get("uid", ""))) for p in pods)
        )

    @property
    def update_revision(self) -> str | None:
        """The StatefulSet's current template revision, once its controller has seen it."""
        sts = self.statefulset
        if sts is None:
            return None
        status = sts.get("status") or {}
        if status.get("observedGeneration", 0) < sts["metadata"].get("generation", 0):
            return None
        return status.get("updateRevision") or None

    @property
    def ready(self) -> bool:
        live = self.live_pods
        return len(live) == self.nodes and all(_ready(p) for p in live)

    @property
    def stale_pods(self) -> list[str]:
        """Names of live pods on another template than the StatefulSet's (none if unknown)."""
        revision = self.update_revision
        if revision is None:
            return []
        return sorted(
            p["metadata"]["name"]
            for p in self.live_pods
            if _labels(p).get(LABEL_REVISION) != revision
        )

    @property
    def mixed(self) -> bool:
        """Live pods of two templates at once: a group that cannot run."""
        revisions = {_labels(p).get(LABEL_REVISION) for p in self.live_pods}
        return len(revisions) > 1

    @property
    def fingerprint(self) -> str | None:
        """The layout generation of its live pods (None: no pod, or two generations)."""
        prints = {_labels(p).get(LABEL_FINGERPRINT) for p in self.live_pods}
        return prints.pop() if len(prints) == 1 else None

    @property
    def updated(self) -> bool:
        return self.update_revision is not None and not self.stale_pods

    def leader(self) -> Json | None:
        for p in self.live_pods:
            if p["metadata"]["name"] == f"{self.name}-0":
                return p
        return None


def observed_instances(
    owner: Owner, spec: PDDeploymentSpec, statefulsets: Iterable[Json], pods: Iterable[Json]
) -> dict[str, list[Instance]]:
    """Every instance that exists per role (a StatefulSet, or pods left by one), by index."""
    by_name = {s["metadata"]["name"]: s for s in statefulsets}
    pods_of: dict[str, list[Json]] = {}
    indices: dict[str, set[int]] = {role: set() for role in ROLES}
    for pod in pods:
        labels = _labels(pod)
        if labels.get(LABEL_ROLE) in ROLES and labels.get(LABEL_INSTANCE) is not None:
            role, index = labels[LABEL_ROLE], int(labels[LABEL_INSTANCE])
            pods_of.setdefault(instance_name(owner, role, index), []).append(pod)
            indices[role].add(index)
    for sts in by_name.values():
        labels = _labels(sts)
        if labels.get(LABEL_ROLE) in ROLES and labels.get(LABEL_INSTANCE) is not None:
            indices[labels[LABEL_ROLE]].add(int(labels[LABEL_INSTANCE]))
    out: dict[str, list[Instance]] = {}
    for role in ROLES:
        names = [(i, instance_name(owner, role, i)) for i in sorted(indices[role])]
        nodes = spec.role(role).nodes_per_instance
        out[role] = [
            Instance(role, i, name, nodes, by_name.get(name), tuple(pods_of.get(name, ())))
            for i, name in names
        ]
    return out


def instances(
    owner: Owner,
    spec: PDDeploymentSpec,
    statefulsets: Iterable[Json],
    pods: Iterable[Json],
    own: Mapping[str, Iterable[int]] | None = None,
) -> dict[str, list[Instance]]:
    """The instances per role the rollout and the status work on: the role's own (``own``,
    by default indices 0 to replicas - 1; those not created yet too), then the others that
    exist (a rollout's surge), by index. Draining instances are not among them: they leave
    whole (``drain``), never updated, restarted or counted."""
    seen = observed_instances(owner, spec, statefulsets, pods)
    out: dict[str, list[Instance]] = {}
    for role in ROLES:
        r = spec.role(role)
        mine = set(range(r.replicas) if own is None else own[role])
        existing = {i.index: i for i in seen[role] if not draining(i)}
        found = []
        for index in sorted(mine | set(existing)):
            name = instance_name(owner, role, index)
            inst = existing.get(index) or Instance(role, index, name, r.nodes_per_instance, None)
            found.append(replace(inst, surge=index not in mine))
        out[role] = found
    return out


def draining(inst: Instance) -> bool:
    """Marked for a drain: its StatefulSet, or a pod it left, carries the draining label."""
    objs = ([inst.statefulset] if inst.statefulset else []) + list(inst.pods)
    return any(_labels(o).get(LABEL_DRAINING) == "true" for o in objs)


@dataclass(frozen=True)
class RoleRollout:
    """One role's rollout as decided: counts for the status and what to do."""

    replicas: int
    ready: int
    updated: int
    available: int
    surge: int
    complete: bool


@dataclass(frozen=True)
class Decision:
    #: Pods to delete, instance by instance (all pods of each instance updated now), as
    #: (name, uid): a pod recreated under the same name is never deleted by mistake.
    restarts: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    #: Leader pods and the labels to set on them (LABEL_LEADER, and the legacy one while
    #: the router still selects on it).
    routing: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: The leader label the router's discovery selects on.
    discovery: str = LABEL_LEADER
    #: Surge instances wanted per role (beyond ``replicas``).
    surge: Mapping[str, int] = field(default_factory=dict)
    roles: Mapping[str, RoleRollout] = field(default_factory=dict)
    serving: str = ""
    target: str = ""
    #: The router runs the serving generation's selectors (or there is no router).
    router_settled: bool = True

    @property
    def complete(self) -> bool:
        """Every instance runs the current spec and the router routes to exactly them."""
        done = all(r.complete for r in self.roles.values()) and self.serving == self.target
        return done and self.router_settled and not self.restarts and not self.routing

    def summary(self) -> Json:
        """``status.rollout``."""
        return {
            "phase": ROLLOUT_COMPLETE if self.complete else ROLLOUT_PROGRESSING,
            "servingFingerprint": self.serving,
            "targetFingerprint": self.target,
        }


def _has_pair(by_role: Mapping[str, list[Instance]], fingerprint: str) -> bool:
    return all(
        any(i.ready and i.updated and i.fingerprint == fingerprint for i in by_role[role])
        for role in ROLES
    )


def router_settled(router: Json | None) -> bool:
    """The live router Deployment runs its current template on every replica."""
    if router is None:
        return True
    meta, status = router["metadata"], router.get("status") or {}
    want = int((router.get("spec") or {}).get("replicas", 1))
    return bool(
        status.get("observedGeneration", 0) >= meta.get("generation", 0)
        and status.get("updatedReplicas", 0) == want
        and status.get("replicas", 0) == want
    )


def serving_generation(
    by_role: Mapping[str, list[Instance]], target: str, current: str | None
) -> str:
    """The generation the router should route to now: the target once it has a Ready pair,
    else the one it routes to (``current``), else any with a Ready pair, else the target."""
    if _has_pair(by_role, target) or current == target:
        return target
    if current:
        return current
    prints = sorted({i.fingerprint for r in ROLES for i in by_role[r] if i.fingerprint})
    return next((f for f in prints if _has_pair(by_role, f)), target)


def discovery_label(router: Json | None, by_role: Mapping[str, list[Instance]]) -> str:
    """The leader label the router selects on: ``LABEL_LEADER``, except for a router of a
    build before 9f74067 (its Deployment names no discovery label) while a leader lacks the
    new label. Those leaders are labelled in this reconcile, and the next one moves the
    router."""
    labels = ((router or {}).get("metadata") or {}).get("labels") or {}
    if router is None or labels.get(LABEL_ROUTER_DISCOVERY) == DISCOVERY_LEADER:
        return LABEL_LEADER
    leaders = [i.leader() for role in ROLES for i in by_role[role]]
    if all(p is None or _labels(p).get(LABEL_LEADER) for p in leaders):
        return LABEL_LEADER
    return LABEL_LEGACY_ROUTABLE


def _routing(
    by_role: Mapping[str, list[Instance]], discovery: str
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Leaders without their labels get them. They are never taken off: sglang-router 0.3
    forgets a worker only when its pod is deleted, and the selectors' generation decides."""
    wanted = (LABEL_LEADER,) if discovery == LABEL_LEADER else (LABEL_LEADER, discovery)
    out: list[tuple[str, tuple[str, ...]]] = []
    for role in ROLES:
        for inst in by_role[role]:
            leader = inst.leader()
            if leader is None:
                continue
            missing = tuple(k for k in wanted if not _labels(leader).get(k))
            if missing:
                out.append((leader["metadata"]["name"], missing))
    return tuple(out)


def decide(
    spec: PDDeploymentSpec,
    by_role: Mapping[str, list[Instance]],
    target: str,
    router: Json | None = None,
    router_generations: frozenset[str] = frozenset(),
) -> Decision:
    """What to update, route and surge now, within ``spec.rollout``'s bounds.

    ``router``: the live router Deployment (None: none yet, or the router is disabled);
    ``router_generations``: the generations its running pods route to (their label)."""
    current = ((router or {}).get("metadata", {}).get("labels") or {}).get(LABEL_FINGERPRINT)
    serving = serving_generation(by_role, target, current)
    # What router pods route to serves (before a switch, the old generation alone; during
    # the router's own rollout, both); with no router pod yet, the serving generation.
    still_serving = set(router_generations) or {serving}
    settled = router_settled(router) and router_generations <= {serving}
    generation_change = serving != target or bool(router_generations - {target})
    restarts: list[tuple[str, tuple[tuple[str, str], ...]]] = []
    roles: dict[str, RoleRollout] = {}
    surge: dict[str, int] = {}
    previous_complete = True
    for role in spec.rollout.role_order:
        r = spec.role(role)
        own = [i for i in by_role[role] if not i.surge]
        extra = [i for i in by_role[role] if i.surge]
        outdated = [i for i in own if not i.updated]

        def available(i: Instance) -> bool:
            # No fingerprint label: a pod from before generations; it counts as serving.
            return i.ready and (i.fingerprint is None or i.fingerprint in still_serving)

        in_progress = bool(outdated) or not all(i.ready for i in own)
        may_start = previous_complete or generation_change
        # Surge while outdated instances remain, and until the role's own are Ready again.
        surging = bool(outdated) or (bool(extra) and in_progress)
        surge[role] = spec.rollout.max_surge if surging and may_start else 0
        budget = sum(available(i) for i in own + extra) - (
            r.replicas - spec.rollout.max_unavailable
        )
        if may_start:
            # Broken groups first, then what serves nothing, then the highest index first.
            for inst in sorted(outdated, key=lambda i: (not i.mixed, available(i), -i.index)):
                pods = inst.members
                if inst.update_revision is None or not pods:
                    continue  # the StatefulSet has not seen its template yet, or no pods
                if available(inst):
                    # Nothing that serves goes while the router itself is switching over.
                    if budget <= 0 or not settled:
                        continue
                    budget -= 1
                restarts.append((inst.name, pods))
        roles[role] = RoleRollout(
            replicas=r.replicas,
            ready=sum(i.ready for i in own),
            updated=sum(i.updated for i in own),
            available=sum(available(i) for i in own + extra),
            surge=len(extra),
            complete=not in_progress and not extra,
        )
        previous_complete = previous_complete and not in_progress
    # Mixed groups are never left running, whatever the order or budget.
    chosen = {name for name, _ in restarts}
    for each in ROLES:
        for inst in by_role[each]:
            if inst.mixed and inst.name not in chosen and inst.update_revision is not None:
                restarts.append((inst.name, inst.members))
    discovery = discovery_label(router, by_role)
    return Decision(
        restarts=tuple(restarts),
        routing=_routing(by_role, discovery),
        discovery=discovery,
        surge=surge,
        roles=roles,
        serving=serving,
        target=target,
        router_settled=settled,
    )
