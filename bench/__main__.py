"""``make bench``: run every benchmark module, write bench/results.json, print a table.

Each module exposes ``run(sizes) -> list[row]`` with rows ``{name, value, unit, goal, met}``
and two sizes: ``FULL`` (what ``make bench`` measures) and ``SMOKE`` (``--smoke``: tiny, so
the test suite can run every code path). Only a row with a goal carries a verdict: ``met``
is a bool exactly when ``goal`` is set, and None otherwise.

A module that cannot be imported, raises, or returns a malformed row is a failed module:
it gets an error row, the others still run, and the exit status is 1 with the failed
modules named, so a broken benchmark can never look like a finished one.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

MODULES = [
    "bench.bench_layout",
    "bench.bench_connector",
    "bench.bench_operator",
    "bench.bench_peer",
    "bench.bench_unrelated",
]
BENCH_DIR = Path(__file__).resolve().parent


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--module",
        action="append",
        dest="modules",
        metavar="NAME",
        help=f"run only this module (repeatable; default: {', '.join(MODULES)})",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="each module's tiny SMOKE sizes (no real figures)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=BENCH_DIR,
        help="directory for results.json and results.md (default: bench/)",
    )
    return parser.parse_args(argv)


def check_rows(rows: Any) -> None:
    """Raise ``ValueError`` naming the first row that breaks the row contract."""
    if not isinstance(rows, list):
        raise ValueError(f"run() returned {type(rows).__name__}; expected a list of rows")
    for row in rows:
        missing = {"name", "value", "unit", "goal", "met"} - set(row)
        if missing:
            raise ValueError(f"row {row.get('name')!r} lacks {sorted(missing)}")
        if row["goal"] and not isinstance(row["met"], bool):
            raise ValueError(f"row {row['name']!r} has goal {row['goal']!r} but no verdict")
        if not row["goal"] and row["met"] is not None:
            raise ValueError(
                f"row {row['name']!r} has no goal but a verdict ({row['met']!r}); "
                "a row without a goal must have met None"
            )


def run_module(name: str, smoke: bool) -> list[dict[str, Any]]:
    module = importlib.import_module(name)
    rows = module.run(module.SMOKE) if smoke else module.run()
    check_rows(rows)
    return list(rows)


def measured_commit() -> str:
    """The commit the benchmark measured, ``-dirty`` when the tree had changes."""
    git = ["git", "-C", str(BENCH_DIR.parent)]
    head = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if head.returncode != 0:
        return "unknown (not a git checkout)"
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    return head.stdout.strip() + ("-dirty" if dirty else "")


def load_average() -> str:
    """The machine's 1/5/15-minute load average: how shared the cores were."""
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def _exit_on_sigterm(signum: int, _frame: Any) -> None:
    # SystemExit unwinds the modules' ``finally`` blocks: a benchmark stopped by kill or a
    # timeout takes its control plane down with it (the default action left a 40-node
    # cluster and an operator running).
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    load_at_start = load_average()
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    for name in args.modules or MODULES:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        try:
            rows.extend(run_module(name, args.smoke))
        except Exception as exc:  # recorded, the other modules still run; exit status 1
            traceback.print_exc()
            failed.append(name)
            rows.append(
                {
                    "name": f"{name} (failed: {type(exc).__name__}: {exc})",
                    "value": None,
                    "unit": "",
                    "goal": "runs",
                    "met": False,
                    "error": f"{type(exc).__name__}: {exc}",
                }
            )
    args.out.mkdir(parents=True, exist_ok=True)
    results, results_md = args.out / "results.json", args.out / "results.md"
    results.write_text(json.dumps(rows, indent=2) + "\n")
    table = markdown_table(rows)
    results_md.write_text(
        "# Latest `make bench`\n\nWritten by `make bench` itself (never by hand), at commit "
        f"{measured_commit()}, on {os.cpu_count()} CPUs, load average (1/5/15 min) "
        f"{load_at_start} at the start and {load_average()} at the end. One run on the "
        "machine that ran it; compare ratios (unit x, measured side by side in the same run), "
        f"not absolute times.\n\n{table}\n"
    )
    print(table)
    print(f"\nwritten to {results} and {results_md}", file=sys.stderr)
    if failed:
        print(
            f"error: {len(failed)} benchmark module(s) failed: {', '.join(failed)}",
            file=sys.stderr,
        )
        return 1
    return 0


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| figure | value | goal | met |", "|---|---:|---|:---:|"]
    for r in rows:
        value = "—" if r["value"] is None else f"{r['value']} {r['unit']}".strip()
        met = "" if r["met"] is None else "yes" if r["met"] else "**no**"
        lines.append(f"| {r['name']} | {value} | {r['goal']} | {met} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
