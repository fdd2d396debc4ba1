"""``make bench``: run every benchmark module, write bench/results.json, print a table.

Each module exposes ``run() -> list[row]`` with rows ``{name, value, unit, goal, met}``.
A module whose prerequisites are missing (no cluster, no SGLang cache) reports that as a
row with ``met: false`` instead of hiding it.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from pathlib import Path
from typing import Any

MODULES = [
    "bench.bench_layout",
    "bench.bench_connector",
    "bench.bench_operator",
    "bench.bench_unrelated",
]
RESULTS = Path(__file__).resolve().parent / "results.json"
#: The latest table, committed so the README can link it.
RESULTS_MD = Path(__file__).resolve().parent / "results.md"


def main() -> int:
    rows: list[dict[str, Any]] = []
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        print(f"running {name} ...", file=sys.stderr, flush=True)
        try:
            rows.extend(module.run())
        except Exception as exc:  # a failed benchmark is a result, not a crash
            traceback.print_exc()
            rows.append(
                {
                    "name": name,
                    "value": None,
                    "unit": "",
                    "goal": "runs",
                    "met": False,
                    "error": str(exc),
                }
            )
    RESULTS.write_text(json.dumps(rows, indent=2) + "\n")
    table = markdown_table(rows)
    RESULTS_MD.write_text(
        "# Latest `make bench`\n\nOne run on the machine that ran it; compare ratios, not "
        f"absolute times.\n\n{table}\n"
    )
    print(table)
    print(f"\nwritten to {RESULTS} and {RESULTS_MD}", file=sys.stderr)
    return 0


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| figure | value | goal | met |", "|---|---:|---|:---:|"]
    for r in rows:
        value = "—" if r["value"] is None else f"{r['value']} {r['unit']}".strip()
        met = "yes" if r["met"] else "**no**"
        lines.append(f"| {r['name']} | {value} | {r['goal']} | {met} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
