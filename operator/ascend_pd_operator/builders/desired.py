"""The desired state of one PDDeployment: its spec checked, its KV layout, every child.

Pure (spec + model facts in, manifests out) and shared by the reconciler and
``ascend-pd render``, so what a user renders offline is exactly what the operator
applies. Each stage stops at the first failure and says which condition it belongs
to: spec rules (Validated) or the layout core (KVLayoutCompatible).

The operator never computes a layer range itself: it turns the spec into the core's
``LayoutRequest`` and asks ``compute_layout``; ``BadInput`` (a partition that does not
sum to the layer count, a pipeline longer than the model) and the core's compatibility
problems both reach the user through KVLayoutCompatible.

``with_children`` adds the manifests in apply order: the layout ConfigMap before the
pods that mount it, PodGroups before the pods they gang, Services before the
StatefulSets whose pods resolve them, the router's ServiceAccount and Role before its pod.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import ascend_pd_runtime.env_contract as ec
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import PDDeploymentSpec, SpecError, check_name, parse_spec
from ascend_pd_operator.api.vocabulary import (
    COMPONENT_KV_LAYOUT,
    LABEL_LEADER,
    LABEL_SURGE,
    REASON_INCOMPATIBLE,
    REASON_INVALID_LAYOUT,
    ROLES,
    Owner,
    kv_layout_name,
    metadata,
)
from ascend_pd_operator.builders.disruption import (
    MIN_DRAIN_UNAVAILABLE,
    pod_disruption_budget,
)
from ascend_pd_operator.builders.pinning import Pin
from ascend_pd_operator.builders.router import router_children
from ascend_pd_operator.builders.volcano import deployment_podgroup
from ascend_pd_operator.builders.workloads import (
    headless_service,
    podgroup,
    scheduling_fields,
    statefulset,
)
from ascend_pd_runtime.errors import BadInput
from ascend_pd_runtime.layout import KVLayout, LayoutRequest, compute_layout
from ascend_pd_runtime.model_facts import ModelFacts
from ascend_pd_runtime.plan import layout_fingerprint, plan_document


@dataclass(frozen=True)
class Validation:
    spec: PDDeploymentSpec | None
    error: str = ""


def validate(owner: Owner, raw_spec: Any) -> Validation:
    """Spec rules (the CRD's schema and CEL, enforced again for clusters without CEL)."""
    try:
        check_name(owner.name)
        return Validation(parse_spec(raw_spec))
    except SpecError as exc:
        return Validation(None, str(exc))


@dataclass(frozen=True)
class Desired:
    """The layout and children, or the layout failure (reason, message)."""

    layout: KVLayout | None
    children: list[Json] = field(default_factory=list)
    reason: str = ""
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.layout is not None and self.layout.compatible and not self.reason


def desired_layout(spec: PDDeploymentSpec, facts: ModelFacts) -> Desired:
    """The layout alone, or its failure: what a rollout decides on before any child is
    built (its surge and the router's generation shape the children)."""
    try:
        layout = plan_layout(spec, facts)
    except BadInput as exc:
        return Desired(None, reason=REASON_INVALID_LAYOUT, message=str(exc))
    if not layout.compatible:
        return Desired(layout, reason=REASON_INCOMPATIBLE, message="; ".join(layout.problems))
    return Desired(layout)


@dataclass(frozen=True)
class Indices:
    """The instance indices of one role: its own, and a rollout's surge ones."""

    own: tuple[int, ...]
    surge: tuple[int, ...] = ()


def with_children(
    desired: Desired,
    owner: Owner,
    spec: PDDeploymentSpec,
    indices: Mapping[str, Indices] | None = None,
    serving: str | None = None,
    discovery: str = LABEL_LEADER,
    pins: Mapping[tuple[str, int], Pin] | None = None,
) -> Desired:
    """``desired`` with every child manifest, built once, in apply order (a failed layout has
    none). ``indices``:
    per role the instances it keeps and a rollout's surge ones (``drain.roster``,
    ``rollout.decide``; None: 0 to replicas - 1, no surge); ``serving``, the KV-layout
    generation the router routes to (None: this layout's); ``discovery``, the leader label
    it selects on; ``pins``, per (role, index) the domain an instance is pinned to
    (``decisions.placement``; an instance without one is unpinned)."""
    if not desired.ok:
        return desired
    layout = desired.layout
    assert layout is not None
    children: list[Json] = [kv_layout_configmap(owner, layout)]
    chosen = indices or {role: Indices(tuple(range(spec.role(role).replicas))) for role in ROLES}
    instances = [(role, i) for role in ROLES for i in chosen[role].own + chosen[role].surge]
    surge = {(role, i) for role in ROLES for i in chosen[role].surge}
    if spec.scheduling.gang == "volcano":
        # An instance whose pin names the deployment's gang joins it; any other has its own.
        ganged = [(role, i) for role, i in instances
                  if (pin := (pins or {}).get((role, i))) is not None and pin.gang]  # fmt: skip
        if ganged:
            priority = str(scheduling_fields(spec).get("priorityClassName", ""))
            children.append(deployment_podgroup(owner, spec, ganged, priority))
        children += [podgroup(owner, spec, role, i) for role, i in instances
                     if (role, i) not in ganged]  # fmt: skip
    children += [headless_service(owner, role, i) for role, i in instances]
    for role, i in instances:
        sts = statefulset(owner, spec, layout, role, i, (pins or {}).get((role, i)))
        if (role, i) in surge:
            sts["metadata"]["labels"][LABEL_SURGE] = "true"
        children.append(sts)
    # The rollout's maxUnavailable per role bounds drains too; at least one, so that a
    # surge-only rollout (maxUnavailable 0) never blocks a node drain for good.
    drainable = max(spec.rollout.max_unavailable, MIN_DRAIN_UNAVAILABLE)
    children += [pod_disruption_budget(owner, role, drainable) for role in ROLES]
    if spec.router.enabled:
        children += router_children(owner, spec, serving or layout_fingerprint(layout),
                                    discovery)  # fmt: skip
    return Desired(layout, children)


def desired_state(owner: Owner, spec: PDDeploymentSpec, facts: ModelFacts) -> Desired:
    """The layout and every child, as no rollout is under way (``ascend-pd render``, the
    audit)."""
    return with_children(desired_layout(spec, facts), owner, spec)


def layout_request(spec: PDDeploymentSpec) -> LayoutRequest:
    algorithm = spec.speculative.algorithm.lower()
    return LayoutRequest(
        prefill_pp=spec.prefill.parallelism.pipeline,
        decode_pp=spec.decode.parallelism.pipeline,
        layer_partition=tuple(spec.prefill.layer_partition),
        speculative=algorithm,
        speculative_roles=tuple(spec.speculative.roles),
        sglang_version=spec.runtime.sglang_version,
        transfer_backend=spec.runtime.transfer_backend,
    )


def plan_layout(spec: PDDeploymentSpec, facts: ModelFacts) -> KVLayout:
    """The deployment's layout; raises ``BadInput`` when the spec cannot fit the model."""
    return compute_layout(facts, layout_request(spec))


def kv_layout_configmap(owner: Owner, layout: KVLayout) -> Json:
    doc = plan_document(layout)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(owner, kv_layout_name(owner), COMPONENT_KV_LAYOUT),
        "data": {ec.KV_LAYOUT_KEY: json.dumps(doc, separators=(",", ":"))},
    }


def child_key(manifest: Json) -> tuple[str, str, str]:
    """(apiVersion, kind, name): identifies a child within its namespace."""
    return (manifest["apiVersion"], manifest["kind"], manifest["metadata"]["name"])
