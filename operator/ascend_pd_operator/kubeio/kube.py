"""A thin REST client for the few resources the operator touches, with server-side apply.

One field manager applies every child (``apply``), so the operator owns exactly
the fields it sets and a deleted or edited child is restored by the next apply.
Paths come from ``access.RESOURCES``, the same table the chart's RBAC is
written from, so the operator cannot use a resource its Role does not grant.

``Kube`` holds the verbs; each is one request through ``sender`` (fencing, throttling,
denials) over ``wire`` (the client's auth and TLS, every request counted in ``metrics``).
What a failed request raises lives in ``errors``. This module is the client's one face:
the names its users import from the other modules are exported here too.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from urllib.parse import quote

from ascend_pd_operator.api.access import Resource, resource_for
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import FIELD_MANAGER
from ascend_pd_operator.kubeio import metrics
from ascend_pd_operator.kubeio.denials import DENIALS, Denials
from ascend_pd_operator.kubeio.errors import (
    Denied,
    KubeError,
    NotFound,
    is_transient,
    wait_at_least,
)
from ascend_pd_operator.kubeio.sender import (
    MAX_RETRY_AFTER_SECONDS,
    THROTTLE_ATTEMPTS,
    Sender,
    iter_lines,
    retry_after,
)
from ascend_pd_operator.kubeio.wire import Connection, Query, Wire

__all__ = [
    "MAX_RETRY_AFTER_SECONDS",
    "THROTTLE_ATTEMPTS",
    "Connection",
    "Denied",
    "Kube",
    "KubeError",
    "Listing",
    "NotFound",
    "is_transient",
    "iter_lines",
    "path",
    "retry_after",
    "wait_at_least",
]


#: A watch connects within this many seconds, and hears something (an event, a bookmark or
#: the server's end of the watch) within its own timeout plus the slack.
WATCH_CONNECT_SECONDS = 10.0
WATCH_READ_SLACK_SECONDS = 30.0
#: Objects per LIST request where the caller streams them (the resync): a page of
#: workloads is a few hundred KiB of JSON, where all of them at once would pin megabytes.
LIST_PAGE_SIZE = 100
#: After a LIST of an optional kind (PodGroup) found its API not served (404), further
#: LISTs of it answer empty without a request for this long: every reconcile lists the
#: kinds it prunes, and on a cluster without Volcano that was one request in ~18 per
#: deployment for nothing. An apply of the kind asks again at once.
ABSENT_RECHECK_SECONDS = 60.0


def path(res: Resource, namespace: str | None = None, name: str | None = None) -> str:
    base = f"/api/{res.version}" if not res.group else f"/apis/{res.group}/{res.version}"
    if namespace is not None and res.namespaced:
        base += f"/namespaces/{quote(namespace)}"
    base += f"/{res.plural}"
    if name is not None:
        base += f"/{quote(name)}"
    return base


def _selectors(labels: str, fields: str) -> Query:
    """The query parameters of a label and a field selector ("" for none)."""
    return [(k, v) for k, v in (("labelSelector", labels), ("fieldSelector", fields)) if v]


def _delete_options() -> Json:
    """A deletion's options: the garbage collector deletes the dependents afterwards."""
    return {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}


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
    """The verbs the operator uses on the API server, each one request through ``sender``."""

    def __init__(
        self,
        connection: Connection,
        may_write: Callable[[], bool] | None = None,
        denials: Denials = DENIALS,
    ) -> None:
        self.connection = connection
        self.sender = Sender(Wire(connection), may_write, denials)
        self.request = self.sender.request
        #: optional kind -> monotonic time until which its API is taken as not served
        self._absent: dict[str, float] = {}

    @property
    def may_write(self) -> Callable[[], bool] | None:
        """With leader election: False once this replica may no longer write (fencing)."""
        return self.sender.may_write

    @may_write.setter
    def may_write(self, check: Callable[[], bool] | None) -> None:
        self.sender.may_write = check

    def resource(self, kind: str) -> Resource:
        """``kind``'s allow-list entry."""
        return resource_for(kind)

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
        res = self.resource(kind)
        if res.optional and self._absent.get(kind, 0.0) > time.monotonic():
            return Listing.of(())
        url = path(res, namespace)
        query = _selectors(selector, field_selector)

        def fetch(page: Query) -> Json:
            try:
                return self.request("GET", url, query=[*query, *page])
            except NotFound:
                if res.optional:  # a LIST's 404: the kind's API is not served
                    self._absent[kind] = time.monotonic() + ABSENT_RECHECK_SECONDS
                raise

        return Listing(fetch)

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
        yield from self.sender.stream(url, query, timeout)

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
        self._absent.pop(res.kind, None)  # served after all (Volcano installed meanwhile)
        metrics.observe_write("apply", res.kind)
        return answer

    def delete(
        self,
        kind: str,
        namespace: str,
        name: str,
        uid: str = "",
        grace_period_seconds: int | None = None,
        orphan: bool = False,
    ) -> None:
        """Delete ``name`` (only while its uid is ``uid``, if given: 409 otherwise), with
        ``grace_period_seconds`` if given (0: a force-delete); ``orphan``: its dependents
        stay (the garbage collector only removes their owner reference)."""
        body = _delete_options()
        if orphan:
            body["propagationPolicy"] = "Orphan"
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
        body = _delete_options()
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
        return self.patch(kind, namespace, name, {"metadata": {"labels": labels}})

    def patch(self, kind: str, namespace: str, name: str, body: Json) -> Json:
        """A JSON merge patch of an object we do not apply (a pod's labels, the PD planner's
        scaler count); a ``metadata.resourceVersion`` in ``body`` makes it conditional
        (409 when the object changed since)."""
        return self.request(
            "PATCH",
            path(resource_for(kind), namespace, name),
            body=body,
            content_type="application/merge-patch+json",
        )

    def patch_status(self, kind: str, namespace: str, name: str, status: Json) -> Json:
        url = path(self.resource(kind), namespace, name) + "/status"
        return self.request(
            "PATCH", url, body={"status": status}, content_type="application/merge-patch+json"
        )

    def replace(self, kind: str, namespace: str, name: str, body: Json) -> Json:
        """Replace ``name`` with ``body``; its ``metadata.resourceVersion`` makes it
        conditional (409 when the object changed since)."""
        return self.request("PUT", path(self.resource(kind), namespace, name), body=body)

    def create(self, kind: str, namespace: str, body: Json, dry_run: bool = False) -> Json:
        """Create ``body``; with ``dry_run`` the API server validates and admits it as it
        would, and stores nothing."""
        query = [("dryRun", "All")] if dry_run else None
        return self.request("POST", path(self.resource(kind), namespace), body=body, query=query)
