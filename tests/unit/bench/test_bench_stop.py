"""A benchmark stopped by SIGTERM (kill, a CI timeout) still runs its modules' cleanup, so
it never leaves a control plane behind (the default action did: a 40-node cluster and an
operator outlived a killed ``make bench``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_sigterm_runs_the_modules_cleanup(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    env = {
        **os.environ,
        "BENCH_SLEEPER_MARKER": str(marker),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(Path(__file__).parent / "fixtures")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", "--module", "bench_sleeper", "--out", str(tmp_path)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text() == "started"):
            assert proc.poll() is None and time.monotonic() < deadline, "never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 128 + signal.SIGTERM
    finally:
        proc.kill()
    assert marker.read_text() == "cleaned up"
