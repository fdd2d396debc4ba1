"""The simulator: one cycle (``Simulator.step``) registers the nodes and has each node's
kubelet report the pods bound to it, against one API server (kube-scheduler binds them)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascend_pd_dev.kubelet_sim import launch_check
from ascend_pd_dev.kubelet_sim.nodes import (
    KUBELET_VERSION,
    NODE_PREFIX,
    internal_ip,
    node_readiness,
    register_nodes,
)
from ascend_pd_dev.kubelet_sim.objects import Obj, iso, list_items
from ascend_pd_dev.kubelet_sim.pods import IpPool, Kubelets, live_pod_ips


@dataclass
class Simulator:
    """``nodes`` simulated kubelets against one API server."""

    api: Any  # kubernetes.client.CoreV1Api
    nodes: int = 8
    ascend_per_node: int = 8
    #: topology domains the nodes are spread over (``nodes.DOMAIN_LABEL``); 0: none
    domains: int = 0
    owner: str = field(default_factory=lambda: str(os.getpid()))
    ips: IpPool = field(default_factory=IpPool)
    #: where local runtimes are registered (``launch_check``); None: no image is local
    runtimes_dir: Path | None = None
    #: seconds from a container's start to its readiness (``knobs.READY_AFTER`` overrides)
    ready_after: float = 0.0
    #: the kubelet version the nodes report (``nodes.kubelet_version``)
    kubelet_version: str = KUBELET_VERSION
    #: wall-clock seconds; every timestamp written and every delay measured comes from it
    clock: Callable[[], float] = time.time
    kubelets: Kubelets = field(init=False)

    def __post_init__(self) -> None:
        self.kubelets = Kubelets(self.api, self.ips, self.now, self.ready_after,
                                 self.runtimes_dir)  # fmt: skip

    def now(self) -> str:
        return iso(self.clock())

    def close(self) -> None:
        self.kubelets.close()

    def step(self) -> None:
        """One reconcile cycle over all nodes and pods."""
        nodes = register_nodes(self.api, self.nodes, self.ascend_per_node, self.owner,
                               self.clock(), self.domains, self.kubelet_version)  # fmt: skip
        names = {n["metadata"]["name"] for n in nodes}
        pods = list_items(self.api.list_pod_for_all_namespaces)
        # once a cycle: the launch check and the kubelets read their knobs here
        namespaces = {
            n["metadata"]["name"]: n["metadata"].get("annotations") or {}
            for n in list_items(self.api.list_namespace)
        }
        self.ips.used = live_pod_ips(pods, names)
        readiness = {n["metadata"]["name"]: node_readiness(n) for n in nodes}
        # an unreachable node's kubelet does nothing: its pods are only marked NotReady
        reachable = {name for name, ready in readiness.items() if ready != "Unknown"}
        asking = launch_check.pods_asking(pods, reachable, namespaces)
        cluster = launch_check.cluster_view(self.api, pods)
        host_ips = {n["metadata"]["name"]: internal_ip(n) for n in nodes}
        for pod in pods:
            node = pod.get("spec", {}).get("nodeName")
            if node in reachable:
                asked = pod["metadata"].get("uid") in asking
                notes = namespaces.get(pod["metadata"].get("namespace", ""), {})
                self.kubelets.sync(pod, host_ips[node], cluster if asked else None,
                                   readiness[node], notes)  # fmt: skip
            elif node in names:
                self.kubelets.mark_unreachable(pod, node)
            elif node and node.startswith(NODE_PREFIX):
                # bound to a simulated node that no longer exists: nothing will run it
                self.kubelets.delete(pod)
        # a check of a pod on an unreachable node is kept for when the node returns
        self.kubelets.forget(pods, asking | _uids_on(pods, names - reachable))


def _uids_on(pods: list[Obj], nodes: set[str]) -> set[str]:
    return {
        str(p["metadata"].get("uid")) for p in pods if p.get("spec", {}).get("nodeName") in nodes
    }
