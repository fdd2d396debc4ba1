"""The desired children of one PDDeployment: every manifest the operator applies.

``build_children`` is pure (spec + layout in, manifests out); the reconciler
applies its result and ``ascend-pd render`` prints it. The order is the apply
order: the layout ConfigMap before the pods that mount it, PodGroups before the
pods they gang, Services before the StatefulSets whose pods resolve them, the router's
ServiceAccount and Role before its pod.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import ascend_pd_runtime.env_contract as ec
from ascend_pd_runtime.layout import KVLayout
from ascend_pd_runtime.plan import layout_fingerprint, plan_document

from .api import PDDeploymentSpec
from .disruption import MIN_DRAIN_UNAVAILABLE, pdb_api_version, pod_disruption_budget
from .naming import COMPONENT_KV_LAYOUT, ROLES, Owner, kv_layout_name, metadata
from .router import router_children
from .workloads import headless_service, podgroup, statefulset

Json = dict[str, Any]


def kv_layout_configmap(owner: Owner, layout: KVLayout) -> Json:
    doc = plan_document(layout)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(owner, kv_layout_name(owner), COMPONENT_KV_LAYOUT),
        "data": {ec.KV_LAYOUT_KEY: json.dumps(doc, separators=(",", ":"))},
    }


def build_children(
    owner: Owner,
    spec: PDDeploymentSpec,
    layout: KVLayout,
    server_minor: int | None = None,
    surge: Mapping[str, int] | None = None,
    serving: str | None = None,
) -> list[Json]:
    """Every child manifest, in apply order, for a 1.<server_minor> API server (None: not
    known, a current one). From ``rollout.decide``: ``surge``, extra instances per role
    during a rollout, numbered after the role's own; ``serving``, the KV-layout generation
    the router routes to (None: this layout's)."""
    children: list[Json] = [kv_layout_configmap(owner, layout)]
    extra = surge or {}
    instances = [
        (role, i) for role in ROLES for i in range(spec.role(role).replicas + extra.get(role, 0))
    ]
    if spec.scheduling.gang == "volcano":
        children += [podgroup(owner, spec, role, i) for role, i in instances]
    children += [headless_service(owner, role, i) for role, i in instances]
    children += [statefulset(owner, spec, layout, role, i) for role, i in instances]
    pdb_version = pdb_api_version(server_minor)
    # The rollout's maxUnavailable per role bounds drains too; at least one, so that a
    # surge-only rollout (maxUnavailable 0) never blocks a node drain for good.
    drainable = max(spec.rollout.max_unavailable, MIN_DRAIN_UNAVAILABLE)
    children += [pod_disruption_budget(owner, role, drainable, pdb_version) for role in ROLES]
    if spec.router.enabled:
        children += router_children(owner, spec, serving or layout_fingerprint(layout))
    return children


def child_key(manifest: Json) -> tuple[str, str, str]:
    """(apiVersion, kind, name): identifies a child within its namespace."""
    return (manifest["apiVersion"], manifest["kind"], manifest["metadata"]["name"])
