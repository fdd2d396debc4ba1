"""The kubelet-sim process: ``python -m ascend_pd_dev.kubelet_sim --kubeconfig PATH`` (what
``ascend-pd-dev cluster up`` runs) cycles ``Simulator.step`` until SIGTERM or SIGINT; a cycle
that fails (the API server may restart under it) is logged and the next one goes on."""

from __future__ import annotations

import argparse
import logging
import signal
import time
from pathlib import Path

from ascend_pd_dev.kubelet_sim import knobs, launch_check
from ascend_pd_dev.kubelet_sim.client import make_api
from ascend_pd_dev.kubelet_sim.nodes import ASCEND_RESOURCE, DOMAIN_LABEL, kubelet_version
from ascend_pd_dev.kubelet_sim.objects import log
from ascend_pd_dev.kubelet_sim.simulator import Simulator


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubelet-sim",
        description="Simulated Ascend nodes for the ascend-pd-dev cluster "
        "(reports the pods kube-scheduler bound to them; never runs a container).",
    )
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--ascend-per-node", type=int, default=8)
    parser.add_argument(
        "--domains", type=int, default=0, metavar="D",
        help=f"spread the nodes over D topology domains (label {DOMAIN_LABEL}=sp-<i mod D>); "
        "0 (default): no domain label",
    )  # fmt: skip
    parser.add_argument("--interval", type=float, default=0.3, help="seconds between cycles")
    parser.add_argument(
        "--local-runtimes",
        type=Path,
        default=None,
        help="directory of local runtimes (image -> python) for launcher checks: pods "
        f"annotated {launch_check.RUN_CHECK_ANNOTATION}=true (or in a namespace so annotated) "
        "get `ascend-pd-runtime launch --check` run here",
    )
    parser.add_argument(
        "--ready-after",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="seconds from a container's start to its readiness (default 0); a pod's "
        f"{knobs.READY_AFTER} annotation overrides it",
    )
    return parser


def run(sim: Simulator, interval: float) -> None:
    """Cycle until SIGTERM or SIGINT."""
    import urllib3
    from kubernetes.client.exceptions import ApiException

    stopping = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    while not stopping:
        try:
            sim.step()
        except (ApiException, OSError, urllib3.exceptions.HTTPError) as err:
            # the API server may restart under us; keep going
            log.warning("cycle failed: %s", str(err).splitlines()[0] if str(err) else err)
        except Exception:
            log.exception("cycle failed")
        time.sleep(interval)


def _server_version(api: object) -> str:
    """The API server's ``gitVersion`` ("" when it does not answer: the nodes then report
    ``KUBELET_VERSION``)."""
    import urllib3
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        info = client.VersionApi(api.api_client).get_code()  # type: ignore[attr-defined]
    except (ApiException, OSError, urllib3.exceptions.HTTPError) as err:
        log.warning("no /version from the API server (%s); nodes report no release", err)
        return ""
    return str(info.git_version or "")


def main(argv: list[str] | None = None) -> int:
    arguments = parser()
    args = arguments.parse_args(argv)
    if not args.ready_after >= 0:
        arguments.error("--ready-after must be a number of seconds >= 0")
    if args.domains < 0:
        arguments.error("--domains must be a number of domains >= 0")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s kubelet-sim %(message)s")
    api = make_api(args.kubeconfig)
    sim = Simulator(
        api, args.nodes, args.ascend_per_node,
        domains=args.domains, runtimes_dir=args.local_runtimes, ready_after=args.ready_after,
        kubelet_version=kubelet_version(_server_version(api)),
    )  # fmt: skip
    log.info("simulating %d Ascend nodes with %d %s each (no containers are run)",
             args.nodes, args.ascend_per_node, ASCEND_RESOURCE)  # fmt: skip
    run(sim, args.interval)
    sim.close()
    log.info("stopped")
    return 0
