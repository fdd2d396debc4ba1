"""A thin REST client for the few resources the operator touches, with server-side apply.

One field manager applies every child (``apply``), so the operator owns exactly
the fields it sets and a deleted or edited child is restored by the next apply.
Paths come from ``access.RESOURCES``, the same table the chart's RBAC is
written from, so the operator cannot use a resource its Role does not grant; a kind whose
served version depends on the server (``access.LEGACY_VERSIONS``) is addressed at the
version the server's ``/version`` says it serves (read once, when first needed).
Every request is counted in ``metrics`` by verb, kind and status code.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes import client, config
from kubernetes.client import rest

from ascend_pd_operator.api.access import (
    LEGACY_VERSIONS,
    Resource,
    resource_for,
    served_api_version,
)
from ascend_pd_operator.api.vocabulary import FIELD_MANAGER
from ascend_pd_operator.kubeio import metrics
from ascend_pd_operator.kubeio.denials import DENIALS, Access, Denials, access_of

Json = dict[str, Any]
log = logging.getLogger(__name__)


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


def load_config() -> client.ApiClient:
    """In-cluster config when running in a pod, else ``$KUBECONFIG`` / ``~/.kube/config``."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return new_client(client.Configuration.get_default_copy())


def new_client(
    configuration: client.Configuration, component: str = "reconciler"
) -> client.ApiClient:
    """A client for ``Kube``: throttling is answered by ``Kube.request`` alone (``RETRIES``);
    its User-Agent names the operator's ``component``, so that the API server's audit log
    (and a proxy counting retries) can tell the reconciler's requests from the watches'."""
    configuration.retries = RETRIES
    api = client.ApiClient(configuration)
    api.user_agent = f"{USER_AGENT} ({component})"
    return api


def watch_client(api_client: client.ApiClient, streams: int) -> client.ApiClient:
    """A client with the same credentials and a connection pool of ``streams`` (+2) for
    long-lived watches; urllib3 would discard connections beyond its pool's size."""
    configuration = copy.deepcopy(api_client.configuration)
    configuration.connection_pool_maxsize = streams + 2
    return new_client(configuration, "watches")


def path(res: Resource, namespace: str | None = None, name: str | None = None) -> str:
    base = f"/api/{res.version}" if not res.group else f"/apis/{res.group}/{res.version}"
    if namespace is not None and res.namespaced:
        base += f"/namespaces/{quote(namespace)}"
    base += f"/{res.plural}"
    if name is not None:
        base += f"/{quote(name)}"
    return base


#: Requests answered 429 (or 503) with Retry-After are sent again after it, this often
#: (``request``; urllib3 is told not to, see ``RETRIES``).
THROTTLE_ATTEMPTS = 5
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
MAX_RETRY_AFTER_SECONDS = 30.0
#: A watch connects within this many seconds, and hears something (an event, a bookmark or
#: the server's end of the watch) within its own timeout plus the slack.
WATCH_CONNECT_SECONDS = 10.0
WATCH_READ_SLACK_SECONDS = 30.0
#: (connect, read) seconds: a request to an API server that vanished mid-call fails
#: instead of blocking its worker forever.
REQUEST_TIMEOUT = (10.0, 60.0)
#: Objects per LIST request where the caller streams them (the resync): a page of
#: workloads is a few hundred KiB of JSON, where all of them at once would pin megabytes.
LIST_PAGE_SIZE = 100
USER_AGENT = "ascend-pd-operator"
#: urllib3's default retries, except that a 429 or 503 with Retry-After comes back to us:
#: urllib3 would retry a GET on its own and, after its last try, raise a MaxRetryError that
#: hides the Retry-After from the work queue, which then retried sooner than asked.
RETRIES = urllib3.Retry(total=3, respect_retry_after_header=False)
#: Answers that say "try again later", not "this request is wrong".
TRANSIENT_STATUSES = frozenset({409, 429, 500, 502, 503, 504})


def _selectors(labels: str, fields: str) -> list[tuple[str, str]]:
    """The query parameters of a label and a field selector ("" for none)."""
    return [(k, v) for k, v in (("labelSelector", labels), ("fieldSelector", fields)) if v]


def is_transient(exc: BaseException) -> bool:
    """A failure that says nothing about the request: a conflict, throttling, a server
    error, the API server unreachable or timing out, or this replica no longer leading.

    The work is retried later; it never becomes a condition on the PDDeployment.
    """
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, Denied):
        return not exc.lasting
    if isinstance(exc, KubeError):
        return exc.status in TRANSIENT_STATUSES or exc.status >= 500 or exc.reason == "NotLeader"
    if isinstance(exc, ApiException):  # the generated clients (leader election)
        return exc.status in TRANSIENT_STATUSES or not exc.status or exc.status >= 500
    return isinstance(exc, OSError | urllib3.exceptions.HTTPError)


def retry_after(status: int, header: str | None) -> float | None:
    """Seconds to wait before sending a throttled request again, or None: do not retry."""
    if status not in (429, 503) or not header:
        return None
    try:
        seconds = float(header)
    except ValueError:  # an HTTP date: the API server never sends one
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)


def _answer(status: int, data: bytes | None, retry_after: float | None = None) -> Json:
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


def server_minor(version: Json) -> int | None:
    """The minor version of a ``/version`` answer: "20" and "21+" (some providers' builds)
    give 20 and 21; None when it says nothing usable."""
    digits = "".join(c for c in str(version.get("minor", "")) if c.isdigit())
    return int(digits) if digits else None


def iter_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Newline-delimited lines from arbitrarily split chunks (a watch stream's framing)."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from (line for line in lines if line.strip())
    if pending.strip():
        yield pending


class Listing:
    """One LIST, fetched ``page_size`` objects per request (the API server's chunking) as
    it is iterated, so a caller that keeps only part of each object never holds the whole
    list at once. Each iteration lists anew: a caller that walks the objects twice holds
    them in a list. ``resource_version``, from which a watch continues, is the first
    page's (the continue tokens keep every page at that version)."""

    def __init__(
        self, fetch: Callable[[list[tuple[str, str]]], Json], page_size: int = LIST_PAGE_SIZE
    ) -> None:
        self._fetch = fetch
        self.page_size = page_size
        self.resource_version = ""

    @classmethod
    def of(cls, items: Iterable[Json], resource_version: str = "") -> Listing:
        """A listing already in hand (a test's transport)."""
        held = list(items)
        listing = cls(lambda _: {"items": held, "metadata": {"resourceVersion": resource_version}})
        return listing

    def __iter__(self) -> Iterator[Json]:
        token = ""
        while True:
            page = [("limit", str(self.page_size))] + ([("continue", token)] if token else [])
            try:
                doc = self._fetch(page)
            except NotFound:
                return
            meta = doc.get("metadata") or {}
            if not token:
                self.resource_version = str(meta.get("resourceVersion", ""))
            yield from doc.get("items") or []
            token = str(meta.get("continue") or "")
            if not token:
                return


class Kube:
    """Requests through the kubernetes client's auth and TLS settings."""

    def __init__(
        self,
        api_client: client.ApiClient,
        may_write: Callable[[], bool] | None = None,
        denials: Denials = DENIALS,
    ) -> None:
        self.api = api_client
        #: Where 401/403 answers are judged: warm-up or an RBAC fault (``denials``).
        self.denials = denials
        #: With leader election: False once this replica may no longer write (fencing).
        self.may_write = may_write
        self._server_minor: int | None = None
        self._server_known = False
        self._version_lock = threading.Lock()
        self._version_retry_at = 0.0  # monotonic: no GET /version before

    @property
    def server_minor(self) -> int | None:
        """The API server's Kubernetes minor version (1.x), from ``/version`` on first use;
        None if the server does not say (then every kind is used at its table version)."""
        # The reconciler and the resync share this client: one of them asks, the other
        # waits for its answer; after a throttled ask neither asks again before the server
        # said (the other used to send its own GET /version right after the 429).
        with self._version_lock:
            if not self._server_known:
                wait = self._version_retry_at - time.monotonic()
                if wait > 0:
                    raise KubeError(429, "TooManyRequests", "GET /version: the server asked "
                                    f"to wait {wait:.1f}s more", retry_after=wait)  # fmt: skip
                try:
                    self._server_minor = server_minor(self.request("GET", "/version"))
                except NotFound:
                    self._server_minor = None
                except KubeError as exc:
                    self._version_retry_at = time.monotonic() + (exc.retry_after or 0.0)
                    raise
                self._server_known = True
            return self._server_minor

    def resource(self, kind: str) -> Resource:
        """``kind``'s allow-list entry at the version this server serves."""
        if kind in LEGACY_VERSIONS:
            return resource_for(kind, served_api_version(kind, self.server_minor))
        return resource_for(kind)

    def request(
        self,
        method: str,
        url: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> Json:
        if method in WRITE_METHODS and self.may_write is not None and not self.may_write():
            raise KubeError(0, "NotLeader", "this replica does not hold the leader lease")
        for attempt in range(1, THROTTLE_ATTEMPTS + 1):
            response = self._send(method, url, query, body, content_type)
            self._count(method, url, query, content_type, response.status)
            response.read()  # type: ignore[no-untyped-call]
            wait = retry_after(response.status, response.getheader("Retry-After"))  # type: ignore[no-untyped-call]
            if wait is None or attempt == THROTTLE_ATTEMPTS:
                break
            # The API server asked us to come back later: do so, not sooner (client-go too).
            log.debug("%s %s: %d, retrying after %.0fs", method, url, response.status, wait)
            time.sleep(wait)
        # Still throttled after the last attempt: whoever retries the work waits ``wait``.
        self._judge(method, url, query, response.status, response.data or b"")
        return _answer(response.status, response.data, wait)

    def _judge(
        self, method: str, url: str, query: list[tuple[str, str]] | None, status: int, data: bytes
    ) -> None:
        """Tell ``denials`` how a request fared; a 401 or 403 raises ``Denied``."""
        if status < 400:
            if self.denials.any():
                self.denials.allowed(access_of(method, url, query))
            return
        if status not in (401, 403):
            return
        access = access_of(method, url, query)
        try:
            _answer(status, data)
        except KubeError as plain:
            lasting = self.denials.denied(access, status, plain.message)
            raise Denied(plain, access, lasting) from None

    def _send(
        self,
        method: str,
        url: str,
        query: list[tuple[str, str]] | None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: tuple[float, float] | None = None,
    ) -> rest.RESTResponse:
        """One request; the response's body is not read yet (``.response`` streams it)."""
        try:
            return self._call(method, url, query, body, content_type, timeout)
        except Exception:
            self._count(method, url, query, content_type, "error")
            raise

    @staticmethod
    def _count(
        method: str, url: str, query: list[tuple[str, str]] | None, ctype: str, code: int | str
    ) -> None:
        metrics.observe_request(
            metrics.request_verb(method, url, query, ctype), metrics.request_kind(url), code
        )

    def _call(
        self,
        method: str,
        url: str,
        query: list[tuple[str, str]] | None,
        body: Any,
        content_type: str,
        timeout: tuple[float, float] | None,
    ) -> rest.RESTResponse:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        _, full_url, header_params, serialized, _ = self.api.param_serialize(
            method,
            url,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        return self.api.call_api(
            method,
            full_url,
            header_params=header_params,
            body=serialized,
            _request_timeout=timeout or REQUEST_TIMEOUT,
        )

    # --- verbs -------------------------------------------------------------------------

    def get(self, kind: str, namespace: str, name: str) -> Json | None:
        try:
            return self.request("GET", path(self.resource(kind), namespace, name))
        except NotFound:
            return None

    def list(
        self, kind: str, namespace: str | None, selector: str = "", field_selector: str = ""
    ) -> Listing:
        """The objects of ``kind`` matching ``selector`` (and ``field_selector``): the API
        server filters, so only matching objects travel. The one LIST of the client: paged
        as it is iterated, with the list's resourceVersion; a kind the server does not
        serve (PodGroups without Volcano) lists empty."""
        url = path(self.resource(kind), namespace)
        query = _selectors(selector, field_selector)
        return Listing(lambda page: self.request("GET", url, query=[*query, *page]))

    def watch(
        self,
        kind: str,
        namespace: str | None,
        selector: str,
        resource_version: str,
        timeout_seconds: int,
        field_selector: str = "",
    ) -> Iterator[Json]:
        """Watch events (``{"type", "object"}``) of ``kind`` matching ``selector`` after
        ``resource_version``, with bookmarks, until the server ends the watch after
        ``timeout_seconds``. A socket silent for ``WATCH_READ_SLACK_SECONDS`` longer than
        that is a dead connection and raises (urllib3's ReadTimeoutError)."""
        query = [("watch", "true"), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(timeout_seconds))]  # fmt: skip
        query += _selectors(selector, field_selector)
        if resource_version:
            query.append(("resourceVersion", resource_version))
        timeout = (WATCH_CONNECT_SECONDS, timeout_seconds + WATCH_READ_SLACK_SECONDS)
        url = path(self.resource(kind), namespace)
        response = self._send("GET", url, query, timeout=timeout)
        self._count("GET", url, query, "application/json", response.status)
        raw = response.response  # the urllib3 response, not read yet
        finished = False
        try:
            if response.status >= 400:  # raises KubeError naming the status
                wait = retry_after(response.status, response.getheader("Retry-After"))  # type: ignore[no-untyped-call]
                data = raw.data
                self._judge("GET", url, query, response.status, data)
                _answer(response.status, data, wait)
            self._judge("GET", url, query, response.status, b"")
            for line in iter_lines(raw.stream(amt=None, decode_content=True)):
                event: Json = json.loads(line)
                yield event
            finished = True
        finally:
            if not finished:  # left mid-stream: the connection cannot serve another request
                raw.close()
            raw.release_conn()

    def apply(self, manifest: Json) -> Json:
        """Server-side apply with our field manager, taking over conflicting fields."""
        # The manifest names its version (a PodDisruptionBudget's is the server's).
        res = resource_for(manifest["kind"], manifest.get("apiVersion"))
        meta = manifest["metadata"]
        url = path(res, meta.get("namespace"), meta["name"])
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        answer = self.request(
            "PATCH", url, body=manifest, query=query, content_type="application/apply-patch+yaml"
        )
        metrics.observe_write("apply", res.kind)
        return answer

    def delete(
        self,
        kind: str,
        namespace: str,
        name: str,
        uid: str = "",
        grace_period_seconds: int | None = None,
    ) -> None:
        """Delete ``name`` (only while its uid is ``uid``, if given: 409 otherwise), with
        ``grace_period_seconds`` if given (0: a force-delete)."""
        body: Json = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": "Background",
        }
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        with contextlib.suppress(NotFound):
            self.request("DELETE", path(self.resource(kind), namespace, name), body=body)
            metrics.observe_write("delete", kind)

    def delete_collection(
        self, kind: str, namespace: str, labels: dict[str, str]
    ) -> tuple[str, ...]:
        """Delete every ``kind`` in ``namespace`` carrying ``labels``, in one request (the API
        server deletes them all, whether or not this process lives to see the answer); the
        uids it deleted."""
        body: Json = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": "Background",
        }
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        answer = self.request("DELETE", path(self.resource(kind), namespace), body=body,
                              query=[("labelSelector", selector)])  # fmt: skip
        uids = tuple(str(item["metadata"]["uid"]) for item in answer.get("items") or [])
        for _ in uids:
            metrics.observe_write("delete", kind)
        return uids

    def patch_labels(
        self, kind: str, namespace: str, name: str, labels: dict[str, str | None]
    ) -> Json:
        """Set (or, for None, remove) labels on an object we do not apply (a pod)."""
        return self.request(
            "PATCH",
            path(resource_for(kind), namespace, name),
            body={"metadata": {"labels": labels}},
            content_type="application/merge-patch+json",
        )

    def patch_status(self, kind: str, namespace: str, name: str, status: Json) -> Json:
        url = path(self.resource(kind), namespace, name) + "/status"
        return self.request(
            "PATCH", url, body={"status": status}, content_type="application/merge-patch+json"
        )

    def create(self, kind: str, namespace: str, body: Json, dry_run: bool = False) -> Json:
        """Create ``body``; with ``dry_run`` the API server validates and admits it as it
        would, and stores nothing."""
        query = [("dryRun", "All")] if dry_run else None
        return self.request("POST", path(self.resource(kind), namespace), body=body, query=query)
