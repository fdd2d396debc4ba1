"""What a failed request raises, and whether the work behind it is worth retrying.

``KubeError`` carries the API server's status, reason and message (and the Retry-After of
a throttled answer); ``NotFound`` is its 404 and ``Denied`` its 401/403 as ``denials``
judged it. ``is_transient`` and ``wait_at_least`` are what every retrying caller (the work
queue, the child watches, the handlers) asks of an exception.
"""

from __future__ import annotations

import urllib3

from ascend_pd_operator.kubeio.denials import Access


class KubeError(Exception):
    def __init__(
        self, status: int, reason: str, message: str, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        #: Seconds the server asked us to wait before sending this request again (429).
        self.retry_after = retry_after


def wait_at_least(exc: BaseException) -> float:
    """How long the server asked us to wait before trying again after ``exc`` (0: not asked).
    Every retry of a failed request (the work queue, a child watch) waits at least this."""
    return (exc.retry_after or 0.0) if isinstance(exc, KubeError) else 0.0


class NotFound(KubeError):
    pass


class Denied(KubeError):
    """401 or 403 for ``access``; ``lasting``: past the API server's warm-up (``denials``),
    so an RBAC fault rather than a restarted API server filling its caches."""

    def __init__(self, error: KubeError, access: Access, lasting: bool) -> None:
        super().__init__(error.status, error.reason, error.message, error.retry_after)
        self.access = access
        self.lasting = lasting


#: Answers that say "try again later", not "this request is wrong".
TRANSIENT_STATUSES = frozenset({409, 429, 500, 502, 503, 504})


def is_transient(exc: BaseException) -> bool:
    """A failure that says nothing about the request: a conflict, throttling, a server
    error, the API server unreachable or timing out, or this replica no longer leading.

    The work is retried later; it never becomes a condition on the PDDeployment.
    """
    if isinstance(exc, Denied):
        return not exc.lasting
    if isinstance(exc, KubeError):
        return exc.status in TRANSIENT_STATUSES or exc.status >= 500 or exc.reason == "NotLeader"
    return isinstance(exc, OSError | urllib3.exceptions.HTTPError)
