"""Pid-file ownership: stop only what we started, never a reused pid."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ascend_pd_dev.controlplane import procs

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_start_running_stop(tmp_path: Path) -> None:
    pid_file = tmp_path / "x.pid"
    record = procs.start(SLEEPER, pid_file, tmp_path / "x.log")
    assert procs.running(pid_file) == record
    assert procs.stop(pid_file) is True
    assert procs.running(pid_file) is None
    assert not pid_file.exists()
    assert procs.stop(pid_file) is False


def test_a_stale_pid_file_naming_someone_elses_process_is_left_alone(tmp_path: Path) -> None:
    other = subprocess.Popen(SLEEPER)
    try:
        pid_file = tmp_path / "stale.pid"
        real_start = procs.process_start_time(other.pid)
        assert real_start is not None
        # same pid, different start time: the pid was reused by another process
        pid_file.write_text(
            json.dumps({"pid": other.pid, "start_time": real_start - 1, "argv": ["etcd"]})
        )
        assert procs.running(pid_file) is None
        assert procs.stop(pid_file) is False
        assert other.poll() is None, "stop() must not touch a process it did not start"
        assert not pid_file.exists()
    finally:
        other.kill()
        other.wait()


def test_garbage_pid_files_are_treated_as_absent(tmp_path: Path) -> None:
    pid_file = tmp_path / "bad.pid"
    pid_file.write_text("not json")
    assert procs.running(pid_file) is None
    assert procs.stop(pid_file) is False


def test_stat_parsing_survives_odd_command_names() -> None:
    stat = "123 (we) ird (name) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 777 19"
    assert procs.parse_stat_start_time(stat) == 777
