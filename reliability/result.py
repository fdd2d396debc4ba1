"""One scenario's outcome and the table ``make reliability`` prints from them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

COLUMNS = ("scenario", "verdict", "runs", "converged", "worst_seconds", "lost", "duplicated")


@dataclass
class ScenarioResult:
    """``runs`` checks, ``converged`` of them converged; ``lost``/``duplicated`` objects."""

    scenario: str
    runs: int = 0
    converged: int = 0
    worst_seconds: float = 0.0
    lost: int = 0
    duplicated: int = 0
    #: what went wrong (empty when everything converged), for the test's failure message
    problems: list[str] = field(default_factory=list)
    #: scenario-specific measurements (fault counts, hand-over time, ...)
    details: dict[str, Any] = field(default_factory=dict)

    def record(self, ok: bool, seconds: float, problem: str = "") -> None:
        self.runs += 1
        self.converged += int(ok)
        self.worst_seconds = max(self.worst_seconds, round(seconds, 2))
        if not ok and problem:
            self.problems.append(problem)

    @property
    def ok(self) -> bool:
        return (
            self.runs > 0
            and self.converged == self.runs
            and self.lost == 0
            and self.duplicated == 0
            and not self.problems
        )

    def await_audit(self, audit: Callable[[], Any], what: str, since: float, bound: float) -> bool:
        """Wait up to ``bound`` seconds for ``audit()`` (an ``audit.Audit``) to be ok and
        record it as one run, timed from ``since``."""
        deadline = time.monotonic() + bound
        while not (found := audit()).ok and time.monotonic() < deadline:
            time.sleep(0.5)
        self.record(found.ok, time.monotonic() - since, f"{what}: {found}")
        return bool(found.ok)

    def final_audit(self, found: Any) -> None:
        """The last check of a scenario: an ``audit.Audit`` of its namespace, its missing
        and extra children counted as lost and duplicated."""
        self.lost += len(found.missing)
        self.duplicated += len(found.extra)
        self.record(found.ok, 0.0, f"final audit: {found}")

    def judge_process(self, log_text: str, alive: bool) -> None:
        """An operator that had to live through the scenario: alive, no thread died."""
        self.details["threads_died_in_log"] = log_text.count("Exception in thread")
        self.details["operator_alive"] = alive
        if "Exception in thread" in log_text:
            self.problems.append("a thread died (see 'Exception in thread' in the log)")
        if not alive:
            self.problems.append("the operator process exited")

    @property
    def verdict(self) -> str:
        """What the row says first: a scenario with any problem (the operator exited, a
        probe failed while the control plane was up) reads FAILED, whatever converged."""
        return "ok" if self.ok else "FAILED"

    def row(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in COLUMNS}


def table(results: list[ScenarioResult]) -> str:
    rows = [[str(r.row()[c]) for c in COLUMNS] for r in results]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def write_json(results: list[ScenarioResult], target: Path) -> None:
    target.write_text(json.dumps([r.row() for r in results], indent=2) + "\n")


def full_report(results: list[ScenarioResult]) -> list[dict[str, Any]]:
    return [asdict(r) for r in results]
