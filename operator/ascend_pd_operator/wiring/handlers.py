"""kopf wiring: watch events only enqueue; one worker runs the level-based reconcile.

Every watch event of a PDDeployment (kopf) or of a child (``child_watch``: the API server
filters by our deployment label) puts ``(namespace, name)`` on the rate-limited work queue
(``workqueue.py``); the initial listing at start is the resume, and a resync unit refreshes
the cache of children from a LIST and enqueues every PDDeployment periodically. A failed
reconcile is queued again after its key's backoff. The resync, the worker, every child watch
and a check of kopf's watch tasks run under the supervisor (``supervisor.py``); the
PDDeployment watch also hands the PD planner (``pd_planner.py``) the specs it plans. No kopf
change handlers, timers or daemons are registered, so kopf adds no finalizer and deleting a
PDDeployment never waits for the operator; kopf's persistence still uses our ``ascendpd.io``
prefixes instead of its own.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import kopf

from ascend_pd_operator.api import models
from ascend_pd_operator.api.vocabulary import LABEL_DEPLOYMENT, PREFIX
from ascend_pd_operator.kubeio import metrics
from ascend_pd_operator.kubeio.backoff import Backoff, Streak
from ascend_pd_operator.kubeio.cached_reads import CachedReads
from ascend_pd_operator.kubeio.child_watch import (
    WATCH_SILENCE_SECONDS,
    Synced,
    start_child_watches,
)
from ascend_pd_operator.kubeio.denials import Denials, access_of
from ascend_pd_operator.kubeio.kube import Connection, Kube, KubeError, is_transient, wait_at_least
from ascend_pd_operator.kubeio.live_cache import LiveCache
from ascend_pd_operator.kubeio.memory import release_free_memory
from ascend_pd_operator.kubeio.pd_planner import PDPlanner
from ascend_pd_operator.kubeio.supervisor import Supervisor, Unit
from ascend_pd_operator.kubeio.workqueue import RateLimitedQueue
from ascend_pd_operator.wiring.reconciler import Reconciler

log = logging.getLogger(__name__)

Key = tuple[str, str]
#: Children whose events trigger a reconcile of their PDDeployment.
WATCHED_CHILDREN = (
    "StatefulSet", "Deployment", "Service", "ConfigMap", "Job", "Pod",
    "ServiceAccount", "Role", "RoleBinding", "PodDisruptionBudget", models.SCALER_KIND,
)  # fmt: skip


#: The queue of reconcile keys (client-go style: dedup, one worker per key, backoff).
WorkQueue = RateLimitedQueue[Key]
#: How often the kopf watch check runs (its supervised unit's period).
WATCH_CHECK_SECONDS = 10.0
#: Name prefix kopf gives its per-resource watcher tasks (``orchestration.py``).
KOPF_WATCHER_PREFIX = "watcher for "


#: kopf's own requests retry by this schedule for ever (1 s doubling to 30 s, jittered):
#: kopf's default gives up after 8 tries (54 s of waits) and ends the whole orchestrator.
KOPF_RETRY_BACKOFF = Backoff(base=1.0, cap=30.0)
#: Restarts of kopf's orchestrator after it ended with an error (a LoginError after 401s,
#: an ERROR in a watch stream): 1 s doubling to 60 s; a run that lasted
#: ``ORCHESTRATOR_STABLE_SECONDS`` starts the count afresh.
ORCHESTRATOR_BACKOFF = Backoff(base=1.0, cap=60.0)
ORCHESTRATOR_STABLE_SECONDS = 300.0


def operator_settings() -> kopf.OperatorSettings:
    """kopf's settings, new for every run of its orchestrator."""
    settings = kopf.OperatorSettings()
    settings.networking.error_backoffs = KOPF_RETRY_BACKOFF.endless()
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.peering.standalone = True
    return settings


def run_orchestrator(
    registry: kopf.OperatorRegistry, namespaces: Iterable[str] | None, stop: threading.Event
) -> None:
    """Run kopf until a signal stops it; start it again after any error, with backoff.

    kopf ends its whole orchestrator when one of its tasks fails (a LoginError after the
    API server refused our still valid token while it restarted, an ERROR event in a watch
    stream). The process, its threads and the cache stay; only kopf starts again, re-lists
    the PDDeployments and re-enqueues them all (the reconcile is level-based).
    """
    streak = Streak(ORCHESTRATOR_BACKOFF)
    while not stop.is_set():
        started = time.monotonic()
        try:
            # kopf returns only when SIGTERM or SIGINT stopped it (its signal handlers).
            kopf.run(
                registry=registry,
                settings=operator_settings(),
                standalone=True,
                clusterwide=namespaces is None,
                namespaces=list(namespaces or ()),
            )
            return
        except Exception:
            if time.monotonic() - started > ORCHESTRATOR_STABLE_SECONDS:
                streak.reset()
            delay = streak.next()
            log.exception("kopf's orchestrator ended; starting it again in %.1fs", delay)
            if stop.wait(delay):
                return


class KopfDenials(logging.Handler):
    """Hands kopf's failed requests that were answered 401 or 403 to ``denials``, so that
    a permission kopf alone uses (watching PDDeployments) is named when it is missing.
    kopf reports a request only in its log: ``Request attempt #N failed; will retry:
    GET <url> -> APIForbiddenError(...)``."""

    PATTERN = re.compile(
        r"Request attempt \S+ failed; [^:]+: (?P<method>[A-Z]+) (?P<url>\S+) -> "
        r"API(?P<what>Forbidden|Unauthorized)Error\((?P<quote>['\"])(?P<message>.*?)(?P=quote)"
    )

    def __init__(self, denials: Denials) -> None:
        super().__init__(logging.DEBUG)
        self.denials = denials

    def emit(self, record: logging.LogRecord) -> None:
        found = self.PATTERN.search(record.getMessage())
        if found:
            status = 403 if found["what"] == "Forbidden" else 401
            access = access_of(found["method"], found["url"])
            self.denials.denied(access, status, found["message"])


def login_info(connection: Connection) -> kopf.ConnectionInfo:
    """kopf's connection settings: ``connection``'s server, trust and credentials."""
    creds, bearer = connection.credentials, connection.bearer
    bearer.refresh()
    token = bearer.token() if bearer.refreshes else creds.token
    cert = (creds.cert_pem, creds.key_pem) if creds.cert_pem else bearer.exec_cert
    return kopf.ConnectionInfo(
        server=creds.server,
        ca_data=creds.ca_pem,
        insecure=creds.insecure or None,
        username=creds.username,
        password=creds.password,
        token=token,
        certificate_data=cert[0] if cert else None,
        private_key_data=cert[1] if cert else None,
        default_namespace=creds.namespace,
    )


def build_registry(
    queue: WorkQueue,
    kube: Kube,
    namespaces: Iterable[str] | None,
    resync_seconds: float,
    supervisor: Supervisor,
    cache: LiveCache | None = None,
    planner: PDPlanner | None = None,
    synced: Synced | None = None,
    reads: CachedReads | None = None,
) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def _login(**_: Any) -> kopf.ConnectionInfo:
        # A private registry has none of kopf's default login handlers: kopf talks to the
        # server the reconciler does, as the same user. kopf calls this again after a 401:
        # the token is read again then.
        return login_info(kube.connection)

    stop = supervisor.stop
    watches = WatchCheck()

    @kopf.on.startup(registry=registry)
    async def _startup(**_: Any) -> None:
        watches.attach(asyncio.get_running_loop())
        if any(unit.name == "resync" for unit in supervisor.units()):
            return  # kopf's orchestrator started again; our threads never stopped
        supervisor.start(
            "resync",
            lambda unit: resync_loop(
                unit, queue, kube, namespaces, resync_seconds, stop, cache, reads
            ),
            period=resync_seconds,
        )
        supervisor.start("watch", lambda unit: watches.run(unit, stop), period=WATCH_CHECK_SECONDS)
        # Children: our own watches, filtered by the API server (child_watch.py).
        children = start_child_watches(WATCHED_CHILDREN, namespaces, kube.connection, queue, cache)
        for watch in children:
            supervisor.start(watch.name, watch.supervised(stop), period=WATCH_SILENCE_SECONDS)
        if synced is not None:
            synced.expect(children)  # the workers wait for their first lists

    @kopf.on.event(models.GROUP, models.VERSION, models.PLURAL, registry=registry)
    def _pdd_event(type: str, body: Any, **_: Any) -> None:
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        if reads is not None:  # the reconcile reads the PDDeployment from here
            raw = {**dict(body), "kind": models.KIND}
            if type == "DELETED":
                reads.deleted(raw)
            else:
                reads.seen(raw)
        metrics.DEPLOYMENTS.deployment_spec(
            namespace, name, None if type == "DELETED" else dict(body.get("spec") or {})
        )
        if planner is not None:  # the PD planner keeps the specs with a Planner role
            if type == "DELETED":
                planner.gone(namespace, name)
            else:
                meta = body["metadata"]
                planner.seen(namespace, name, str(meta.get("uid", "")),
                             int(meta.get("generation") or 0), body.get("spec"))  # fmt: skip
        if type != "DELETED":
            queue.add((namespace, name))

    return registry


def resync_once(
    queue: WorkQueue,
    kube: Kube,
    namespaces: Iterable[str] | None,
    cache: LiveCache | None,
    reads: CachedReads | None = None,
) -> None:
    """Refresh the cache from a LIST of our children, then enqueue every PDDeployment.

    The LIST is what lets the resync repair drift no watch event reported: the cache
    alone would call such a child unchanged and skip it. The PDDeployments listed refresh
    ``reads`` too (a copy older than one held is refused there).
    """
    for ns in list(namespaces) if namespaces else [None]:
        if cache is not None:
            for kind in sorted(cache.listed_kinds):
                cache.refresh(kind, ns, kube.list(kind, ns, LABEL_DEPLOYMENT))
        for item in kube.list(models.KIND, ns):
            if reads is not None:
                reads.seen({**item, "kind": models.KIND})
            queue.add((item["metadata"]["namespace"], item["metadata"]["name"]))


def resync_loop(
    unit: Unit,
    queue: WorkQueue,
    kube: Kube,
    namespaces: Iterable[str] | None,
    every: float,
    stop: threading.Event,
    cache: LiveCache | None = None,
    reads: CachedReads | None = None,
) -> None:
    """Periodic resync: every PDDeployment is reconciled at least every ``every`` seconds.

    Supervised: a failed LIST (the API server unreachable, anything) ends this call, and
    the supervisor starts it again after a backoff; a restart resyncs at once.
    """
    if unit.restarts == 0 and stop.wait(every):
        return  # kopf's initial listing has just enqueued everything
    while not stop.is_set():
        resync_once(queue, kube, namespaces, cache, reads)
        release_free_memory()  # what the last pass's reconciles freed
        unit.beat()
        if stop.wait(every):
            return


def worker(
    queue: WorkQueue,
    reconciler: Reconciler,
    stop: threading.Event,
    unit: Unit | None = None,
    ready: Callable[[], bool] = lambda: True,
) -> None:
    """Drain the queue; a failed reconcile is queued again after its key's backoff.

    Conflicts are retried quietly and transient API errors with one log line; neither
    touches the status (the reconciler raises them before writing it). ``ready`` holds
    the worker back (e.g. until this replica leads).
    """
    while not stop.is_set():
        if unit is not None:
            unit.beat()
        if not ready():
            stop.wait(1.0)
            continue
        key = queue.get(timeout=1.0)
        if key is None:
            continue
        started = time.monotonic()
        try:
            result = reconciler.reconcile(*key)
        except Exception as exc:
            metrics.observe_reconcile(_failure(exc), time.monotonic() - started)
            delay = queue.add_rate_limited(key, wait_at_least(exc))
            if isinstance(exc, KubeError) and exc.status == 409:
                log.debug("reconcile of %s/%s: conflict, retrying in %.1fs", *key, delay)
            elif is_transient(exc):
                log.warning("reconcile of %s/%s: %s: %s; retrying in %.1fs",
                            *key, type(exc).__name__, exc, delay)  # fmt: skip
            elif isinstance(exc, KubeError):
                log.warning("reconcile of %s/%s: %s; retrying in %.1fs", *key, exc, delay)
            else:
                log.exception("reconcile of %s/%s failed; retrying in %.1fs", *key, delay)
        else:
            metrics.observe_reconcile("ok" if result else "gone", time.monotonic() - started)
            metrics.DEPLOYMENTS.deployment_status(
                *key,
                result.status if result else None,
                result.plan.events if result and result.plan else (),
            )
            queue.forget(key)
            if result is not None and result.requeue_after is not None:
                queue.add_after(key, result.requeue_after)  # a restart waiting for its backoff
        finally:
            queue.done(key)


def _failure(exc: Exception) -> str:
    """The ``result`` label of a failed reconcile (``metrics.RECONCILE_RESULTS``)."""
    if isinstance(exc, KubeError) and exc.status == 409:
        return "conflict"
    return "transient" if is_transient(exc) else "error"


class WatchCheck:
    """Are kopf's watch streams alive, and does kopf's event loop answer?

    kopf reconnects a watch stream that breaks (the API server going away), but a
    watcher task that ends with an error kopf does not retry stays dead while the
    process lives on. This check runs on kopf's loop: a watcher task it has seen that
    ended other than by cancellation is dead, and the unit stops beating, so /healthz
    fails; so it does when the loop does not answer within the period.
    """

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._tasks: dict[str, asyncio.Task[Any]] = {}

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Check the tasks of this run of kopf's orchestrator (a restart has a new loop)."""
        self.loop, self._tasks = loop, {}

    async def dead_watchers(self) -> list[str]:
        for task in asyncio.all_tasks():
            if task.get_name().startswith(KOPF_WATCHER_PREFIX):
                self._tasks[task.get_name()] = task  # kopf replaces a cancelled one by name
        return sorted(name for name, task in self._tasks.items()
                      if task.done() and not task.cancelled())  # fmt: skip

    def run(self, unit: Unit, stop: threading.Event) -> None:
        reported: list[str] = []
        while not stop.is_set():
            loop = self.loop
            if loop is None or loop.is_closed():  # kopf is starting (again): no progress
                if stop.wait(1.0):
                    return
                continue
            dead = asyncio.run_coroutine_threadsafe(self.dead_watchers(), loop).result(
                timeout=unit.period
            )
            if not dead:
                unit.beat()
            elif dead != reported:
                unit.last_error = f"kopf watch tasks ended: {', '.join(dead)}"
                log.error("%s; /healthz will fail so the operator is restarted", unit.last_error)
                reported = dead
            if stop.wait(unit.period):
                return
