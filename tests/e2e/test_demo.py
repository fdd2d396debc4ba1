"""The README's main command, end to end, as a user runs it: ``make demo`` then ``make demo-down``.

The demo runs on a control plane of its own (``ASCEND_PD_DEV_DIR`` points it at a temporary
state directory), exactly as on a fresh checkout, so it neither sees nor disturbs the e2e
suite's cluster; ``demo --down`` must leave no process and no data of it behind.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_pd_dev.controlplane import procs, versions
from ascend_pd_dev.testtools.kubectl import kubectl_path

pytestmark = [pytest.mark.local, pytest.mark.simulated, pytest.mark.timeout(900)]


def _demo(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ASCEND_PD_DEV_DIR=str(state))
    env.pop("KUBECONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "ascend_pd_dev.cli", "demo", *args],
        capture_output=True, text=True, timeout=900, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_demo_shows_a_ready_deepseek_v3_pp_deployment_and_down_removes_it(
    cluster: object, tmp_path: Path
) -> None:
    if not versions.control_plane().binaries_ready():
        pytest.skip("the control-plane binaries are not built here")
    state = tmp_path / "demo"
    try:
        done = _demo(state, "--timeout", "300")
        assert done.returncode == 0, done.stdout + done.stderr
        out = done.stdout
        assert "phase Ready" in out
        # NAME READY PHASE PREFILL DECODE REASON UPDATES AGE PP LAYERS ROUTER ENDPOINT MESSAGE
        # (-o wide); UPDATES is empty (nothing waits): blank, or <none> on some kubectl
        assert re.search(
            r"^dsv3\s+True\s+Ready\s+2/2\s+1/1\s+Ready\s+(?:<none>\s+)?\S+\s+2\s+61\s+2/2\s+http://",
            out,
            re.M,
        ), out
        assert "statefulset.apps/dsv3-prefill-1   2/2" in out
        assert "totalKvLayers 61, kvBufGroups 2, draft layers prefill 0 / decode 1" in out
        assert "prefill PP rank 1: layers [30, 61)" in out
        assert "Tear down: ascend-pd-dev demo --down" in out
        phase = subprocess.run(
            [str(kubectl_path()), "--kubeconfig", str(state / "kubeconfig"), "get", "pdd",
             "-n", "llm", "dsv3", "-o", "jsonpath={.status.phase}"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert phase.stdout == "Ready"
    finally:
        down = _demo(state, "--down")
    assert down.returncode == 0, down.stderr
    assert "are removed" in down.stdout
    assert not procs.processes_mentioning(str(state)), "a demo process outlived demo --down"
    assert not (state / "etcd").exists() and not (state / "kubeconfig").exists()
