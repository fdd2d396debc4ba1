"""``ascend-pd-dev cluster up|status|down`` as a user runs them, on a second cluster of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ascend_pd_dev.controlplane import procs, versions
from ascend_pd_dev.testtools.kubectl import kubectl_path

pytestmark = pytest.mark.local


def _dev(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ASCEND_PD_DEV_DIR=str(state))
    env.pop("KUBECONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "ascend_pd_dev.cli", "cluster", *args],
        capture_output=True, text=True, env=env, check=False, timeout=600,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.fixture
def state(tmp_path: Path, cluster: Any) -> Iterator[Path]:
    if not versions.control_plane().binaries_ready():
        pytest.skip("the control-plane binaries are not built here")
    root = tmp_path / "dev"
    yield root
    _dev(root, "down")
    left = procs.processes_mentioning(str(root))
    for pid in left:
        os.kill(pid, 9)
    assert not left, f"processes of {root} outlived 'cluster down': {left}"


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """A process that is not the dev cluster's: nothing may stop it."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    proc.kill()
    proc.wait()


def test_up_twice_status_stale_pid_files_and_down(
    state: Path, bystander: subprocess.Popen[bytes]
) -> None:
    first = _dev(state, "up", "--nodes", "2")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"export KUBECONFIG={state / 'kubeconfig'}"
    assert "2 simulated Ascend nodes" in first.stderr

    nodes = subprocess.run(
        [str(kubectl_path()), "--kubeconfig", str(state / "kubeconfig"), "get", "nodes", "-o",
         "name"], capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert nodes == ["node/sim-ascend-0", "node/sim-ascend-1"]

    status = json.loads(_dev(state, "status", "--output", "json").stdout)
    assert status["up"] is True and status["nodes"] == 2
    pids = status["components"]
    assert all(pids.values())

    again = _dev(state, "up", "--nodes", "2")
    assert again.returncode == 0 and "already up" in again.stderr
    assert json.loads(_dev(state, "status", "--output", "json").stdout)["components"] == pids

    # the API server died, and a stale pid file names someone else's live process
    procs.stop(state / "run" / "kube-apiserver.pid")
    # the controller manager is stopped before its pid file is faked: a live one whose pid
    # file names someone else is a process nobody owns any more, and it outlived the test
    procs.stop(state / "run" / "kube-controller-manager.pid")
    start = procs.process_start_time(bystander.pid)
    assert start is not None
    (state / "run" / "kube-controller-manager.pid").write_text(
        json.dumps({"pid": bystander.pid, "start_time": start + 1, "argv": ["x"]})
    )
    assert _dev(state, "status").returncode == 3
    restarted = _dev(state, "up", "--nodes", "2")
    assert restarted.returncode == 0, restarted.stderr
    assert bystander.poll() is None
    new = json.loads(_dev(state, "status", "--output", "json").stdout)
    assert new["up"] is True and new["server"] == status["server"]

    down = _dev(state, "down")
    assert down.returncode == 0
    for pid in new["components"].values():
        assert (
            not Path(f"/proc/{pid}").exists()
            or procs.process_start_time(pid) is None
            or (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z")
        )
    assert bystander.poll() is None, "dev down stopped a process it did not start"
    assert _dev(state, "status").returncode == 3
    assert "nothing was running" in _dev(state, "down").stderr
