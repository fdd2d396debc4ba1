"""Volcano's PodGroups: one per instance (the instance's gang), or with spec.placement scope
Deployment one for the whole deployment with a subgroup per instance; and what the
installed PodGroup CRD can hold.

The field names and their meaning are Volcano's ``scheduling.volcano.sh/v1beta1`` PodGroup
(``tests/unit/operator/fixtures/volcano`` holds its CRD, against which the tests validate
what is built here):

- ``networkTopology`` (Volcano >= 1.12): ``mode`` hard (the pods must fit in one HyperNode
  of at most ``highestTierAllowed``) or soft (preferred), ``highestTierAllowed`` a HyperNode
  tier (1: the leaf tier next to the nodes).
- ``subGroupPolicy`` (Volcano >= 1.14): the pods of the group matching ``labelSelector``
  are split by the values of their ``matchLabelKeys`` labels into subgroups, each
  gang-scheduled with ``subGroupSize`` pods; ``minSubGroups`` of them must fit for any to
  start.

Pure: JSON in, JSON out.
"""

from __future__ import annotations

from collections.abc import Iterable

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import PDDeploymentSpec, Placement
from ascend_pd_operator.api.vocabulary import (
    COMPONENT_GANG,
    LABEL_INSTANCE,
    ROLES,
    Owner,
    gang_name,
    instance_name,
    metadata,
    selector,
)

VOLCANO_SCHEDULER = "volcano"
PODGROUP_API_VERSION = "scheduling.volcano.sh/v1beta1"
#: The installed PodGroup CRD, read for what its schema holds (``podgroup_subgroups``).
PODGROUP_CRD = "podgroups.scheduling.volcano.sh"
#: spec.placement.mode -> Volcano's networkTopology.mode.
TOPOLOGY_MODE = {"Required": "hard", "Preferred": "soft"}


def network_topology(placement: Placement | None) -> Json | None:
    """The PodGroups' ``networkTopology``: mode from placement.mode, the tier the user named.
    None without a tier: a networkTopology without one means tier 1 to Volcano 1.12 and 1.13
    (their CRD's default) and no bound at all to later releases, so the operator writes
    none rather than a constraint that depends on the Volcano installed."""
    if placement is None or placement.highest_tier_allowed is None or placement.scope == "None":
        return None
    return {
        "mode": TOPOLOGY_MODE[placement.mode],
        "highestTierAllowed": placement.highest_tier_allowed,
    }


def _group_spec(spec: PDDeploymentSpec, members: Iterable[str], priority: str) -> Json:
    """minMember and minResources of a gang of whole instances of ``members`` (roles, one
    entry per instance), the priority, and the deployment's networkTopology."""
    roles = [spec.role(role) for role in members]
    npus = sum(r.nodes_per_instance * r.devices_per_node for r in roles)
    group: Json = {
        "minMember": sum(r.nodes_per_instance for r in roles),
        "minResources": {spec.ascend.resource_name: str(npus)},
    }
    if priority:
        group["priorityClassName"] = priority
    if (topology := network_topology(spec.placement)) is not None:
        group["networkTopology"] = topology
    return group


def instance_podgroup(
    owner: Owner, spec: PDDeploymentSpec, role: str, index: int, priority: str
) -> Json:
    """One instance's gang: its pods start only when all of them can; with a placement tier,
    within one HyperNode of that tier."""
    return {
        "apiVersion": PODGROUP_API_VERSION,
        "kind": "PodGroup",
        "metadata": metadata(owner, instance_name(owner, role, index), role, index),
        "spec": _group_spec(spec, [role], priority),
    }


def deployment_podgroup(
    owner: Owner, spec: PDDeploymentSpec, members: Iterable[tuple[str, int]], priority: str
) -> Json:
    """The deployment's gang (spec.placement scope Deployment, where the installed CRD has
    subGroupPolicy): every member instance starts only when all of them can, within one
    HyperNode of the placement's tier; per role one subGroupPolicy splits the role's pods by
    their instance label, so that each instance is a subgroup of its own, placed whole
    (``subGroupSize`` its pods) and counted whole (``minSubGroups`` the role's members)."""
    instances = sorted(members, key=lambda m: (ROLES.index(m[0]), m[1]))
    group = _group_spec(spec, [role for role, _ in instances], priority)
    group["subGroupPolicy"] = [
        {
            "name": role,
            "labelSelector": {"matchLabels": selector(owner, role)},
            "matchLabelKeys": [LABEL_INSTANCE],
            "subGroupSize": spec.role(role).nodes_per_instance,
            "minSubGroups": count,
        }
        for role in ROLES
        if (count := sum(1 for r, _ in instances if r == role))
    ]
    return {
        "apiVersion": PODGROUP_API_VERSION,
        "kind": "PodGroup",
        "metadata": metadata(owner, gang_name(owner), COMPONENT_GANG),
        "spec": group,
    }


def podgroup_subgroups(crd: Json | None) -> bool | None:
    """Whether an installed PodGroup CRD (``PODGROUP_CRD`` as the API server returns it) has
    ``spec.subGroupPolicy`` in its served v1beta1 schema (Volcano >= 1.14); None when there
    is no such CRD (Volcano not installed) or it serves no v1beta1 schema to read."""
    if not crd:
        return None
    for version in (crd.get("spec") or {}).get("versions") or []:
        if version.get("name") != PODGROUP_API_VERSION.rsplit("/", 1)[1] or not version.get(
            "served", True
        ):
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        spec = (schema.get("properties") or {}).get("spec") or {}
        if not schema:
            return None
        return "subGroupPolicy" in (spec.get("properties") or {})
    return None
