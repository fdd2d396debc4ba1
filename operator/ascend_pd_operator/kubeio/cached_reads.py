"""The reconcile's reads of a PDDeployment and its model objects, served from the watches.

Every reconcile read the PDDeployment, its model ConfigMap and (while inspecting) the
inspector Job with a GET: at rest, two requests per deployment per resync
(bench/operator.md). controller-runtime reads from its informers instead; this is the same,
with the same guards against acting on an old object:

- **A first read is live.** After the process starts, and again whenever it becomes the
  leader (``new_term``), the first read of each object is a GET (controller-runtime waits
  for its informers to sync; a GET per object is the same promise without a global wait).
- **Never older than what this process wrote or saw.** Each object's newest resourceVersion
  this process wrote (the status patch's answer, an apply's) or read live is its floor
  (``Freshness``); a cached copy below it is not used, the read is a GET. The PDDeployment
  store (``Store``) takes the answer of our own status patch and refuses any older copy a
  lagging watch event or resync LIST brings, so the planner never computes a status from
  one older than the status it wrote last.
- **A conflict reads live.** A write answered 409 makes the next read of that key a GET
  (``suspect``); the work queue retries the key quietly.
- **Absent is not trusted.** An object the cache does not hold is read with a GET (a
  create the watch has not reported yet, a ConfigMap created after its reference).

resourceVersions are compared as the integers the API server issues (etcd revisions); one
that is not an integer is never trusted to be newer, so the read is live. ``CachedReads``
does the I/O; ``Freshness`` and ``Store`` are pure and lock for the workers and watches.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from ascend_pd_operator.api import models
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.kubeio.kept import keeps_data
from ascend_pd_operator.kubeio.live_cache import LiveCache
from ascend_pd_operator.kubeio.watched import Key


def version(obj: Json | None) -> int | None:
    """``obj``'s resourceVersion as an integer (None: absent or not an integer)."""
    raw = ((obj or {}).get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(raw))
    except ValueError:
        return None


def key_of(obj: Json) -> Key:
    meta = obj["metadata"]
    return (str(obj["kind"]), str(meta.get("namespace", "")), str(meta["name"]))


class Freshness:
    """Per key: the newest resourceVersion this process wrote or read live (the floor), and
    whether the key was read live since the process started or last became leader."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._floor: dict[Key, int] = {}
        self._primed: set[Key] = set()

    def new_term(self) -> None:
        """The process became the leader: the next read of every key is live."""
        with self._lock:
            self._primed.clear()

    def raise_floor(self, key: Key, obj: Json | None) -> None:
        """This process wrote ``obj`` or read it live: no older copy of ``key`` is used."""
        found = version(obj)
        if found is None:
            return
        with self._lock:
            self._floor[key] = max(found, self._floor.get(key, found))

    def read_live(self, key: Key, obj: Json | None) -> None:
        """``obj`` (None: not found) was just read with a GET."""
        self.raise_floor(key, obj)
        with self._lock:
            self._primed.add(key)

    def suspect(self, key: Key) -> None:
        """A write of ``key`` conflicted: its next read is live."""
        with self._lock:
            self._primed.discard(key)

    def suspect_namespace(self, namespace: str) -> None:
        """A write in ``namespace`` conflicted: the next read of each of its keys is live
        (the reconcile that failed does not say which object it read was behind)."""
        with self._lock:
            self._primed = {key for key in self._primed if key[1] != namespace}

    def trusts(self, key: Key, cached: Json | None) -> bool:
        """May the reconcile act on ``cached`` as ``key``'s current state?"""
        if cached is None:
            return False
        found = version(cached)
        with self._lock:
            if key not in self._primed or found is None:
                return False
            return found >= self._floor.get(key, found)

    def forget(self, key: Key) -> None:
        with self._lock:
            self._floor.pop(key, None)
            self._primed.discard(key)


class Terms:
    """``leading`` as the workers ask it, starting a new term of ``freshness`` each time it
    turns true: a replica that (again) leads reads every key live first, as its standby
    time's watches may lag what the previous leader wrote."""

    def __init__(self, leading: Callable[[], bool], freshness: Freshness) -> None:
        self._leading = leading
        self._freshness = freshness
        self._lock = threading.Lock()
        self._was = False

    def __call__(self) -> bool:
        with self._lock:
            now = self._leading()
            if now and not self._was:
                self._freshness.new_term()
            self._was = now
            return now


class Store:
    """Objects by key, each replaced only by a copy at least as new (resourceVersion), so a
    lagging watch event or LIST cannot bring back what a newer answer replaced. A deleted
    key remembers the deletion's version a while, refusing older copies of it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[Key, Json] = {}
        #: key -> the version it was deleted at (older offers are refused)
        self._deleted: dict[Key, int] = {}

    def offer(self, obj: Json) -> bool:
        """Keep ``obj`` (its ``kind`` set) unless an at least as new copy is held; True if
        kept. managedFields are not kept: nothing reads them."""
        key = key_of(obj)
        new = version(obj)
        kept = {**obj, "metadata": {k: v for k, v in obj["metadata"].items()
                                    if k != "managedFields"}}  # fmt: skip
        with self._lock:
            held = version(self._objects.get(key))
            gone_at = self._deleted.get(key)
            if new is not None and gone_at is not None and new <= gone_at:
                return False
            if new is not None and held is not None and new < held:
                return False
            self._objects[key] = kept
            self._deleted.pop(key, None)
            return True

    def deleted(self, obj: Json) -> None:
        key = key_of(obj)
        with self._lock:
            self._objects.pop(key, None)
            at = version(obj)
            if at is not None:
                self._deleted[key] = at
            if len(self._deleted) > 10_000:  # a bound: deletions are rare, keys are not reused
                self._deleted.pop(next(iter(self._deleted)))

    def get(self, key: Key) -> Json | None:
        with self._lock:
            return self._objects.get(key)

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)


#: Where a kind's cached copies come from: (kind, namespace, name) -> the copy or None.
Source = Callable[[str, str, str], Json | None]


class CachedReads:
    """GETs served from the watches' copies when ``Freshness`` trusts them.

    ``store`` holds the PDDeployments (fed by kopf's watch and the resync's LIST, and by
    our own status writes); ``sources`` name where other kinds are read from (the children's
    ``LiveCache``, which keeps the facts ConfigMap's data). Any other kind is always a GET.
    """

    def __init__(
        self,
        get: Callable[[str, str, str], Json | None],
        store: Store | None = None,
        sources: dict[str, Source] | None = None,
        freshness: Freshness | None = None,
        kinds: Iterable[str] | None = None,
    ) -> None:
        self._get = get
        #: the kinds read through here (None: any); a write of another kind is not recorded
        self.kinds = frozenset(kinds) if kinds is not None else None
        self.store = store or Store()
        self.sources = dict(sources or {})
        self.freshness = freshness or Freshness()
        #: how many reads were served from the cache and how many were GETs
        self.hits = 0
        self.misses = 0

    def cached(self, kind: str, namespace: str, name: str) -> Json | None:
        source = self.sources.get(kind)
        if source is not None:
            return source(kind, namespace, name)
        return self.store.get((kind, namespace, name))

    def get(self, kind: str, namespace: str, name: str) -> Json | None:
        """``kind``/``namespace``/``name`` as the reconcile may act on it (None: absent)."""
        key = (kind, namespace, name)
        cached = self.cached(kind, namespace, name)
        if self.freshness.trusts(key, cached):
            self.hits += 1
            return cached
        self.misses += 1
        live = self._get(kind, namespace, name)
        self.freshness.read_live(key, live)
        if live is not None and kind not in self.sources:
            self.store.offer({**live, "kind": kind})
        return live

    def wrote(self, kind: str, obj: Json) -> None:
        """The API server's answer to a write of ours: the floor of its key; a
        PDDeployment's answer (the status patch's) is kept as the newest copy."""
        if not obj.get("metadata") or (self.kinds is not None and kind not in self.kinds):
            return  # nothing reads it here: its floor would only take memory
        obj = {**obj, "kind": kind}
        self.freshness.raise_floor(key_of(obj), obj)
        if kind not in self.sources:
            self.store.offer(obj)

    # --- fed by the PDDeployment watch and the resync ---------------------------------
    def seen(self, obj: Json) -> None:
        self.store.offer(obj)

    def listed(self, kind: str, items: Iterable[Json]) -> None:
        for item in items:
            self.store.offer({**item, "kind": kind})

    def deleted(self, obj: Json) -> None:
        self.store.deleted(obj)
        self.freshness.forget(key_of(obj))


def from_watches(get: Callable[[str, str, str], Json | None], cache: LiveCache) -> CachedReads:
    """The operator's reads: PDDeployments from their own store; the model-facts ConfigMaps
    (kept whole by ``kept.keeps_data``) and the inspector Jobs from the children's cache. A
    user's ConfigMap is not watched (it carries no label of ours): a GET each reconcile."""

    def configmap(kind: str, namespace: str, name: str) -> Json | None:
        found = cache.listed_one(kind, namespace, name)
        return found if found is not None and keeps_data(found) else None

    return CachedReads(
        get,
        sources={"ConfigMap": configmap, "Job": cache.listed_one},
        kinds={models.KIND, "ConfigMap", "Job"},
    )
