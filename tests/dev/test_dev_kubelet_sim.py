"""Pure placement and status logic of the simulated kubelet (no API server)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from ascend_pd_dev import kubelet_sim as ks

NOW = "2026-01-01T00:00:00Z"


def pod(name: str, ascend: int | None = 8, node: str | None = None, **extra: object) -> dict:
    resources = {"limits": {ks.ASCEND_RESOURCE: str(ascend)}} if ascend else {}
    spec: dict = {"containers": [{"name": "main", "image": "img:1", "resources": resources}]}
    if node:
        spec["nodeName"] = node
    spec.update(extra.pop("spec", {}))  # type: ignore[arg-type]
    meta = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": {"app": "x"}}
    meta.update(extra.pop("metadata", {}))  # type: ignore[arg-type]
    return {"metadata": meta, "spec": spec, "status": extra.pop("status", {"phase": "Pending"})}


def nodes(count: int, ascend: int = 8) -> list[dict]:
    return [ks.node_manifest(i, ascend, NOW) for i in range(count)]


def test_node_manifest_declares_ascend_capacity_and_says_it_is_simulated() -> None:
    node = ks.node_manifest(3, 8, NOW)
    assert node["metadata"]["name"] == "sim-ascend-3"
    assert node["status"]["capacity"][ks.ASCEND_RESOURCE] == "8"
    assert node["status"]["allocatable"][ks.ASCEND_RESOURCE] == "8"
    assert node["metadata"]["labels"][ks.SIM_LABEL] == "true"
    assert "no container" in node["status"]["nodeInfo"]["osImage"]
    assert node["status"]["addresses"][0] == {"type": "InternalIP", "address": "127.0.1.4"}


def test_requests_default_to_limits_and_sum_over_containers() -> None:
    p = pod("a", ascend=4)
    p["spec"]["containers"].append(
        {"name": "side", "resources": {"requests": {"cpu": "500m", ks.ASCEND_RESOURCE: "2"}}}
    )
    p["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "2"}}}]
    req = ks.pod_requests(p)
    assert req[ks.ASCEND_RESOURCE] == 6
    assert req["cpu"] == 2  # the init container's 2 beats the containers' 0.5
    assert req["pods"] == 1


def test_whole_node_pods_spread_one_per_node_and_the_extra_one_stays_pending() -> None:
    cluster_nodes = nodes(2)
    pods: list[dict] = []
    placed = []
    for name in ("p0", "p1", "p2"):
        p = pod(name)
        chosen, message = ks.choose_node(p, cluster_nodes, pods)
        if chosen:
            p["spec"]["nodeName"] = chosen
            placed.append(chosen)
        pods.append(p)
    assert placed == ["sim-ascend-0", "sim-ascend-1"]
    assert message == f"0/2 nodes are available: 2 Insufficient {ks.ASCEND_RESOURCE}."


def test_terminal_pods_free_their_devices() -> None:
    done = pod("old", node="sim-ascend-0", status={"phase": "Succeeded"})
    chosen, _ = ks.choose_node(pod("new"), nodes(1), [done])
    assert chosen == "sim-ascend-0"


def test_node_selector_and_required_node_affinity_are_honoured() -> None:
    ns = nodes(3)
    p = pod("a", spec={"nodeSelector": {ks.HOSTNAME_KEY: "sim-ascend-2"}})
    assert ks.choose_node(p, ns, [])[0] == "sim-ascend-2"
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": ks.HOSTNAME_KEY,
                                "operator": "NotIn",
                                "values": ["sim-ascend-0"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    assert ks.choose_node(pod("b", spec={"affinity": affinity}), ns, [])[0] == "sim-ascend-1"
    nowhere = pod("c", spec={"nodeSelector": {"zone": "mars"}})
    chosen, message = ks.choose_node(nowhere, ns, [])
    assert chosen is None and "didn't match node selector" in message


def test_required_pod_anti_affinity_on_hostname() -> None:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": ks.HOSTNAME_KEY, "labelSelector": {"matchLabels": {"app": "x"}}}
            ]
        }
    }
    first = pod("a", ascend=None, node="sim-ascend-0")
    second = pod("b", ascend=None, spec={"affinity": anti})
    assert ks.choose_node(second, nodes(2), [first])[0] == "sim-ascend-1"
    assert ks.choose_node(second, nodes(1), [first])[0] is None


def test_a_resource_the_node_lacks_does_not_fit() -> None:
    p = pod("a", ascend=None)
    p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    chosen, message = ks.choose_node(p, nodes(1), [])
    assert chosen is None and "Insufficient nvidia.com/gpu" in message


def _ready(status: dict) -> str:
    return next(c["status"] for c in status["conditions"] if c["type"] == "Ready")


@pytest.mark.parametrize(
    ("outcome", "phase", "ready", "state"),
    [
        (None, "Running", "True", "running"),
        ("ready", "Running", "True", "running"),
        ("unready", "Running", "False", "running"),
        ("crash", "Running", "False", "waiting"),
        ("succeed", "Succeeded", "False", "terminated"),
        ("fail", "Failed", "False", "terminated"),
        ("bogus", "Failed", "False", "terminated"),
    ],
)
def test_outcome_annotation_decides_the_reported_status(
    outcome: str | None, phase: str, ready: str, state: str
) -> None:
    annotations = {ks.OUTCOME_ANNOTATION: outcome} if outcome else {}
    p = pod("a", node="sim-ascend-0", metadata={"annotations": annotations})
    status = ks.desired_status(p, "127.0.1.1", "127.1.0.9", NOW)
    assert status["phase"] == phase
    assert _ready(status) == ready
    assert status["podIP"] == "127.1.0.9" and status["hostIP"] == "127.0.1.1"
    container = status["containerStatuses"][0]
    assert list(container["state"]) == [state]
    if state == "terminated":
        assert container["state"]["terminated"]["exitCode"] == (0 if phase == "Succeeded" else 1)
    if outcome == "bogus":
        assert ks.OUTCOME_ANNOTATION in status["message"] and "'bogus'" in status["message"]


def test_an_unchanged_pod_gives_an_unchanged_signature() -> None:
    p = pod("a", node="sim-ascend-0")
    first = ks.desired_status(p, "127.0.1.1", "127.1.0.2", NOW)
    p["status"] = first
    again = ks.desired_status(p, "127.0.1.1", "127.1.0.2", "2030-01-01T00:00:00Z")
    assert ks.status_signature(again) == ks.status_signature(first)
    assert again["startTime"] == NOW
    p["metadata"]["annotations"] = {ks.OUTCOME_ANNOTATION: "unready"}
    changed = ks.desired_status(p, "127.0.1.1", "127.1.0.2", NOW)
    assert ks.status_signature(changed) != ks.status_signature(first)


def test_ip_pool_gives_unique_loopback_addresses_and_skips_reserved_ones() -> None:
    pool = ks.IpPool()
    pool.reserve("127.1.0.2")
    got = [pool.allocate() for _ in range(3)]
    assert got == ["127.1.0.1", "127.1.0.3", "127.1.0.4"]
    pool.release("127.1.0.1")
    assert all(ip.startswith("127.") for ip in got)


def test_quantities() -> None:
    assert ks.parse_quantity("500m") == Decimal("0.5")
    assert ks.parse_quantity("2Gi") == 2 * 1024**3


@pytest.mark.parametrize("restart", [None, "Always", "Never", "OnFailure"])
def test_without_annotation_every_pod_runs_and_none_is_declared_finished(
    restart: str | None,
) -> None:
    p = pod("a", node="sim-ascend-0", spec={"restartPolicy": restart} if restart else {})
    assert ks.desired_status(p, "127.0.1.1", "127.1.0.9", NOW)["phase"] == "Running"
