"""Watches of our children that the API server filters by our label: only our objects travel.

kopf filters ``labels=`` in Python after receiving every object of a kind, so an operator
beside 5,000 unrelated pods would parse and drop each of them and every change to them.
kopf cannot send a label selector, so children are watched here directly, one ``ChildWatch``
per kind and namespace (or one per kind with ``--all-namespaces``), each asking for
``ascendpd.io/deployment`` (pods: only the model inspector's), and kopf keeps the
PDDeployment watch alone.

A ``ChildWatch`` is a reflector in the style of client-go's: list (the list's
resourceVersion), then watch from the last resourceVersion seen (bookmarks keep it fresh on a
quiet watch), re-watch when the server ends a watch, re-list when the server says the version
is too old (410 Gone) or after any error, waiting with capped exponential backoff between
failures. A re-list replaces what this watch knew: an object that vanished while the watch
was down is reported gone. Every change feeds the ``LiveCache`` and puts the owning
PDDeployment on the work queue, as kopf's child handler did.

``ListWatch`` owns one scope's requests and what each answer means; ``ChildWatch.run(stop)``
is the whole long-lived loop around them: it returns once ``stop`` is set and may be
started again after an exception (each start re-lists). What a watch knows of its objects,
and what it reports when they change, is its ``ledger.Ledger``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import (
    COMPONENT_INSPECTOR,
    COMPONENT_ROUTER,
    LABEL_COMPONENT,
    LABEL_DEPLOYMENT,
    LABEL_ROLE,
    ROLES,
)
from ascend_pd_operator.decisions.waits import launch_refusal
from ascend_pd_operator.kubeio.backoff import Streak
from ascend_pd_operator.kubeio.errors import KubeError, wait_at_least
from ascend_pd_operator.kubeio.kube import Connection, Listing
from ascend_pd_operator.kubeio.ledger import EventLedger, Ledger, NodeLedger, Queue
from ascend_pd_operator.kubeio.live_cache import LiveCache

log = logging.getLogger(__name__)

#: The server ends each watch after a random time in this range (client-go: 5 to 10 minutes),
#: so the watches of one operator do not all reconnect at once.
WATCH_TIMEOUT_RANGE = (300, 600)
#: A watch that ends sooner than this without an event counts as a failure (backoff).
MIN_WATCH_SECONDS = 1.0
#: A working watch hears something (an event, a bookmark, or the server ending it and a new
#: list) at least this often; the supervisor's health check allows this much silence.
WATCH_SILENCE_SECONDS = WATCH_TIMEOUT_RANGE[1] + 30.0


def selector_for(kind: str) -> str:
    """The label selector the API server applies for ``kind``: every child of ours (every
    node: none of them is ours)."""
    return "" if kind == "Node" else LABEL_DEPLOYMENT


def pod_with_news(pod: Json) -> bool:
    """The pods the operator keeps: runtime pods (their template revision, generation and
    readiness drive rollouts and routing), the router's (the generation each routes to),
    the inspector's pod (its termination message is
    the inspection's result) and any pod whose command SGLang refused."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return (
        labels.get(LABEL_ROLE) in ROLES
        or labels.get(LABEL_COMPONENT) in (COMPONENT_INSPECTOR, COMPONENT_ROUTER)
        or bool(launch_refusal(pod))
    )


#: The Events the operator reads, as the API server filters them: the StatefulSet
#: controller's ``FailedCreate``, a pod the API server refused (Pod Security, a
#: ResourceQuota, a webhook). A StatefulSet's status has no condition for it (its
#: controller sets none), so
#: this Warning Event is the only place it is told; no other Event travels.
EVENT_FIELD_SELECTOR = "involvedObject.kind=StatefulSet,reason=FailedCreate"
#: kind -> which of our objects of that kind the operator keeps (default: all)
KEEP: dict[str, Callable[[Json], bool]] = {"Pod": pod_with_news}


class Transport(Protocol):
    """What a watch needs of the API (``kube.Kube`` in the operator, a fake in tests)."""

    def list(
        self, kind: str, namespace: str | None, selector: str = "", field_selector: str = ""
    ) -> Listing: ...

    def watch(
        self,
        kind: str,
        namespace: str | None,
        selector: str,
        resource_version: str,
        timeout_seconds: int,
        field_selector: str = "",
    ) -> Iterator[Json]: ...


class Heartbeat(Protocol):
    """A supervised unit as a watch sees it: it reports progress, and why it has none."""

    def beat(self) -> None: ...

    def failed(self, exc: BaseException) -> None: ...


class Expired(Exception):
    """The server no longer has the resourceVersion the watch asked for (410 Gone)."""


class WatchError(Exception):
    """The watch stream reported an error other than 410 (an ERROR event)."""


class ListWatch:
    """The list and watch requests of one kind in one namespace (None: all), and what each
    answer means: a list replaces what ``ledger`` knows, an event changes it, and the
    resourceVersion to continue from follows both."""

    def __init__(
        self,
        kind: str,
        namespace: str | None,
        transport: Transport,
        ledger: Ledger,
        timeout_range: tuple[int, int] = WATCH_TIMEOUT_RANGE,
    ) -> None:
        self.kind = kind
        self.namespace = namespace
        self.selector = selector_for(kind)
        #: A field selector the API server applies too ("" for none).
        self.field_selector = ""
        self.transport = transport
        self.ledger = ledger
        self.timeout_range = timeout_range
        #: The resourceVersion to continue from: the last list's, event's or bookmark's.
        self.resource_version = ""
        #: Set once a list succeeded: what this watch knows is then whole (``Synced``).
        self.listed = threading.Event()
        #: Told of every successful list or event (the supervised unit's beat).
        self.heartbeat: Heartbeat | None = None

    @property
    def name(self) -> str:
        return f"watch {self.kind} in {self.namespace or 'all namespaces'}"

    def _progress(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.beat()

    def relist(self) -> None:
        """List anew and replace what this watch knew: new, changed and vanished objects
        are reported; unchanged ones are not."""
        listing = self.transport.list(
            self.kind, self.namespace, self.selector, field_selector=self.field_selector
        )
        self.ledger.replace(listing)
        self.resource_version = listing.resource_version
        self.listed.set()
        self._progress()

    def watch_once(self, stop: threading.Event) -> bool:
        """One watch request from ``resource_version`` until the server ends it or ``stop``;
        True when it delivered an event or lasted a while (the connection works)."""
        timeout = random.randint(*self.timeout_range)
        started = time.monotonic()
        delivered = False
        events = self.transport.watch(
            self.kind, self.namespace, self.selector, self.resource_version, timeout,
            field_selector=self.field_selector,
        )  # fmt: skip
        try:
            for event in events:
                self.handle(event)
                delivered = True
                if stop.is_set():
                    break
        except KubeError as exc:
            if exc.status == 410:
                raise Expired(str(exc)) from exc
            raise
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()  # a generator left early releases its connection now
        return delivered or time.monotonic() - started >= MIN_WATCH_SECONDS

    def handle(self, event: Json) -> None:
        """Apply one watch event; raise Expired (410) or WatchError for an ERROR event."""
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            message = f"{code} {obj.get('reason', '')}: {obj.get('message', '')}"
            if code == 410:
                raise Expired(message)
            raise WatchError(message)
        version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        if kind in ("ADDED", "MODIFIED"):
            self.ledger.seen(obj)
        elif kind == "DELETED":
            self.ledger.deleted(obj)
        elif kind != "BOOKMARK":  # a bookmark carries nothing but its resourceVersion
            raise WatchError(f"unknown watch event type {kind!r}")
        if version:
            self.resource_version = version
        self._progress()


class ChildWatch(ListWatch):
    """A ``ListWatch`` run for as long as the operator runs, as a supervised unit: list, then
    watch until stopped, waiting ``backoff`` between failures."""

    def __init__(
        self,
        kind: str,
        namespace: str | None,
        transport: Transport,
        queue: Queue,
        cache: LiveCache | None = None,
        backoff: Streak | None = None,
        timeout_range: tuple[int, int] = WATCH_TIMEOUT_RANGE,
        ledger: Ledger | None = None,
    ) -> None:
        ledger = ledger or Ledger(kind, queue, cache, KEEP.get(kind))
        super().__init__(kind, namespace, transport, ledger, timeout_range)
        self.backoff = backoff or Streak()

    def supervised(self, stop: threading.Event) -> Callable[[Heartbeat], None]:
        """The body of this watch's supervised unit: ``run`` reporting progress to it."""

        def body(unit: Heartbeat) -> None:
            self.heartbeat = unit
            self.run(stop)

        return body

    def run(self, stop: threading.Event) -> None:
        """List, then watch until ``stop``; re-list after 410 and after every failure."""
        must_list = True
        while not stop.is_set():
            try:
                if must_list:
                    self.relist()
                    must_list = False
                if self.watch_once(stop):
                    self.backoff.reset()
                    continue
                # Ended at once without a single event: do not hammer the server.
                delay = self.backoff.next()
            except Expired:
                # The normal way a long-lost watch resumes: list again, at once the first time.
                must_list = True
                if self.backoff.failures == 0:
                    self.backoff.failures = 1
                    log.info("%s: resourceVersion %s expired; listing again",
                             self.name, self.resource_version)  # fmt: skip
                    continue
                delay = self.backoff.next()
                log.warning("%s: expired again; listing in %.1f s", self.name, delay)
            except Exception as exc:  # any failure: back off, then list again
                must_list = True
                if self.heartbeat is not None:
                    self.heartbeat.failed(exc)
                delay = max(self.backoff.next(), wait_at_least(exc))
                log.warning("%s failed (%s: %s); listing again in %.1f s",
                            self.name, type(exc).__name__, exc, delay)  # fmt: skip
            if stop.wait(delay):
                return


class NodeWatch(ChildWatch):
    """Nodes, cluster-wide, reported by a ``NodeLedger``: a change that group recovery
    reads reconciles every PDDeployment with a pod on the node."""

    def __init__(self, transport: Transport, queue: Queue, cache: LiveCache) -> None:
        super().__init__("Node", None, transport, queue, cache, ledger=NodeLedger(queue, cache))


class EventWatch(ChildWatch):
    """The StatefulSet controller's FailedCreate Events in one namespace (None: all), as the
    API server selects them (``EVENT_FIELD_SELECTOR``; Events carry no labels). Each one
    of an instance of ours is kept slim (``EventLedger``) and reconciles its PDDeployment,
    whose status then names why the instance has no pods. The controller repeats a refused
    create with backoff, counting into the same Event, and Events expire after an hour
    (the API server's ``--event-ttl``), so what is kept stays small."""

    def __init__(
        self, namespace: str | None, transport: Transport, queue: Queue, cache: LiveCache
    ) -> None:
        super().__init__(
            "Event", namespace, transport, queue, cache, ledger=EventLedger(queue, cache)
        )
        self.selector = ""
        self.field_selector = EVENT_FIELD_SELECTOR


def child_watches(
    kinds: Iterable[str],
    namespaces: Iterable[str] | None,
    transport: Transport,
    queue: Queue,
    cache: LiveCache | None = None,
) -> list[ChildWatch]:
    """One watch per kind and namespace (per kind alone when ``namespaces`` is None)."""
    scopes: list[str | None] = list(namespaces) if namespaces else [None]
    return [ChildWatch(k, ns, transport, queue, cache) for k in kinds for ns in scopes]


def start_child_watches(
    kinds: Iterable[str],
    namespaces: Iterable[str] | None,
    connection: Connection,
    queue: Queue,
    cache: LiveCache | None,
) -> list[ChildWatch]:
    """Every child watch, on a connection pool of their own sized for them (each watch
    holds a connection; the reconciler's pool stays free). The caller runs each one as a
    supervised unit (``ChildWatch.supervised``)."""
    from ascend_pd_operator.kubeio.kube import Kube

    kinds = list(kinds)
    namespaces = list(namespaces) if namespaces else None
    scopes: list[str | None] = list(namespaces) if namespaces else [None]
    # One connection per watch: the children's and the Events' per scope, and the nodes'.
    count = (len(kinds) + 1) * len(scopes)
    transport = Kube(connection.with_pool(count + 1, "watches"))
    watches = child_watches(kinds, namespaces, transport, queue, cache)
    if cache is not None:
        watches.append(NodeWatch(transport, queue, cache))
        watches += [EventWatch(ns, transport, queue, cache) for ns in scopes]
    return watches


class Synced:
    """Whether every watch the reconciles read from has listed once (client-go's
    ``HasSynced``, which controller-runtime's workers wait for). A reconcile before that
    sees a cache without some pods or children: an operator restarting, failing over or
    upgraded then reported Ready instances as not ready (a Warning Event each) until the
    pod watch caught up. The Events' watches are not waited for: the status only names
    their FailedCreate reasons, and a namespace whose Events the operator may not read
    must not stop every reconcile."""

    def __init__(self) -> None:
        self._watches: list[ListWatch] | None = None

    def expect(self, watches: Iterable[ListWatch]) -> None:
        """The watches to wait for (set once they are started)."""
        self._watches = [w for w in watches if not isinstance(w, EventWatch)]

    def __call__(self) -> bool:
        return self._watches is not None and all(w.listed.is_set() for w in self._watches)
