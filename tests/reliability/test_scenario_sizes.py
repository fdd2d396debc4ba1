"""The scenarios' deployments fit the scenario cluster with room to spare (pure, no cluster).

``deletion-while-down`` starts four deployments at once, beside the pods of the scenario
before it that are still terminating. With the requests derived from DeepSeek-V3's weights on
one NPU per rank, each decode pod took most of a simulated node and one stayed Pending
("0/12 nodes are available ... Insufficient memory"), so the scenario failed in CI now and
then. The requests are read from what the operator renders; the node capacity is
kubelet-sim's, the packing is by hand.
"""

from __future__ import annotations

from typing import Any

from ascend_pd_dev.kubelet_sim.nodes import NODE_CAPACITY
from ascend_pd_operator.wiring.render_cli import render
from reliability.env import SCENARIO_NODES, SCENARIO_NPUS_PER_NODE
from reliability.specs import pdd

UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def gib(quantity: str) -> float:
    for suffix, factor in UNITS.items():
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor / 2**30
    return float(quantity) / 2**30


def pods_of(doc: dict[str, Any]) -> list[tuple[float, int]]:
    """(memory GiB requested, NPUs) of each pod ``doc``'s children would run."""
    code, manifests, message = render(doc, None, None)
    assert code == 0, message
    pods = []
    for child in manifests:
        if child["kind"] not in ("StatefulSet", "Deployment"):
            continue
        spec = child["spec"]["template"]["spec"]
        memory = sum(gib(c.get("resources", {}).get("requests", {}).get("memory", "0"))
                     for c in spec["containers"])  # fmt: skip
        npus = sum(int(c.get("resources", {}).get("requests", {}).get("huawei.com/Ascend910", 0))
                   for c in spec["containers"])  # fmt: skip
        pods += [(memory, npus)] * child["spec"].get("replicas", 1)
    return pods


def nodes_needed(pods: list[tuple[float, int]]) -> int:
    """First fit decreasing by memory onto nodes of kubelet-sim's capacity."""
    capacity = gib(NODE_CAPACITY["memory"])
    nodes: list[list[float]] = []  # [memory left, NPUs left]
    for memory, npus in sorted(pods, reverse=True):
        for node in nodes:
            if node[0] >= memory and node[1] >= npus:
                node[0] -= memory
                node[1] -= npus
                break
        else:
            nodes.append([capacity - memory, SCENARIO_NPUS_PER_NODE - npus])
    return len(nodes)


def test_the_deletion_scenario_fits_half_the_scenario_cluster() -> None:
    # reliability.deletion's starting point: three deployments to delete and one kept
    docs = [pdd(f"gone-{i}", "ns", decode=1 + i % 2) for i in range(3)] + [pdd("kept", "ns")]
    pods = [pod for doc in docs for pod in pods_of(doc)]
    assert len(pods) == 4 * 2 + 5 + 4 * 2  # prefill PP 2, decode 1/2/1/1, two routers each
    # half the cluster stays free for the last scenario's pods that are still terminating
    assert nodes_needed(pods) <= SCENARIO_NODES // 2
