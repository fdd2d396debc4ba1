"""Pod scheduling fields as Kubernetes types them: tolerations and affinity (core/v1).

They were free-form objects, so a toleration with operator ``Maybe`` passed admission and
surfaced only as a child's failed apply. Typed, the API server refuses a bad one at
admission naming the field: enums, required keys and types cost nothing there; the few
cross-field rules of a toleration are CEL (``rules.pod.TOLERATION_RULES``), on one toleration
each, with no map() or sum().

Every field is optional with no default in the CRD, and the pods get exactly what was
given (``given``): the API server adds nothing to what users wrote, so no running pod
template changes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.rules.limits import (
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    MAX_LABEL_KEY_LENGTH,
    MAX_NAME_PART_LENGTH,
    QUALIFIED_NAME,
)
from ascend_pd_operator.api.spec_model import SpecModel

#: A label key, or empty (a toleration's key: empty with operator Exists tolerates all).
OPTIONAL_LABEL_KEY_PATTERN = f"^({LABEL_KEY_PATTERN[1:-1]})?$"


_Object = SpecModel


def given(obj: BaseModel | None) -> Json:
    """The object as the user wrote it: the keys given, defaults or not (the pod's field)."""
    if obj is None:
        return {}
    return obj.model_dump(by_alias=True, exclude_unset=True)


class Toleration(_Object):
    """A taint the pod tolerates (core/v1 Toleration)."""

    key: str | None = Field(
        None,
        max_length=MAX_LABEL_KEY_LENGTH,
        pattern=OPTIONAL_LABEL_KEY_PATTERN,
        description=f"The taint key: a label key ({QUALIFIED_NAME}); empty (with operator "
        "Exists): every taint.",
    )
    operator: Literal["Exists", "Equal", ""] | None = Field(
        None, description="Exists (any value) or Equal (value); unset or empty: Equal."
    )
    value: str | None = Field(
        None,
        max_length=MAX_NAME_PART_LENGTH,
        pattern=LABEL_VALUE_PATTERN,
        description="The taint value with operator Equal (a label value); empty with Exists.",
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = Field(
        None,
        description="The taint effect matched: NoSchedule, PreferNoSchedule or NoExecute; "
        "unset or empty: all.",
    )
    toleration_seconds: int | None = Field(
        None,
        description="With effect NoExecute: how long the pod stays bound after the taint "
        "appears; unset: forever.",
    )


_NODE_OPERATORS = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
_LABEL_OPERATORS = Literal["In", "NotIn", "Exists", "DoesNotExist"]
_Strings = list[str] | None


class NodeSelectorRequirement(_Object):
    """A node label or field compared with values (core/v1 NodeSelectorRequirement)."""

    key: str = Field(..., min_length=1, description="The label key (or field) compared.")
    operator: _NODE_OPERATORS = Field(..., description="In, NotIn, Exists, DoesNotExist, Gt or Lt.")
    values: _Strings = Field(
        None,
        description="In and NotIn: one or more; Exists and DoesNotExist: none; Gt and Lt: "
        "one integer.",
    )


class NodeSelectorTerm(_Object):
    """Requirements a node meets together (core/v1 NodeSelectorTerm)."""

    match_expressions: list[NodeSelectorRequirement] | None = Field(
        None, description="Requirements on the node's labels."
    )
    match_fields: list[NodeSelectorRequirement] | None = Field(
        None, description="Requirements on the node's fields (metadata.name)."
    )


class NodeSelector(_Object):
    """Terms of which a node meets one (core/v1 NodeSelector)."""

    node_selector_terms: list[NodeSelectorTerm] = Field(
        ..., min_length=1, description="The terms, ORed: at least one."
    )


class PreferredSchedulingTerm(_Object):
    """A weighted node preference (core/v1 PreferredSchedulingTerm)."""

    weight: int = Field(..., ge=1, le=100, description="Weight, 1 to 100.")
    preference: NodeSelectorTerm = Field(..., description="The nodes preferred.")


class NodeAffinity(_Object):
    """Node affinity (core/v1 NodeAffinity)."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = Field(
        None, description="Nodes the pod must be scheduled on."
    )
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] | None = (
        Field(None, description="Nodes the pod prefers, weighted.")
    )


class LabelSelectorRequirement(_Object):
    """A label compared with values (meta/v1 LabelSelectorRequirement)."""

    key: str = Field(..., min_length=1, description="The label key compared.")
    operator: _LABEL_OPERATORS = Field(..., description="In, NotIn, Exists or DoesNotExist.")
    values: _Strings = Field(
        None, description="In and NotIn: one or more; Exists and DoesNotExist: none."
    )


class LabelSelector(_Object):
    """A label query (meta/v1 LabelSelector); its parts are ANDed."""

    match_labels: dict[str, str] | None = Field(None, description="Labels required, as given.")
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        None, description="Label requirements."
    )


class PodAffinityTerm(_Object):
    """Pods near which (or away from which) the pod runs (core/v1 PodAffinityTerm)."""

    label_selector: LabelSelector | None = Field(None, description="The pods.")
    namespace_selector: LabelSelector | None = Field(None, description="Their namespaces.")
    namespaces: _Strings = Field(None, description="Their namespaces, by name.")
    topology_key: str = Field(
        ..., min_length=1, description="The node label whose value is the domain, e.g. "
        "kubernetes.io/hostname."
    )  # fmt: skip
    match_label_keys: _Strings = Field(
        None, description="Label keys whose values, taken from this pod, join labelSelector."
    )
    mismatch_label_keys: _Strings = Field(
        None, description="Label keys whose values, taken from this pod, must differ."
    )


class WeightedPodAffinityTerm(_Object):
    """A weighted pod affinity term (core/v1 WeightedPodAffinityTerm)."""

    weight: int = Field(..., ge=1, le=100, description="Weight, 1 to 100.")
    pod_affinity_term: PodAffinityTerm = Field(..., description="The term.")


class PodAffinity(_Object):
    """Pod affinity or anti-affinity (core/v1 PodAffinity, PodAntiAffinity)."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] | None = Field(
        None, description="Terms the pod's node must meet."
    )
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] | None = (
        Field(None, description="Terms the pod prefers, weighted.")
    )


class Affinity(_Object):
    """The pod's affinity (core/v1 Affinity)."""

    node_affinity: NodeAffinity | None = Field(None, description="Node affinity.")
    pod_affinity: PodAffinity | None = Field(None, description="Pod affinity.")
    pod_anti_affinity: PodAffinity | None = Field(None, description="Pod anti-affinity.")
