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
from pathlib import Path
from typing import Any

from .api_access import HEALTH_PATH
from .rbac import local_operator_command


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalOperator:
    """``ascend-pd run`` with a chart Deployment's args, as the chart's ServiceAccount."""

    def __init__(
        self,
        deployment: dict[str, Any],
        kubeconfig: Path,
        log: Path,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.health_port = free_port()
        argv, pod_env = local_operator_command(deployment, self.health_port)
        env = {**os.environ, **pod_env, "KUBECONFIG": str(kubeconfig)}
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ascend_pd_operator.cli", *argv, *extra_args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log.open("w"),
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

    def stop(self) -> None:
        stop_process_group(self.process.pid)
        self.process.wait()


def stop_process_group(pid: int, timeout: float = 30.0) -> bool:
    """SIGTERM the process group of ``pid``, SIGKILL after ``timeout``; False if gone."""
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
