"""The unrelated-objects benchmark (``bench/bench_unrelated.py``) runs end to end at tiny sizes.

It starts its own control plane (as ``make bench`` does), so a refactor of the toolbox or
the operator that breaks it fails here; the figures mean nothing at these sizes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from ascend_pd_dev.controlplane import versions  # noqa: E402
from bench import bench_unrelated  # noqa: E402
from bench.__main__ import check_rows  # noqa: E402

pytestmark = [pytest.mark.local, pytest.mark.simulated, pytest.mark.timeout(900)]


def test_unrelated_bench_smoke(cluster: Any) -> None:
    if not versions.control_plane().binaries_ready():
        pytest.skip("the control-plane binaries are not built here")
    rows = bench_unrelated.run(bench_unrelated.SMOKE)
    check_rows(rows)
    assert len(rows) == 9, [r["name"] for r in rows]
    assert all(isinstance(r["value"], int | float) for r in rows), rows
    assert [r["unit"] for r in rows if r["goal"]] == ["x", "x"]
