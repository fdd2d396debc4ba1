"""Capped exponential backoff with jitter: the one retry schedule of every client.

Every retry in the operator waits by this schedule: a supervised thread restarted after a
failure, a child watch listing again, kopf's own requests (``Backoff.endless`` as kopf's
``error_backoffs``: never exhausted, so no outage length makes kopf give up) and a restart
of kopf's orchestrator. The jitter spreads clients that failed together (every watch at
the end of an API server outage), so they do not all come back in the same instant.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field

_RNG = random.Random()


@dataclass(frozen=True)
class Backoff:
    """Delay before the n-th try in a row: ``base * 2**(n-1)``, up to ``jitter`` more, at
    most ``cap``."""

    base: float = 0.5
    cap: float = 30.0
    jitter: float = 0.1

    def delay(self, failures: int, rng: random.Random | None = None) -> float:
        plain = min(self.cap, self.base * 2.0 ** max(0, failures - 1))
        return min(self.cap, plain * (1 + self.jitter * (rng or _RNG).random()))

    def endless(self) -> Endless:
        """The delays of one request's retries, for ever: every iteration starts afresh."""
        return Endless(self)


@dataclass(frozen=True)
class Endless:
    """A re-iterable, never-ending sequence of delays (kopf iterates it once per request;
    it must not be ``Sized``, or kopf would count the tries and stop at the last)."""

    backoff: Backoff

    def __iter__(self) -> Iterator[float]:
        failures = 0
        while True:
            failures += 1
            yield self.backoff.delay(failures)


@dataclass
class Streak:
    """Failures in a row of one long-lived loop and the wait before its next try."""

    backoff: Backoff = field(default_factory=Backoff)
    rng: random.Random | None = None
    failures: int = 0

    def next(self) -> float:
        self.failures += 1
        return self.backoff.delay(self.failures, self.rng)

    def reset(self) -> None:
        self.failures = 0
