"""``Observation``, everything one reconcile read, and the pods in it the plan counts: the
runtime pods as this operator's own deletions leave them, the router's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import (
    COMPONENT_ROUTER,
    LABEL_COMPONENT,
    LABEL_FINGERPRINT,
    LABEL_ROLE,
    ROLES,
    Owner,
)
from ascend_pd_operator.decisions.placement import (
    Usage,
)
from ascend_pd_runtime.model_facts import ModelFacts


@dataclass(frozen=True)
class Observation:
    """Everything one reconcile read; ``reconciler.observe`` fills it, tests build it."""

    #: The PDDeployment as read (metadata, spec, status).
    resource: Json
    #: ``spec.model.configMapRef``'s ConfigMap (None: not found or not asked for).
    user_configmap: Json | None = None
    #: The inspector's stored result, ``<name>-model-facts``.
    facts_configmap: Json | None = None
    #: The inspector Job and its pods (their termination message is its result).
    inspector_job: Json | None = None
    inspector_pods: list[Json] = field(default_factory=list)
    #: Our labelled children per kind (ownership is checked here, by uid).
    children: Mapping[str, list[Json]] = field(default_factory=dict)
    #: The runtime pods, read while an instance is not ready (they may carry a refusal).
    pods: list[Json] = field(default_factory=list)
    #: Facts given offline (``ascend-pd render --model-config``): they win over the rest.
    local_facts: ModelFacts | None = None
    #: Runtime pods deleted lately, as last seen (group recovery tells who deleted them).
    gone_pods: list[Json] = field(default_factory=list)
    #: uids of the pods this operator deleted lately (the watch may not show it yet).
    our_deletions: frozenset[str] = frozenset()
    #: Those of them it force-deleted: gone from the API server, whatever the watch says.
    our_force_deletions: frozenset[str] = frozenset()
    #: The nodes of our pods as the node watch keeps them (``recovery.slim_node``); with
    #: spec.placement every node the watch keeps (the domains to choose from).
    nodes: Mapping[str, Json] = field(default_factory=dict)
    #: What the pods on the nodes hold (``placement.usage_of``): read only when an instance
    #: with spec.placement is to be created (``Plan.needs_usage``); None: not read.
    node_usage: Usage | None = None
    #: Whether the installed Volcano PodGroup CRD has spec.subGroupPolicy (``volcano.
    #: podgroup_subgroups``), read only with scheduling.gang volcano and placement scope
    #: Deployment; None: not read, or no PodGroup CRD.
    podgroup_subgroups: bool | None = None
    #: The StatefulSet controller's FailedCreate Events of our instances (the status names
    #: why an instance has too few pods; ``child_watch.EventWatch``).
    events: list[Json] = field(default_factory=list)
    #: (kind, name) -> (resourceVersion, pod template) of the workloads whose live template
    #: a decision needs (``Plan.needs_templates``): the cache keeps no template.
    templates: Mapping[tuple[str, str], tuple[str, Json]] = field(default_factory=dict)

    @property
    def owner(self) -> Owner:
        meta = self.resource["metadata"]
        return Owner(
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace") or "default"),
            uid=str(meta.get("uid", "")),
            generation=int(meta.get("generation", 0) or 0),
        )

    @property
    def previous(self) -> Json:
        return dict(self.resource.get("status") or {})

    def owned(self, kind: str) -> list[Json]:
        """Our children of ``kind`` whose controller is this PDDeployment (this uid)."""
        uid = self.owner.uid
        return [
            item
            for item in self.children.get(kind, [])
            if any(ref.get("uid") == uid for ref in item["metadata"].get("ownerReferences") or [])
        ]


def observed_pods(obs: Observation) -> list[Json]:
    """The runtime pods, those we deleted marked as going even if the watch has not said so
    yet (a rollout must not count an instance it just took down as serving), those we
    force-deleted left out (they are gone)."""
    out = []
    for pod in runtime_pods(obs.pods):
        meta = pod["metadata"]
        if meta.get("uid") in obs.our_force_deletions:
            continue
        if meta.get("uid") in obs.our_deletions and not meta.get("deletionTimestamp"):
            pod = {**pod, "metadata": {**meta, "deletionTimestamp": "(deleted by us)"}}
        out.append(pod)
    return out


def router_generations(obs: Observation) -> frozenset[str]:
    """The KV-layout generations the router's running pods route to."""
    return frozenset(
        (p["metadata"].get("labels") or {}).get(LABEL_FINGERPRINT, "")
        for p in router_pods(obs.pods)
        if not p["metadata"].get("deletionTimestamp")
    ) - {""}


def router_pods(pods: list[Json]) -> list[Json]:
    """The router's pods among ``pods``."""
    return [
        p for p in pods
        if (p["metadata"].get("labels") or {}).get(LABEL_COMPONENT) == COMPONENT_ROUTER
    ]  # fmt: skip


def runtime_pods(pods: list[Json]) -> list[Json]:
    """The prefill and decode pods among ``pods``."""
    return [p for p in pods if (p["metadata"].get("labels") or {}).get(LABEL_ROLE) in ROLES]
