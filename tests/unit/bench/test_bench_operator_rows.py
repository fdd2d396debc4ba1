"""The operator benchmark's table from hand-made runs: medians with min and max, verdicts
only where there is a goal, and the idle writes judged by the worst run."""

from __future__ import annotations

from bench.__main__ import check_rows
from bench.bench_operator import FULL, Figures, rows_from


def figures(scale_children: float, rss: float, writes: dict[str, int] | None = None) -> Figures:
    return Figures(
        one_children=[0.1, 0.2, 0.3, 0.9],
        one_ready=[0.5, 0.6, 0.7, 2.0],
        scale_children=scale_children,
        scale_ready=40.0,
        children=1200,
        writes=writes or {},
        requests=1000,
        rss_0=60.0,
        rss_scale=rss,
    )


def by_start(rows: list[dict], start: str) -> dict:
    (found,) = [r for r in rows if r["name"].startswith(start)]
    return found


def test_each_figure_is_the_median_of_the_runs_with_min_and_max():
    rows = rows_from([figures(12.0, 95.0), figures(8.0, 99.0), figures(9.5, 120.0)], FULL)
    check_rows(rows)
    scale = by_start(rows, "100 CRs applied at once: until all 1200 children exist")
    assert (scale["value"], scale["min"], scale["max"], scale["met"]) == (9.5, 8.0, 12.0, True)
    assert scale["name"].endswith("median of 3 (min 8.00, max 12.00)")
    rss = by_start(rows, "operator RSS at 100 Ready CRs")
    assert (rss["value"], rss["goal"], rss["met"]) == (99.0, "< 100 MiB", True)
    p95 = by_start(rows, "one CR, apply request to every child created, p95 of 20")
    assert (p95["value"], p95["met"]) == (0.9, True)  # nearest rank of 4 samples
    for r in rows:
        assert (r["met"] is None) == (not r["goal"]), r


def test_a_missed_median_says_no_and_one_noisy_run_writes_fail_the_idle_row():
    rows = rows_from(
        [figures(11.0, 101.0), figures(10.5, 130.0), figures(9.0, 90.0, {"PATCH": 2})], FULL
    )
    assert by_start(rows, "100 CRs applied at once: until all 1200")["met"] is False
    assert by_start(rows, "operator RSS at 100 Ready CRs")["met"] is False
    idle = by_start(rows, "operator API writes")
    assert (idle["value"], idle["met"]) == (2, False)
    assert "all runs: PATCH 2" in idle["name"]
