"""API denials (401, 403): transient right after an API server restart, a fault when they last.

A kube-apiserver that has just started answers 403 until its RBAC authorizer has filled its
caches, and 401 until its token authenticator can read again; kopf used to take such an
answer as final and stop. So a denial is transient for ``WARMUP_SECONDS`` after the first
one of a streak, and every client simply retries it. A denial that outlasts the window is a
fault of the cluster's configuration (the operator's Role lost a rule): the log says once
which verb on which resource in which namespace is refused, ``/healthz`` names it under
``faults``, and the operator keeps retrying without crash-looping, so it recovers by itself
the moment the permission is back.

What is refused comes from the request itself (method, path, query), so the name is the one
an RBAC rule uses (``patch statefulsets.apps in namespace llm``). Our own client reports
every answer (a success clears its entry); kopf's requests are seen only when they fail
(``handlers.KopfDenials``), so an entry nobody reports again for ``STALE_SECONDS`` is
forgotten.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

log = logging.getLogger(__name__)

#: A denial streak younger than this is the API server warming up: retried quietly. The
#: RBAC authorizer of a restarted kube-apiserver fills its caches within seconds (a few on
#: the local control plane); 30 s leaves a busy control plane room and still names a real
#: fault within a minute.
WARMUP_SECONDS = 30.0
#: A denial not seen again for this long is forgotten: kopf retries a failed request at
#: least every 33 s (``handlers.KOPF_RETRY_BACKOFF``: 30 s + 10 % jitter) and reports
#: nothing when it succeeds, so its fault clears this long after the permission is back.
STALE_SECONDS = 45.0


@dataclass(frozen=True)
class Access:
    """One permission, as an RBAC rule names it: verb, resource(.group), namespace."""

    verb: str
    resource: str
    namespace: str = ""  # "": cluster-wide (all namespaces, or a cluster-scoped kind)

    def __str__(self) -> str:
        where = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
        return f"{self.verb} {self.resource} {where}"


def access_of(method: str, url: str, query: list[tuple[str, str]] | None = None) -> Access:
    """The permission a request needs: ``GET /apis/apps/v1/namespaces/x/statefulsets`` is
    ``list statefulsets.apps in namespace x``; a ``?watch=true`` GET is ``watch``."""
    parts = urlsplit(url)
    params = dict(query or []) | dict(parse_qsl(parts.query))
    segments = [p for p in parts.path.split("/") if p]
    if segments[:1] == ["api"]:
        group, rest = "", segments[2:]
    else:
        group, rest = (segments[1] if len(segments) > 1 else ""), segments[3:]
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] if rest else (parts.path or "/")
    if group:
        resource = f"{resource}.{group}"
    if len(rest) >= 3:  # a subresource: pddeployments.ascendpd.io/status
        resource = f"{resource}/{rest[2]}"
    named = len(rest) >= 2
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, "")
    if method == "GET":
        verb = "watch" if params.get("watch") in ("true", "1") else "get" if named else "list"
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    return Access(verb or method.lower(), resource, namespace)


@dataclass
class _Streak:
    status: int
    first: float
    last: float
    message: str
    fault: bool = False


class Denials:
    """The denial streaks of one operator process, from all of its clients."""

    def __init__(
        self,
        warmup: float = WARMUP_SECONDS,
        stale: float = STALE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.warmup = warmup
        self.stale = stale
        self._clock = clock
        self._lock = threading.Lock()
        self._streaks: dict[Access, _Streak] = {}

    def denied(self, access: Access, status: int, message: str = "") -> bool:
        """Record a 401/403 for ``access``; True once the streak has outlasted the warm-up
        (a fault: retry, but say so), False while it may still be the API server warming up."""
        now = self._clock()
        with self._lock:
            streak = self._streaks.get(access)
            if streak is None or now - streak.last > self.stale:
                streak = self._streaks[access] = _Streak(status, now, now, message)
            streak.status, streak.last, streak.message = status, now, message or streak.message
            newly = not streak.fault and now - streak.first >= self.warmup
            if newly:
                streak.fault = True
        if newly:
            log.error("%s; the operator keeps retrying and recovers once it is granted",
                      _describe(access, streak, now))  # fmt: skip
        return streak.fault

    def any(self) -> bool:
        """Is any streak open? (Cheap: a client asks after every success.)"""
        return bool(self._streaks)

    def allowed(self, access: Access) -> None:
        """A request needing ``access`` succeeded: its streak, if any, is over."""
        with self._lock:
            streak = self._streaks.pop(access, None)
        if streak is not None and streak.fault:
            log.info("granted again: %s (refused for %.0fs)", access, self._clock() - streak.first)

    def faults(self) -> list[str]:
        """Each lasting denial, named as an RBAC rule would name it (for /healthz)."""
        now = self._clock()
        with self._lock:
            for access in [a for a, s in self._streaks.items() if now - s.last > self.stale]:
                del self._streaks[access]
            return sorted(_describe(a, s, now) for a, s in self._streaks.items() if s.fault)


def _describe(access: Access, streak: _Streak, now: float) -> str:
    what = "RBAC denies" if streak.status == 403 else "the API server refuses the credentials for"
    return (f"{what} {access} ({streak.status} for {now - streak.first:.0f}s: "
            f"{streak.message[:300]})")  # fmt: skip


#: The operator process's denials: every client reports here, /healthz reads it.
DENIALS = Denials()
