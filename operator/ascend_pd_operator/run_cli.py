"""``ascend-pd run [--namespace NS ...| --all-namespaces]``: run the operator.

kopf watches PDDeployments and their children and serves the liveness endpoint
(``--health-port``, path ``/healthz``); a worker thread reconciles. Credentials
come from the pod's service account in a cluster, else ``$KUBECONFIG``. With
``--leader-elect`` only the replica holding the Lease reconciles.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
from typing import TYPE_CHECKING

from .api_access import DEFAULT_HEALTH_PORT, HEALTH_PATH

if TYPE_CHECKING:
    from .leader import LeaderElector


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
        "--resync-seconds", type=float, default=60.0, help="periodic resync interval (60)"
    )
    parser.add_argument(
        "--leader-elect",
        action="store_true",
        help="reconcile only while holding the Lease ascend-pd-operator in $POD_NAMESPACE",
    )
    parser.add_argument("--debug", action="store_true", help="debug logging")


def run(args: argparse.Namespace) -> int:
    import kopf

    from .handlers import WATCHED_CHILDREN, WorkQueue, build_registry, worker
    from .kube import Kube, load_config
    from .live_cache import LiveCache
    from .reconciler import Reconciler

    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.debug:
        # kopf logs every handler call at INFO; our reconciler logs what it changes.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    if not args.namespace and not args.all_namespaces:
        print("error: pass --namespace NS (repeatable) or --all-namespaces", file=sys.stderr)
        return 1
    kube = Kube(load_config())
    stop = threading.Event()
    queue = WorkQueue()
    namespaces = None if args.all_namespaces else list(args.namespace)
    # Pods are watched for the inspector's alone; the other children are watched whole.
    cache = LiveCache(listed_kinds=set(WATCHED_CHILDREN) - {"Pod"})
    registry = build_registry(queue, kube, namespaces, args.resync_seconds, stop, cache)

    def reconcile_forever() -> None:
        # A standby watches (and answers its liveness probe) but never writes.
        if args.leader_elect:
            kube.may_write = _wait_for_leadership(stop).holds
        worker(queue, Reconciler(kube, cache=cache), stop)

    threading.Thread(target=reconcile_forever, name="reconciler", daemon=True).start()
    liveness = f"http://0.0.0.0:{args.health_port}{HEALTH_PATH}" if args.health_port else None
    try:
        kopf.run(
            registry=registry,
            standalone=True,
            clusterwide=bool(args.all_namespaces),
            namespaces=namespaces or (),
            liveness_endpoint=liveness,
            # No stop_flag: kopf waits for a threading.Event in an executor thread that
            # would keep the process alive after SIGTERM; kopf handles the signals itself.
        )
    finally:
        stop.set()
    return 0


def _wait_for_leadership(stop: threading.Event) -> LeaderElector:
    from kubernetes import client

    from .leader import LeaderElector

    namespace = os.environ.get("POD_NAMESPACE", "default")

    def lost() -> None:
        logging.getLogger(__name__).error("lost leadership; exiting so a standby takes over")
        stop.set()
        os._exit(1)

    elector = LeaderElector(
        client.CoordinationV1Api(),
        namespace=namespace,
        name="ascend-pd-operator",
        identity=os.environ.get("POD_NAME", socket.gethostname()),
        on_lost=lost,
    )
    log = logging.getLogger(__name__)
    log.info("leader election: waiting for lease %s/ascend-pd-operator", namespace)
    elector.wait_for_leadership()
    log.info("leader election: leading; reconciling")
    return elector
