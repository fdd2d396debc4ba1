"""From a PDDeployment and its model facts to the desired state, or the reason there is none.

Pure and shared by the reconciler and ``ascend-pd render``, so what a user
renders offline is exactly what the operator applies. Each stage stops at the
first failure and says which condition it belongs to: spec rules
(Validated) or the layout core (KVLayoutCompatible).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ascend_pd_runtime.errors import BadInput
from ascend_pd_runtime.layout import KVLayout
from ascend_pd_runtime.model_facts import ModelFacts

from .api import PDDeploymentSpec, SpecError, check_name, parse_spec
from .children import build_children
from .naming import REASON_INCOMPATIBLE, REASON_INVALID_LAYOUT, Owner
from .planning import plan_layout

Json = dict[str, Any]


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


def desired_state(
    owner: Owner,
    spec: PDDeploymentSpec,
    facts: ModelFacts,
    server_minor: int | None = None,
    surge: Mapping[str, int] | None = None,
    serving: str | None = None,
) -> Desired:
    """``server_minor``: the API server's Kubernetes minor version (1.x), where a child's
    apiVersion depends on it; None when not known (rendering offline). ``surge``: extra
    instances per role during a rollout; ``serving``: the generation the router routes to."""
    try:
        layout = plan_layout(spec, facts)
    except BadInput as exc:
        return Desired(None, reason=REASON_INVALID_LAYOUT, message=str(exc))
    if not layout.compatible:
        return Desired(layout, reason=REASON_INCOMPATIBLE, message="; ".join(layout.problems))
    return Desired(layout, build_children(owner, spec, layout, server_minor, surge, serving))
