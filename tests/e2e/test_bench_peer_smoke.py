"""The peer benchmark (``bench/bench_peer.py``) runs end to end at a tiny size.

On the e2e suite's cluster: the LWS manager (built by ``build_lws``; the tier's build step
builds it, see ``ascend_pd_dev.cli.tiers``) takes two deployments' LeaderWorkerSets until
all their children exist and an idle window of two seconds; then the bare client and the
operator take two PDDeployments. The figures mean nothing at this size; what is checked is
that every step runs, the rows follow the row contract, the peer's children are the ones
LWS makes (a leader StatefulSet, a headless Service and a ControllerRevision per LWS), and
neither controller logged a traceback or a panic.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from ascend_pd_dev.controlplane import build_lws

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import bench_peer  # noqa: E402
from bench.__main__ import check_rows  # noqa: E402

pytestmark = [pytest.mark.local, pytest.mark.simulated, pytest.mark.peer, pytest.mark.timeout(900)]


def test_peer_bench_smoke(cluster: Any, tmp_path: Path) -> None:
    if not build_lws.binaries_ready():
        pytest.skip(f"the LWS manager is not built ({build_lws.cache_dir()}): "
                    "python -m ascend_pd_dev.controlplane.build_lws")  # fmt: skip
    rows = bench_peer.run(bench_peer.SMOKE, layout=cluster.layout, workdir=tmp_path)
    check_rows(rows)
    names = [r["name"] for r in rows]
    # 2 deployments: 4 LWS (one per instance) of 3 children; ours 15 children each
    assert any(n.startswith("2 deployments: operator / LWS peer, until every child exists "
                            "(30 / 12 children)") for n in names), names  # fmt: skip
    goals = [r["name"].split(" (")[0] for r in rows if r["goal"]]
    assert goals == [
        "2 deployments: operator / LWS peer, until every child exists",
        "2 deployments: kube-apiserver CPU per child, operator / LWS peer",
        "2 Ready deployments at rest, 2 s: API requests per minute per deployment, operator",
    ], goals
    log = (tmp_path / "operator.log").read_text()
    assert "Traceback" not in log, log[-4000:]
    # without its webhooks LWS still reconciles the bench's objects: every field is set
    (errors,) = [r for r in rows if "reconcile errors" in r["name"]]
    assert errors["value"] == 0, (tmp_path / "lws-manager.log").read_text()[-4000:]
