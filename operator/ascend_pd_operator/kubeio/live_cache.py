"""What the watches last saw of each child, so an unchanged child is not applied again.

The watches feed every child they report (``seen``, ``gone``; the resync's ``refresh``);
the reconciler asks whether a manifest would change its child (``unchanged``, by the rules
of ``apply_records``), records what it applied (``applied``) and lists children from here
(``listed``): the kinds the cache is told it watches completely (``listed_kinds``) are
listed from it, so a reconcile's prune needs no LIST request. What is kept of each object
is ``kept``'s; the objects themselves are held by ``watched``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import LABEL_DEPLOYMENT
from ascend_pd_operator.kubeio.apply_records import Applied, digest, unchanged
from ascend_pd_operator.kubeio.kept import kept
from ascend_pd_operator.kubeio.watched import Key, Tombstones, Watched, contains

#: Kinds whose deleted objects are remembered a while (a pod deleted by someone else
#: means its instance must restart, even if the reconcile only runs after the deletion).
TOMBSTONE_KINDS = frozenset({"Pod"})
TOMBSTONE_SECONDS = 600.0


class LiveCache:
    """Children as the watches last reported them, and what we last applied to each, under
    one lock: the watches write, the reconcilers read."""

    def __init__(self, listed_kinds: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._watched = Watched()
        self._applied: dict[Key, Applied] = {}
        #: Deleted pods, their last state, kept ``TOMBSTONE_SECONDS`` (group recovery).
        self._tombstones = Tombstones(TOMBSTONE_SECONDS)
        #: Kinds whose watch feeds every object into this cache: listed from here.
        self.listed_kinds = frozenset(listed_kinds)

    # --- fed by the watches -------------------------------------------------------------
    def seen(self, obj: Json) -> None:
        held = kept(obj)
        meta = held["metadata"]  # a node's gets its namespace "" here
        with self._lock:
            self._watched.put((obj["kind"], meta["namespace"], meta["name"]), held)

    def _forget(self, key: Key) -> Json | None:
        """Forget ``key``: its object and its apply record (the lock is held)."""
        self._applied.pop(key, None)
        return self._watched.pop(key)

    def refresh(self, kind: str, namespace: str | None, items: Iterable[Json]) -> int:
        """Replace what the watch reported of ``kind`` in ``namespace`` (None: every one) by
        the result of a fresh LIST; return how many entries changed.

        The periodic resync calls this, so drift the watch did not report (an edit that
        removes our deployment label is dropped by the handlers' label filter; a stream can
        miss an event) is seen: a child listed at another resourceVersion than the one we
        applied is applied again, and a child no longer listed is forgotten (applied afresh).
        A LIST older than a watch event costs at most one extra apply.
        """
        fresh = {
            (kind, obj["metadata"]["namespace"], obj["metadata"]["name"]): kept(
                {**obj, "kind": kind}
            )
            for obj in items
        }
        with self._lock:
            stale = [key for key in self._watched.keys(kind, namespace) if key not in fresh]
            for key in stale:
                self._forget(key)
            changed = sum(self._watched.update(key, obj) for key, obj in fresh.items())
        return changed + len(stale)

    def gone(self, kind: str, namespace: str, name: str) -> None:
        # A deleted child is applied afresh anyway; forgetting its records keeps the cache
        # from growing with every PDDeployment ever deleted.
        key = (kind, namespace, name)
        with self._lock:
            last = self._forget(key)
            if kind in TOMBSTONE_KINDS and last is not None:
                self._tombstones.add(key, last, time.monotonic())

    def tombstones(self, kind: str, namespace: str, labels: Mapping[str, str]) -> list[Json]:
        """Objects of ``kind`` deleted lately, as last seen, that carry all of ``labels``."""
        with self._lock:
            return self._tombstones.matching(kind, namespace, labels)

    # --- used by the reconciler ---------------------------------------------------------
    def unchanged(self, manifest: Json) -> Json | None:
        """The watched child when applying ``manifest`` again would change nothing."""
        key = _key(manifest)
        manifest_digest = digest(manifest)  # outside the lock: the watches wait for it
        with self._lock:
            obj = self._watched.get(key)
            applied = self._applied.get(key)
        return obj if unchanged(manifest, manifest_digest, applied, obj) else None

    def applied(self, manifest: Json, response: Json) -> None:
        record = Applied.of(digest(manifest), response)
        with self._lock:
            self._applied[_key(manifest)] = record

    def listed(self, kind: str, namespace: str, labels: Mapping[str, str]) -> list[Json]:
        """The watched objects of ``kind`` in ``namespace`` that carry all of ``labels``."""
        owner = labels.get(LABEL_DEPLOYMENT)
        with self._lock:
            if owner is not None:
                candidates = self._watched.of_owner(kind, namespace, owner)
            else:
                candidates = [obj for _, obj in self._watched.in_scope(kind, namespace)]
        return [obj for obj in candidates if contains(obj["metadata"].get("labels"), labels)]

    def listed_one(self, kind: str, namespace: str, name: str) -> Json | None:
        """The watched object ``kind``/``namespace``/``name``, if the watch reported it."""
        with self._lock:
            return self._watched.get((kind, namespace, name))

    def owners_on_node(self, node: str) -> set[tuple[str, str]]:
        """(namespace, PDDeployment) of every watched pod of ours bound to ``node``."""
        with self._lock:
            pods = [
                (ns, obj) for ns, obj in self._watched.in_scope("Pod", None)
                if (obj.get("spec") or {}).get("nodeName") == node
            ]  # fmt: skip
        owners = {
            (ns, (obj["metadata"].get("labels") or {}).get(LABEL_DEPLOYMENT)) for ns, obj in pods
        }
        return {(ns, str(owner)) for ns, owner in owners if owner}

    def records(self) -> int:
        """How many objects and apply records the cache holds."""
        with self._lock:
            return len(self._watched) + len(self._applied)


def _key(manifest: Json) -> Key:
    meta = manifest["metadata"]
    return (manifest["kind"], meta["namespace"], meta["name"])
