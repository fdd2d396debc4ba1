"""kopf wiring: watch events only enqueue; one worker runs the level-based reconcile.

Every watch event of a PDDeployment (kopf) or of a child (``child_watch``: the API
server filters by our deployment label) puts ``(namespace, name)`` on a de-duplicating
queue; the initial listing at start is the resume, and a resync thread enqueues every
PDDeployment periodically. No kopf change handlers, timers or daemons are registered, so
kopf adds no finalizer and deleting a PDDeployment never waits for the operator;
kopf's persistence still uses our ``ascendpd.io`` prefixes instead of its own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

import kopf

from . import api
from .child_watch import start_child_watches
from .kube import Kube, KubeError
from .live_cache import LiveCache
from .naming import PREFIX
from .reconciler import Reconciler

log = logging.getLogger(__name__)

Key = tuple[str, str]
#: Children whose events trigger a reconcile of their PDDeployment.
WATCHED_CHILDREN = ("StatefulSet", "Deployment", "Service", "ConfigMap", "Job", "Pod")


class WorkQueue:
    """A set of keys with at most one pending entry per key, drained by one worker."""

    def __init__(self) -> None:
        self._pending: list[Key] = []
        self._cond = threading.Condition()

    def put(self, key: Key) -> None:
        with self._cond:
            if key not in self._pending:
                self._pending.append(key)
                self._cond.notify()

    def get(self, timeout: float | None = None) -> Key | None:
        with self._cond:
            if not self._pending:
                self._cond.wait(timeout)
            return self._pending.pop(0) if self._pending else None

    def __len__(self) -> int:
        with self._cond:
            return len(self._pending)


def configure(settings: kopf.OperatorSettings) -> None:
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.peering.standalone = True


def build_registry(
    queue: WorkQueue,
    kube: Kube,
    namespaces: Iterable[str] | None,
    resync_seconds: float,
    stop: threading.Event,
    cache: LiveCache | None = None,
) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def _login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # A private registry has none of kopf's default login handlers: use the same
        # in-cluster service account or $KUBECONFIG as the reconciler's client.
        info: kopf.ConnectionInfo | None = kopf.login_via_client(**kwargs)
        return info

    @kopf.on.startup(registry=registry)
    def _startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings)
        threading.Thread(
            target=_resync_loop,
            args=(queue, kube, namespaces, resync_seconds, stop),
            name="resync",
            daemon=True,
        ).start()
        # Children: our own watches, filtered by the API server (child_watch.py).
        start_child_watches(WATCHED_CHILDREN, namespaces, kube.api, queue, cache, stop)

    @kopf.on.event(api.GROUP, api.VERSION, api.PLURAL, registry=registry)
    def _pdd_event(type: str, body: Any, **_: Any) -> None:
        if type != "DELETED":
            queue.put((body["metadata"]["namespace"], body["metadata"]["name"]))

    return registry


def _resync_loop(
    queue: WorkQueue,
    kube: Kube,
    namespaces: Iterable[str] | None,
    every: float,
    stop: threading.Event,
) -> None:
    """Periodic resync: every PDDeployment is reconciled at least every ``every`` seconds."""
    while not stop.wait(every):
        for ns in list(namespaces) if namespaces else [None]:
            try:
                for item in kube.list(api.KIND, ns):
                    queue.put((item["metadata"]["namespace"], item["metadata"]["name"]))
            except (KubeError, OSError) as exc:
                log.warning("resync: listing PDDeployments failed: %s", exc)


def worker(queue: WorkQueue, reconciler: Reconciler, stop: threading.Event) -> None:
    """Drain the queue; a failed reconcile is retried on the next event or resync."""
    while not stop.is_set():
        key = queue.get(timeout=1.0)
        if key is None:
            continue
        try:
            reconciler.reconcile(*key)
        except KubeError as exc:  # e.g. a conflict or the namespace going away: retried
            log.warning("reconcile of %s/%s: %s", *key, exc)
        except Exception:  # keep the worker alive; the next trigger retries
            log.exception("reconcile of %s/%s failed", *key)
