"""The rules on spec.placement: its topology key, and the settings that need a scope or a
Volcano gang to mean anything."""

from __future__ import annotations

from ascend_pd_operator.api.rules.limits import (
    LABEL_KEY_PATTERN,
    PREFIX_LENGTH_PATTERN,
    QUALIFIED_NAME,
)
from ascend_pd_operator.api.rules.rule import Rule, bad_keys

PLACEMENT_RULES: tuple[Rule, ...] = (
    Rule(
        where="Placement",
        # The schema's pattern checks the form; a regex of DNS labels cannot bound the
        # prefix's length (as for the nodeSelector's keys).
        cel=f"self.topologyKey.matches('{PREFIX_LENGTH_PATTERN}')",
        message=f"placement.topologyKey must be a label key: {QUALIFIED_NAME}",
        check=lambda p: not bad_keys(LABEL_KEY_PATTERN, [p.topology_key]),
        detail=lambda p: f"got {p.topology_key!r}",
    ),
    Rule(
        where="Placement",
        # has(): the API server evaluates rules on the schema's defaults as written.
        cel="!has(self.exclusive) || !self.exclusive || !has(self.scope) || self.scope != 'None'",
        message="placement.exclusive needs scope Deployment or Instance: with scope None the "
        "deployment holds no domain that could be kept for it",
        check=lambda p: not (p.exclusive and p.scope == "None"),
        detail=lambda p: f"got exclusive {str(p.exclusive).lower()}, scope {p.scope}",
    ),
    Rule(
        where="Placement",
        cel="!has(self.highestTierAllowed) || !has(self.scope) || self.scope != 'None'",
        message="placement.highestTierAllowed needs scope Deployment or Instance: with scope "
        "None no group of pods is kept within one domain",
        check=lambda p: p.highest_tier_allowed is None or p.scope != "None",
        detail=lambda p: f"got highestTierAllowed {p.highest_tier_allowed}, scope {p.scope}",
    ),
    Rule(
        where="PDDeploymentSpec",
        # has(): scheduling defaults to {} and its gang to none, but a rule may meet the
        # object before the defaults (render, the operator's own parse).
        cel="!has(self.placement) || !has(self.placement.highestTierAllowed) || "
        "(has(self.scheduling) && has(self.scheduling.gang) && self.scheduling.gang == 'volcano')",
        message="placement.highestTierAllowed needs scheduling.gang volcano: it is the Volcano "
        "PodGroups' networkTopology, which nothing else reads",
        check=lambda s: (
            s.placement is None
            or s.placement.highest_tier_allowed is None
            or s.scheduling.gang == "volcano"
        ),
        detail=lambda s: f"got scheduling.gang {s.scheduling.gang}",
    ),
)
