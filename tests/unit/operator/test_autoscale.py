"""The built-in PD planner's rule (``decisions.autoscale``) on SGLang ``/metrics`` fixtures.

The fixtures (``fixtures/sglang_metrics``) are leaders' expositions with the real SGLang
names, labels and buckets; each test fills in the gauge values, parses the text with the
scraper's own parser and asks the planner. Every expected number is worked out by hand in
the test's comment, never with the module's helpers.
"""

from __future__ import annotations

import math
from pathlib import Path
from string import Template

import pytest

from ascend_pd_operator.decisions import autoscale as a
from ascend_pd_operator.decisions.autoscale import Leader, PlannerPolicy, RoleObservation, decide
from ascend_pd_operator.kubeio.leader_metrics import parse

FIXTURES = Path(__file__).parent / "fixtures" / "sglang_metrics"
POLICY = PlannerPolicy()  # queue 4/instance, usage 0.7, prealloc 2, tolerance 0.1, step 2, 300 s


def samples(fixture: str, **values: float) -> a.Samples:
    text = Template((FIXTURES / fixture).read_text()).substitute(
        {k: repr(float(v)) for k, v in values.items()}
    )
    return parse(text)


def prefill(i: int, queue: float, bootstrap: float = 0.0) -> Leader:
    return Leader(
        f"prefill-{i}", samples("prefill-0.5.23.prom", queue=queue, bootstrap_queue=bootstrap)
    )


def decode(i: int, usage: float, prealloc: float = 0.0, transfer: float = 0.0) -> Leader:
    return Leader(
        f"decode-{i}",
        samples(
            "decode-0.5.23.prom", usage=usage, prealloc_queue=prealloc, transfer_queue=transfer
        ),
    )


def observe(
    role: str, desired: int, ready: list[Leader], lo: int = 1, hi: int = 10, **kw: object
) -> RoleObservation:
    return RoleObservation(role, desired, lo, hi, tuple(ready), **kw)  # type: ignore[arg-type]


# --- reading the fixtures ------------------------------------------------------------------------
def test_one_leaders_gauges_as_sglang_exposes_them() -> None:
    one = samples("prefill-0.5.23.prom", queue=6, bootstrap_queue=3)
    assert a.gauge(one, a.QUEUE, "sum") == 6.0
    assert a.gauge(one, a.BOOTSTRAP_QUEUE, "sum") == 3.0
    assert a.gauge(one, a.TOKEN_USAGE, "mean") == 0.04
    # the scraper keeps only what the planner reads: gen_throughput is not there
    assert not any(name == "sglang:gen_throughput" for name, _ in one)
    # priority scheduling: the total is priority=""; priorities 0 (5) and 5 (7) are its parts
    prio = samples("prefill-priority-0.5.23.prom", queue=12, bootstrap_queue=0)
    assert a.gauge(prio, a.QUEUE, "sum") == 12.0
    # DP attention: each DP rank its own queue (1 + 3 = 4) and KV pool ((0.5 + 0.9) / 2 = 0.7)
    dp = samples(
        "decode-dp2-0.5.23.prom",
        usage0=0.5, usage1=0.9, prealloc_queue0=1, prealloc_queue1=3,
        transfer_queue0=0, transfer_queue1=2,
    )  # fmt: skip
    assert a.gauge(dp, a.TOKEN_USAGE, "mean") == pytest.approx(0.7)
    assert a.gauge(dp, a.PREALLOC_QUEUE, "sum") == 4.0
    assert a.gauge(dp, a.TRANSFER_QUEUE, "sum") == 2.0
    # 0.5.10 names the bootstrap queue's gauge as it was before 0.5.12
    old = samples("prefill-0.5.10.prom", queue=1, bootstrap_queue=3)
    assert a.gauge(old, a.BOOTSTRAP_QUEUE, "sum") is None
    assert a.gauge(old, a.BOOTSTRAP_QUEUE_BEFORE_0_5_12, "sum") == 3.0


def test_quantile_as_promql_interpolates() -> None:
    # rank 0.5 * 10 = 5 falls in (0.1, 0.2] holding 10: 0.1 + 0.1 * 5 / 10
    assert a.quantile(0.5, {0.1: 0, 0.2: 10, math.inf: 10}) == pytest.approx(0.15)
    # rank 9 of 10 is past the last finite bound (2 counted below 1.0): that bound
    assert a.quantile(0.9, {1.0: 2, math.inf: 10}) == 1.0
    # first bucket: from 0; rank 0.25 * 4 = 1 of 4 in (0, 2]: 0.5
    assert a.quantile(0.25, {2.0: 4, math.inf: 4}) == pytest.approx(0.5)
    assert a.quantile(0.9, {1.0: 0, math.inf: 0}) is None
    assert a.quantile(0.9, {1.0: 3}) is None


# --- up, the step cap, the tolerance band -------------------------------------------------------
def test_prefill_queue_growth_scales_up_capped_by_the_step() -> None:
    # 12 per instance / 4 = 3; ceil(2 * 3) = 6, but at most 2 more: 4
    d = decide(POLICY, observe("prefill", 2, [prefill(0, 12), prefill(1, 12)]), None, now=0)
    assert (d.replicas, d.action, d.recommendation) == (4, "up", 6)
    assert d.reason == "up 2->4: prefill queue 12.0/instance > target 4.0 (step cap 2, asked 6)"
    assert d.metrics["queue"] == 12.0
    # (5 + 7) / 2 = 6 per instance: 1.5; ceil(2 * 1.5) = 3, within the cap
    d = decide(POLICY, observe("prefill", 2, [prefill(0, 5), prefill(1, 7)]), None, now=0)
    assert (d.replicas, d.action, d.reason) == (
        3,
        "up",
        "up 2->3: prefill queue 6.0/instance > target 4.0",
    )


def test_within_the_tolerance_band_nothing_moves() -> None:
    # 4.4 / 4 = 1.1 and 3.6 / 4 = 0.9: both within 10% of the target
    for queue in (4.4, 3.6):
        d = decide(
            POLICY, observe("prefill", 2, [prefill(0, queue), prefill(1, queue)]), None, now=0
        )
        assert (d.replicas, d.action, d.recommendation) == (2, "hold", 2), queue
        assert "within 10% of target 4.0" in d.reason
    # 4.5 / 4 = 1.125, outside: ceil(2 * 1.125) = 3
    d = decide(POLICY, observe("prefill", 2, [prefill(0, 4.5), prefill(1, 4.5)]), None, now=0)
    assert (d.replicas, d.action) == (3, "up")


def test_decode_scales_up_on_token_usage_and_on_the_prealloc_queue() -> None:
    # usage 0.91 / 0.7 = 1.3: ceil(2 * 1.3) = 3
    d = decide(POLICY, observe("decode", 2, [decode(0, 0.91), decode(1, 0.91)]), None, now=0)
    assert (d.replicas, d.reason) == (3, "up 2->3: decode token usage 0.91 > target 0.70")
    # usage 0.5 is low, but 3 requests per instance wait for KV memory: 3 / 2 = 1.5 -> 3
    d = decide(POLICY, observe("decode", 2, [decode(0, 0.5, 2), decode(1, 0.5, 4)]), None, now=0)
    assert (d.replicas, d.reason) == (3, "up 2->3: decode prealloc queue 3.0/instance > target 2.0")


def test_a_growing_transfer_queue_alone_never_scales_decode_up() -> None:
    state = None
    # usage 0.3 / 0.7: ceil(2 * 0.43) = 1; prealloc empty; the transfer queue grows 10 -> 200
    for t, transfer in enumerate((10, 50, 100, 200)):
        obs = observe("decode", 2, [decode(0, 0.3, 0, transfer), decode(1, 0.3, 0, transfer)])
        d = decide(POLICY, obs, state, now=15.0 * t)
        state = d.state
        assert (d.replicas, d.action, d.recommendation) == (2, "hold", 1)
        assert d.metrics["transfer_queue"] == transfer
        assert "transfer queue" in d.reason and "prefill/link symptom" in d.reason


# --- down: one step, after the window -----------------------------------------------------------
def low_decode(n: int) -> list[Leader]:
    # usage 0.2 / 0.7: ceil(3 * 0.29) = 1, below the 3 there are
    return [decode(i, 0.2) for i in range(n)]


def test_down_by_one_only_after_a_whole_window_below_target() -> None:
    state = None
    for t in range(0, 300, 15):  # 0 .. 285 s: below, but not for 300 s yet
        d = decide(POLICY, observe("decode", 3, low_decode(3)), state, now=float(t))
        state = d.state
        assert (d.replicas, d.action, d.recommendation) == (3, "hold", 1), t
    assert d.reason.endswith("for 285 s of 300 s")
    d = decide(POLICY, observe("decode", 3, low_decode(3)), state, now=300.0)
    assert (d.replicas, d.action) == (2, "down")
    assert d.reason == "down 3->2 after 300 s below target"
    # decode-2 drains: hold; once it is gone the window starts over at 2
    state = d.state
    d = decide(
        POLICY, observe("decode", 2, low_decode(2), draining=("decode-2",)), state, now=315.0
    )
    assert (d.replicas, d.reason) == (2, "hold: decode-2 draining")
    state = d.state
    for t in range(330, 630, 15):
        d = decide(POLICY, observe("decode", 2, low_decode(2)), d.state, now=float(t))
        assert d.action == "hold", t
    d = decide(POLICY, observe("decode", 2, low_decode(2)), d.state, now=630.0)
    assert (d.replicas, d.reason) == (1, "down 2->1 after 300 s below target")


def test_the_highest_recommendation_in_the_window_wins() -> None:
    state = None
    # below from 0; at 150 s usage 0.7 asks for 3 (the current count); below again after
    for t in range(0, 451, 15):
        usage = 0.7 if t == 150 else 0.2
        d = decide(
            POLICY, observe("decode", 3, [decode(i, usage) for i in range(3)]), state, now=float(t)
        )
        state = d.state
        # the 3 asked at 150 s stays in the window (t - 300, t] until t = 450
        assert d.action == ("down" if t == 450 else "hold"), t


def test_a_hold_a_gap_or_a_change_by_someone_else_starts_the_window_over() -> None:
    d = None
    for t in range(0, 200, 15):  # below target from 0 to 195 s
        d = decide(POLICY, observe("decode", 3, low_decode(3)), d and d.state, now=float(t))
    assert d is not None and d.action == "hold"
    # missing metrics at 200 s: hold; the run restarts at 215 s, so no down before 515 s
    missing = [*low_decode(2), Leader("decode-2", None)]
    d = decide(POLICY, observe("decode", 3, missing), d.state, now=200.0)
    assert d.reason == "hold: metrics missing from decode-2"
    d = decide(POLICY, observe("decode", 3, low_decode(3)), d.state, now=215.0)
    for t in range(230, 515, 15):
        d = decide(POLICY, observe("decode", 3, low_decode(3)), d.state, now=float(t))
        assert d.action == "hold", t
    gap_state = d.state
    d = decide(POLICY, observe("decode", 3, low_decode(3)), gap_state, now=515.0)
    assert d.action == "down"
    # the same history, but nobody looked for 46 s (> 3 intervals of 15 s): start over
    d = decide(POLICY, observe("decode", 3, low_decode(3)), gap_state, now=500.0 + 46.0)
    assert d.action == "hold" and d.reason.endswith("for 0 s of 300 s")
    # someone scaled the scaler to 4 (kubectl scale, an HPA): the run at 3 counts no more
    d = decide(POLICY, observe("decode", 4, low_decode(4)), gap_state, now=515.0)
    assert d.action == "hold" and d.reason.endswith("for 0 s of 300 s")


# --- holds ------------------------------------------------------------------------------------
def test_holds_while_instances_start_drain_are_missing_or_lack_metrics() -> None:
    busy = [prefill(0, 40), prefill(1, 40)]
    cases = [
        (observe("prefill", 3, busy, starting=("prefill-2",)), "hold: prefill-2 starting"),
        (observe("prefill", 2, busy, draining=("prefill-2",)), "hold: prefill-2 draining"),
        (observe("prefill", 3, busy), "hold: 2 prefill instances exist, 3 wanted"),
        (
            observe("prefill", 2, [], unready=("prefill-0", "prefill-1")),
            "hold: no Ready prefill instance",
        ),
        (
            observe("prefill", 2, [busy[0], Leader("prefill-1", None)]),
            "hold: metrics missing from prefill-1",
        ),
    ]
    for obs, reason in cases:
        d = decide(POLICY, obs, None, now=0)
        assert (d.replicas, d.action, d.reason) == (obs.desired, "hold", reason)
    # a gauge every release defines is absent (here decode's token usage): missing
    full = decode(0, 0.9).samples
    assert full is not None
    lacking = {k: v for k, v in full.items() if k[0] != a.TOKEN_USAGE}
    d = decide(POLICY, observe("decode", 1, [Leader("decode-0", lacking)]), None, now=0)
    assert d.reason == "hold: sglang:token_usage missing from decode-0"
    # a release's own name of a value counts: 0.5.10's bootstrap queue; 8 / 4 = 2 -> 2
    old = Leader("prefill-0", samples("prefill-0.5.10.prom", queue=8, bootstrap_queue=3))
    d = decide(POLICY, observe("prefill", 1, [old]), None, now=0)
    assert (d.replicas, d.action, d.metrics["bootstrap_queue"]) == (2, "up", 3.0)
    # a value only reported, not driving, is never missing: no bootstrap queue at all
    bare = {k: v for k, v in (old.samples or {}).items() if "prealloc" not in k[0]}
    d = decide(POLICY, observe("prefill", 1, [Leader("prefill-0", bare)]), None, now=0)
    assert (d.replicas, d.action) == (2, "up") and "bootstrap_queue" not in d.metrics
    # a failed instance is no capacity and no reason to hold: 1 Ready at 12 / 4 -> ceil(3)
    d = decide(POLICY, observe("prefill", 2, [prefill(0, 12)], unready=("prefill-1",)), None, now=0)
    assert (d.replicas, d.recommendation) == (3, 3)
    # the ratio bounds raised the workloads to 3 while the scaler says 2: no hold
    d = decide(
        POLICY, observe("prefill", 2, [prefill(i, 4) for i in range(3)], effective=3), None, now=0
    )
    assert d.action == "hold" and "within" in d.reason


# --- the bounds -------------------------------------------------------------------------------
def test_clamped_to_min_and_max_even_while_holding() -> None:
    d = decide(POLICY, observe("prefill", 1, [], lo=2, starting=("prefill-0",)), None, now=0)
    assert (d.replicas, d.action, d.reason) == (2, "up", "up 1->2: minReplicas 2")
    d = decide(POLICY, observe("prefill", 7, [], hi=5), None, now=0)
    assert (d.replicas, d.action, d.reason) == (5, "down", "down 7->5: maxReplicas 5")
    # asked for 12 / 4 * 4 = 12, step allows 6, max 5
    d = decide(POLICY, observe("prefill", 4, [prefill(i, 12) for i in range(4)], hi=5), None, now=0)
    assert (d.replicas, d.recommendation) == (5, 12)
    d = decide(POLICY, observe("prefill", 5, [prefill(i, 12) for i in range(5)], hi=5), None, now=0)
    assert (d.replicas, d.action) == (5, "hold") and "at maxReplicas 5" in d.reason
    state = None
    for t in range(0, 601, 15):
        d = decide(
            POLICY, observe("prefill", 2, [prefill(0, 0), prefill(1, 0)], lo=2), state, now=float(t)
        )
        state = d.state
        assert (d.replicas, d.action) == (2, "hold") and "at minReplicas 2" in d.reason


# --- latency targets ----------------------------------------------------------------------------
def test_a_ttft_target_scales_prefill_on_the_quantile_between_two_scrapes() -> None:
    policy = PlannerPolicy(ttft_target_seconds=2.0)
    t0 = [Leader(f"prefill-{i}", samples("prefill-ttft-0.5.23-t0.prom")) for i in range(2)]
    t1 = [Leader(f"prefill-{i}", samples("prefill-ttft-0.5.23-t1.prom")) for i in range(2)]
    d = decide(policy, observe("prefill", 2, t0), None, now=0)
    # the first scrape has nothing to subtract: the queue (1 / 4) alone asks ceil(0.5) = 1
    assert (d.action, d.recommendation) == ("hold", 1) and "ttft_seconds" not in d.metrics
    d = decide(policy, observe("prefill", 2, t1), d.state, now=15)
    # per leader in between: 10 in (0.2, 0.4], 20 in (1, 2], 10 in (2, 4]; both leaders: 80.
    # p90: rank 72; 60 at or below 2 s; 20 in (2, 4]: 2 + 2 * 12 / 20 = 3.2 s.
    # 3.2 / 2.0 = 1.6: ceil(2 * 1.6) = 4
    assert d.metrics["ttft_seconds"] == pytest.approx(3.2)
    assert (d.replicas, d.recommendation) == (4, 4)
    assert d.reason == "up 2->4: prefill TTFT p90 3.2 s > target 2 s"


def test_an_itl_target_scales_decode_and_a_restart_gives_no_latency() -> None:
    policy = PlannerPolicy(itl_target_seconds=0.05)
    t0 = [Leader(f"decode-{i}", samples("decode-itl-0.5.23-t0.prom")) for i in range(2)]
    t1 = [Leader(f"decode-{i}", samples("decode-itl-0.5.23-t1.prom")) for i in range(2)]
    first = decide(policy, observe("decode", 2, t0), None, now=0)
    d = decide(policy, observe("decode", 2, t1), first.state, now=15)
    # per leader: 100 in (0.004, 0.006], 100 in (0.04, 0.06]; p90 rank 180 of 200:
    # 0.04 + 0.02 * 80 / 100 = 0.056 s; 0.056 / 0.05 = 1.12: ceil(2 * 1.12) = 3
    assert d.metrics["itl_seconds"] == pytest.approx(0.056)
    assert (d.replicas, d.reason) == (3, "up 2->3: decode ITL p90 0.056 s > target 0.05 s")
    # decode-0 restarted (its counts fell back to t0's), decode-1 went on from t0 to t1: only
    # decode-1's 100 + 100 count, p90 0.056 s again; decode-0's fall must not cancel them
    d = decide(policy, observe("decode", 2, [t0[0], t0[1]]), first.state, now=0)
    d = decide(policy, observe("decode", 2, [t1[0], t0[1]]), d.state, now=15)
    d = decide(policy, observe("decode", 2, [t0[0], t1[1]]), d.state, now=30)
    assert d.metrics["itl_seconds"] == pytest.approx(0.056)
    # decode-1 restarted too, decode-0 served nothing since: no latency this time
    d = decide(policy, observe("decode", 2, t0), d.state, now=45)
    assert "itl_seconds" not in d.metrics


def test_names_read_are_sglangs() -> None:
    """Each name the planner reads is in a fixture made from the release it names (the SGLang
    tier checks them against every release's wheel)."""
    text = "".join(p.read_text() for p in FIXTURES.glob("*.prom"))
    for name, kind in a.METRICS_READ.items():
        assert f"# TYPE {name} {kind}\n" in text, name
    assert {n for names in a.SIGNAL_METRICS.values() for n in names} == a.METRICS_READ.keys()
