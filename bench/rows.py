"""Table rows the benchmark modules share: the row contract and repeated-run summaries.

A row is ``{name, value, unit, goal, met}``; only a row with a goal carries a verdict
(``bench/__main__.check_rows``). A figure measured over several runs is their median, with
min and max beside it in the name and as ``min``/``max`` keys.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

Row = dict[str, Any]


def row(name: str, value: float | None, unit: str, goal: str = "", met: bool | None = None) -> Row:
    """A table row; only a row with a goal carries a verdict."""
    return {"name": name, "value": value, "unit": unit, "goal": goal, "met": met}


def summary(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max) of one figure's runs."""
    return statistics.median(values), min(values), max(values)


def median_row(
    figure: str,
    values: Sequence[float],
    unit: str,
    digits: int,
    goal: str = "",
    passes: Callable[[float], bool] | None = None,
) -> Row:
    """``figure`` over its runs: the median (judged by ``passes`` when there is a goal),
    min and max."""
    med, lo, hi = summary(values)
    name = f"{figure}: median of {len(values)} (min {lo:.{digits}f}, max {hi:.{digits}f})"
    met = passes(med) if goal and passes is not None else None
    return {**row(name, round(med, digits), unit, goal, met),
            "min": round(lo, digits), "max": round(hi, digits)}  # fmt: skip


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0..1) of ``values``."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]
