"""Supervised threads: any exception restarts the work, and /healthz fails for a unit that
cannot recover (the landed code lost its resync thread to a urllib3 MaxRetryError while
/healthz kept answering 200)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3

from ascend_pd_operator.api import models
from ascend_pd_operator.kubeio import health
from ascend_pd_operator.kubeio import supervisor as supervisor_module
from ascend_pd_operator.kubeio.backoff import Backoff
from ascend_pd_operator.kubeio.errors import KubeError
from ascend_pd_operator.kubeio.leader import LeaderElector
from ascend_pd_operator.kubeio.live_cache import LiveCache
from ascend_pd_operator.kubeio.supervisor import Supervisor, Unit
from ascend_pd_operator.wiring.handlers import WatchCheck, WorkQueue, resync_loop

FAST = Backoff(base=0.01, cap=0.05)


def refused() -> urllib3.exceptions.MaxRetryError:
    """What the kubernetes client raises while the API server's port is closed."""
    return urllib3.exceptions.MaxRetryError(
        None, "/apis/ascendpd.io/v1alpha1/pddeployments", reason=ConnectionRefusedError(111)
    )


def eventually(predicate: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"not within {timeout:.0f}s")


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


# --- restarts ---------------------------------------------------------------------------------


class ListingKube:
    """Lists PDDeployments after failing with the given exceptions, one per call."""

    def __init__(self, failures: list[BaseException]) -> None:
        self.failures = failures
        self.calls = 0

    def list(self, kind: str, namespace: str | None, selector: str = "") -> list[dict[str, Any]]:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        if kind != models.KIND:
            return []
        return [{"metadata": {"namespace": "llm", "name": "dsv3"}}]


@pytest.mark.parametrize(
    "error",
    [refused(), urllib3.exceptions.ProtocolError("Connection aborted."), RuntimeError("bug")],
    ids=["MaxRetryError", "ProtocolError", "RuntimeError"],
)
def test_a_resync_that_raises_anything_is_restarted(
    stop: threading.Event, error: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    kube = ListingKube([error, error, error])
    queue = WorkQueue()
    supervisor = Supervisor(stop, backoff=FAST)
    unit = supervisor.start(
        "resync",
        lambda unit: resync_loop(unit, queue, kube, ["llm"], 0.05, stop, LiveCache()),  # type: ignore[arg-type]
        period=0.05,
    )
    assert eventually(lambda: queue.get(0)) == ("llm", "dsv3")
    assert unit.restarts == 3 and unit.thread is not None and unit.thread.is_alive()
    eventually(lambda: unit.failures == 0)  # it beat again: the streak is over
    assert supervisor.problems() == []
    # logged once with its traceback, then one line per repeat
    with_traceback = [r for r in caplog.records if r.exc_info]
    assert len(with_traceback) == 1


def test_a_worker_body_that_raises_is_restarted(stop: threading.Event) -> None:
    runs: list[int] = []

    def body(unit: Unit) -> None:
        runs.append(1)
        if len(runs) < 3:
            raise RuntimeError("the queue broke")
        while not stop.wait(0.01):
            unit.beat()

    supervisor = Supervisor(stop, backoff=FAST)
    unit = supervisor.start("worker", body, period=0.05)
    eventually(lambda: len(runs) == 3 and unit.failures == 0)
    assert unit.restarts == 2 and supervisor.report()["ok"]


def test_a_body_that_returns_is_restarted_too(stop: threading.Event) -> None:
    runs: list[int] = []
    supervisor = Supervisor(stop, backoff=FAST)
    supervisor.start("resync", lambda unit: runs.append(1), period=1.0)
    eventually(lambda: len(runs) >= 3)


class FlakyLeases:
    """The Lease verbs of ``Kube``, whose reads fail with the given exceptions first."""

    def __init__(self, failures: list[BaseException]) -> None:
        self.failures = failures
        self.lease: Any = None

    def get(self, kind: str, namespace: str, name: str) -> Any:
        if self.failures:
            raise self.failures.pop(0)
        return self.lease

    def create(self, kind: str, namespace: str, body: dict[str, Any]) -> None:
        self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}

    replace = None  # a renewal is not part of this test


@pytest.mark.parametrize(
    "error",
    [refused(), KubeError(500, "InternalError", "etcd"), RuntimeError("bug")],
    ids=["MaxRetryError", "500", "RuntimeError"],
)
def test_leader_election_that_raises_is_restarted(
    stop: threading.Event, error: BaseException
) -> None:
    # the landed wait_for_leadership ended the reconciler thread on anything but a conflict
    leases = FlakyLeases([error, error])
    elector = LeaderElector(leases, "ns", "lease", "me", lease_seconds=2, renew_seconds=0.05)
    supervisor = Supervisor(stop, backoff=FAST)
    unit = supervisor.start("leader-election", lambda u: elector.run(u, stop), period=0.05)
    eventually(elector.is_leader.is_set)
    assert unit.restarts == 2 and unit.thread is not None and unit.thread.is_alive()


# --- liveness ---------------------------------------------------------------------------------


def get_health(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture
def served(stop: threading.Event) -> Iterator[tuple[Supervisor, int]]:
    supervisor = Supervisor(stop, grace=0.3, backoff=FAST)
    server = health.serve(supervisor, 0, host="127.0.0.1")
    yield supervisor, server.server_address[1]
    server.shutdown()


def test_healthz_fails_for_a_unit_that_cannot_recover(
    stop: threading.Event, served: tuple[Supervisor, int]
) -> None:
    supervisor, port = served

    def healthy(unit: Unit) -> None:
        while not stop.wait(0.02):
            unit.beat()

    def api_down(unit: Unit) -> None:
        raise refused()

    supervisor.start("worker", healthy, period=0.1)
    assert get_health(port)[0] == 200
    supervisor.start("resync", api_down, period=0.1)
    assert get_health(port)[0] == 200  # within its period + grace: not yet
    _, report = eventually(lambda: (r := get_health(port))[0] == 503 and r)
    assert report["problems"] and report["problems"][0].startswith("resync: no progress")
    assert "MaxRetryError" in report["problems"][0]
    assert report["units"]["worker"]["failing"] == 0
    assert report["units"]["resync"]["restarts"] >= 1


def test_healthz_fails_for_a_unit_stuck_in_a_call(served: tuple[Supervisor, int]) -> None:
    supervisor, port = served
    release = threading.Event()

    def stuck(unit: Unit) -> None:
        unit.beat()
        release.wait()  # a request that never returns

    supervisor.start("worker", stuck, period=0.1)
    eventually(lambda: get_health(port)[0] == 503)
    release.set()


def test_healthz_recovers_with_the_unit(
    stop: threading.Event, served: tuple[Supervisor, int]
) -> None:
    supervisor, port = served
    api_up = threading.Event()

    def resync(unit: Unit) -> None:
        while not stop.wait(0.02):
            if not api_up.is_set():
                raise refused()
            unit.beat()

    supervisor.start("resync", resync, period=0.1)
    eventually(lambda: get_health(port)[0] == 503)
    api_up.set()
    eventually(lambda: get_health(port)[0] == 200)


def test_a_dead_kopf_watcher_is_found(stop: threading.Event) -> None:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    fail = asyncio.Event()

    async def watch() -> None:
        await fail.wait()
        raise RuntimeError("Event processing has failed with an unrecoverable error.")

    tasks: list[asyncio.Task[None]] = []

    async def spawn() -> None:
        tasks.append(asyncio.create_task(watch(), name="watcher for pods.v1@llm"))
        tasks.append(asyncio.create_task(asyncio.sleep(3600), name="watcher for services.v1@llm"))

    asyncio.run_coroutine_threadsafe(spawn(), loop).result(10)
    supervisor = Supervisor(stop, grace=0.3, backoff=FAST)
    check = WatchCheck()
    check.attach(loop)
    unit = supervisor.start("watch", lambda u: check.run(u, stop), period=0.05)
    eventually(lambda: unit.failures == 0 and unit.silence() < 0.05)
    assert supervisor.problems() == []
    loop.call_soon_threadsafe(fail.set)
    problems = eventually(supervisor.problems)
    assert "watch: no progress" in problems[0] and "pods.v1@llm" in problems[0]
    stop.set()
    loop.call_soon_threadsafe(loop.stop)


def test_supervisor_logs_expected_errors_without_traceback(
    stop: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    runs: list[int] = []

    def body(unit: Unit) -> None:
        runs.append(1)
        if len(runs) < 4:
            raise refused()
        stop.wait()

    caplog.set_level(logging.WARNING)
    supervisor = Supervisor(
        stop, backoff=FAST, expected=lambda e: isinstance(e, OSError | urllib3.exceptions.HTTPError)
    )
    # A name no other test's unit has: their threads may still log while this test runs.
    supervisor.start("expected-errors", body, period=1.0)
    eventually(lambda: len(runs) == 4)
    ours = [r for r in caplog.records if "expected-errors" in r.getMessage()]
    assert not [r for r in ours if r.exc_info]
    assert len(ours) == 3


def test_healthz_fails_until_the_expected_units_run(
    stop: threading.Event, served: tuple[Supervisor, int]
) -> None:
    supervisor, port = served
    supervisor.expect("resync")
    status, report = get_health(port)
    assert status == 503 and report["problems"] == ["resync: not started yet"]
    supervisor.start("resync", lambda unit: stop.wait(), period=1.0)
    assert get_health(port)[0] == 200


def test_a_unit_being_started_is_never_reported_gone(
    stop: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe while kopf's startup starts the child watches one by one saw a unit whose
    thread had not started yet and answered 503 ("its thread is gone")."""
    supervisor = Supervisor(stop, backoff=FAST)
    seen: list[list[str]] = []

    class Probed(threading.Thread):
        def start(self) -> None:
            seen.append(supervisor.problems())  # the probe, just before the thread runs
            super().start()

    monkeypatch.setattr(supervisor_module.threading, "Thread", Probed)
    supervisor.start("watch Service in llm", lambda unit: stop.wait(), period=1.0)
    assert seen == [[]]
    assert supervisor.problems() == []


def test_a_throttled_unit_restarts_no_sooner_than_retry_after(stop: threading.Event) -> None:
    """The resync's first GET /version answered 429 + Retry-After: 1 came back after the
    supervisor's 0.5 s backoff (the api-faults scenario caught it)."""
    from ascend_pd_operator.kubeio.kube import KubeError, wait_at_least

    starts: list[float] = []

    def body(unit: Unit) -> None:
        starts.append(time.monotonic())
        if len(starts) == 1:
            raise KubeError(429, "TooManyRequests", "slow down", retry_after=0.3)
        stop.wait()

    supervisor = Supervisor(stop, backoff=FAST, wait_at_least=wait_at_least)
    supervisor.start("throttled", body, period=1.0)
    eventually(lambda: len(starts) == 2)
    assert starts[1] - starts[0] >= 0.3
