"""The rules on scaling: each role's range of instance counts, the P:D ratio bounds and
whether any pair of counts satisfies both (the scaling decision reads the same functions),
and the built-in planner's settings."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from ascend_pd_operator.api.rules.limits import MAX_REPLICAS
from ascend_pd_operator.api.rules.rule import Rule

# --- scaling: role bounds and the P:D ratio --------------------------------------------


def role_range(r: Any) -> tuple[int, int]:
    """The instance counts a role may run: a Static role its replicas, a scaled role its
    [minReplicas, maxReplicas]."""
    if r.scaling.mode == "Static":
        return r.replicas, r.replicas
    return r.scaling.min_replicas, r.scaling.max_replicas


def ratio_bounds(s: Any) -> tuple[Fraction | None, Fraction | None]:
    """spec.scaling.prefillPerDecode as exact fractions (None: unbounded on that side)."""
    b = s.scaling.prefill_per_decode
    if b is None:
        return None, None
    return (Fraction(b.min) if b.min else None), (Fraction(b.max) if b.max else None)


def bounds_apply(s: Any) -> bool:
    """Whether the roles' counts are bounded at all: a role is scaled, or a ratio is set.
    Two Static roles without a ratio keep exactly their replicas, zeros included."""
    return s.scaling.prefill_per_decode is not None or any(
        s.role(role).scaling.mode != "Static" for role in ("prefill", "decode")
    )


def pair_ok(prefill: int, decode: int, bounds: tuple[Fraction | None, Fraction | None]) -> bool:
    """Both roles at zero, or both running within the ratio bounds."""
    if prefill == 0 or decode == 0:
        return prefill == decode
    lo, hi = bounds
    ratio = Fraction(prefill, decode)
    return (lo is None or ratio >= lo) and (hi is None or ratio <= hi)


def feasible_pairs(s: Any) -> list[tuple[int, int]]:
    """Every (prefill, decode) pair the roles' ranges and the ratio bounds allow."""
    (plo, phi), (dlo, dhi) = role_range(s.prefill), role_range(s.decode)
    bounds = ratio_bounds(s)
    return [
        (p, d) for p in range(plo, phi + 1) for d in range(dlo, dhi + 1) if pair_ok(p, d, bounds)
    ]


def _scaling_feasible(s: Any) -> bool:
    return not bounds_apply(s) or bool(feasible_pairs(s))


def _range_cel(role: str, end: str) -> str:
    bound = "minReplicas" if end == "lo" else "maxReplicas"
    return (
        f"(self.{role}.scaling.mode == 'Static' ? self.{role}.replicas : "
        f"self.{role}.scaling.{bound})"
    )


def _feasible_cel() -> str:
    """``_scaling_feasible`` in CEL, with the smallest work the API server can do: with one
    bound, the best decode count is an end of its range (the smallest under a lower bound,
    the largest under an upper one); with both, each decode count d of the range tries the
    largest prefill count the range and the upper bound allow against the lower bound.
    Doubles with a margin far below the bounds' 0.001 steps stand in for the exact
    fractions. Ternaries, not ``||``: they skip what they need not evaluate."""
    plo, phi = _range_cel("prefill", "lo"), _range_cel("prefill", "hi")
    dlo, dhi = _range_cel("decode", "lo"), _range_cel("decode", "hi")
    bounds = "self.scaling.prefillPerDecode"
    lo, hi = f"double({bounds}.min)", f"double({bounds}.max)"
    eps = "0.000001"
    p1, d1 = f"({plo} > 1 ? {plo} : 1)", f"({dlo} > 1 ? {dlo} : 1)"

    def top(d: str) -> str:  # the largest prefill count for decode count d
        by_hi = f"int({hi} * double({d}) + {eps})"
        return f"({by_hi} < {phi} ? {by_hi} : {phi})"

    running = f"{p1} <= {phi} && {d1} <= {dhi}"
    only_lo = f"{running} && double({phi}) >= {lo} * double({d1}) - {eps}"
    only_hi = f"{running} && {top(dhi)} >= {p1}"
    counts = ", ".join(str(n) for n in range(1, MAX_REPLICAS + 1))
    pair = f"{top('d')} >= {p1} && double({top('d')}) >= {lo} * double(d) - {eps}"
    both = f"{running} && [{counts}].exists(d, d < {d1} || d > {dhi} ? false : {pair})"
    static = "self.prefill.scaling.mode == 'Static' && self.decode.scaling.mode == 'Static'"
    # a role's own range rule (RoleScaling) and the order rule (RatioBounds) speak for a
    # reversed range or reversed bounds
    reversed_bounds = f"has({bounds}) && has({bounds}.min) && has({bounds}.max) && {lo} > {hi}"
    vacuous = (
        f"({static} && !has({bounds})) || {plo} > {phi} || {dlo} > {dhi} || "
        f"({reversed_bounds}) || ({plo} == 0 && {dlo} == 0)"
    )
    return (
        f"{vacuous} ? true : !has({bounds}) ? {running} : "
        f"!has({bounds}.max) ? (has({bounds}.min) ? {only_lo} : {running}) : "
        f"!has({bounds}.min) ? {only_hi} : {both}"
    )


def _describe_scaling(s: Any) -> str:
    def role(name: str) -> str:
        r = s.role(name)
        if r.scaling.mode == "Static":
            return f"{name}.replicas {r.replicas} (Static)"
        lo, hi = r.scaling.min_replicas, r.scaling.max_replicas
        return f"{name}.scaling.minReplicas {lo}, {name}.scaling.maxReplicas {hi}"

    b = s.scaling.prefill_per_decode
    ratio = "none" if b is None else f"min {b.min or 'none'}, max {b.max or 'none'}"
    return f"{role('prefill')}; {role('decode')}; scaling.prefillPerDecode {ratio}"


SCALING_RULES: tuple[Rule, ...] = (
    Rule(
        where="RoleScaling",
        cel="self.minReplicas <= self.maxReplicas",
        message="minReplicas must not exceed maxReplicas",
        check=lambda c: c.min_replicas <= c.max_replicas,
        detail=lambda c: f"got minReplicas {c.min_replicas}, maxReplicas {c.max_replicas}",
    ),
    Rule(
        where="RatioBounds",
        cel="!has(self.min) || !has(self.max) || double(self.min) <= double(self.max)",
        message="min must not exceed max",
        check=lambda b: not (b.min and b.max and Fraction(b.min) > Fraction(b.max)),
        detail=lambda b: f"got min {b.min}, max {b.max}",
    ),
    Rule(
        where="PDDeploymentSpec",
        cel=_feasible_cel(),
        message="no pair of instance counts satisfies the roles' ranges (prefill.replicas "
        "of a Static role, else prefill.scaling.minReplicas to maxReplicas; decode likewise) "
        "and spec.scaling.prefillPerDecode: both roles at zero, or both running with "
        "prefill/decode within the bounds",
        check=_scaling_feasible,
        detail=_describe_scaling,
    ),
)


# --- the built-in planner's settings -----------------------------------------------------


def _positive_rule(field: str, attr: str, what: str) -> Rule:
    """The decimal string ``field`` of the planner's settings is above 0 (its pattern already
    bounds its form): a zero target would make every load infinitely above it."""
    return Rule(
        where="PlannerSettings",
        cel=f"double(self.{field}) > 0.0",
        message=f"scaling.planner.{field} must be greater than 0 ({what})",
        check=lambda p: Fraction(getattr(p, attr)) > 0,
        detail=lambda p: f"got {getattr(p, attr)!r}",
    )


PLANNER_RULES: tuple[Rule, ...] = (
    _positive_rule("prefillQueueTarget", "prefill_queue_target", "requests per instance"),
    _positive_rule("decodeTokenUsageTarget", "decode_token_usage_target", "a share of the KV pool"),
    _positive_rule(
        "decodePreallocQueueTarget", "decode_prealloc_queue_target", "requests per instance"
    ),
    _positive_rule("latencyQuantile", "latency_quantile", "a quantile such as 0.9"),
)
