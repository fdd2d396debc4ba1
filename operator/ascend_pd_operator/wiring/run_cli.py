"""``ascend-pd run [--namespace NS ...| --all-namespaces]``: run the operator.

kopf watches PDDeployments and their children; ``--workers`` threads reconcile. The
workers, the resync, leader election, the PD planner (``kubeio.pd_planner``) and a check
of kopf's watches run under one supervisor, and ``/healthz`` on ``--health-port`` fails
once one of them has made no progress for its period plus ``--unhealthy-after-seconds``;
Prometheus metrics are served at ``/metrics`` on ``--metrics-port`` (``metrics.py``).
Credentials come from the pod's service account in a cluster, else ``$KUBECONFIG``. With
``--leader-elect`` only the replica holding the Lease reconciles and plans.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ascend_pd_operator.api.access import (
    DEFAULT_HEALTH_PORT,
    DEFAULT_METRICS_PORT,
    HEALTH_PATH,
    METRICS_PATH,
)
from ascend_pd_operator.kubeio.supervisor import DEFAULT_GRACE_SECONDS

if TYPE_CHECKING:
    from ascend_pd_operator.kubeio.leader import LeaderElector
    from ascend_pd_operator.kubeio.wire import Connection

#: Reconcile threads. Applying 100 new deployments' children one deployment at a time
#: left the API server idle between requests (bench/operator.md); 4 keep it busy.
DEFAULT_WORKERS = 4


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        help="watch this namespace (repeatable)",
    )
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace")
    parser.add_argument(
        "--health-port",
        type=int,
        default=DEFAULT_HEALTH_PORT,
        help=f"port of the liveness endpoint {HEALTH_PATH} ({DEFAULT_HEALTH_PORT}; 0: off)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=DEFAULT_METRICS_PORT,
        help=f"port of the Prometheus endpoint {METRICS_PATH} ({DEFAULT_METRICS_PORT}; 0: off)",
    )
    parser.add_argument(
        "--resync-seconds", type=float, default=60.0, help="periodic resync interval (60)"
    )
    parser.add_argument(
        "--workers",
        type=_positive_int,
        default=DEFAULT_WORKERS,
        help="deployments reconciled at once; one deployment is never reconciled by two "
        f"workers at once ({DEFAULT_WORKERS})",
    )
    parser.add_argument(
        "--restart-backoff-seconds",
        type=float,
        default=10.0,
        help="group recovery: wait before an instance's second restart; doubles (10)",
    )
    parser.add_argument(
        "--restart-backoff-max-seconds",
        type=float,
        default=300.0,
        help="group recovery: the longest wait between restarts (300)",
    )
    parser.add_argument(
        "--restart-loop-limit",
        type=int,
        default=5,
        help="group recovery: restarts within the window that make a restart loop (5)",
    )
    parser.add_argument(
        "--restart-loop-window-seconds",
        type=float,
        default=600.0,
        help="group recovery: the window restarts are counted in (600)",
    )
    parser.add_argument(
        "--unhealthy-after-seconds",
        type=float,
        default=DEFAULT_GRACE_SECONDS,
        help="/healthz fails once a supervised thread has made no progress for its period "
        f"plus this long ({DEFAULT_GRACE_SECONDS:g})",
    )
    parser.add_argument(
        "--leader-elect",
        action="store_true",
        help="reconcile only while holding the Lease ascend-pd-operator in $POD_NAMESPACE",
    )
    parser.add_argument(
        "--placement-device-info",
        action="store_true",
        help="spec.placement: also leave out the NPUs MindCluster's device plugin reports "
        "unhealthy or network-unhealthy (ConfigMaps mindx-dl-deviceinfo-<node> in "
        "kube-system; needs list on configmaps there)",
    )
    parser.add_argument("--debug", action="store_true", help="debug logging")


def run(args: argparse.Namespace) -> int:
    from ascend_pd_operator.decisions.recovery import RecoveryPolicy
    from ascend_pd_operator.kubeio import health, metrics
    from ascend_pd_operator.kubeio.cached_reads import Terms, from_watches
    from ascend_pd_operator.kubeio.child_watch import Synced
    from ascend_pd_operator.kubeio.crds import CrdGate
    from ascend_pd_operator.kubeio.credentials import ConfigError
    from ascend_pd_operator.kubeio.denials import DENIALS
    from ascend_pd_operator.kubeio.discovery import warn_below_floor
    from ascend_pd_operator.kubeio.kube import (
        Connection,
        Denied,
        Kube,
        is_transient,
        wait_at_least,
    )
    from ascend_pd_operator.kubeio.leader_metrics import LeaderMetrics
    from ascend_pd_operator.kubeio.live_cache import LiveCache
    from ascend_pd_operator.kubeio.pd_planner import PERIOD_SECONDS, PDPlanner
    from ascend_pd_operator.kubeio.supervisor import Supervisor
    from ascend_pd_operator.wiring.handlers import (
        WATCHED_CHILDREN,
        KopfDenials,
        WorkQueue,
        build_registry,
        run_orchestrator,
        worker,
    )
    from ascend_pd_operator.wiring.reconciler import Reconciler

    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.debug:
        # kopf logs every handler call at INFO; our reconciler logs what it changes.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
        # urllib3 logs each of its own retries; the supervisor and the worker log the failure
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    if not args.namespace and not args.all_namespaces:
        print("error: pass --namespace NS (repeatable) or --all-namespaces", file=sys.stderr)
        return 1
    # kopf's requests are seen only in its log: a 401/403 there is judged like ours
    logging.getLogger("kopf").addHandler(KopfDenials(DENIALS))
    try:
        connection = Connection.from_environment()
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    kube = Kube(connection, denials=DENIALS)
    stop = threading.Event()
    crds = CrdGate(lambda url: kube.request("GET", url))
    supervisor = Supervisor(
        stop,
        grace=args.unhealthy_after_seconds,
        expected=is_transient,
        # a unit stalled by a denial is named (once it lasts), never failed: a restart
        # cannot grant a permission, it would only make a crash loop
        blocked=lambda exc: isinstance(exc, Denied),
        faults=DENIALS.faults,
        # a CRD the operator watches missing: /healthz names it until it is installed
        conditions=crds.problems,
        # a unit throttled with Retry-After waits for it
        wait_at_least=wait_at_least,
    )
    # Not live until kopf has started them (as kopf's own endpoint was not up until then).
    supervisor.expect("resync", "watch")
    if args.health_port:
        health.serve(supervisor, args.health_port)
    warn_below_floor(lambda url: kube.request("GET", url))
    # Nothing watches before every CRD is served: a missing one is one line, not a 404 loop.
    if not crds.wait(stop):
        return 0
    queue = WorkQueue()
    namespaces = None if args.all_namespaces else list(args.namespace)
    # Pods are watched for the inspector's alone; the other children are watched whole.
    cache = LiveCache(listed_kinds=set(WATCHED_CHILDREN) - {"Pod"})
    planner = PDPlanner(kube, cache, LeaderMetrics())
    reads = from_watches(kube.get, cache)
    # The workers start at once but reconcile only once every child watch has listed.
    synced = Synced()
    registry = build_registry(
        queue,
        kube,
        namespaces,
        args.resync_seconds,
        supervisor,
        cache,
        planner,
        synced,
        reads,
    )

    leading: Callable[[], bool] | None = None
    if args.leader_elect:
        # A standby watches (and answers its liveness probe) but never writes.
        elector = _elector(connection)
        kube.may_write = elector.holds
        leading = Terms(elector.is_leader.is_set, reads.freshness)
        supervisor.start("leader-election", lambda unit: elector.run(unit, stop),
                         period=elector.renew_seconds)  # fmt: skip
    policy = RecoveryPolicy(
        backoff_seconds=args.restart_backoff_seconds,
        max_backoff_seconds=args.restart_backoff_max_seconds,
        failure_limit=args.restart_loop_limit,
        window_seconds=args.restart_loop_window_seconds,
    )
    reconciler = Reconciler(
        kube,
        cache=cache,
        recovery=policy,
        read_device_info=args.placement_device_info,
        reads=reads,
    )
    # Reconciles wait on the API server most of the time: several workers let the children
    # of different deployments be written at once (the queue keeps each key on one worker).
    for index in range(args.workers):
        supervisor.start(
            f"worker-{index}",
            lambda unit: worker(
                queue,
                reconciler,
                stop,
                unit,
                ready=lambda: synced() and (leading is None or leading()),
            ),
            period=1.0,
        )
    # The PD planner decides only on the leader, like the workers (its writes are fenced too).
    planner.leading = leading or (lambda: True)
    supervisor.start("pd-planner", lambda unit: planner.run(unit, stop), period=PERIOD_SECONDS)
    if args.metrics_port:
        metrics.serve(args.metrics_port)
    try:
        # No stop_flag for kopf: it would wait for a threading.Event in an executor thread
        # that keeps the process alive after SIGTERM; kopf handles the signals itself.
        run_orchestrator(registry, namespaces, stop)
    finally:
        stop.set()
    return 0


def _elector(connection: Connection) -> LeaderElector:
    from ascend_pd_operator.kubeio.kube import Kube
    from ascend_pd_operator.kubeio.leader import LeaderElector

    namespace = os.environ.get("POD_NAMESPACE", "default")

    logging.getLogger(__name__).info(
        "leader election: waiting for lease %s/ascend-pd-operator", namespace
    )
    return LeaderElector(
        # not the fenced client: a standby must write the Lease to take it over
        Kube(connection.with_pool(1, "leader-election")),
        namespace=namespace,
        name="ascend-pd-operator",
        identity=os.environ.get("POD_NAME", socket.gethostname()),
    )
