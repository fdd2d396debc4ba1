"""The README's main command, end to end on the local control plane."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from ascend_pd_dev import paths
from ascend_pd_dev.local_run import stop_process_group

pytestmark = [pytest.mark.local, pytest.mark.simulated, pytest.mark.timeout(900)]


def test_demo_shows_a_ready_deepseek_v3_pp_deployment(cluster: Any, kubectl: Any) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ascend_pd_dev.cli", "demo", "--timeout", "300"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    pid_file = paths.state_dir() / "demo-operator.pid"
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        out = done.stdout
        assert "phase Ready" in out
        assert "dsv3   True    Ready   2         1        2     61" in out
        assert "statefulset.apps/dsv3-prefill-1   2/2" in out
        assert "totalKvLayers 61, kvBufGroups 2, draft layers prefill 0 / decode 1" in out
        assert "prefill PP rank 1: layers [30, 61)" in out
        assert "Tear down: ascend-pd-dev demo --down" in out
        status = kubectl("get", "pdd", "-n", "llm", "dsv3", "-o", "jsonpath={.status.phase}")
        assert status.stdout == "Ready"
    finally:
        if pid_file.is_file():
            stop_process_group(int(pid_file.read_text()))
            pid_file.unlink()
        kubectl("delete", "namespace", "llm", "--wait=false", "--ignore-not-found", check=False)
