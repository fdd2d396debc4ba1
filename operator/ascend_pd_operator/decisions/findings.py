"""``Findings``: what one reconcile learnt, which the status is computed from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import PDDeploymentSpec
from ascend_pd_operator.api.vocabulary import (
    REASON_APPLY_FAILED,
    Owner,
)
from ascend_pd_operator.builders.desired import Desired
from ascend_pd_operator.builders.model_source import FactsResolution
from ascend_pd_operator.decisions.drain import Roster
from ascend_pd_operator.decisions.operator_updates import Held
from ascend_pd_operator.decisions.recovery import Recovery
from ascend_pd_operator.decisions.rollout import Decision
from ascend_pd_operator.decisions.scaling import ScaleDecision


@dataclass(frozen=True)
class Findings:
    """What the status is computed from (``planner.conclude`` gathers it); ``children``
    maps (kind, name) to the live object."""

    owner: Owner
    spec: PDDeploymentSpec | None
    validation_error: str = ""
    facts: FactsResolution | None = None
    desired: Desired | None = None
    children: dict[tuple[str, str], Json] = field(default_factory=dict)
    previous: Json = field(default_factory=dict)
    #: Why writing the children failed (the API server refused a write), if it did.
    write_error: str = ""
    #: The Ready condition's reason for ``write_error`` (ApplyFailed or PruneFailed).
    write_error_reason: str = REASON_APPLY_FAILED
    #: The runtime pods.
    pods: list[Json] = field(default_factory=list)
    #: The rollout as decided for these children (None: none written).
    rollout: Decision | None = None
    #: Group recovery's restarts and records (None: none written).
    recovery: Recovery | None = None
    #: The StatefulSet controller's FailedCreate Events of our instances (slim, as
    #: ``child_watch.slim_event`` keeps them): why an instance has fewer pods than it wants.
    events: list[Json] = field(default_factory=list)
    #: Each role's asked and effective count (``spec`` already runs the effective ones).
    scale: ScaleDecision | None = None
    #: Per role the instances it keeps and its drains (None: 0 to replicas - 1, none).
    rosters: Mapping[str, Roster] | None = None
    #: The router's pods: why its Deployment is not ready.
    router_pods: list[Json] = field(default_factory=list)
    #: With spec.placement (``placement``): the PlacementFeasible condition, status.placement
    #: and the instances not created for want of a domain (name -> the condition's reason).
    #: Without it the condition alone, when the spec's transfer protocol cannot cross the
    #: servers it implies (``transfer.implied_mismatch``).
    placement_condition: Json | None = None
    placement_status: Json | None = None
    placement_blocked: Mapping[str, str] = field(default_factory=dict)
    #: The operator-made template changes that wait for the user (None: none written).
    held: Held | None = None
