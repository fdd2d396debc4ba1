"""The operator benchmark's table from hand-made runs: medians with min and max, ratios
taken within each run, verdicts only where there is a goal, the idle writes judged by the
worst run, and the RSS slope a least-squares line."""

from __future__ import annotations

import pytest

from bench.__main__ import check_rows
from bench.bench_operator import FULL, Cpu, Figures, Scale, cpu_seconds, rows_from, slope


def figures(
    op_100: float,
    rss_100: float,
    writes: dict[str, int] | None = None,
    op_300: float = 30.0,
    scaler_worst: float = 1.5,
) -> Figures:
    return Figures(
        one_children=[0.1, 0.2, 0.3, 0.9],
        one_ready=[0.5, 0.6, 0.7, 2.0],
        scales=[
            Scale(10, children=1.2, ready=5.0, bare=1.0, rss=70.0),
            Scale(
                100,
                children=op_100,
                ready=40.0,
                bare=8.0,
                rss=rss_100,
                requests=1530,
                cpu=Cpu(server=15.0, operator=2.5),
                bare_server_cpu=10.0,
            ),
            Scale(300, children=op_300, ready=120.0, bare=25.0, rss=rss_100 + 20.0),
        ],
        children_per_cr=12,
        writes=writes or {},
        requests=1000,
        rss_0=60.0,
        scaler_steps=[0.3, 0.4, 0.5, scaler_worst],
    )


def by_start(rows: list[dict], start: str) -> dict:
    (found,) = [r for r in rows if r["name"].startswith(start)]
    return found


def fields(row: dict, names: str) -> tuple:
    """The row's values of the space-separated ``names``, in that order."""
    return tuple(row[name] for name in names.split())


def test_each_ratio_is_taken_within_a_run_then_the_median_of_the_runs():
    rows = rows_from([figures(12.0, 95.0), figures(8.0, 99.0), figures(10.0, 120.0)], FULL)
    check_rows(rows)
    op = by_start(rows, "100 CRs applied at once: operator until all 1200 children exist")
    assert fields(op, "value min max goal met") == (10.0, 8.0, 12.0, "", None)
    ratio = by_start(rows, "operator / bare client, 100 CRs, until all children exist")
    # 12/8, 8/8, 10/8 per run: the median run's own ratio
    assert fields(ratio, "value unit goal met") == (1.25, "x", "<= 1.5", True)
    assert "medians 10.00 s / 8.00 s" in ratio["name"]
    assert by_start(rows, "operator / bare client, 10 CRs")["value"] == 1.2
    requests = by_start(rows, "100 CRs: operator API requests per CR until all children exist")
    assert fields(requests, "value goal") == (15.3, "")
    assert "(the bare client: 12)" in requests["name"]
    # per CR: 30/300 over 10/100 (median run) = 1.0
    growth = by_start(rows, "per-CR time at 300 CRs / at 100 CRs, operator")
    assert fields(growth, "value unit met") == (1.0, "x", True)
    bare_growth = by_start(rows, "per-CR time at 300 CRs / at 100 CRs, bare client")
    assert fields(bare_growth, "value goal met") == (1.04, "", None)
    rss = by_start(rows, "operator RSS at 100 Ready CRs")
    assert fields(rss, "value goal met") == (99.0, "< 100 MiB", True)
    assert by_start(rows, "operator RSS at 300 Ready CRs")["goal"] == ""
    p95 = by_start(rows, "one CR, apply request to every child created, p95 of 20")
    assert fields(p95, "value met") == (0.9, True)  # nearest rank of 4 samples
    for r in rows:
        assert (r["met"] is None) == (not r["goal"]), r
        if r["goal"] and r["name"].split()[0] in ("operator", "per-CR"):
            assert r["unit"] in ("x", "MiB/CR", "MiB", "writes"), r


def test_missed_ratios_say_no_and_one_noisy_run_writes_fail_the_idle_row():
    rows = rows_from(
        [
            figures(14.0, 101.0, op_300=60.0),
            figures(12.5, 130.0, op_300=60.0),
            figures(9.0, 90.0, {"PATCH": 2}, op_300=60.0),
        ],
        FULL,
    )
    assert by_start(rows, "operator / bare client, 100 CRs")["met"] is False  # 12.5 / 8
    assert by_start(rows, "per-CR time at 300 CRs / at 100 CRs, operator")["met"] is False
    assert by_start(rows, "operator RSS at 100 Ready CRs")["met"] is False
    idle = by_start(rows, "operator API writes")
    assert fields(idle, "value met") == (2, False)
    assert "all runs: PATCH 2" in idle["name"]


def test_the_rss_slope_is_the_least_squares_line_through_rest_and_every_scale():
    # 60 at rest, 70/95/115 at 10/100/300: by hand: Sxy 9850 over Sxx 58075 = 0.1696 MiB per CR
    assert slope([0, 10, 100, 300], [60.0, 70.0, 95.0, 115.0]) == pytest.approx(0.16961, abs=1e-5)
    run = figures(10.0, 95.0)
    assert run.rss_slope() == pytest.approx(0.16961, abs=1e-5)
    rows = rows_from([run], FULL)
    fitted = by_start(rows, "operator RSS slope per Ready CR, least squares over 0/10/100/300")
    assert fields(fitted, "value unit goal met") == (0.17, "MiB/CR", "<= 0.3 MiB/CR", True)
    steep = figures(10.0, 95.0)
    steep.scales[2] = Scale(300, children=30.0, ready=120.0, bare=25.0, rss=200.0)
    assert rows_from([steep], FULL)[-1]["met"] is False


def test_the_scaler_row_is_the_median_of_each_run_s_p95_against_two_seconds() -> None:
    rows = rows_from([figures(10.0, 95.0), figures(10.0, 95.0, scaler_worst=3.0),
                      figures(10.0, 95.0, scaler_worst=2.5)], FULL)  # fmt: skip
    check_rows(rows)
    row = by_start(rows, "a scaler's spec.replicas + 1 to the new instance's StatefulSet, p95")
    # p95 of [0.3, 0.4, 0.5, w] is w (nearest rank): runs 1.5, 3.0, 2.5; median 2.5
    assert fields(row, "value goal met") == (2.5, "< 2 s", False)


def test_the_api_servers_work_is_a_ratio_within_each_run_and_no_verdict():
    rows = rows_from([figures(12.0, 95.0), figures(8.0, 99.0), figures(10.0, 120.0)], FULL)
    server = by_start(
        rows,
        "kube-apiserver CPU until all children exist, operator's run / bare client's run, 100 CRs",
    )
    assert fields(server, "value unit goal met") == (1.5, "x", "", None)
    assert "medians 15.0 s / 10.0 s" in server["name"]
    operator = by_start(rows, "operator process CPU per CR until all children exist, 100 CRs")
    assert fields(operator, "value unit goal met") == (25.0, "ms", "", None)
    # 10 CRs carries no CPU figures in these runs: the row says so rather than a ratio of 0
    unmeasured = by_start(
        rows,
        "kube-apiserver CPU until all children exist, operator's run / bare client's run, 10 CRs",
    )
    assert fields(unmeasured, "value met") == (None, None)


def test_cpu_seconds_reads_this_process_and_a_gone_one_is_zero():
    import os
    import time

    before = cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    assert cpu_seconds(os.getpid()) - before >= 0.1
    assert cpu_seconds(2**22 + 1) == 0.0  # above pid_max's default: no such process
