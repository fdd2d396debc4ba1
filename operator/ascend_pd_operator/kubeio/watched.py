"""The objects the watches reported, by key and by owner, and the deleted ones a while.

``Watched`` holds each object as the cache keeps it, keyed by (kind, namespace, name) and
indexed by (kind, namespace, deployment label), so a reconcile lists its own children
without scanning everyone's. ``Tombstones`` keeps the last state of deleted objects for a
while. Neither locks: ``LiveCache`` holds one lock around both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import LABEL_DEPLOYMENT

Key = tuple[str, str, str]  # (kind, namespace, name)


def contains(live: Mapping[str, Any] | None, wanted: Mapping[str, Any] | None) -> bool:
    """Every entry of ``wanted`` (labels, annotations) is in ``live``."""
    return all((live or {}).get(k) == v for k, v in (wanted or {}).items())


class Watched:
    """Objects by key, indexed by owner."""

    def __init__(self) -> None:
        self._objects: dict[Key, Json] = {}
        #: (kind, namespace, value of our deployment label) -> the keys of those objects.
        self._by_owner: dict[tuple[str, str, str], set[Key]] = {}

    def __len__(self) -> int:
        return len(self._objects)

    def get(self, key: Key) -> Json | None:
        return self._objects.get(key)

    def put(self, key: Key, obj: Json) -> None:
        old = self._objects.get(key)
        if old is not None:
            self._unindex(key, old)
        self._objects[key] = obj
        self._by_owner.setdefault(_owner_key(key, obj), set()).add(key)

    def update(self, key: Key, obj: Json) -> bool:
        """``put`` unless the object held is at ``obj``'s resourceVersion; True if put."""
        old = self._objects.get(key)
        version = obj["metadata"].get("resourceVersion")
        if old is not None and old["metadata"].get("resourceVersion") == version:
            return False
        self.put(key, obj)
        return True

    def pop(self, key: Key) -> Json | None:
        old = self._objects.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return old

    def _unindex(self, key: Key, obj: Json) -> None:
        owner = _owner_key(key, obj)
        keys = self._by_owner.get(owner)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_owner[owner]

    def keys(self, kind: str, namespace: str | None) -> list[Key]:
        """The keys of ``kind`` in ``namespace`` (None: every one)."""
        return [key for key in self._objects if key[0] == kind and namespace in (None, key[1])]

    def of_owner(self, kind: str, namespace: str, owner: str) -> list[Json]:
        """The objects of ``kind`` in ``namespace`` whose deployment label is ``owner``."""
        return [self._objects[key] for key in self._by_owner.get((kind, namespace, owner), ())]

    def in_scope(self, kind: str, namespace: str | None) -> list[tuple[str, Json]]:
        """(namespace, object) of every object of ``kind`` in ``namespace`` (None: all)."""
        return [
            (ns, obj) for (k, ns, _), obj in self._objects.items()
            if k == kind and namespace in (None, ns)
        ]  # fmt: skip


def _owner_key(key: Key, obj: Json) -> tuple[str, str, str]:
    """The index entry of ``obj``: its kind, namespace and deployment label ("" if none)."""
    labels = obj["metadata"].get("labels") or {}
    return key[0], key[1], str(labels.get(LABEL_DEPLOYMENT, ""))


class Tombstones:
    """Deleted objects as last seen, each kept ``seconds`` after its deletion."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._kept: dict[Key, tuple[float, Json]] = {}

    def add(self, key: Key, last: Json, now: float) -> None:
        """``key`` was deleted at ``now`` (monotonic) as ``last``; older ones expire."""
        self._kept[key] = (now, last)
        for old in [k for k, (at, _) in self._kept.items() if now - at > self.seconds]:
            del self._kept[old]

    def matching(self, kind: str, namespace: str, labels: Mapping[str, str]) -> list[Json]:
        return [
            obj
            for (k, ns, _), (_, obj) in self._kept.items()
            if k == kind and ns == namespace and contains(obj["metadata"].get("labels"), labels)
        ]
