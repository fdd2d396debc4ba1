"""Background processes owned through pid files: start, check, stop exactly our own.

A pid file records the pid and the process's start time (``/proc/<pid>/stat`` field 22), so a
stale pid file whose pid was reused by an unrelated process is recognised and never acted on:
``stop`` signals a pid only while both still match.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PidRecord:
    pid: int
    start_time: int
    argv: tuple[str, ...]


def process_start_time(pid: int) -> int | None:
    """The start time (clock ticks since boot) of ``pid``, or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return parse_stat_start_time(stat)


def parse_stat_start_time(stat: str) -> int:
    """Field 22 of ``/proc/<pid>/stat``."""
    # the command name (field 2) may hold spaces and parentheses: split after the last ')',
    # where fields start at field 3
    return int(stat.rsplit(")", 1)[1].split()[19])


def read_pid_file(path: Path) -> PidRecord | None:
    try:
        data = json.loads(path.read_text())
        return PidRecord(int(data["pid"]), int(data["start_time"]), tuple(data["argv"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def is_ours(record: PidRecord) -> bool:
    """The recorded process still runs (same pid and the same start time) and is not a zombie."""
    if process_start_time(record.pid) != record.start_time:
        return False
    try:
        state = Path(f"/proc/{record.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def running(pid_file: Path) -> PidRecord | None:
    """The live process a pid file names, or None (missing, unreadable or stale pid file)."""
    record = read_pid_file(pid_file)
    if record is None or not is_ours(record):
        return None
    return record


def start(
    argv: list[str],
    pid_file: Path,
    log_file: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> PidRecord:
    """Start ``argv`` detached (own session, stdin closed, output to ``log_file``)."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            cwd=cwd, start_new_session=True,
        )  # fmt: skip
    start_time = process_start_time(proc.pid)
    if start_time is None:
        raise RuntimeError(f"{argv[0]} exited at once; see {log_file}")
    record = PidRecord(proc.pid, start_time, tuple(argv))
    tmp = pid_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": proc.pid, "start_time": start_time, "argv": argv}) + "\n")
    tmp.replace(pid_file)
    return record


def stop(pid_file: Path, timeout: float = 15.0) -> bool:
    """Terminate the process of ``pid_file`` if it is still ours; remove the pid file.

    Returns True when a process was stopped. SIGTERM first, SIGKILL after ``timeout``.
    """
    record = running(pid_file)
    stopped = False
    if record is not None:
        os.kill(record.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while is_ours(record) and time.monotonic() < deadline:
            _reap(record.pid)
            time.sleep(0.1)
        if is_ours(record):
            os.kill(record.pid, signal.SIGKILL)
            while is_ours(record):
                _reap(record.pid)
                time.sleep(0.05)
        _reap(record.pid)
        stopped = True
    pid_file.unlink(missing_ok=True)
    return stopped


def stop_all(
    pid_file: Callable[[str], Path], components: Sequence[str], progress: Callable[[str], None]
) -> list[str]:
    """Stop ``components`` (the last first) by their pid files; return the names stopped."""
    stopped = []
    for component in reversed(components):
        if stop(pid_file(component)):
            stopped.append(component)
            progress(f"stopped {component}")
    return stopped


def _reap(pid: int) -> None:
    # a process we started in this same Python process stays a zombie until waited for
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def processes_mentioning(text: str) -> list[int]:
    """Live (not zombie) processes whose command line contains ``text``: what a test checks
    after ``cluster down`` to prove nothing of that cluster's state directory lives on."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            zombie = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except (OSError, IndexError, UnicodeDecodeError):
            continue
        if text in cmdline and not zombie:
            found.append(int(entry.name))
    return found
