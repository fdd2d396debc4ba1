"""The operator benchmark (``bench/bench_operator.py``) runs end to end at tiny sizes.

It runs on the e2e suite's cluster instead of the bench's own 40-node control plane:
two CRs one after the other, two at once, a two-second idle window with a one-second
resync. The figures mean nothing at these sizes; what is checked is that every step
runs (a refactor of the operator's local runner once broke the benchmark at its last
line, after ten minutes of measuring), that every row follows the row contract, and that
the operator logged no traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import bench_operator  # noqa: E402
from bench.__main__ import check_rows  # noqa: E402

# the fault proxy forwards the dev cluster's admin credentials; Ready needs kubelet-sim
pytestmark = [pytest.mark.local, pytest.mark.simulated, pytest.mark.timeout(900)]


def test_operator_bench_smoke(cluster: Any, tmp_path: Path) -> None:
    rows = bench_operator.run(bench_operator.SMOKE, layout=cluster.layout, workdir=tmp_path)
    check_rows(rows)
    names = [r["name"] for r in rows]
    assert len(rows) == 10, names
    assert all(isinstance(r["value"], int | float) for r in rows), rows
    # 12 children each: layout ConfigMap, 2 headless Services, 2 StatefulSets, 2 budgets,
    # the router's ServiceAccount, Role, RoleBinding, Service and Deployment
    assert any(n.startswith("2 CRs applied at once: until all 24 children exist: median of 1")
               for n in names), names  # fmt: skip
    assert [r["name"].split(": median of")[0].split(", worst of")[0]
            for r in rows if r["goal"]] == [
        "one CR, apply request to every child created, p95 of 2",
        "2 CRs applied at once: until all 24 children exist",
        "operator API writes in 2 s idle, 2 Ready CRs, resync every 1 s",
        "operator RSS at 2 Ready CRs",
    ]  # fmt: skip
    log = (tmp_path / "operator.log").read_text()
    assert "Traceback" not in log, log[-4000:]
