"""kopf wiring: watch events only enqueue; one worker runs the level-based reconcile.

Every watch event of a PDDeployment or of a child (found by our deployment
label) puts ``(namespace, name)`` on a de-duplicating queue; the initial listing
at start is the resume, and a resync thread enqueues every PDDeployment
periodically. No kopf change handlers, timers or daemons are registered, so
kopf adds no finalizer and deleting a PDDeployment never waits for the operator;
kopf's persistence still uses our ``ascendpd.io`` prefixes instead of its own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

import kopf

from . import api
from .api_access import resource_for
from .kube import Kube, KubeError
from .live_cache import LiveCache
from .model_source import COMPONENT_INSPECTOR
from .naming import LABEL_DEPLOYMENT, LABEL_ROLE, PREFIX
from .reconciler import Reconciler
from .status import launch_refusal

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

    @kopf.on.event(api.GROUP, api.VERSION, api.PLURAL, registry=registry)
    def _pdd_event(type: str, body: Any, **_: Any) -> None:
        if type != "DELETED":
            queue.put((body["metadata"]["namespace"], body["metadata"]["name"]))

    for kind in WATCHED_CHILDREN:
        res = resource_for(kind)
        labels: dict[str, Any] = {LABEL_DEPLOYMENT: kopf.PRESENT}
        # Runtime pods reach us through their StatefulSet's status; only the inspector's
        # pod and a pod whose command SGLang refused carry news of their own (a
        # termination message), and a refusal changes no StatefulSet status.
        when = _pod_with_news if kind == "Pod" else None
        kopf.on.event(
            res.group, res.version, res.plural, labels=labels, when=when, registry=registry
        )(_child_handler(queue, kind, cache))
    return registry


def _pod_with_news(body: Any, **_: Any) -> bool:
    labels = (body.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_ROLE) == COMPONENT_INSPECTOR or bool(launch_refusal(dict(body)))


def _child_handler(queue: WorkQueue, kind: str, cache: LiveCache | None) -> Callable[..., None]:
    def handler(type: str | None, body: Any, **_: Any) -> None:
        meta = body["metadata"]
        if cache is not None:
            if type == "DELETED":
                cache.gone(kind, meta["namespace"], meta["name"])
            else:
                cache.seen({**dict(body), "kind": kind})
        owner = (meta.get("labels") or {}).get(LABEL_DEPLOYMENT)
        if owner:
            queue.put((meta["namespace"], owner))

    return handler


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
