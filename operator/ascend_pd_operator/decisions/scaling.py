"""How many instances each role runs: the count it asks for (``replicas``, or its
PDRoleScaler's ``spec.replicas``), held to the role's bounds and to the P:D ratio.

The ratio's semantics are Kthena's: after each role's clamp, a ratio below ``min`` raises
prefill (at its max: lowers decode), one above ``max`` raises decode (at its max: lowers
prefill); both roles reach zero together, a lone zero is raised to 1. Where those steps
alone cannot land on an allowed pair (the integer counts leave no room), the allowed pair
nearest to the asked one wins; admission guarantees one exists (``rules.scaling.feasible_pairs``).

The counts used go to the workloads and to status, never back into a scaler's spec, so an
HPA never fights them. Pure: the planner calls it with what the reconcile observed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import PDDeploymentSpec
from ascend_pd_operator.api.rules.scaling import (
    bounds_apply,
    feasible_pairs,
    pair_ok,
    ratio_bounds,
    role_range,
)
from ascend_pd_operator.api.vocabulary import ROLES, role_status


@dataclass(frozen=True)
class RoleScale:
    """One role's count: what it asked for, and what it runs."""

    role: str
    mode: str
    #: replicas (Static), the scaler's spec.replicas, or the seed of a scaler not seen yet
    asked: int
    effective: int
    #: the live PDRoleScaler (None: Static, or not created yet)
    scaler: Json | None = None

    @property
    def scaled(self) -> bool:
        return self.mode != "Static"

    @property
    def seed(self) -> int | None:
        """The count to create the scaler with: what the role asks for while its scaler is
        not there yet (None: Static, or it exists)."""
        return self.asked if self.scaled and self.scaler is None else None


@dataclass(frozen=True)
class ScaleDecision:
    roles: Mapping[str, RoleScale]
    #: what the ratio bounds changed, in words ("" when they changed nothing)
    ratio_change: str = ""

    def effective(self, role: str) -> int:
        return self.roles[role].effective


def _clamp(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, n))


def seed(spec: PDDeploymentSpec, role: str, previous: Json) -> int:
    """A new scaler's first count: what the role runs now (the last status's effective
    count, status.roles.<role>.effectiveReplicas: switching from Static then drains
    nothing), else its replicas; clamped."""
    r = spec.role(role)
    before = role_status(previous, role)
    now = before.get("effectiveReplicas", before.get("replicas"))
    start = int(now) if isinstance(now, int) and not isinstance(now, bool) else r.replicas
    return _clamp(start, r.scaling.min_replicas, r.scaling.max_replicas)


def asked_count(spec: PDDeploymentSpec, role: str, scaler: Json | None, previous: Json) -> int:
    r = spec.role(role)
    if r.scaling.mode == "Static":
        return r.replicas
    if scaler is None:
        return seed(spec, role, previous)
    replicas = (scaler.get("spec") or {}).get("replicas")
    return int(replicas) if isinstance(replicas, int) else seed(spec, role, previous)


def bound(spec: PDDeploymentSpec, asked: Mapping[str, int]) -> tuple[dict[str, int], str]:
    """The counts the roles run for the counts they ask for, and what the ratio changed (in
    words; "" when nothing). Two Static roles without a ratio run exactly their replicas."""
    if not bounds_apply(spec):
        return dict(asked), ""
    (plo, phi), (dlo, dhi) = role_range(spec.prefill), role_range(spec.decode)
    p0, d0 = _clamp(asked["prefill"], plo, phi), _clamp(asked["decode"], dlo, dhi)
    bounds = ratio_bounds(spec)
    p, d = _lone_zero(p0, d0, (plo, phi), (dlo, dhi))
    p, d = _ratio_steps(p, d, bounds, (plo, phi), (dlo, dhi))
    if not (plo <= p <= phi and dlo <= d <= dhi and pair_ok(p, d, bounds)):
        p, d = min(
            feasible_pairs(spec),
            key=lambda pair: (abs(pair[0] - p0) + abs(pair[1] - d0), -sum(pair), -pair[0]),
        )
    out = {"prefill": p, "decode": d}
    if (p, d) == (p0, d0):
        return out, ""
    return out, _describe(p0, d0, p, d, spec)


def _lone_zero(p: int, d: int, prange: tuple[int, int], drange: tuple[int, int]) -> tuple[int, int]:
    """Both roles reach zero together: a lone zero is raised to 1 where its range allows,
    else the other role goes to zero too."""
    if (p == 0) == (d == 0):
        return p, d
    if p == 0:
        return (max(1, prange[0]), d) if prange[1] >= 1 else (0, 0 if drange[0] == 0 else d)
    return (p, max(1, drange[0])) if drange[1] >= 1 else (0 if prange[0] == 0 else p, 0)


def _ratio_steps(
    p: int,
    d: int,
    bounds: tuple[Fraction | None, Fraction | None],
    prange: tuple[int, int],
    drange: tuple[int, int],
) -> tuple[int, int]:
    lo, hi = bounds
    if p == 0 or d == 0:
        return p, d
    if lo is not None and Fraction(p, d) < lo:
        need = math.ceil(lo * d)
        if need <= prange[1]:
            return need, d
        return prange[1], math.floor(prange[1] / lo)  # prefill at its max: lower decode
    if hi is not None and Fraction(p, d) > hi:
        need = math.ceil(p / hi)
        if need <= drange[1]:
            return p, need
        return math.floor(hi * drange[1]), drange[1]  # decode at its max: lower prefill
    return p, d


def _describe(p0: int, d0: int, p: int, d: int, spec: PDDeploymentSpec) -> str:
    changes = ", ".join(
        f"{role} {a} -> {n}" for role, a, n in (("prefill", p0, p), ("decode", d0, d)) if a != n
    )
    if (p0 == 0) != (d0 == 0):
        return f"prefill/decode {p0}/{d0}: both roles reach zero together; {changes}"
    b = spec.scaling.prefill_per_decode
    bounds = "[-, -]" if b is None else f"[{b.min or '-'}, {b.max or '-'}]"
    return (
        f"prefill/decode {p0}/{d0} = {float(Fraction(p0, d0)):.3g} is outside "
        f"prefillPerDecode {bounds}; {changes}"
    )


def decide_scale(
    spec: PDDeploymentSpec, scalers: Mapping[str, Json], previous: Json
) -> ScaleDecision:
    """Each role's asked and effective count. ``scalers``: the live PDRoleScalers by role;
    ``previous``: the PDDeployment's last status (a new scaler's seed)."""
    asked = {role: asked_count(spec, role, scalers.get(role), previous) for role in ROLES}
    effective, change = bound(spec, asked)
    roles = {}
    for role in ROLES:
        mode = spec.role(role).scaling.mode
        live = scalers.get(role) if mode != "Static" else None
        roles[role] = RoleScale(role, mode, asked[role], effective[role], live)
    return ScaleDecision(roles, change)


def with_effective(spec: PDDeploymentSpec, decision: ScaleDecision) -> PDDeploymentSpec:
    """``spec`` with each role's replicas set to its effective count: the builders, the
    rollout and the status read replicas and need no other change."""
    update = {
        role: spec.role(role).model_copy(update={"replicas": decision.effective(role)})
        for role in ROLES
        if spec.role(role).replicas != decision.effective(role)
    }
    return spec.model_copy(update=update) if update else spec
