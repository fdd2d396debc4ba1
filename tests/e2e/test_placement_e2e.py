"""``spec.placement`` against the real kube-scheduler on a labelled topology of its own.

A control plane of this module's own (nodes are added during the test, which no other test
may see): kubelet-sim spreads 6 nodes of 8 NPUs over 2 domains (``DOMAIN_LABEL``:
``sp-<i mod 2>``, 3 nodes each). Every runtime pod takes a whole node (8 NPUs, the host
network). The expectations are derived by hand from the documented rule (best fit: the
domain with the fewest free NPUs that still fits, ties by name), and where a pod runs is read
from the pods kube-scheduler bound and the nodes' own labels, not from the operator.

1. ``a`` (scope Deployment, 2 pods): both domains have 3 free nodes, so the tie goes to
   ``sp-0``; ``status.placement.domain`` names it and both pods run there.
2. ``b`` (exclusive): ``sp-0`` holds ``a``'s pods, so ``sp-1``.
3. ``c`` (scope Deployment, 2 pods): ``sp-0`` has 1 free node, ``sp-1`` is ``b``'s alone:
   ``PlacementFeasible=False, InsufficientDomainCapacity``, no StatefulSet. Two nodes are
   added (one per domain): ``c`` comes up in ``sp-0`` by itself.
4. Changing ``a``'s placement changes none of its StatefulSets (generation and template).
5. ``d`` (scope Instance, two 2-node prefill instances and a 1-node decode) after ``b`` and
   ``c`` are gone: each instance's pods in one domain, by best fit in role and index order.
6. MindCluster's device info (the operator runs with ``--placement-device-info``; until now
   kube-system held no device-info ConfigMap, so steps 1-5 are placement without it): with
   ``d`` gone ``sp-1`` has 4 free nodes; a ConfigMap ``mindx-dl-deviceinfo-<node>`` in the
   device plugin's format says one of them has a chip whose network is down, so ``e``
   (scope Deployment, 4 pods) gets ``UnhealthyNPUs`` naming that node and chip, and no
   StatefulSet; once the ConfigMap says the chip is healthy again, ``e`` comes up there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from own_plane import NPUS, Plane, own_plane, small_spec
from pdd_e2e import apply, condition, status

from ascend_pd_dev.kubelet_sim.nodes import DOMAIN_LABEL

pytestmark = [pytest.mark.local, pytest.mark.timeout(900)]

NODES = 6
NAMESPACE = "placement"


def pod_domains(plane: Plane, name: str) -> dict[str, str]:
    """``<role>-<index>`` -> the domains its runtime pods were bound in ("" unbound)."""
    pods = plane.json("pods", "-n", NAMESPACE, "-l", f"ascendpd.io/deployment={name}")
    where = plane.domains()
    out: dict[str, set[str]] = {}
    for pod in pods["items"]:
        labels = pod["metadata"]["labels"]
        if "ascendpd.io/instance" not in labels or "ascendpd.io/role" not in labels:
            continue
        instance = f"{labels['ascendpd.io/role']}-{labels['ascendpd.io/instance']}"
        out.setdefault(instance, set()).add(where.get(pod["spec"].get("nodeName") or "", ""))
    return {k: ",".join(sorted(v)) for k, v in sorted(out.items())}


def statefulsets(plane: Plane, name: str) -> dict[str, Any]:
    return plane.named("statefulsets", "-l", f"ascendpd.io/deployment={name}")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    log_dir = tmp_path_factory.mktemp(NAMESPACE)
    with own_plane(NAMESPACE, NODES, log_dir, "--placement-device-info") as plane:
        yield plane


def deployment(name: str, placement: dict[str, Any], prefill: int = 1, prefill_nodes: int = 1,
               decode: int = 1, protocol: str = "") -> dict[str, Any]:  # fmt: skip
    """Whole-node runtime pods (8 NPUs, TP 8 per node) in the host network, no router;
    ``protocol``: ascend.transferProtocol (default sdma, which reaches only within a
    domain: a scope that may spread the roles needs one that crosses domains)."""

    def role(replicas: int, nodes: int) -> dict[str, Any]:
        return {"replicas": replicas, "parallelism": {"tensor": 8 * nodes},
                "devicesPerNode": NPUS}  # fmt: skip

    return small_spec(
        name, NAMESPACE, role(prefill, prefill_nodes), role(decode, 1),
        placement={"topologyKey": DOMAIN_LABEL, **placement},
        **({"ascend": {"transferProtocol": protocol}} if protocol else {}),
    )  # fmt: skip


def test_placement_on_a_labelled_topology(plane: Plane, wait_until: Any) -> None:
    k = plane.run

    def st(name: str) -> dict[str, Any]:
        return status(k, NAMESPACE, name)

    def is_ready(name: str) -> bool:
        return condition(st(name), "Ready").get("status") == "True"

    # 1. scope Deployment: the tie between two empty domains goes to sp-0
    apply(k, [deployment("a", {"scope": "Deployment"})])
    wait_until(lambda: is_ready("a"), "a Ready", timeout=300)
    assert st("a")["placement"]["domain"] == "sp-0", st("a").get("placement")
    assert pod_domains(plane, "a") == {"decode-0": "sp-0", "prefill-0": "sp-0"}
    feasible = condition(st("a"), "PlacementFeasible")
    assert feasible.get("status") == "True", feasible

    # 2. exclusive: sp-0 holds a's pods
    apply(k, [deployment("b", {"scope": "Deployment", "exclusive": True})])
    wait_until(lambda: is_ready("b"), "b Ready", timeout=300)
    assert st("b")["placement"]["domain"] == "sp-1", st("b").get("placement")
    assert pod_domains(plane, "b") == {"decode-0": "sp-1", "prefill-0": "sp-1"}

    # 3. no domain can hold c: sp-0 has 1 free node, sp-1 is b's alone
    apply(k, [deployment("c", {"scope": "Deployment"})])
    refused = wait_until(
        lambda: (c := condition(st("c"), "PlacementFeasible")).get("status") == "False" and c,
        "c PlacementFeasible=False",
    )
    assert refused["reason"] == "InsufficientDomainCapacity", refused
    assert "sp-0" in refused["message"], refused
    assert statefulsets(plane, "c") == {}
    events = plane.json("events", "-n", NAMESPACE, "--field-selector",
                        "involvedObject.name=c,reason=InsufficientDomainCapacity")  # fmt: skip
    assert events["items"], "a Warning Event says why c waits"
    # two nodes join, one per domain (sim-ascend-6 in sp-0): c comes up by itself
    plane.grow(NODES + 2)
    assert plane.domains()["sim-ascend-6"] == "sp-0"
    wait_until(lambda: is_ready("c"), "c Ready once sp-0 has room", timeout=300)
    assert st("c")["placement"]["domain"] == "sp-0"
    assert pod_domains(plane, "c") == {"decode-0": "sp-0", "prefill-0": "sp-0"}

    # 4. a placement change on a running deployment changes no StatefulSet
    before = {n: (s["metadata"]["generation"], s["spec"]["template"])
              for n, s in statefulsets(plane, "a").items()}  # fmt: skip
    generation = plane.json("pdd", "a", "-n", NAMESPACE)["metadata"]["generation"]
    plane.run(
        "patch",
        "pdd",
        "a",
        "-n",
        NAMESPACE,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"placement": {"scope": "Instance", "domains": ["sp-1"]}}}),
    )
    wait_until(lambda: st("a").get("observedGeneration", 0) > generation and is_ready("a"),
               "a's placement change observed")  # fmt: skip
    after = {n: (s["metadata"]["generation"], s["spec"]["template"])
             for n, s in statefulsets(plane, "a").items()}  # fmt: skip
    assert after == before
    assert pod_domains(plane, "a") == {"decode-0": "sp-0", "prefill-0": "sp-0"}

    # 5. scope Instance: b and c go; free: sp-0 2 nodes (4, 6... whichever a left), sp-1 4
    plane.run("delete", "pdd", "b", "c", "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    wait_until(lambda: not plane.json("pods", "-n", NAMESPACE, "-l",
                                      "ascendpd.io/deployment in (b,c)")["items"],
               "b's and c's pods gone")  # fmt: skip
    apply(k, [deployment("d", {"scope": "Instance"}, prefill=2, prefill_nodes=2,
                         protocol="device_rdma")])  # fmt: skip
    wait_until(lambda: is_ready("d"), "d Ready", timeout=300)
    # by hand: prefill-0 (2 nodes) best fits sp-0 (2 free); prefill-1 then only fits sp-1
    # (4 free), leaving it 2; decode-0 (1 node) best fits sp-1 (2 free; sp-0 has none)
    assert pod_domains(plane, "d") == {"decode-0": "sp-1", "prefill-0": "sp-0",
                                      "prefill-1": "sp-1"}  # fmt: skip

    # 6. MindCluster's device info: a chip of one sp-1 node has its network down
    plane.run("delete", "pdd", "d", "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    wait_until(lambda: not plane.json("pods", "-n", NAMESPACE, "-l",
                                      "ascendpd.io/deployment=d")["items"],
               "d's pods gone")  # fmt: skip
    sick = min(n for n, d in plane.domains().items() if d == "sp-1")

    def device_info(network_unhealthy: str) -> str:
        chips = {
            "huawei.com/Ascend910": ",".join(f"Ascend910-{i}" for i in range(NPUS)),
            "huawei.com/Ascend910-NetworkUnhealthy": network_unhealthy,
            "huawei.com/Ascend910-Unhealthy": "",
            "huawei.com/Ascend910-Recovering": "",
            "huawei.com/Ascend910-Fault": "[]",
        }
        cfg = {"DeviceInfo": {"DeviceList": chips, "UpdateTime": 1796198400},
               "SuperPodID": 1, "ServerIndex": 0, "CheckCode": "e2e"}  # fmt: skip
        return json.dumps({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"mindx-dl-deviceinfo-{sick}", "namespace": "kube-system",
                         "labels": {"mx-consumer-cim": "true"}},
            "data": {"DeviceInfoCfg": json.dumps(cfg)},
        })  # fmt: skip

    plane.run("apply", "-f", "-", input=device_info("Ascend910-3"))
    apply(k, [deployment("e", {"scope": "Deployment"}, prefill=3)])

    def placement_says(reason: str) -> bool:
        return condition(st("e"), "PlacementFeasible").get("reason") == reason

    wait_until(lambda: placement_says("UnhealthyNPUs"), "e: UnhealthyNPUs")
    message = condition(st("e"), "PlacementFeasible")["message"]
    assert f"MindCluster reports {sick}: Ascend910-3 network-unhealthy" in message, message
    assert statefulsets(plane, "e") == {}
    # the device plugin reports the chip healthy again: e comes up in sp-1 by itself
    plane.run("apply", "-f", "-", input=device_info(""))
    wait_until(lambda: is_ready("e"), "e Ready", timeout=300)
    assert st("e")["placement"]["domain"] == "sp-1"
    assert set(pod_domains(plane, "e").values()) == {"sp-1"}
