"""The unrelated-objects benchmark's own arithmetic: CPU seconds from /proc and its rows."""

from __future__ import annotations

import os
import time

from bench.bench_unrelated import GOAL_RATIO, cpu_seconds, rows_from


def test_cpu_seconds_of_this_process_agree_with_os_times() -> None:
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:  # burn some CPU so the figure is not ~0
        pass
    times = os.times()
    measured = cpu_seconds(os.getpid())
    # /proc counts in clock ticks (1/100 s); os.times() in the same units, per thread summed
    assert abs(measured - (times.user + times.system)) < 0.05
    assert measured >= 0.3


def test_rows_report_medians_min_max_and_a_ratio_against_the_goal() -> None:
    without = [(2.0, 0.5, 60.0), (2.2, 0.6, 61.0), (2.1, 0.4, 59.0)]
    within = [(2.2, 0.7, 62.0), (2.3, 0.9, 63.0), (2.25, 0.8, 61.0)]
    cpu = [r for r in rows_from(without, within) if r["unit"] == "CPU s"]
    assert cpu[0]["value"] == 2.1 and cpu[0]["min"] == 2.0 and cpu[0]["max"] == 2.2
    assert "median of 3 (min 2.00, max 2.20)" in cpu[0]["name"]
    ratios = [r for r in rows_from(without, within) if r["unit"] == "x"]
    assert [r["value"] for r in ratios] == [round(2.25 / 2.1, 3), 1.6, round(62 / 60, 3)]
    assert ratios[0]["met"] and ratios[0]["goal"] == f"<= {GOAL_RATIO:.2f}"
    assert ratios[1]["goal"] == ""  # the window alone carries no goal
    assert len(rows_from(without, within)) == 9  # 3 figures x (without, with, ratio)

    slower = [(3.0, 1.5, 60.0)] * 3
    verdict = next(r for r in rows_from(without, slower) if r["unit"] == "x")
    assert verdict["value"] == round(3.0 / 2.1, 3) and not verdict["met"]
