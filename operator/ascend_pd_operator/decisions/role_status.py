"""Each role's status (status.roles.<role>) and the router's, and which of their
instances or pods are not ready and why (``waits`` words each cause)."""

from __future__ import annotations

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import PDDeploymentSpec
from ascend_pd_operator.api.vocabulary import (
    LABEL_INSTANCE,
    LABEL_ROLE,
    ROLES,
    instance_name,
    role_status,
    router_name,
    scaler_name,
)
from ascend_pd_operator.builders.pinning import pin_of
from ascend_pd_operator.decisions.findings import Findings
from ascend_pd_operator.decisions.waits import (
    LISTED_INSTANCES,
    RANK_NOT_CREATED,
    ROLE_MESSAGE_CHARS,
    ROUTER_STARTING,
    counted,
    instance_ready,
    instance_wait,
    pods_wait,
    quoted,
    replica_failure,
)


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
    return text + (f"; and {counted(rest, 'more instance')} not ready" if rest > 0 else "")


def role_state(
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


def router_state(obs: Findings, spec: PDDeploymentSpec) -> tuple[Json, bool, str]:
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
