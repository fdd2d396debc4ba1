"""Every benchmark module runs at tiny sizes, as ``make bench`` runs it (``python -m bench``).

A refactor that breaks a benchmark fails here instead of on the next ``make bench``; a
failing module makes ``python -m bench`` exit non-zero naming it; rows follow the row
contract (only a row with a goal has a verdict). The operator module's smoke run needs a
control plane and lives with the e2e suite (``tests/e2e/test_bench_operator_smoke.py``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.__main__ import check_rows, markdown_table  # noqa: E402


def make_bench(
    tmp_path: Path, *args: str, path: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m bench`` from the repository, as ``make bench`` runs it, writing to tmp."""
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(path), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "bench", "--out", str(tmp_path / "out"), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=1500,
    )


def results(tmp_path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((tmp_path / "out" / "results.json").read_text())
    return rows


def assert_honest(rows: list[dict[str, Any]]) -> None:
    check_rows(rows)
    for row in rows:
        assert row["value"] is not None, row
        cell = markdown_table([row]).splitlines()[-1].rsplit("|", 2)[-2].strip()
        assert cell == ("" if not row["goal"] else "yes" if row["met"] else "**no**"), row


def test_layout_bench_smoke(tmp_path: Path) -> None:
    done = make_bench(tmp_path, "--smoke", "--module", "bench.bench_layout")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = results(tmp_path)
    assert len(rows) == 8
    assert_honest(rows)
    assert (tmp_path / "out" / "results.md").read_text().count("\n| transfer plan") == 8
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    header = (tmp_path / "out" / "results.md").read_text()
    assert f"at commit {head}" in header
    # the machine's share: its cores and how loaded they were, a/b/c for 1/5/15 minutes
    assert re.search(rf"on {os.cpu_count()} CPUs, load average \(1/5/15 min\) "
                     r"[\d.]+/[\d.]+/[\d.]+ at the start and [\d.]+/[\d.]+/[\d.]+ at the end",
                     header), header[:400]  # fmt: skip
    # shares of the wire are absolute times: shown without a verdict
    assert [r["unit"] for r in rows if r["goal"]] == ["x", "x"]


@pytest.mark.sglang
@pytest.mark.timeout(1800)
def test_connector_bench_smoke(tmp_path: Path) -> None:
    done = make_bench(tmp_path, "--smoke", "--module", "bench.bench_connector")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = results(tmp_path)
    # 2 models × (fully fragmented: 10 rows, realistic: 9) + 5 engine representations
    assert len(rows) == 2 * 10 + 2 * 9 + 5
    assert_honest(rows)
    # shares of the wire are absolute times: no goal, no verdict, never a pass by construction
    shares = [r for r in rows if "share of KV wire time" in r["name"]]
    assert len(shares) == 10 and all(r["goal"] == "" and r["met"] is None for r in shares)
    # the goals are ratios measured side by side: the plan against upstream (fully
    # fragmented), the whole call against the binding's conversion (every case)
    goals = [(r["name"].split(",")[0], r["unit"], r["goal"]) for r in rows if r["goal"]]
    vs_binding = (
        "whole patched send_kvcache / the binding's own conversion of the same descriptors "
        "(one call of prebuilt lists)"
    )
    assert sorted(goals) == sorted(
        [("layout-core plan (guard + mapping + vectorized descriptors) vs upstream send_kvcache",
          "x", ">= 20x")] * 2 + [(vs_binding, "x", "<= 1.5")] * 4
    )  # fmt: skip
    ratios = [r for r in rows if r["name"].startswith(vs_binding)]
    assert {("fully fragmented" in r["name"], "3 groups" in r["name"]) for r in ratios} == {
        (True, False), (True, True), (False, False), (False, True)
    }  # fmt: skip
    assert all(r["value"] > 0 and "medians" in r["name"] for r in ratios)
    fresh = [r for r in rows if r["name"].startswith("fresh engine lists alone")]
    assert len(fresh) == 4 and all(r["unit"] == "x" and r["met"] is None for r in fresh)
    batches = [r for r in rows if r["name"].startswith("fresh engine batches alone")]
    assert len(batches) == 4 and all(r["unit"] == "x" and r["met"] is None for r in batches)
    # the whole call says how many engine calls carried its descriptors
    assert all(" engine calls; " in r["name"] for r in ratios)
    conversions = [r for r in rows if r["name"].startswith("engine argument conversion from")]
    assert len(conversions) == 5 and all(r["value"] > 0 for r in conversions)


FAILING = """
def run(sizes=None):
    raise AttributeError("'Bench' object has no attribute 'log'")

SMOKE = None
"""


def test_a_failing_module_fails_make_bench_naming_it(tmp_path: Path) -> None:
    (tmp_path / "failing_bench.py").write_text(FAILING)
    done = make_bench(
        tmp_path,
        "--smoke",
        "--module", "failing_bench",
        "--module", "bench.bench_layout",
        "--module", "bench.no_such_module",
        path=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    assert "error: 2 benchmark module(s) failed: failing_bench, bench.no_such_module" in done.stderr
    rows = results(tmp_path)
    failed = [r for r in rows if r.get("error")]
    assert [r["error"] for r in failed] == [
        "AttributeError: 'Bench' object has no attribute 'log'",
        "ModuleNotFoundError: No module named 'bench.no_such_module'",
    ]
    assert all(r["goal"] == "runs" and r["met"] is False for r in failed)
    assert len(rows) == 8 + 2  # the module between them still ran
    table = (tmp_path / "out" / "results.md").read_text()
    assert "| failing_bench (failed: AttributeError: 'Bench' object has no attribute 'log') |" in (
        table
    )


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ({"goal": "", "met": True}, "has no goal but a verdict (True)"),
        ({"goal": "< 1 s", "met": None}, "has goal '< 1 s' but no verdict"),
    ],
)
def test_a_verdict_needs_a_goal_and_a_goal_needs_a_verdict(
    row: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(needle)):
        check_rows([{"name": "figure", "value": 1.0, "unit": "s", **row}])
