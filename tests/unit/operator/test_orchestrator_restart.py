"""kopf's orchestrator ending with an error is started again; a signal still stops it.

Real kopf: its startup activity fails on the first two runs (as a LoginError or a watch
stream's ERROR would end it), and the third run is stopped by SIGTERM, as the kubelet
stops a pod. Nothing talks to a cluster: the startup activity runs before any watch.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import kopf
import pytest

from ascend_pd_operator.kubeio.backoff import Backoff
from ascend_pd_operator.wiring import handlers


def _sigterm_once_kopf_handles_it() -> None:
    """SIGTERM as the kubelet sends it, once kopf's loop has taken the signal over (it
    does so just after it starts its tasks; before, SIGTERM would end the test run)."""
    deadline = time.monotonic() + 60
    while signal.getsignal(signal.SIGTERM) == signal.SIG_DFL and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGTERM)


def test_a_failed_orchestrator_starts_again_and_a_signal_stops_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(handlers, "ORCHESTRATOR_BACKOFF", Backoff(base=0.01, cap=0.02))
    registry = kopf.OperatorRegistry()
    runs: list[int] = []

    @kopf.on.login(registry=registry)
    def _login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server="http://127.0.0.1:9")

    @kopf.on.startup(registry=registry, errors=kopf.ErrorsMode.PERMANENT)
    def _startup(**_: Any) -> None:
        runs.append(1)
        if len(runs) < 3:
            raise kopf.PermanentError(f"run {len(runs)} fails")
        threading.Thread(target=_sigterm_once_kopf_handles_it, daemon=True).start()

    stop = threading.Event()
    handlers.run_orchestrator(registry, ["llm"], stop)
    assert len(runs) == 3
    assert not stop.is_set()
    # kopf restored the default SIGTERM handling when its loop closed
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
