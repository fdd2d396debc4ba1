"""Stopping a child process group of ours: reaped on SIGTERM at once, not after the timeout."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from ascend_pd_dev.testtools.local_run import stop_child_group


def _child(code: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    time.sleep(0.5)  # let it install its handlers
    return process


def test_a_child_that_exits_on_sigterm_is_reaped_without_waiting_for_the_timeout() -> None:
    process = _child("import time; time.sleep(60)")
    started = time.monotonic()
    assert stop_child_group(process, timeout=20) is True
    # polling the group instead sees the unreaped zombie alive until the timeout
    assert time.monotonic() - started < 10
    assert process.returncode == -signal.SIGTERM


def test_a_child_ignoring_sigterm_is_killed_after_the_timeout() -> None:
    process = _child("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                     "time.sleep(60)")  # fmt: skip
    assert stop_child_group(process, timeout=1) is False
    assert process.returncode == -signal.SIGKILL
