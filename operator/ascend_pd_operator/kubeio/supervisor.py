"""Supervised long-lived work: restart on any exception, and a liveness verdict for /healthz.

Every long-lived thread of the operator (resync, workers, leader election, the kopf
watch check) runs its body under ``Supervisor.start``. When a body raises anything
(urllib3's ``MaxRetryError`` while the API server is down, a bug), the exception is
logged once (with its traceback, or as one line when ``expected`` says it is a
transient API error), and the body is started again after an exponential backoff
(``Backoff``, capped). A thread therefore never dies silently.

A body shows progress by calling ``unit.beat()`` at least every ``period`` seconds
while it works. A unit that has not beaten for ``period + grace`` seconds is unhealthy
and ``/healthz`` fails, so the kubelet restarts the operator. That one rule covers a
unit failing over and over (it never gets to beat), one stuck in a call that does not
return, and a thread that is gone. The one exception is a unit stalled by a fault a
restart cannot cure (``blocked``: a permission the operator lacks): it keeps retrying,
the report names the fault, and the probe stays green, because restarting would only
turn a missing permission into a crash loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ascend_pd_operator.kubeio.backoff import Backoff

log = logging.getLogger(__name__)

#: /healthz fails once a unit has shown no progress for its period plus this long.
DEFAULT_GRACE_SECONDS = 60.0
#: Restarts of a failed unit: 0.5 s doubling to 15 s, jittered.
RESTART_BACKOFF = Backoff(base=0.5, cap=15.0)


class Unit:
    """One supervised piece of work, as the supervisor and /healthz see it."""

    def __init__(self, name: str, period: float, clock: Callable[[], float]) -> None:
        self.name = name
        #: The body beats at least this often while it works.
        self.period = period
        self._clock = clock
        self.last_beat = clock()
        self.restarts = 0
        #: Failures since the last beat (0: healthy).
        self.failures = 0
        self.last_error = ""
        #: The latest failure (None: none since the last beat).
        self.last_exception: BaseException | None = None
        self.thread: threading.Thread | None = None

    def beat(self) -> None:
        """The body made progress; a failure streak ends here."""
        self.last_beat = self._clock()
        self.last_exception = None
        if self.failures:
            log.info("%s: recovered after %d failure(s)", self.name, self.failures)
            self.failures = 0

    def failed(self, exc: BaseException) -> None:
        """The body failed and will try again itself (a watch): why it shows no progress."""
        self.last_exception = exc
        self.last_error = f"{type(exc).__name__}: {exc}"[:500]

    def silence(self) -> float:
        """Seconds since the last beat."""
        return self._clock() - self.last_beat

    def report(self) -> dict[str, Any]:
        return {
            "alive": bool(self.thread and self.thread.is_alive()),
            "secondsSinceProgress": round(self.silence(), 1),
            "periodSeconds": self.period,
            "restarts": self.restarts,
            "failing": self.failures,
            "lastError": self.last_error,
        }


class Supervisor:
    def __init__(
        self,
        stop: threading.Event,
        grace: float = DEFAULT_GRACE_SECONDS,
        backoff: Backoff = RESTART_BACKOFF,
        expected: Callable[[BaseException], bool] = lambda _: False,
        blocked: Callable[[BaseException], bool] = lambda _: False,
        faults: Callable[[], list[str]] = list,
        conditions: Callable[[], list[str]] = list,
        wait_at_least: Callable[[BaseException], float] = lambda _: 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stop = stop
        self.grace = grace
        self.backoff = backoff
        #: Exceptions that are news but not bugs (a transient API error): one log line.
        self.expected = expected
        #: Failures a restart of the process cannot cure (a permission the operator lacks):
        #: a unit stalled by one is reported by ``faults``, and /healthz stays 200 for it,
        #: so the kubelet does not restart the operator into a crash loop.
        self.blocked = blocked
        self.faults = faults
        #: Problems of the process that no unit shows (a CRD it watches is missing): each
        #: fails /healthz while it lasts.
        self.conditions = conditions
        #: The least a restart after this failure waits (the server's Retry-After).
        self.wait_at_least = wait_at_least
        self._clock = clock
        self._units: dict[str, Unit] = {}
        self._expected: set[str] = set()
        self._lock = threading.Lock()

    def expect(self, *names: str) -> None:
        """Units started later (by kopf's startup): not live until they run."""
        with self._lock:
            self._expected.update(names)

    def start(self, name: str, body: Callable[[Unit], None], period: float) -> Unit:
        """Run ``body(unit)`` in a daemon thread named ``name`` until ``stop``, restarting it."""
        unit = Unit(name, period, self._clock)
        with self._lock:
            if name in self._units:
                raise ValueError(f"a supervised unit named {name!r} already runs")
        unit.thread = threading.Thread(target=self._run, args=(unit, body), name=name, daemon=True)
        unit.thread.start()
        # Only a running unit is reported: a probe in between saw "its thread is gone".
        with self._lock:
            self._units[name] = unit
        return unit

    def _run(self, unit: Unit, body: Callable[[Unit], None]) -> None:
        while not self.stop.is_set():
            try:
                body(unit)
                if self.stop.is_set():
                    return
                raise RuntimeError("returned while the operator is running")
            except Exception as exc:
                unit.failures += 1
                unit.restarts += 1
                unit.failed(exc)
                delay = max(self.backoff.delay(unit.failures), self.wait_at_least(exc))
                if self.expected(exc):
                    log.warning("%s: %s; restarting in %.1fs", unit.name, unit.last_error, delay)
                elif unit.failures == 1:
                    log.exception("%s failed; restarting in %.1fs", unit.name, delay)
                else:  # the traceback of this failure streak is already in the log
                    log.error("%s failed again (%d in a row): %s; restarting in %.1fs",
                              unit.name, unit.failures, unit.last_error, delay)  # fmt: skip
                self.stop.wait(delay)

    # --- liveness ---------------------------------------------------------------------------
    def units(self) -> list[Unit]:
        with self._lock:
            return list(self._units.values())

    def problems(self) -> list[str]:
        """Why the operator is not live (empty: it is)."""
        found = list(self.conditions())
        with self._lock:
            found += [
                f"{name}: not started yet" for name in sorted(self._expected - set(self._units))
            ]
        for unit in self.units():
            alive = unit.thread is not None and unit.thread.is_alive()
            if not alive and not self.stop.is_set():
                found.append(f"{unit.name}: its thread is gone")
            elif unit.silence() > unit.period + self.grace and not (
                unit.last_exception is not None and self.blocked(unit.last_exception)
            ):
                why = f" (last error: {unit.last_error})" if unit.last_error else ""
                found.append(f"{unit.name}: no progress for {unit.silence():.0f}s, more than "
                             f"its period {unit.period:g}s + {self.grace:g}s{why}")  # fmt: skip
        return found

    def report(self) -> dict[str, Any]:
        problems = self.problems()
        return {
            "ok": not problems,
            "problems": problems,
            "faults": self.faults(),
            "units": {unit.name: unit.report() for unit in self.units()},
        }
