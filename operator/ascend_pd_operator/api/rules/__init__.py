"""The spec rules that need no model facts, each written once for both enforcers.

A ``Rule`` carries a CEL expression (the API server's ``x-kubernetes-validations``
on clusters that have CEL) and a Python predicate (the pydantic validator, which
the operator runs on every cluster and ``ascend-pd render`` runs offline). Tests
evaluate both on the same specs, so the two cannot drift apart.

Rules that need model facts (layer partition sums, layout compatibility) run at
reconcile through the runtime's layout core, never here.

This package holds ``RULES``, every rule, and its look-ups; ``rule`` the ``Rule`` type and
its helpers, ``limits`` the bounds, patterns and words; the rules by what they check:
``spec`` (its shape, cross-role agreement), ``pod`` (what reaches the pods), ``scaling``
(counts, ratio, planner settings), ``placement`` and ``host_mounts``.
"""

from __future__ import annotations

from typing import Any

from ascend_pd_operator.api.rules.host_mounts import HOST_MOUNT_RULES
from ascend_pd_operator.api.rules.placement import PLACEMENT_RULES
from ascend_pd_operator.api.rules.pod import ENV_SOURCE_RULES, POD_RULES, TOLERATION_RULES
from ascend_pd_operator.api.rules.rule import Rule
from ascend_pd_operator.api.rules.scaling import PLANNER_RULES, SCALING_RULES
from ascend_pd_operator.api.rules.spec import SPEC_RULES

#: Every rule. The CRD attaches each object's rules in this order, and the validators
#: report them in it.
RULES: tuple[Rule, ...] = (
    SPEC_RULES
    + POD_RULES
    + SCALING_RULES
    + PLANNER_RULES
    + PLACEMENT_RULES
    + HOST_MOUNT_RULES
    + TOLERATION_RULES
    + ENV_SOURCE_RULES
)


def rules_for(where: str, field: str = "") -> list[Rule]:
    """The rules on object ``where``, or on its field ``field`` (the wire name)."""
    return [r for r in RULES if r.where == where and r.field == field]


def violations(where: str, obj: Any, field: str = "") -> list[str]:
    return [msg for rule in rules_for(where, field) if (msg := rule.violation(obj))]
