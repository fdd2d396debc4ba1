"""What one child watch knows of the objects in its scope, and the reports each change makes.

A ``Ledger`` remembers, per object, the resourceVersion and owner it last reported. A new
or changed object goes into the ``LiveCache`` (as ``kept`` keeps it) and puts its owning
PDDeployment on the work queue; a vanished one is forgotten the same way; every one feeds
the per-deployment metrics. An unchanged object (a re-list) is not reported again, and an
object is recorded only after its reports went out, so a failed report is retried by the
next list. ``NodeLedger`` and ``EventLedger`` are the two kinds that report differently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import LABEL_DEPLOYMENT
from ascend_pd_operator.kubeio import metrics
from ascend_pd_operator.kubeio.kept import event_owner, slim_event
from ascend_pd_operator.kubeio.live_cache import TOMBSTONE_KINDS, LiveCache

Key = tuple[str, str]


class Queue(Protocol):
    def add(self, key: Key) -> None: ...


class Ledger:
    """(namespace, name) -> (resourceVersion, owner) of every object of ``kind`` a watch
    reported, kept in step with ``cache`` and ``queue``; ``keep`` picks the objects worth
    keeping (None: all)."""

    def __init__(
        self,
        kind: str,
        queue: Queue,
        cache: LiveCache | None = None,
        keep: Callable[[Json], bool] | None = None,
    ) -> None:
        self.kind = kind
        self.queue = queue
        self.cache = cache
        self.keep = keep
        self.known: dict[Key, tuple[str, str]] = {}

    def replace(self, objects: Iterable[Json]) -> None:
        """A fresh list: new and changed objects are reported, vanished ones reported gone,
        unchanged ones not at all."""
        current: set[Key] = set()
        for obj in objects:
            current.add(key_of(obj))
            self.seen(obj)
        for key in [k for k in self.known if k not in current]:
            metrics.DEPLOYMENTS.child_gone(self.kind, *key)
            self.gone(key)

    def deleted(self, obj: Json) -> None:
        """A DELETED event: ``obj`` is gone (a pod's last state is kept as a tombstone)."""
        key = key_of(obj)
        metrics.DEPLOYMENTS.child_gone(self.kind, *key)
        if self.cache is not None and self.kind in TOMBSTONE_KINDS and key in self.known:
            self.cache.seen({**obj, "kind": self.kind})  # its last state, for the record
        self.gone(key)

    def seen(self, obj: Json) -> None:
        meta = obj["metadata"]
        key = key_of(obj)
        version = str(meta.get("resourceVersion", ""))
        owner = (meta.get("labels") or {}).get(LABEL_DEPLOYMENT, "")
        metrics.DEPLOYMENTS.child_seen(self.kind, obj)  # every pod: restarts per instance
        if self.known.get(key, ("", ""))[0] == version:
            return  # a re-list of an unchanged object: nothing new
        if self.keep is not None and not self.keep(obj):
            if key in self.known:
                self.gone(key)  # it was news and is no longer: forget it like a deletion
            return
        if self.cache is not None:
            # List items carry no kind; the cache keys by it (and keeps what ``kept`` says).
            self.cache.seen({**obj, "kind": self.kind})
        if owner:
            self.queue.add((key[0], owner))
        # Recorded last: if reporting failed, the next list reports the object again.
        self.known[key] = (version, owner)

    def gone(self, key: Key) -> None:
        _, owner = self.known.get(key, ("", ""))
        if self.cache is not None:
            self.cache.gone(self.kind, *key)
        if owner:
            self.queue.add((key[0], owner))
        self.known.pop(key, None)


class NodeLedger(Ledger):
    """Nodes: when one's Ready condition or out-of-service taint changes, or it goes, every
    PDDeployment with a pod on it is queued (its group recovery reads them). A heartbeat
    that changes nothing else queues nothing."""

    def __init__(self, queue: Queue, cache: LiveCache) -> None:
        super().__init__("Node", queue, cache)
        self.node_cache = cache

    def seen(self, obj: Json) -> None:
        name = str(obj["metadata"]["name"])
        before = self.node_cache.listed_one("Node", "", name)
        super().seen(obj)
        after = self.node_cache.listed_one("Node", "", name)
        if before is None or after is None or _facts(before) != _facts(after):
            self._queue_owners(name)

    def gone(self, key: Key) -> None:
        super().gone(key)
        self._queue_owners(key[1])

    def _queue_owners(self, node: str) -> None:
        for namespace, owner in self.node_cache.owners_on_node(node):
            self.queue.add((namespace, owner))


class EventLedger(Ledger):
    """FailedCreate Events: one about an instance of ours is kept slim (``slim_event``)
    under its PDDeployment's name; any other is not kept."""

    def __init__(self, queue: Queue, cache: LiveCache) -> None:
        super().__init__("Event", queue, cache)

    def seen(self, obj: Json) -> None:
        if not event_owner(obj):
            key = key_of(obj)
            if key in self.known:
                self.gone(key)
            return
        super().seen(slim_event(obj))


def _facts(node: Json) -> Json:
    """What group recovery reads of a (slim) node: all of it but its resourceVersion."""
    return {k: v for k, v in node.items() if k != "metadata"}


def key_of(obj: Json) -> Key:
    meta = obj["metadata"]
    return (str(meta.get("namespace", "")), str(meta["name"]))
