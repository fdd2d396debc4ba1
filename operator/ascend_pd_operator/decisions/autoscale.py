"""The built-in PD planner's rule (``scaling.mode: Planner``): what SGLang's own ``/metrics``
says about each role's load in, the role scaler's next ``spec.replicas`` out. Pure: no I/O,
no clock (``now`` is given), no prometheus_client (``kubeio.leader_metrics`` scrapes and
parses; the samples arrive here as a plain mapping).

One call decides one role (``decide``). Its signals, each read from every Ready leader and
averaged per instance:

- prefill: ``sglang:num_queue_reqs`` (requests waiting to be prefilled) against
  ``prefill_queue_target``; optionally the TTFT quantile from
  ``sglang:time_to_first_token_seconds`` against ``ttft_target_seconds``;
- decode: ``sglang:token_usage`` (the KV pool's used share, 0..1) against
  ``decode_token_usage_target`` and ``sglang:num_decode_prealloc_queue_reqs`` (requests
  waiting for decode KV memory) against ``decode_prealloc_queue_target``; optionally the ITL
  quantile from ``sglang:inter_token_latency_seconds`` against ``itl_target_seconds``.

``sglang:num_decode_transfer_queue_reqs`` (KV on its way from prefill) and
``sglang:num_prefill_bootstrap_queue_reqs`` (``num_prefill_prealloc_queue_reqs`` before
SGLang 0.5.12: ``SIGNAL_METRICS``) are read and reported, never acted on: a
transfer queue that grows while decode has KV room is a prefill or link symptom, and more
decode instances would only wait longer.

Per signal, as an HPA does: ``ratio = observed / target``; within ``tolerance`` of 1 it asks
for the current count, else for ``ceil(ready * ratio)``; the role's recommendation is the
largest of its signals'. Then:

- up at once, by at most ``max_step_up``;
- down by one only when every recommendation of the last ``stabilization_window_seconds``
  was below the current count (the highest in the window wins) and the planner watched the
  whole window: a hold, a change of the count by anyone (an HPA, ``kubectl scale``) or a gap
  of more than ``GAP_INTERVALS`` intervals between observations starts the window over;
- hold while an instance of the role starts or drains, while the instances that exist are
  not the count asked for (the workloads have not caught up), when no instance is Ready,
  or when a Ready leader's metrics are missing (its scrape failed, or a gauge that drives
  the role is absent under all its names: SGLang sets its gauges within 30 s of starting,
  busy or idle);
- always within ``[min_replicas, max_replicas]``: a count outside is moved to the bound at
  once, hold or not (an HPA's ``minReplicas`` does the same without metrics).

The ratio bounds between the roles are applied afterwards by their own pure function; this
module never looks at the other role.

**Reading one leader's samples.** SGLang labels each scheduler gauge with ``model_name``,
``engine_type``, ``tp_rank``, ``pp_rank``, ``moe_ep_rank`` and, under DP attention,
``dp_rank``. The series of one DP rank describe one scheduler, so they count once, with
their largest value: with priority scheduling that is the total (``priority=""``), never
one of its per-priority parts. DP ranks have their own queues and KV pools, so queues are
summed over them and usage is averaged. A multi-node instance's leader serves only its own
node's schedulers: for
instances spanning nodes under DP attention the queues are the leader's share.

**Latency.** The histograms are cumulative since the server started, so the quantile is
taken over what happened between two scrapes: the state keeps each leader's last buckets,
the deltas of all Ready leaders are pooled by bucket bound, and the quantile is interpolated
within its bucket as PromQL's ``histogram_quantile`` does. A leader without a previous
scrape, with no request in between, or whose counts went down (a restart) gives no latency
this time; a histogram appears only after the first request, so its absence is never
"missing".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

#: One sample's labels (``(name, value)`` pairs) and a leader's samples: sample name (as
#: exposed: a histogram's ``<name>_bucket`` with its ``le``) and labels -> value.
Labels = frozenset[tuple[str, str]]
Samples = Mapping[tuple[str, Labels], float]

# --- the SGLang metrics the planner reads ----------------------------------------------------
QUEUE = "sglang:num_queue_reqs"
BOOTSTRAP_QUEUE = "sglang:num_prefill_bootstrap_queue_reqs"
#: The prefill bootstrap queue's gauge before SGLang 0.5.12 (the same queue).
BOOTSTRAP_QUEUE_BEFORE_0_5_12 = "sglang:num_prefill_prealloc_queue_reqs"
TTFT = "sglang:time_to_first_token_seconds"
TOKEN_USAGE = "sglang:token_usage"
PREALLOC_QUEUE = "sglang:num_decode_prealloc_queue_reqs"
TRANSFER_QUEUE = "sglang:num_decode_transfer_queue_reqs"
ITL = "sglang:inter_token_latency_seconds"

#: Each value the planner reads (the keys of ``RoleDecision.metrics``) -> the SGLang metric
#: names it is read under, in order: the first one a leader exposes counts, so a name some
#: release lacks is only an alternative. The SGLang tier
#: (tests/sglang/test_dashboard_metrics_sglang.py) checks against every supported release's
#: wheel that each value has one of its names there, and says which release lacks which name.
SIGNAL_METRICS: Mapping[str, tuple[str, ...]] = {
    "queue": (QUEUE,),
    "bootstrap_queue": (BOOTSTRAP_QUEUE, BOOTSTRAP_QUEUE_BEFORE_0_5_12),
    "ttft_seconds": (TTFT,),
    "token_usage": (TOKEN_USAGE,),
    "prealloc_queue": (PREALLOC_QUEUE,),
    "transfer_queue": (TRANSFER_QUEUE,),
    "itl_seconds": (ITL,),
}
#: Every SGLang metric family the planner reads, with the Prometheus type it reads it as
#: (the tier checks the type too); the scraper keeps only these.
METRICS_READ: Mapping[str, str] = {
    name: "histogram" if key.endswith("_seconds") else "gauge"
    for key, names in SIGNAL_METRICS.items()
    for name in names
}

#: Observations further apart than this many intervals start the scale-down window over:
#: the planner did not watch the load in between.
GAP_INTERVALS = 3
#: ``ceil`` of a ratio that is an integer up to float rounding (3 * 0.7 / 0.7) stays that
#: integer.
_EPSILON = 1e-9

Role = Literal["prefill", "decode"]
Action = Literal["up", "down", "hold"]


@dataclass(frozen=True)
class PlannerPolicy:
    """The planner's targets and pacing (from the role scaler's spec; defaults as an
    experienced user would set them). Targets are per Ready instance."""

    #: Prefill requests waiting per instance.
    prefill_queue_target: float = 4.0
    #: Share of decode's KV pool in use (0..1): room left for the running requests to grow.
    decode_token_usage_target: float = 0.7
    #: Decode requests waiting for KV memory per instance.
    decode_prealloc_queue_target: float = 2.0
    #: Optional latency targets in seconds at ``latency_quantile`` (None: not used).
    ttft_target_seconds: float | None = None
    itl_target_seconds: float | None = None
    latency_quantile: float = 0.9
    #: No change while every signal is within this share of its target (HPA's 0.1).
    tolerance: float = 0.1
    max_step_up: int = 2
    stabilization_window_seconds: float = 300.0
    #: How often the planner observes (the caller's loop; here for the gap rule).
    interval_seconds: float = 15.0

    def __post_init__(self) -> None:
        for name in ("prefill_queue_target", "decode_prealloc_queue_target", "interval_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        for name in ("ttft_target_seconds", "itl_target_seconds"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0 or None")
        if not 0 < self.decode_token_usage_target <= 1:
            raise ValueError("decode_token_usage_target must be in (0, 1]")
        if not 0 < self.latency_quantile < 1:
            raise ValueError("latency_quantile must be in (0, 1)")
        if not 0 <= self.tolerance < 1:
            raise ValueError("tolerance must be in [0, 1)")
        if self.max_step_up < 1:
            raise ValueError("max_step_up must be >= 1")
        if self.stabilization_window_seconds < 0:
            raise ValueError("stabilization_window_seconds must be >= 0")


@dataclass(frozen=True)
class Leader:
    """One Ready, non-draining instance's leader: its name as users see it (``decode-0``)
    and its samples (None: the scrape failed)."""

    instance: str
    samples: Samples | None


@dataclass(frozen=True)
class RoleObservation:
    """One role at one interval, as the caller read it."""

    role: Role
    #: The role scaler's ``spec.replicas`` now (what the planner writes).
    desired: int
    min_replicas: int
    max_replicas: int
    #: The Ready, non-draining instances, one leader each.
    ready: tuple[Leader, ...]
    #: Instances that exist and are not Ready yet after being created (names).
    starting: tuple[str, ...] = ()
    #: Instances marked draining.
    draining: tuple[str, ...] = ()
    #: Instances that exist, are not draining, not starting and not Ready (failed, crash
    #: loop): neither capacity nor a reason to hold.
    unready: tuple[str, ...] = ()
    #: The count the workloads were given after the ratio bounds (None: ``desired``).
    effective: int | None = None


@dataclass(frozen=True)
class RoleState:
    """What the planner remembers about one role between intervals (keep it per
    PDDeployment and role; a fresh ``RoleState()`` after an operator restart only delays
    the next scale-down by one window)."""

    #: The scaler count the run below was observed at.
    replicas: int | None = None
    #: The first observation of the current run: no hold, no change, no gap since.
    since: float | None = None
    #: The last observation (for the gap rule).
    seen: float | None = None
    #: The run's ``(time, recommendation)`` within the window.
    history: tuple[tuple[float, int], ...] = ()
    #: Each leader's last cumulative latency buckets (upper bound -> count).
    buckets: Mapping[str, Mapping[float, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class RoleDecision:
    """The planner's answer for one role."""

    role: Role
    #: Write this to the scaler's ``spec.replicas`` (equal to ``previous`` on a hold).
    replicas: int
    previous: int
    action: Action
    #: One short phrase, for the scaler's status and an Event.
    reason: str
    #: The values it used: ``queue``, ``bootstrap_queue``, ``ttft_seconds`` (prefill);
    #: ``token_usage``, ``prealloc_queue``, ``transfer_queue``, ``itl_seconds`` (decode).
    #: Gauges are per Ready instance (means over the leaders); latencies the quantile.
    metrics: Mapping[str, float]
    #: What the load asked for before the step cap, the window and the bounds (None: held
    #: before the load was read).
    recommendation: int | None
    #: Pass to the next ``decide`` of this role.
    state: RoleState

    @property
    def changed(self) -> bool:
        return self.replicas != self.previous


@dataclass(frozen=True)
class _Gauge:
    key: str
    #: How DP ranks combine: queues add up, usage shares average.
    combine: Literal["sum", "mean"]
    #: The phrase in a reason, e.g. "prefill queue" (12.0/instance).
    label: str


_PREFILL_GAUGES = (
    _Gauge("queue", "sum", "prefill queue"),
    _Gauge("bootstrap_queue", "sum", "prefill bootstrap queue"),
)
_DECODE_GAUGES = (
    _Gauge("token_usage", "mean", "decode token usage"),
    _Gauge("prealloc_queue", "sum", "decode prealloc queue"),
    _Gauge("transfer_queue", "sum", "decode transfer queue"),
)


def _targets(policy: PlannerPolicy, role: Role) -> dict[str, float]:
    """The signals that drive a role, by key; the other gauges are only reported."""
    if role == "prefill":
        found = {"queue": policy.prefill_queue_target}
        if policy.ttft_target_seconds is not None:
            found["ttft_seconds"] = policy.ttft_target_seconds
        return found
    found = {
        "token_usage": policy.decode_token_usage_target,
        "prealloc_queue": policy.decode_prealloc_queue_target,
    }
    if policy.itl_target_seconds is not None:
        found["itl_seconds"] = policy.itl_target_seconds
    return found


# --- reading samples ---------------------------------------------------------------------------
def gauge(samples: Samples, name: str, combine: Literal["sum", "mean"]) -> float | None:
    """One leader's value of a scheduler gauge (None: no series of it)."""
    by_rank: dict[str | None, float] = {}
    for (sample, labels), value in samples.items():
        if sample != name:
            continue
        rank = dict(labels).get("dp_rank")
        by_rank[rank] = max(value, by_rank.get(rank, value))
    if not by_rank:
        return None
    total = sum(by_rank.values())
    return total if combine == "sum" else total / len(by_rank)


def buckets(samples: Samples, name: str) -> dict[float, float] | None:
    """One leader's cumulative histogram: upper bound -> count, summed over its series
    (each request is counted in exactly one: streaming or not, its priority). None: the
    histogram has no series yet (no request since the server started)."""
    found: dict[float, float] = {}
    bucket = f"{name}_bucket"
    for (sample, labels), value in samples.items():
        if sample != bucket:
            continue
        bound = float(dict(labels)["le"])
        found[bound] = found.get(bound, 0.0) + value
    return found or None


def quantile(q: float, cumulative: Mapping[float, float]) -> float | None:
    """The ``q`` quantile of a cumulative histogram (upper bound -> count, with +Inf), as
    PromQL's ``histogram_quantile``: linear within the bucket it falls in; in the +Inf
    bucket, the highest finite bound. None: no observation, or no +Inf bucket."""
    bounds = sorted(cumulative)
    if not bounds or bounds[-1] != math.inf:
        return None
    counts: list[float] = []
    for bound in bounds:  # cumulative counts never fall; a torn scrape must not make them
        counts.append(max(cumulative[bound], counts[-1] if counts else 0.0))
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    i = next(i for i, count in enumerate(counts) if count >= rank)
    if bounds[i] == math.inf:
        return bounds[i - 1] if i > 0 else None
    lower = bounds[i - 1] if i > 0 else min(0.0, bounds[i])
    below = counts[i - 1] if i > 0 else 0.0
    return lower + (bounds[i] - lower) * (rank - below) / (counts[i] - below)


def _delta(old: Mapping[float, float], new: Mapping[float, float]) -> dict[float, float] | None:
    """New minus old per bound both have; None when a count fell (the server restarted)."""
    common = old.keys() & new.keys()
    delta = {bound: new[bound] - old[bound] for bound in common}
    if any(value < 0 for value in delta.values()):
        return None
    return delta


def _pool(deltas: Iterable[Mapping[float, float]]) -> dict[float, float]:
    """The leaders' deltas added per bound, over the bounds all of them have."""
    deltas = list(deltas)
    if not deltas:
        return {}
    common = set(deltas[0]).intersection(*deltas[1:])
    return {bound: sum(d[bound] for d in deltas) for bound in common}


# --- the rule ----------------------------------------------------------------------------------
def _in_band(ratio: float, tolerance: float) -> bool:
    return abs(ratio - 1.0) <= tolerance + _EPSILON  # 4.4 / 4.0 is 1.1000000000000001


def _recommend(ratio: float, ready: int, current: int, tolerance: float) -> int:
    if _in_band(ratio, tolerance):
        return current
    return max(0, math.ceil(ready * ratio - _EPSILON))


def _fmt(key: str, value: float) -> str:
    if key.endswith("_seconds"):
        return f"{value:.3g} s"
    if key == "token_usage":
        return f"{value:.2f}"
    return f"{value:.1f}/instance"


def _phrase(role: Role, policy: PlannerPolicy, key: str) -> str:
    if key == "ttft_seconds":
        return f"prefill TTFT p{policy.latency_quantile * 100:g}"
    if key == "itl_seconds":
        return f"decode ITL p{policy.latency_quantile * 100:g}"
    gauges = _PREFILL_GAUGES if role == "prefill" else _DECODE_GAUGES
    return next(g.label for g in gauges if g.key == key)


def decide(
    policy: PlannerPolicy,
    observation: RoleObservation,
    previous: RoleState | None,
    now: float,
) -> RoleDecision:
    """The next ``spec.replicas`` of one role's scaler, why, and the state to keep."""
    obs = observation
    role = obs.role
    state = previous or RoleState()
    current = obs.desired
    lo, hi = obs.min_replicas, obs.max_replicas
    gauges = _PREFILL_GAUGES if role == "prefill" else _DECODE_GAUGES
    latency_metric, latency_key = (
        (TTFT, "ttft_seconds") if role == "prefill" else (ITL, "itl_seconds")
    )
    targets = _targets(policy, role)

    # The latency buckets are kept from every leader that answered, even on a hold, so the
    # next delta spans one interval.
    kept: dict[str, Mapping[float, float]] = {}
    deltas = []
    if latency_key in targets:
        for leader in obs.ready:
            cumulative = buckets(leader.samples, latency_metric) if leader.samples else None
            if cumulative is None:
                continue
            kept[leader.instance] = cumulative
            old = state.buckets.get(leader.instance)
            delta = _delta(old, cumulative) if old is not None else None
            if delta is not None:
                deltas.append(delta)

    metrics: dict[str, float] = {}

    def answer(
        replicas: int, action: Action, reason: str, recommendation: int | None, run: RoleState
    ) -> RoleDecision:
        return RoleDecision(
            role,
            replicas,
            current,
            action,
            reason,
            metrics,
            recommendation,
            replace(run, buckets=kept),
        )

    def hold(reason: str) -> RoleDecision:  # before the load was read: the window restarts
        return answer(current, "hold", reason, None, RoleState(current, None, now))

    # The bounds rule before anything else: it needs no metrics.
    if current < lo or current > hi:
        bound = lo if current < lo else hi
        which = "minReplicas" if current < lo else "maxReplicas"
        action: Action = "up" if bound > current else "down"
        return answer(
            bound,
            action,
            f"{action} {current}->{bound}: {which} {bound}",
            None,
            RoleState(bound, None, now),
        )

    if obs.draining:
        return hold(f"hold: {obs.draining[0]} draining")
    if obs.starting:
        return hold(f"hold: {obs.starting[0]} starting")
    exist = len(obs.ready) + len(obs.starting) + len(obs.unready)
    wanted = current if obs.effective is None else obs.effective
    if exist != wanted:
        return hold(f"hold: {exist} {role} instances exist, {wanted} wanted")
    if not obs.ready:
        return hold(f"hold: no Ready {role} instance")

    # Every Ready leader's gauges, or a hold naming the first that lacks one.
    values: dict[str, list[float]] = {g.key: [] for g in gauges}
    for leader in obs.ready:
        if leader.samples is None:
            return hold(f"hold: metrics missing from {leader.instance}")
        for g in gauges:
            names = SIGNAL_METRICS[g.key]
            value = next(
                (v for n in names if (v := gauge(leader.samples, n, g.combine)) is not None),
                None,
            )
            if value is None:
                if g.key not in targets:
                    continue  # only reported
                return hold(f"hold: {names[0]} missing from {leader.instance}")
            values[g.key].append(value)
    for key, found in values.items():
        if found:
            metrics[key] = sum(found) / len(found)
    if deltas:
        latency = quantile(policy.latency_quantile, _pool(deltas))
        if latency is not None:
            metrics[latency_key] = latency

    # Each driving signal's recommendation; the largest wins.
    ready = len(obs.ready)
    asks = {
        key: _recommend(metrics[key] / target, ready, current, policy.tolerance)
        for key, target in targets.items()
        if key in metrics
    }
    top = max(asks, key=lambda k: (asks[k], metrics[k] / targets[k]))
    recommendation = asks[top]
    why = f"{_phrase(role, policy, top)} {_fmt(top, metrics[top])}"
    target_text = _fmt(top, targets[top]).removesuffix("/instance")

    # The run of observations at this count, for the scale-down window.
    gap = state.seen is not None and now - state.seen > GAP_INTERVALS * policy.interval_seconds
    since, history = state.since, state.history
    if state.replicas != current or since is None or gap:
        since, history = now, ()
    window = policy.stabilization_window_seconds
    history = (*((t, r) for t, r in history if t > now - window), (now, recommendation))
    run = RoleState(current, since, now, history)

    if recommendation > current:
        up = min(recommendation, current + policy.max_step_up, hi)
        if up == current:
            return answer(
                current,
                "hold",
                f"hold: {why} > target {target_text}, at maxReplicas {hi}",
                recommendation,
                run,
            )
        capped = (
            f" (step cap {policy.max_step_up}, asked {recommendation})"
            if up < recommendation
            else ""
        )
        return answer(
            up,
            "up",
            f"up {current}->{up}: {why} > target {target_text}{capped}",
            recommendation,
            RoleState(up, None, now),
        )
    note = ""
    if (
        role == "decode"
        and metrics.get("transfer_queue", 0.0) > policy.decode_prealloc_queue_target
    ):
        # Said aloud so nobody waits for decode to grow on it.
        note = (
            f"; transfer queue {metrics['transfer_queue']:.1f}/instance is a prefill/link symptom"
        )
    if recommendation == current:
        if _in_band(metrics[top] / targets[top], policy.tolerance):
            said = f"within {policy.tolerance:.0%} of target {target_text}"
        else:
            said = f"vs target {target_text} needs {current}"
        return answer(current, "hold", f"hold: {why} {said}{note}", recommendation, run)
    if current <= lo:
        return answer(
            current,
            "hold",
            f"hold: {why} < target {target_text}, at minReplicas {lo}{note}",
            recommendation,
            run,
        )
    watched = now - since
    highest = max(r for _, r in history)
    if watched >= window and highest < current:
        down = current - 1
        return answer(
            down,
            "down",
            f"down {current}->{down} after {watched:.0f} s below target",
            recommendation,
            RoleState(down, None, now),
        )
    return answer(
        current,
        "hold",
        f"hold: {why} < target {target_text} for {watched:.0f} s of {window:.0f} s{note}",
        recommendation,
        run,
    )
