"""The operator's requests as it sends them: fenced, throttled, judged and decoded.

``Sender.request`` refuses a write once this replica may no longer write (leader election's
fencing), sends a request answered 429 or 503 with Retry-After again after it, this often
(``THROTTLE_ATTEMPTS``; after the last one the Retry-After travels on in the ``KubeError``),
tells ``denials`` how each request fared (a 401 or 403 raises ``Denied``) and decodes the
answer. ``Sender.stream`` opens a watch the same way and yields its events.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.kubeio.denials import DENIALS, Denials, access_of
from ascend_pd_operator.kubeio.errors import Denied, KubeError, NotFound
from ascend_pd_operator.kubeio.wire import Query, Wire

log = logging.getLogger(__name__)

#: Requests answered 429 (or 503) with Retry-After are sent again after it, this often
#: (``request``; urllib3 is told not to, see ``wire.RETRIES``).
THROTTLE_ATTEMPTS = 5
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
MAX_RETRY_AFTER_SECONDS = 30.0


def retry_after(status: int, header: str | None) -> float | None:
    """Seconds to wait before sending a throttled request again, or None: do not retry."""
    if status not in (429, 503) or not header:
        return None
    try:
        seconds = float(header)
    except ValueError:  # an HTTP date: the API server never sends one
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)


def decoded(status: int, data: bytes | None, retry_after: float | None = None) -> Json:
    """The JSON document of a response; a KubeError (NotFound for 404) for a failure."""
    data = data or b"{}"
    try:
        doc = json.loads(data)
    except json.JSONDecodeError:  # e.g. "404 page not found" for an unknown API group
        doc = {"message": data.decode(errors="replace").strip()}
    if status >= 400:
        cls = NotFound if status == 404 else KubeError
        raise cls(status, str(doc.get("reason", "")), str(doc.get("message", data)), retry_after)
    result: Json = doc
    return result


def iter_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Newline-delimited lines from arbitrarily split chunks (a watch stream's framing)."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from (line for line in lines if line.strip())
    if pending.strip():
        yield pending


class Sender:
    """Requests over ``wire``: writes fenced by ``may_write``, throttling answered,
    401/403 judged by ``denials``, answers decoded."""

    def __init__(
        self,
        wire: Wire,
        may_write: Callable[[], bool] | None = None,
        denials: Denials = DENIALS,
    ) -> None:
        self.wire = wire
        #: Where 401/403 answers are judged: warm-up or an RBAC fault (``denials``).
        self.denials = denials
        #: With leader election: False once this replica may no longer write (fencing).
        self.may_write = may_write

    def request(
        self,
        method: str,
        url: str,
        *,
        body: Any = None,
        query: Query | None = None,
        content_type: str = "application/json",
    ) -> Json:
        if method in WRITE_METHODS and self.may_write is not None and not self.may_write():
            raise KubeError(0, "NotLeader", "this replica does not hold the leader lease")
        for attempt in range(1, THROTTLE_ATTEMPTS + 1):
            response = self.wire.send(method, url, query, body, content_type)
            try:
                data = response.data
            finally:
                response.release_conn()
            wait = retry_after(response.status, response.headers.get("Retry-After"))
            if wait is None or attempt == THROTTLE_ATTEMPTS:
                break
            # The API server asked us to come back later: do so, not sooner (client-go too).
            log.debug("%s %s: %d, retrying after %.0fs", method, url, response.status, wait)
            time.sleep(wait)
        # Still throttled after the last attempt: whoever retries the work waits ``wait``.
        self._judge(method, url, query, response.status, data or b"")
        return decoded(response.status, data, wait)

    def stream(self, url: str, query: Query, timeout: tuple[float, float]) -> Iterator[Json]:
        """The events of the watch GET ``url`` ``query``, as the server sends them, until it
        ends the watch; a watch refused raises as ``request`` would (once: no retry)."""
        raw = self.wire.send("GET", url, query, timeout=timeout)  # not read yet
        finished = False
        try:
            if raw.status >= 400:  # raises KubeError naming the status
                wait = retry_after(raw.status, raw.headers.get("Retry-After"))
                data = raw.data
                self._judge("GET", url, query, raw.status, data)
                decoded(raw.status, data, wait)
            self._judge("GET", url, query, raw.status, b"")
            for line in iter_lines(raw.stream(amt=None, decode_content=True)):
                event: Json = json.loads(line)
                yield event
            finished = True
        finally:
            if not finished:  # left mid-stream: the connection cannot serve another request
                raw.close()
            raw.release_conn()

    def _judge(self, method: str, url: str, query: Query | None, status: int, data: bytes) -> None:
        """Tell ``denials`` how a request fared; a 401 or 403 raises ``Denied``."""
        if status < 400:
            if self.denials.any():
                self.denials.allowed(access_of(method, url, query))
            return
        if status not in (401, 403):
            return
        access = access_of(method, url, query)
        try:
            decoded(status, data)
        except KubeError as plain:
            lasting = self.denials.denied(access, status, plain.message)
            raise Denied(plain, access, lasting) from None
