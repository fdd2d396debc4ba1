"""The built-in PD planner's view of one PDDeployment, and what it writes back: pure.

``autoscale.decide`` judges one role from a ``RoleObservation``; this module makes that
observation from what the operator's watches keep (the role's PDRoleScaler, its instance
StatefulSets and their pods) and turns the decision into the scaler's writes. The loop
around it (``kubeio.pd_planner``) does the I/O: it reads the cache, scrapes the leaders
this module names and sends the writes.

- ``planner_policy``: ``spec.scaling.planner`` (decimal strings, integer seconds and
  milliseconds) as the rule's ``PlannerPolicy``.
- ``role_view``: one Planner role as observed. An instance is its StatefulSet; it is
  *draining* when its StatefulSet or a pod carries the draining label or its StatefulSet is
  being deleted, *ready* when every pod is Ready (``rollout.Instance.ready``, the reconcile's
  own test) and its leader has an address to scrape, *unready* (failed: neither capacity
  nor a reason to hold) when a pod failed or a container ended or restarted, and
  *starting* otherwise. The count the workloads were given (``effective``) is the scaler
  status's, once the reconcile has seen the scaler's current generation; before that the
  scaler's own count stands in, so the rule waits for the new instances to exist.
- ``planner_status`` and ``status_patch``: ``status.planner`` on the scaler, written when
  the decision, the count or the kind of reason changes (``status_due``: the numbers in a
  reason change at every reading, the decision does not), as a merge patch that touches
  no other key of the scaler's status (the reconcile owns those).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import PDDeploymentSpec, PlannerSettings, Role
from ascend_pd_operator.api.vocabulary import (
    LABEL_DRAINING,
    LABEL_INSTANCE,
    LABEL_ROLE,
    Owner,
)
from ascend_pd_operator.decisions.autoscale import (
    Leader,
    PlannerPolicy,
    RoleDecision,
    RoleObservation,
    Samples,
)
from ascend_pd_operator.decisions.rollout import Instance
from ascend_pd_operator.decisions.status import merge_patch

#: The key of the scaler's status the planner owns; every other key is the reconcile's.
STATUS_KEY = "planner"


def planner_policy(settings: PlannerSettings) -> PlannerPolicy:
    """``spec.scaling.planner`` as the rule's policy (the decimal strings read exactly)."""

    def decimal(text: str) -> float:
        return float(Fraction(text))

    def seconds(milliseconds: int | None) -> float | None:
        return None if milliseconds is None else milliseconds / 1000

    return PlannerPolicy(
        prefill_queue_target=decimal(settings.prefill_queue_target),
        decode_token_usage_target=decimal(settings.decode_token_usage_target),
        decode_prealloc_queue_target=decimal(settings.decode_prealloc_queue_target),
        ttft_target_seconds=seconds(settings.ttft_target_milliseconds),
        itl_target_seconds=seconds(settings.itl_target_milliseconds),
        latency_quantile=decimal(settings.latency_quantile),
        tolerance=decimal(settings.tolerance),
        max_step_up=settings.max_step_up,
        stabilization_window_seconds=float(settings.stabilization_window_seconds),
        interval_seconds=float(settings.interval_seconds),
    )


def planner_roles(spec: PDDeploymentSpec) -> tuple[Role, ...]:
    """The roles the planner scales."""
    return tuple(r for r in ("prefill", "decode") if spec.role(r).scaling.mode == "Planner")


@dataclass(frozen=True)
class RoleView:
    """One Planner role as observed, before its leaders are scraped."""

    #: The observation, each Ready leader's samples still None.
    observation: RoleObservation
    #: Each Ready instance's leader address (pod IP), by the instance's name in
    #: ``observation.ready``; one without an address is left out (never scraped: missing).
    addresses: Mapping[str, str]

    def with_samples(self, samples: Mapping[str, Samples | None]) -> RoleObservation:
        """The observation with each Ready leader's scrape (absent: missing)."""
        ready = tuple(Leader(r.instance, samples.get(r.instance)) for r in self.observation.ready)
        return replace(self.observation, ready=ready)


def _labels(obj: Json) -> Mapping[str, str]:
    labels: Mapping[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return labels


def _owned(obj: Json, uid: str) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return not uid or any(ref.get("uid") == uid for ref in refs)


def _failed(pod: Json) -> bool:
    """The pod failed, or one of its containers ended or restarted: its instance is broken,
    not on its way up."""
    status = pod.get("status") or {}
    if status.get("phase") == "Failed":
        return True
    return any(
        int(c.get("restartCount", 0) or 0) > 0
        or "terminated" in (c.get("state") or {})
        or "terminated" in (c.get("lastState") or {})
        for c in status.get("containerStatuses") or []
    )


def _draining(instance: Instance) -> bool:
    sts = instance.statefulset or {}
    return (
        bool((sts.get("metadata") or {}).get("deletionTimestamp"))
        or _labels(sts).get(LABEL_DRAINING) == "true"
        or any(_labels(p).get(LABEL_DRAINING) == "true" for p in instance.pods)
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def role_view(
    owner: Owner,
    spec: PDDeploymentSpec,
    role: Role,
    scaler: Json,
    statefulsets: Iterable[Json],
    pods: Iterable[Json],
) -> RoleView:
    """``role`` of ``owner`` as the watches report it: its scaler, and the StatefulSets and
    runtime pods of the deployment (other roles' and other owners' are skipped)."""
    r = spec.role(role)
    pods_of: dict[str, list[Json]] = {}
    for pod in pods:
        labels = _labels(pod)
        if labels.get(LABEL_ROLE) == role and labels.get(LABEL_INSTANCE) is not None:
            pods_of.setdefault(labels[LABEL_INSTANCE], []).append(pod)
    found = []
    for sts in statefulsets:
        labels = _labels(sts)
        index = labels.get(LABEL_INSTANCE, "")
        if labels.get(LABEL_ROLE) != role or not index.isdigit() or not _owned(sts, owner.uid):
            continue
        found.append(Instance(role=role, index=int(index), name=sts["metadata"]["name"],
                              nodes=r.nodes_per_instance, statefulset=sts,
                              pods=tuple(pods_of.get(index, ()))))  # fmt: skip
    ready: list[Leader] = []
    addresses: dict[str, str] = {}
    starting, draining, unready = [], [], []
    for inst in sorted(found, key=lambda i: i.index):
        name = f"{role}-{inst.index}"  # as users name instances: decode-0
        leader = inst.leader()
        if _draining(inst):
            draining.append(name)
        elif inst.ready and leader is not None:
            ready.append(Leader(name, None))
            ip = (leader.get("status") or {}).get("podIP")
            if ip:
                addresses[name] = str(ip)
        elif any(_failed(p) for p in inst.live_pods):
            unready.append(name)
        else:
            starting.append(name)
    desired = _int((scaler.get("spec") or {}).get("replicas"))
    desired = r.scaling.min_replicas if desired is None else desired
    status = scaler.get("status") or {}
    generation = _int((scaler.get("metadata") or {}).get("generation")) or 0
    seen = (_int(status.get("observedGeneration")) or 0) >= generation
    effective = _int(status.get("effectiveReplicas")) if seen else None
    observation = RoleObservation(
        role=role,
        desired=desired,
        min_replicas=r.scaling.min_replicas,
        max_replicas=r.scaling.max_replicas,
        ready=tuple(ready),
        starting=tuple(starting),
        draining=tuple(draining),
        unready=tuple(unready),
        effective=desired if effective is None else effective,
    )
    return RoleView(observation, addresses)


# --- what the planner writes -------------------------------------------------------------


def metric_text(value: float) -> str:
    """A value read, as the status shows it: at most 3 decimals, no trailing zeros."""
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def planner_status(decision: RoleDecision, now: str) -> Json:
    """``status.planner`` for ``decision`` taken at ``now`` (RFC 3339)."""
    return {
        "lastDecision": decision.action,
        "reason": decision.reason,
        "replicas": decision.replicas,
        "time": now,
        "metrics": {k: metric_text(v) for k, v in sorted(decision.metrics.items())},
    }


_NUMBER = re.compile(r"[0-9]+([.][0-9]+)?")


def _kind_of(reason: Any) -> str:
    """A reason with its numbers masked: what it says, not the values it says it with."""
    return _NUMBER.sub("#", str(reason or ""))


def status_due(old: Json | None, new: Json) -> bool:
    """Whether ``new`` is worth a write over the scaler's ``old`` status.planner: the
    decision, its count or the kind of its reason changed (not its values alone)."""
    if not old:
        return True
    return (
        old.get("lastDecision") != new["lastDecision"]
        or old.get("replicas") != new["replicas"]
        or _kind_of(old.get("reason")) != _kind_of(new["reason"])
    )


def status_patch(old_status: Json | None, new: Json) -> Json:
    """The merge patch of the scaler's status that sets ``status.planner`` to ``new`` and
    touches no other key (a metric no longer read is removed)."""
    old = (old_status or {}).get(STATUS_KEY)
    return {STATUS_KEY: merge_patch(old, new) if isinstance(old, dict) else new}
