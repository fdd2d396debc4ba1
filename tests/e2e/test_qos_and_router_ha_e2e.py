"""No pod the operator creates is BestEffort, and the router survives a node drain
(issue 36), as the real API server and controllers judge it.

The QoS class is the API server's (``status.qosClass``, set when it admits a pod); the
router's PodDisruptionBudget is counted by kube-controller-manager's disruption controller
and enforced by the eviction API, the path ``kubectl drain`` takes. Every node is cordoned
before the drain, so the evicted router pod's replacement stays Pending: the budget then
has no disruption left, and the second router pod's eviction must be refused however fast
kubelet-sim would have made a replacement Ready.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pdd_e2e import Operator, apply, example, get, status

pytestmark = [pytest.mark.simulated, pytest.mark.timeout(600)]

NAME = "dsv2-lite"
ROUTER = f"ascendpd.io/deployment={NAME},app.kubernetes.io/component=router"


def _pods(kubectl: Any, namespace: str, selector: str) -> list[dict[str, Any]]:
    found = get(kubectl, namespace, "pods", "-l", selector) or {}
    return [p for p in found.get("items", []) if not p["metadata"].get("deletionTimestamp")]


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _evict(kubectl: Any, namespace: str, pod: str) -> Any:
    body = {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace}}  # fmt: skip
    return kubectl("create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction",
                   "-f", "-", input=json.dumps(body), check=False)  # fmt: skip


def test_pods_are_burstable_and_a_drain_leaves_a_router_answering(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    apply(kubectl, example("deepseek-v2-lite.yaml", namespace))
    st = wait_until(
        lambda: (s := status(kubectl, namespace, NAME)).get("phase") == "Ready" and s,
        f"{NAME} Ready",
    )
    assert st["router"] == {"replicas": 2, "readyReplicas": 2, "ready": "2/2"}

    # the API server's QoS class of every pod the operator made: none BestEffort
    pods = _pods(kubectl, namespace, f"ascendpd.io/deployment={NAME}")
    classes = {p["metadata"]["name"]: p["status"].get("qosClass") for p in pods}
    assert len(classes) == 5, classes  # 1 prefill and 2 decode pods, 2 router pods
    assert set(classes.values()) == {"Burstable"}, classes

    # the router's budget, as the disruption controller counts it
    resource = "poddisruptionbudgets.v1.policy"
    pdb = get(kubectl, namespace, resource, f"{NAME}-router")
    assert pdb is not None and pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == {
        "ascendpd.io/deployment": NAME, "app.kubernetes.io/component": "router"}  # fmt: skip
    wait_until(
        lambda: ((get(kubectl, namespace, resource, f"{NAME}-router") or {}).get("status") or {})
        .get("disruptionsAllowed") == 1,
        "the router budget allowing one disruption",
    )  # fmt: skip

    # the scheduler spread the two router pods over two nodes
    routers = wait_until(lambda: len(r := _pods(kubectl, namespace, ROUTER)) == 2 and r,
                         "two router pods")  # fmt: skip
    nodes = {p["spec"]["nodeName"] for p in routers}
    assert len(nodes) == 2, nodes

    first, second = sorted(p["metadata"]["name"] for p in routers)
    listed = json.loads(kubectl("get", "nodes", "-o", "json").stdout)["items"]
    node_names = [n["metadata"]["name"] for n in listed]
    try:
        for node in node_names:
            kubectl("cordon", node)
        done = _evict(kubectl, namespace, first)
        assert done.returncode == 0, done.stderr  # one disruption allowed
        refused = _evict(kubectl, namespace, second)
        assert refused.returncode != 0
        assert "disruption budget" in refused.stderr, refused.stderr
        # the endpoint still has a Ready router behind it
        left = get(kubectl, namespace, "pod", second)
        assert left is not None and _ready(left) and not left["metadata"].get("deletionTimestamp")
    finally:
        for node in node_names:
            kubectl("uncordon", node, check=False)
    wait_until(
        lambda: (status(kubectl, namespace, NAME).get("router") or {}).get("ready") == "2/2",
        "the router back at 2/2",
    )
