"""``ascend-pd-dev cluster up|down|status``: a local Kubernetes control plane (the newest
release of ``versions.RELEASES`` by default, another with ``--k8s-version`` or
``ASCEND_PD_K8S_VERSION``), simulated Ascend nodes.

``up`` builds the control plane once (cached per user and release), starts it on free
loopback ports and prints the ``export KUBECONFIG=...`` line; a healthy cluster is left
running. ``down`` stops exactly the processes ``up`` started (by their pid files). ``status``
exits 0 when the cluster is up and 3 when it is not. ``crd-server up|down`` runs a current
CRD checker beside it (``crd_server``: the default release's kube-apiserver alone, with its
own etcd) for checking the CRD.
``node NAME ready|not-ready|unreachable`` makes a simulated node (and its pods) NotReady and
back (``kubelet_sim.testing.set_node_ready``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from ascend_pd_dev.controlplane import (
    build,
    certs,
    cluster,
    crd_server,
    paths,
    versions,
)
from ascend_pd_dev.kubelet_sim.nodes import ASCEND_RESOURCE
from ascend_pd_dev.kubelet_sim.testing import set_node_ready


def _progress(message: str) -> None:
    print(f"ascend-pd-dev cluster: {message}", file=sys.stderr, flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    up = sub.add_parser("up", help="start the local control plane (building it once)")
    up.add_argument("--nodes", type=_positive, default=8,
                    help="simulated Ascend nodes (default 8)")  # fmt: skip
    up.add_argument("--ascend-per-node", type=_positive, default=8,
                    help=f"{ASCEND_RESOURCE} per node (default 8)")  # fmt: skip
    up.add_argument("--rebuild", action="store_true",
                    help="rebuild the control-plane binaries even when cached")  # fmt: skip
    up.add_argument("--k8s-version", choices=sorted(versions.RELEASES), default=None,
                    help=f"the Kubernetes release to run (default: ${versions.K8S_VERSION_ENV}, "
                    f"else {versions.DEFAULT}); a cluster of another release is replaced, "
                    "its data deleted")  # fmt: skip
    down = sub.add_parser("down", help="stop the processes 'dev up' started")
    down.add_argument("--purge", action="store_true",
                      help="also delete its data, credentials and logs (.dev/)")  # fmt: skip
    status = sub.add_parser("status", help="show whether the local control plane runs")
    status.add_argument("--output", choices=["text", "json"], default="text")
    crd = sub.add_parser(
        "crd-server",
        help="the newest kube-apiserver alone (no controllers, no nodes) for checking the CRD",
    )
    crd.add_argument("crd_action", choices=["up", "down"], metavar="up|down")
    node = sub.add_parser(
        "node", help="make a simulated node Ready, NotReady or unreachable (kubelet-sim)"
    )
    node.add_argument("node_name", metavar="NAME", help="e.g. sim-ascend-0")
    node.add_argument("readiness", choices=["ready", "not-ready", "unreachable"])


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def run(args: argparse.Namespace) -> int:
    layout = cluster.Layout(paths.state_dir())
    action = args.cluster_command
    try:
        if action == "up":
            return _up(layout, args)
        if action == "crd-server":
            return _crd_server(args.crd_action)
        if action == "node":
            return _node(layout, args.node_name, args.readiness)
        if action == "down":
            stopped = cluster.down(layout, _progress, purge=args.purge)
            _progress("nothing was running" if not stopped else "down")
            return 0
        return _status(layout, args.output)
    except (build.BuildError, cluster.ClusterError, certs.CertError,
            crd_server.CrdServerError,
            versions.VersionError) as err:  # fmt: skip
        print(f"ascend-pd-dev cluster {action}: {err}", file=sys.stderr)
        return 1


def _up(layout: cluster.Layout, args: argparse.Namespace) -> int:
    started = time.monotonic()
    state = cluster.up(layout, args.nodes, args.ascend_per_node, _progress, rebuild=args.rebuild,
                       k8s_version=args.k8s_version)  # fmt: skip
    _progress(f"up in {time.monotonic() - started:.0f}s: Kubernetes {state.k8s_release} "
              f"kube-apiserver {state.server}, "
              f"{state.nodes} simulated Ascend nodes; logs in {layout.logs}")  # fmt: skip
    _progress(f"look around: KUBECONFIG={layout.kubeconfig} kubectl get nodes -L accelerator")
    _progress("stop it with: ascend-pd-dev cluster down")
    print(f"export KUBECONFIG={layout.kubeconfig}")
    return 0


def _node(layout: cluster.Layout, name: str, readiness: str) -> int:
    from kubernetes.client.exceptions import ApiException

    if not cluster.healthy(layout):
        print("ascend-pd-dev cluster node: the local control plane is not up", file=sys.stderr)
        return 3
    try:
        set_node_ready(layout.kubeconfig, name, readiness == "ready",
                                   unreachable=readiness == "unreachable")  # fmt: skip
    except ApiException as err:
        print(f"ascend-pd-dev cluster node {name}: {err.reason}", file=sys.stderr)
        return 1
    _progress(f"node {name}: {readiness} (kubelet-sim applies it within a cycle)")
    return 0


def _crd_server(action: str) -> int:
    root = paths.state_dir() / "crd-server"
    if action == "down":
        stopped = crd_server.stop(root, _progress)
        _progress("nothing was running" if not stopped else "down")
        return 0
    server = crd_server.start(root, _progress, fresh=False)
    _progress(f"kube-apiserver {crd_server.server_version(server)} at {server.url} (alone: "
              "no controllers, no nodes)")  # fmt: skip
    _progress("stop it with: ascend-pd-dev cluster crd-server down")
    print(f"export KUBECONFIG={server.kubeconfig}")
    return 0


def _status(layout: cluster.Layout, output: str) -> int:
    state = cluster.load_state(layout)
    components = cluster.component_status(layout)
    healthy = cluster.healthy(layout)
    plane = versions.RELEASES.get(state.k8s_release) if state else versions.control_plane()
    report = {
        "up": healthy,
        "server": state.server if state else None,
        "kubeconfig": str(layout.kubeconfig) if layout.kubeconfig.is_file() else None,
        "nodes": state.nodes if state else None,
        "ascend_per_node": state.ascend_per_node if state else None,
        "components": {
            name: (record.pid if record else None) for name, record in components.items()
        },
        "k8s_release": state.k8s_release if state else None,
        "binaries": str(plane.bin_dir()) if plane and plane.binaries_ready() else None,
    }
    if output == "json":
        print(json.dumps(report, indent=2))
    else:
        print(f"local control plane: {'up' if healthy else 'down'}")
        for name, record in components.items():
            state_text = f"running (pid {record.pid})" if record else "stopped"
            print(f"  {name:<24} {state_text}")
        if state is not None:
            print(f"  Kubernetes               {plane.version if plane else state.k8s_release}")
            print(f"  server                   {state.server}")
            print(f"  simulated nodes          {state.nodes} x {state.ascend_per_node} "
                  f"{ASCEND_RESOURCE}")  # fmt: skip
        if healthy:
            print(f"export KUBECONFIG={layout.kubeconfig}")
    return 0 if healthy else 3
