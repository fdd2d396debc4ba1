"""Run the operator as a local process with exactly the rights the chart gives its pod.

The local control plane runs no containers, so the demo and the chart e2e tests run
``ascend-pd run`` here, with the live chart Deployment's own arguments and a
kubeconfig holding only the chart ServiceAccount's token: a verb missing from the
chart's RBAC fails here as it would in the pod.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ascend_pd_dev.testtools.rbac import local_operator_command
from ascend_pd_operator.api.access import HEALTH_PATH, METRICS_PATH

CLI = "ascend_pd_operator.wiring.cli"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OperatorProcess:
    """``ascend-pd run ARGS`` as a local process in its own process group.

    It gets a free health port and a free metrics port of its own (any ``--health-port`` or
    ``--metrics-port`` in ``args`` is replaced: operators run side by side here),
    its output goes to ``log``, and ``env`` is added to this process's environment.
    ``python``: the interpreter (default: this one; ``operator_venv`` has the image's).
    """

    def __init__(
        self,
        args: Sequence[str],
        kubeconfig: Path,
        log: Path,
        env: Mapping[str, str] | None = None,
        python: Path | None = None,
    ) -> None:
        self.health_port = free_port()
        self.metrics_port = free_port()
        run_args = [a for a in args if not a.startswith(("--health-port", "--metrics-port"))]
        self.args = [
            *run_args,
            f"--health-port={self.health_port}",
            f"--metrics-port={self.metrics_port}",
        ]
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as out:
            self.process = subprocess.Popen(
                [str(python or sys.executable), "-m", CLI, "run", *self.args],
                env={**os.environ, **(env or {}), "KUBECONFIG": str(kubeconfig)},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends all of it
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def healthy(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"the operator exited:\n{self.log.read_text()[-4000:]}")
        try:
            url = f"http://127.0.0.1:{self.health_port}{HEALTH_PATH}"
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def metrics_text(self) -> str:
        """The operator's ``/metrics`` exposition, as a Prometheus scrape reads it."""
        url = f"http://127.0.0.1:{self.metrics_port}{METRICS_PATH}"
        with urllib.request.urlopen(url, timeout=10) as response:
            return str(response.read().decode())

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError(f"no VmRSS for pid {self.pid}")

    def kill(self) -> None:
        """SIGKILL, as a crash would (a held lease is left to expire)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self, timeout: float = 30.0) -> bool:
        """SIGTERM and wait; SIGKILL after ``timeout``. True when it exited on SIGTERM."""
        return stop_child_group(self.process, timeout)


class LocalOperator(OperatorProcess):
    """``ascend-pd run`` with a chart Deployment's args, as the chart's ServiceAccount."""

    def __init__(
        self,
        deployment: dict[str, Any],
        kubeconfig: Path,
        log: Path,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        argv, pod_env = local_operator_command(deployment, 0)
        super().__init__([*argv[1:], *extra_args], kubeconfig, log, env=pod_env)


def stop_child_group(process: subprocess.Popen[Any], timeout: float = 30.0) -> bool:
    """SIGTERM the process group of our child ``process`` (started with
    ``start_new_session``) and wait for the child; SIGKILL the group after ``timeout``.
    True when it exited on SIGTERM. Waiting on the child reaps it: polling its group
    instead would see the unreaped zombie alive until the timeout."""
    if process.poll() is not None:
        return True
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
        return True
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return False


def stop_process_group(pid: int, timeout: float = 30.0) -> bool:
    """SIGTERM the process group of ``pid`` (not a child of ours: a zombie child would
    look alive), SIGKILL after ``timeout``; False if there was no such group."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    return True
