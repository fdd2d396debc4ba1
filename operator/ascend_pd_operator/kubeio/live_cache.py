"""What the watches last saw of each child, so an unchanged child is not applied again.

Server-side apply of an unchanged manifest changes nothing but is still a write
request; at every resync and every child status change that adds up. The
reconciler remembers, per child, the digest of the manifest it applied and the
resourceVersion the API server answered with. While the watch reports that same
resourceVersion (nobody edited or deleted the child since) and the manifest's
digest is the same, ``needs_apply`` says no and the watched object stands in for
the apply response. Any edit, deletion or new desired state applies again.

A controller updating a workload's status changes its resourceVersion but not its
``metadata.generation``; ``only_status_changed`` lets such a child be skipped too when
the generation is the one our apply produced and our labels, annotations and owner
references are still on it (any spec edit bumps the generation; a metadata edit of
ours shows). The kinds the cache is told it watches completely (``listed_kinds``) are
listed from it, so a reconcile's prune needs no LIST request.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ascend_pd_operator.api.vocabulary import LABEL_DEPLOYMENT
from ascend_pd_operator.kubeio.kept import DROPPED, SPEC_KEPT, kept

Json = dict[str, Any]
Key = tuple[str, str, str]  # (kind, namespace, name)
#: Kinds whose deleted objects are remembered a while (a pod deleted by someone else
#: means its instance must restart, even if the reconcile only runs after the deletion).
TOMBSTONE_KINDS = frozenset({"Pod"})
TOMBSTONE_SECONDS = 600.0


def digest(manifest: Json) -> str:
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


def needs_apply(
    manifest_digest: str, last_applied: tuple[str, str] | None, watched_version: str | None
) -> bool:
    """Apply unless this exact manifest was applied and the child is unchanged since."""
    if last_applied is None or watched_version is None:
        return True
    applied_digest, applied_version = last_applied
    return applied_digest != manifest_digest or applied_version != watched_version


def _contains(live: Mapping[str, Any] | None, wanted: Mapping[str, Any] | None) -> bool:
    return all((live or {}).get(k) == v for k, v in (wanted or {}).items())


def only_status_changed(manifest: Json, applied_generation: int | None, watched: Json) -> bool:
    """The watched child differs from what our apply returned in its status alone."""
    meta, live = manifest["metadata"], watched["metadata"]
    if applied_generation is None or live.get("generation") != applied_generation:
        return False
    refs = live.get("ownerReferences") or []
    return (
        _contains(live.get("labels"), meta.get("labels"))
        and _contains(live.get("annotations"), meta.get("annotations"))
        and all(ref in refs for ref in meta.get("ownerReferences") or [])
    )


def covers(live: Any, wanted: Any) -> bool:
    """Every field of ``wanted`` is in ``live`` with the same value (maps may hold more)."""
    if isinstance(wanted, dict):
        return isinstance(live, dict) and all(
            k in live and covers(live[k], v) for k, v in wanted.items()
        )
    return bool(live == wanted)


def others_added(manifest: Json, watched: Json) -> bool:
    """The watched child still holds all of our manifest; another controller only added
    to it (on 1.20 the token controller adds ``secrets`` to a new ServiceAccount, which
    cost one more apply per deployment). Kinds the cache trims never pass."""
    if manifest["kind"] in SPEC_KEPT or manifest["kind"] in DROPPED:
        return False
    wanted = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
    return covers(watched, wanted)


class LiveCache:
    """Children as the watches last reported them, and what we last applied to each."""

    def __init__(self, listed_kinds: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._objects: dict[Key, Json] = {}
        #: (kind, namespace, value of our deployment label) -> the keys of those objects: a
        #: reconcile lists its own children without scanning everyone's under the lock.
        self._by_owner: dict[tuple[str, str, str], set[Key]] = {}
        self._applied: dict[Key, tuple[str, str]] = {}
        self._generations: dict[Key, int] = {}
        #: Deleted pods, their last state, kept ``TOMBSTONE_SECONDS`` (group recovery).
        self._tombstones: dict[Key, tuple[float, Json]] = {}
        #: Kinds whose watch feeds every object into this cache: listed from here.
        self.listed_kinds = frozenset(listed_kinds)

    # --- fed by the watch handlers ----------------------------------------------------
    def seen(self, obj: Json) -> None:
        held = kept(obj)
        meta = held["metadata"]  # a node's gets its namespace "" here
        with self._lock:
            self._put((obj["kind"], meta["namespace"], meta["name"]), held)

    def _put(self, key: Key, obj: Json) -> None:
        """Store ``obj`` and index it by owner (the lock is held)."""
        old = self._objects.get(key)
        if old is not None:
            self._unindex(key, old)
        self._objects[key] = obj
        self._by_owner.setdefault(_owner_key(key, obj), set()).add(key)

    def _pop(self, key: Key) -> Json | None:
        """Forget ``key``: its object, index entry and apply records (the lock is held)."""
        old = self._objects.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        self._applied.pop(key, None)
        self._generations.pop(key, None)
        return old

    def _unindex(self, key: Key, obj: Json) -> None:
        owner = _owner_key(key, obj)
        keys = self._by_owner.get(owner)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_owner[owner]

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
        changed = 0
        with self._lock:
            stale = [
                key
                for key in self._objects
                if key[0] == kind and namespace in (None, key[1]) and key not in fresh
            ]
            for key in stale:
                self._pop(key)
            for key, obj in fresh.items():
                old = self._objects.get(key)
                version = obj["metadata"].get("resourceVersion")
                if old is None or old["metadata"].get("resourceVersion") != version:
                    self._put(key, obj)
                    changed += 1
        return changed + len(stale)

    def gone(self, kind: str, namespace: str, name: str) -> None:
        # A deleted child is applied afresh anyway; forgetting its records keeps the cache
        # from growing with every PDDeployment ever deleted.
        key = (kind, namespace, name)
        with self._lock:
            last = self._pop(key)
            if kind in TOMBSTONE_KINDS and last is not None:
                now = time.monotonic()
                self._tombstones[key] = (now, last)
                for old in [k for k, (at, _) in self._tombstones.items()
                            if now - at > TOMBSTONE_SECONDS]:  # fmt: skip
                    del self._tombstones[old]

    def tombstones(self, kind: str, namespace: str, labels: Mapping[str, str]) -> list[Json]:
        """Objects of ``kind`` deleted lately, as last seen, that carry all of ``labels``."""
        with self._lock:
            return [
                obj
                for (k, ns, _), (_, obj) in self._tombstones.items()
                if k == kind
                and ns == namespace
                and _contains(obj["metadata"].get("labels"), labels)
            ]

    # --- used by the reconciler -------------------------------------------------------
    def unchanged(self, manifest: Json) -> Json | None:
        """The watched child when applying ``manifest`` again would change nothing."""
        key = _key(manifest)
        manifest_digest = digest(manifest)  # outside the lock: the watches wait for it
        with self._lock:
            obj = self._objects.get(key)
            applied = self._applied.get(key)
            generation = self._generations.get(key)
        version = obj["metadata"].get("resourceVersion") if obj else None
        if not needs_apply(manifest_digest, applied, version):
            return obj
        if (
            obj is not None
            and applied is not None
            and applied[0] == manifest_digest
            and (only_status_changed(manifest, generation, obj) or others_added(manifest, obj))
        ):
            return obj
        return None

    def listed(self, kind: str, namespace: str, labels: Mapping[str, str]) -> list[Json]:
        """The watched objects of ``kind`` in ``namespace`` that carry all of ``labels``."""
        owner = labels.get(LABEL_DEPLOYMENT)
        with self._lock:
            if owner is not None:
                keys = self._by_owner.get((kind, namespace, owner), set())
                candidates = [self._objects[key] for key in keys]
            else:
                candidates = [
                    obj for (k, ns, _), obj in self._objects.items() if (k, ns) == (kind, namespace)
                ]
        return [obj for obj in candidates if _contains(obj["metadata"].get("labels"), labels)]

    def listed_one(self, kind: str, namespace: str, name: str) -> Json | None:
        """The watched object ``kind``/``namespace``/``name``, if the watch reported it."""
        with self._lock:
            return self._objects.get((kind, namespace, name))

    def owners_on_node(self, node: str) -> set[tuple[str, str]]:
        """(namespace, PDDeployment) of every watched pod of ours bound to ``node``."""
        with self._lock:
            pods = [
                (ns, obj) for (k, ns, _), obj in self._objects.items()
                if k == "Pod" and (obj.get("spec") or {}).get("nodeName") == node
            ]  # fmt: skip
        owners = {
            (ns, (obj["metadata"].get("labels") or {}).get(LABEL_DEPLOYMENT)) for ns, obj in pods
        }
        return {(ns, str(owner)) for ns, owner in owners if owner}

    def records(self) -> int:
        """How many objects and apply records the cache holds."""
        with self._lock:
            return len(self._objects) + len(self._applied) + len(self._generations)

    def applied(self, manifest: Json, response: Json) -> None:
        key, record = (
            _key(manifest),
            (digest(manifest), str(response["metadata"].get("resourceVersion", ""))),
        )
        generation = response["metadata"].get("generation")
        with self._lock:
            self._applied[key] = record
            if generation is None:
                self._generations.pop(key, None)
            else:
                self._generations[key] = int(generation)


def _owner_key(key: Key, obj: Json) -> tuple[str, str, str]:
    """The index entry of ``obj``: its kind, namespace and deployment label ("" if none)."""
    labels = obj["metadata"].get("labels") or {}
    return key[0], key[1], str(labels.get(LABEL_DEPLOYMENT, ""))


def _key(manifest: Json) -> Key:
    meta = manifest["metadata"]
    return (manifest["kind"], meta["namespace"], meta["name"])
