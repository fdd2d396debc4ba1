"""The operator benchmark (``bench/bench_operator.py``) runs end to end at tiny sizes.

It runs on the e2e suite's cluster instead of the bench's own 40-node control plane:
two CRs one after the other; then one and two CRs at once, each after a bare client's
same applies; a two-second idle window with a one-second resync. The figures mean nothing
at these sizes; what is checked is that every step runs (a refactor of the operator's
local runner once broke the benchmark at its last line, after ten minutes of measuring),
that every row follows the row contract, and that the operator logged no traceback.
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
    assert all(isinstance(r["value"], int | float) for r in rows), rows
    # 15 children each: layout ConfigMap, 2 headless Services, 2 StatefulSets, 2 budgets,
    # the router's ServiceAccount, Role, RoleBinding, Service, Deployment and budget (issue
    # 36: two replicas), and both roles' PDRoleScalers
    assert any(n.startswith("2 CRs applied at once: operator until all 30 children exist: "
                            "median of 1") for n in names), names  # fmt: skip
    assert any(n.startswith("2 CRs: bare client, the same 30 server-side applies")
               for n in names), names  # fmt: skip
    goals = [(r["name"].split(" (")[0].split(": median of")[0].split(", worst of")[0], r["unit"])
             for r in rows if r["goal"]]  # fmt: skip
    assert goals == [
        ("one CR, apply request to every child created, p95 of 2", "s"),
        ("a scaler's spec.replicas + 1 to the new instance's StatefulSet, p95 of 2", "s"),
        ("operator / bare client, 1 CRs, until all children exist", "x"),
        ("operator / bare client, 2 CRs, until all children exist", "x"),
        ("per-CR time at 2 CRs / at 1 CRs, operator until all children exist", "x"),
        ("operator API writes in 2 s idle, 1 Ready CRs, resync every 1 s", "writes"),
        ("operator RSS at 1 Ready CRs", "MiB"),
        ("operator RSS slope per Ready CR, least squares over 0/1/2 CRs", "MiB/CR"),
    ]
    bare = [r for r in rows if r["name"].startswith("2 CRs: bare client")]
    assert bare[0]["value"] > 0
    log = (tmp_path / "operator.log").read_text()
    assert "Traceback" not in log, log[-4000:]
