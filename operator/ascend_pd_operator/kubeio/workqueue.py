"""A rate-limited work queue of reconcile keys, in the style of client-go's workqueue.

Watch events and the resync ``add`` a key; workers ``get`` one, reconcile it and call
``done``. The guarantees the reconcile loop relies on:

- a key waits in the queue at most once (adding a queued key again does nothing);
- a key is never handed to two workers at once: added while being processed, it is
  queued again only when its worker calls ``done``;
- a failed key comes back after a per-key exponential backoff (``add_rate_limited``:
  ``base * 2**(failures-1)``, capped, up to 10 % jitter), and ``forget`` resets its
  failure count after a success. A plain ``add`` (a new event, the resync) is not
  delayed by the backoff.

Delayed keys are kept in a heap and moved to the queue by ``get`` when due, so the
queue needs no timer thread of its own. Its depth, the delayed keys, each key's wait and
the retries are reported to ``metrics`` as they change.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from ascend_pd_operator.kubeio import metrics
from ascend_pd_operator.kubeio.backoff import Backoff

K = TypeVar("K", bound=Hashable)

#: First retry of a failed reconcile after this long; each further failure doubles it.
BASE_DELAY_SECONDS = 0.1
#: A key failing over and over is retried at least this often.
MAX_DELAY_SECONDS = 30.0


class RateLimitedQueue(Generic[K]):
    def __init__(
        self,
        base_delay: float = BASE_DELAY_SECONDS,
        max_delay: float = MAX_DELAY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        jitter: float = 0.1,
    ) -> None:
        #: Keys failing together (every deployment during an API outage) come back spread.
        self.backoff = Backoff(base=base_delay, cap=max_delay, jitter=jitter)
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()  # waiting in _queue, or to be queued when done
        self._processing: set[K] = set()
        self._waiting: list[tuple[float, int, K]] = []  # (due, seq, key) heap
        self._seq = 0
        self._failures: dict[K, int] = {}
        self._queued_at: dict[K, float] = {}  # when each key in _queue entered it

    # --- adding ---------------------------------------------------------------------------
    def add(self, key: K) -> None:
        with self._cond:
            self._add_locked(key)

    def _add_locked(self, key: K) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        metrics.QUEUE_ADDS.inc()
        if key in self._processing:
            return  # queued again by done()
        self._enqueue_locked(key)

    def _enqueue_locked(self, key: K) -> None:
        self._queue.append(key)
        self._queued_at[key] = self._clock()
        metrics.QUEUE_DEPTH.set(len(self._queue))
        self._cond.notify()

    def add_after(self, key: K, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            self._seq += 1
            heapq.heappush(self._waiting, (self._clock() + delay, self._seq, key))
            metrics.QUEUE_DELAYED.set(len(self._waiting))
            self._cond.notify_all()  # a waiting get() may now have to wake up sooner

    def add_rate_limited(self, key: K, at_least: float = 0.0) -> float:
        """Queue ``key`` again after its backoff, and not before ``at_least`` seconds (the
        server's Retry-After); return the delay."""
        with self._cond:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
        metrics.QUEUE_RETRIES.inc()
        delay = max(at_least, self.backoff.delay(failures))
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    # --- taking ---------------------------------------------------------------------------
    def get(self, timeout: float | None = None) -> K | None:
        """The next key (now being processed), or None after ``timeout`` seconds."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                now = self._clock()
                while self._waiting and self._waiting[0][0] <= now:
                    self._add_locked(heapq.heappop(self._waiting)[2])
                    metrics.QUEUE_DELAYED.set(len(self._waiting))
                if self._queue:
                    key = self._queue.popleft()
                    metrics.QUEUE_DEPTH.set(len(self._queue))
                    metrics.QUEUE_WAIT.observe(max(0.0, now - self._queued_at.pop(key, now)))
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                waits = [t - now for t in (deadline, self._waiting[0][0] if self._waiting
                                           else None) if t is not None]  # fmt: skip
                if deadline is not None and now >= deadline:
                    return None
                self._cond.wait(max(0.0, min(waits)) if waits else None)

    def done(self, key: K) -> None:
        """``key``'s worker finished; a key added meanwhile is queued now."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._enqueue_locked(key)

    # --- looking --------------------------------------------------------------------------
    def __len__(self) -> int:
        """Keys waiting to be processed now (not the delayed ones)."""
        with self._cond:
            return len(self._queue)

    def waiting(self) -> int:
        """Keys waiting for their backoff."""
        with self._cond:
            return len(self._waiting)
