"""spec.placement's decision on hand-built node sets: which domain, or why none.

The spec is ``deepseek-v3-pp2.yaml``: prefill 2 instances of 2 nodes, decode 1 instance of
2 nodes, 8 NPUs per pod, so the whole deployment needs 6 nodes with 8 free NPUs. Every
expectation below is counted by hand from the nodes written here."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ascend_pd_operator.api.models import SpecError, parse_spec
from ascend_pd_operator.api.vocabulary import Owner
from ascend_pd_operator.builders.pinning import Pin
from ascend_pd_operator.decisions.placement import Usage, decide, pod_npus, usage_of
from ascend_pd_operator.decisions.recovery import slim_node

from .conftest import load_example

Json = dict[str, Any]
KEY = "example.com/super-pod"
NPU = "huawei.com/Ascend910"
OWNER = Owner("dsv3", "llm", "uid-1", 1)
ALL = [("prefill", 0), ("prefill", 1), ("decode", 0)]


def spec(protocol: str = "sdma", **placement: Any) -> Any:
    """The example's spec with ``placement``; ``protocol``: its ascend.transferProtocol
    (sdma by default, which reaches only within a domain: the domains here are super-pods,
    whose UB fabric joins their nodes)."""
    resource = copy.deepcopy(load_example("deepseek-v3-pp2.yaml"))
    resource["spec"]["placement"] = {"topologyKey": KEY, **placement}
    resource["spec"]["ascend"]["transferProtocol"] = protocol
    return parse_spec(resource["spec"])


#: a transfer protocol that crosses domains, for the scopes that may spread the roles
RDMA = "device_rdma"


def node(
    name: str,
    domain: str | None,
    npus: int = 8,
    *,
    allocatable: int | None = None,
    ready: str = "True",
    cordoned: bool = False,
    taints: list[Json] | None = None,
) -> Json:
    """A node as the API server sends it, kept as the node watch keeps it (slim)."""
    labels = {"kubernetes.io/hostname": name, **({KEY: domain} if domain else {})}
    full = {
        "metadata": {"name": name, "resourceVersion": "1", "labels": labels},
        "spec": {"unschedulable": cordoned, "taints": taints or []},
        "status": {
            "capacity": {"cpu": "192", NPU: str(npus)},
            "allocatable": {"cpu": "190", NPU: str(npus if allocatable is None else allocatable)},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }  # fmt: skip
    return slim_node(full)


def nodes(*groups: tuple[str, int]) -> dict[str, Json]:
    """``count`` 8-NPU nodes in each (domain, count)."""
    return {
        f"{domain}-n{i}": node(f"{domain}-n{i}", domain)
        for domain, count in groups
        for i in range(count)
    }


def pod(
    node_name: str,
    npus: int,
    deployment: str = "",
    namespace: str = "other",
    role: str = "decode",
    exclusive: bool = False,
    phase: str = "Running",
) -> Json:
    labels: Json = {}
    if deployment:
        labels = {"ascendpd.io/deployment": deployment, "ascendpd.io/role": role}
        if exclusive:
            labels["ascendpd.io/exclusive"] = "true"
    return {
        "metadata": {"name": f"p-{node_name}", "namespace": namespace, "labels": labels},
        "spec": {"nodeName": node_name, "containers": [
            {"name": "c", "resources": {"limits": {NPU: str(npus)}}}]},
        "status": {"phase": phase},
    }  # fmt: skip


NONE_USED = Usage()


def test_the_deployment_goes_to_the_smallest_domain_that_holds_all_six_nodes() -> None:
    # sp-0: 8 nodes (64 free), sp-1: 6 nodes (48 free), sp-2: 4 nodes: sp-1 is the best fit
    found = decide(OWNER, spec(), ALL, {}, nodes(("sp-0", 8), ("sp-1", 6), ("sp-2", 4)),
                   NONE_USED, {})  # fmt: skip
    assert (found.status, found.reason, found.domain) == ("True", "DomainChosen", "sp-1")
    assert found.blocked == frozenset()
    assert found.pins == dict.fromkeys(ALL, Pin(KEY, ("sp-1",), "Required", False))
    assert found.message == (
        "dsv3-prefill-0, dsv3-prefill-1, dsv3-decode-0 → sp-1: best fit for 6 nodes with 8 free "
        "huawei.com/Ascend910, 48 huawei.com/Ascend910 free on 6 nodes"
    )
    assert found.capacity == (
        {"domain": "sp-1", "nodes": 6, "freeNpus": 48},
        {"domain": "sp-0", "nodes": 8, "freeNpus": 64},
        {"domain": "sp-2", "nodes": 4, "freeNpus": 32},
    )


def test_equal_domains_are_chosen_by_name() -> None:
    found = decide(OWNER, spec(), ALL, {}, nodes(("sp-b", 6), ("sp-a", 6)), NONE_USED, {})
    assert found.domain == "sp-a"


def test_the_allow_list_wins_over_the_best_fit() -> None:
    found = decide(OWNER, spec(domains=["sp-0"]), ALL, {}, nodes(("sp-0", 8), ("sp-1", 6)),
                   NONE_USED, {})  # fmt: skip
    assert found.domain == "sp-0"


def test_npus_other_pods_request_are_not_free() -> None:
    # sp-1's 6 nodes: one holds a pod of 4 NPUs (4 left, fewer than 8): 5 usable, no fit
    used = usage_of([pod("sp-1-n0", 4), pod("sp-1-n1", 8, phase="Succeeded")], NPU)
    assert used.npus == {"sp-1-n0": 4}  # an ended pod holds nothing
    found = decide(OWNER, spec(), ALL, {}, nodes(("sp-0", 8), ("sp-1", 6)), used, {})
    assert found.domain == "sp-0"


def test_a_node_that_runs_a_pod_of_ours_takes_no_other() -> None:
    used = usage_of([pod("sp-1-n0", 8, deployment="dsv3", namespace="llm")], NPU)
    # 8 NPUs each, but the pod of ours takes the host's ports: sp-1 keeps 5 nodes
    found = decide(OWNER, spec(), ALL, {}, nodes(("sp-0", 8), ("sp-1", 6)), used, {})
    assert found.domain == "sp-0"


def test_in_the_host_network_a_node_with_another_deployments_pod_is_taken() -> None:
    # sp-0: 12 nodes of 8 (96 free); sp-1: 6 nodes of 16, one running kimi's 8-NPU runtime
    # pod on port 30000 (88 free, the best fit if it fits)
    topology = {**nodes(("sp-0", 12)), **{f"sp-1-n{i}": node(f"sp-1-n{i}", "sp-1", 16)
                                         for i in range(6)}}  # fmt: skip
    used = usage_of([pod("sp-1-n0", 8, deployment="kimi")], NPU)
    assert decide(OWNER, spec(), ALL, {}, topology, used, {}).domain == "sp-0"
    resource = copy.deepcopy(load_example("deepseek-v3-pp2.yaml"))
    resource["spec"]["placement"] = {"topologyKey": KEY}
    resource["spec"]["ascend"] = {"hostNetwork": False}
    # in the pod network the 8 NPUs left on it are free for a pod of ours: sp-1 fits
    found = decide(OWNER, parse_spec(resource["spec"]), ALL, {}, topology, used, {})
    assert found.domain == "sp-1"


def test_exclusive_avoids_domains_with_other_deployments() -> None:
    # a pod of another PDDeployment in sp-1 (on a 16-NPU node outside the count)
    topology = {**nodes(("sp-0", 8), ("sp-1", 6)), "sp-1-big": node("sp-1-big", "sp-1", 16)}
    used = usage_of([pod("sp-1-big", 8, deployment="kimi")], NPU)
    assert decide(OWNER, spec(), ALL, {}, topology, used, {}).domain == "sp-1"
    found = decide(OWNER, spec(exclusive=True), ALL, {}, topology, used, {})
    assert found.domain == "sp-0"
    assert found.pins[("prefill", 0)] == Pin(KEY, ("sp-0",), "Required", True)


def test_a_domain_held_exclusively_by_another_is_chosen_by_nobody() -> None:
    topology = {**nodes(("sp-0", 8), ("sp-1", 6)), "sp-1-big": node("sp-1-big", "sp-1", 16)}
    used = usage_of([pod("sp-1-big", 8, deployment="kimi", exclusive=True)], NPU)
    assert decide(OWNER, spec(), ALL, {}, topology, used, {}).domain == "sp-0"
    # when only that domain fits: DomainsTaken, naming who holds it
    found = decide(OWNER, spec(), ALL, {}, {k: v for k, v in topology.items()
                                            if k.startswith("sp-1")}, used, {})  # fmt: skip
    assert (found.status, found.reason) == ("False", "DomainsTaken")
    assert found.message.endswith("the domains that fit are taken: sp-1 (held by other/kimi)")
    assert found.blocked == frozenset(ALL)


def test_no_node_with_the_topology_label() -> None:
    unlabelled = {f"n{i}": node(f"n{i}", None) for i in range(8)}
    found = decide(OWNER, spec(), ALL, {}, unlabelled, NONE_USED, {})
    assert (found.status, found.reason) == ("False", "NoTopologyLabel")
    assert found.message == (
        "dsv3-prefill-0, dsv3-prefill-1, dsv3-decode-0 not created: no node is labelled "
        "example.com/super-pod"
    )
    assert found.blocked == frozenset(ALL) and found.pins == {}
    allowed = decide(OWNER, spec(domains=["sp-9"]), ALL, {}, nodes(("sp-0", 8)), NONE_USED, {})
    assert allowed.reason == "NoTopologyLabel"
    assert allowed.message.endswith("no node is labelled example.com/super-pod in domains sp-9")


def test_insufficient_capacity_names_the_need_and_the_best_domains() -> None:
    topology = nodes(("sp-1", 3), ("sp-0", 4), ("sp-2", 1), ("sp-3", 2))
    found = decide(OWNER, spec(), ALL, {}, topology, NONE_USED, {})
    assert (found.status, found.reason) == ("False", "InsufficientDomainCapacity")
    assert found.message == (
        "dsv3-prefill-0, dsv3-prefill-1, dsv3-decode-0 not created: needs 6 nodes with 8 free "
        "huawei.com/Ascend910 in one domain; best: sp-0 has 4, sp-1 has 3, sp-3 has 2"
    )
    assert found.blocked == frozenset(ALL)


def test_capacity_only_on_unhealthy_nodes_or_npus() -> None:
    sick = {
        **nodes(("sp-0", 3)),
        "sp-0-a": node("sp-0-a", "sp-0", ready="False"),
        "sp-0-b": node("sp-0-b", "sp-0", cordoned=True),
        "sp-0-c": node("sp-0-c", "sp-0", allocatable=6),  # 2 NPUs the device plugin withholds
    }
    found = decide(OWNER, spec(), ALL, {}, sick, NONE_USED, {})
    assert (found.status, found.reason) == ("False", "UnhealthyNPUs")
    assert "needs 6 nodes with 8 free huawei.com/Ascend910 in one domain" in found.message
    assert "only unhealthy capacity would fit (sp-0:" in found.message


def test_a_taint_the_role_tolerates_is_no_obstacle() -> None:
    taint = {"key": "huawei.com/npu", "value": "a3", "effect": "NoSchedule"}
    tainted = {f"n{i}": node(f"n{i}", "sp-0", taints=[taint]) for i in range(6)}
    assert decide(OWNER, spec(), ALL, {}, tainted, NONE_USED, {}).reason == "UnhealthyNPUs"
    resource = copy.deepcopy(load_example("deepseek-v3-pp2.yaml"))
    resource["spec"]["placement"] = {"topologyKey": KEY}
    for role in ("prefill", "decode"):
        resource["spec"][role]["tolerations"] = [{"key": "huawei.com/npu", "operator": "Exists"}]
    found = decide(OWNER, parse_spec(resource["spec"]), ALL, {}, tainted, NONE_USED, {})
    assert found.domain == "sp-0"


def test_scope_instance_gives_each_instance_its_own_best_domain() -> None:
    # sp-1 (2 nodes) is the best fit for prefill-0; then it is full: the rest go to sp-0
    found = decide(OWNER, spec(RDMA, scope="Instance"), ALL, {}, nodes(("sp-0", 4), ("sp-1", 2)),
                   NONE_USED, {})  # fmt: skip
    assert found.status == "True" and found.domain == ""
    assert {k: p.domains for k, p in found.pins.items()} == {
        ("prefill", 0): ("sp-1",), ("prefill", 1): ("sp-0",), ("decode", 0): ("sp-0",)
    }  # fmt: skip


def test_scope_instance_blocks_only_the_instances_that_do_not_fit() -> None:
    found = decide(OWNER, spec(RDMA, scope="Instance"), ALL, {}, nodes(("sp-0", 2), ("sp-1", 2)),
                   NONE_USED, {})  # fmt: skip
    assert set(found.pins) == {("prefill", 0), ("prefill", 1)}
    assert found.blocked == frozenset({("decode", 0)})
    assert (found.status, found.reason) == ("False", "InsufficientDomainCapacity")
    assert found.message.startswith("dsv3-decode-0 not created: needs 2 nodes with 8 free")


def test_preferred_creates_unpinned_when_nothing_fits() -> None:
    found = decide(OWNER, spec(mode="Preferred"), ALL, {}, nodes(("sp-0", 4)), NONE_USED, {})
    assert (found.status, found.reason) == ("True", "PreferredDomainUnavailable")
    assert found.blocked == frozenset() and found.pins == {}
    assert found.message.startswith(
        "dsv3-prefill-0, dsv3-prefill-1, dsv3-decode-0 created unpinned "
        "(InsufficientDomainCapacity: needs 6 nodes"
    )
    fits = decide(OWNER, spec(mode="Preferred"), ALL, {}, nodes(("sp-0", 6)), NONE_USED, {})
    assert fits.pins[("decode", 0)] == Pin(KEY, ("sp-0",), "Preferred", False)


def test_the_deployment_domain_is_kept_while_an_instance_runs() -> None:
    pinned = Pin(KEY, ("sp-0",), "Required")
    existing = {("prefill", 0): pinned, ("prefill", 1): pinned}
    previous = {"placement": {"topologyKey": KEY, "domain": "sp-0"}}
    # sp-1 would fit better, but the deployment lives in sp-0 (2 free nodes left there)
    topology = nodes(("sp-0", 6), ("sp-1", 2))
    used = usage_of([pod(f"sp-0-n{i}", 8, deployment="dsv3", namespace="llm", role="prefill")
                     for i in range(4)], NPU)  # fmt: skip
    found = decide(OWNER, spec(), [("decode", 0)], existing, topology, used, previous)
    assert found.domain == "sp-0" and found.pins[("decode", 0)].domains == ("sp-0",)
    # sp-0 full: the new instance waits rather than going elsewhere
    full = usage_of([pod(f"sp-0-n{i}", 8, deployment="x") for i in range(6)], NPU)
    waits = decide(OWNER, spec(), [("decode", 0)], existing, topology, full, previous)
    assert (waits.status, waits.reason) == ("False", "InsufficientDomainCapacity")
    assert "needs 2 nodes with 8 free huawei.com/Ascend910 in domain sp-0" in waits.message
    assert waits.blocked == frozenset({("decode", 0)})


def test_nothing_to_create_keeps_the_last_word() -> None:
    said = {"type": "PlacementFeasible", "status": "True", "reason": "DomainChosen",
            "message": "x → sp-0: best fit"}  # fmt: skip
    previous = {"conditions": [said]}
    found = decide(OWNER, spec(), [], {("prefill", 0): None}, {}, None, previous)
    assert (found.status, found.message, found.needs_usage) == ("True", "x → sp-0: best fit", False)


def test_a_choice_waits_for_the_pods_usage() -> None:
    found = decide(OWNER, spec(), ALL, {}, nodes(("sp-0", 6)), None, {})
    assert found.needs_usage and found.blocked == frozenset(ALL)
    refused = decide(OWNER, spec(), ALL, {}, nodes(("sp-0", 6)),
                     Usage(error="pods is forbidden"), {})  # fmt: skip
    assert (refused.status, refused.reason) == ("False", "NodeUsageUnknown")
    assert "pods is forbidden" in refused.message and not refused.needs_usage


def test_scope_none_holds_pods_to_the_allowed_domains_only() -> None:
    free = decide(OWNER, spec(RDMA, scope="None"), ALL, {}, {}, None, {})
    assert (free.status, free.reason, free.pins, free.needs_usage) == ("True", "Unscoped", {},
                                                                       False)  # fmt: skip
    held = decide(OWNER, spec(RDMA, scope="None", domains=["sp-0", "sp-1"]), ALL, {}, {}, None,
                  {})  # fmt: skip
    assert held.pins[("decode", 0)] == Pin(KEY, ("sp-0", "sp-1"), "Required", False)


@pytest.mark.parametrize(("containers", "init", "npus"), [
    ([{"requests": {NPU: "8"}, "limits": {NPU: "8"}}], [], 8),
    ([{"limits": {NPU: 4}}, {"limits": {NPU: "4"}}], [], 8),
    ([{"requests": {"cpu": "1"}}], [{"limits": {NPU: "2"}}], 2),
    ([], [], 0),
])  # fmt: skip
def test_the_npus_a_pod_requests(containers: list[Json], init: list[Json], npus: int) -> None:
    pod_ = {"spec": {"containers": [{"name": "c", "resources": r} for r in containers],
                     "initContainers": [{"name": "i", "resources": r} for r in init]}}  # fmt: skip
    assert pod_npus(pod_, NPU) == npus


# --- the KV transfer protocol against the domains -----------------------------------------


def test_sdma_keeps_every_instance_of_scope_instance_in_one_domain() -> None:
    # sp-0 holds all 6 nodes, sp-1 only 4: apart, prefill-0 (2 nodes) would best fit sp-1;
    # with sdma the KV never leaves a domain, so all three go to sp-0, each pinned on its own
    found = decide(OWNER, spec(scope="Instance"), ALL, {}, nodes(("sp-0", 6), ("sp-1", 4)),
                   NONE_USED, {})  # fmt: skip
    assert (found.status, found.reason, found.domain) == ("True", "DomainChosen", "sp-0")
    assert found.pins == dict.fromkeys(ALL, Pin(KEY, ("sp-0",), "Required", False))
    # a protocol that crosses domains: each instance where it fits best
    apart = decide(OWNER, spec(RDMA, scope="Instance"), ALL, {},
                   nodes(("sp-0", 6), ("sp-1", 4)), NONE_USED, {})  # fmt: skip
    assert {k: p.domain for k, p in apart.pins.items()} == {
        ("prefill", 0): "sp-1", ("prefill", 1): "sp-1", ("decode", 0): "sp-0"}  # fmt: skip


def test_sdma_joins_the_domain_the_running_instances_use() -> None:
    running = {("prefill", 0): Pin(KEY, ("sp-1",)), ("prefill", 1): Pin(KEY, ("sp-1",))}
    found = decide(OWNER, spec(scope="Instance"), [("decode", 0)], running,
                   nodes(("sp-0", 6), ("sp-1", 6)), NONE_USED, {})  # fmt: skip
    assert found.pins == {("decode", 0): Pin(KEY, ("sp-1",), "Required", False)}


@pytest.mark.parametrize("mode", ["Required", "Preferred"])
def test_sdma_refuses_a_plan_that_only_spread_instances_would_fit(mode: str) -> None:
    # 4 nodes in each domain: no domain holds all 6 nodes, the two together would
    found = decide(OWNER, spec(scope="Instance", mode=mode), ALL, {},
                   nodes(("sp-0", 4), ("sp-1", 4)), NONE_USED, {})  # fmt: skip
    assert (found.status, found.reason) == ("False", "TransferProtocolMismatch")
    assert found.blocked == frozenset(ALL) and found.pins == {}
    assert found.message == (
        f"ascend.transferProtocol sdma moves the KV only within one {KEY} domain, but the "
        f"deployment needs 6 nodes with 8 free {NPU} in one domain; best: sp-0 has 4, sp-1 has "
        "4, and only sp-0, sp-1 together would hold its instances; use a transfer protocol "
        "that crosses domains (e.g. device_rdma), or free or add capacity in one domain"
    )
    # when not even spread instances fit, it is capacity that is missing, not the protocol
    short = decide(OWNER, spec(scope="Instance"), ALL, {}, nodes(("sp-0", 2), ("sp-1", 2)),
                   NONE_USED, {})  # fmt: skip
    assert (short.status, short.reason) == ("False", "InsufficientDomainCapacity")


def test_running_instances_spread_over_domains_are_kept_and_nothing_is_added() -> None:
    running = {("prefill", 0): Pin(KEY, ("sp-0",)), ("prefill", 1): Pin(KEY, ("sp-1",))}
    found = decide(OWNER, spec(scope="Instance"), [("decode", 0)], running,
                   nodes(("sp-0", 8), ("sp-1", 8)), None, {})  # fmt: skip
    assert (found.status, found.reason, found.blocked) == (
        "False", "TransferProtocolMismatch", frozenset({("decode", 0)}))  # fmt: skip
    assert "the running instances are in sp-0, sp-1" in found.message
    assert not found.needs_usage  # nothing is read for it
    # with nothing to create the condition still says why the plan cannot work
    idle = decide(OWNER, spec(scope="Instance"), [], running, nodes(("sp-0", 8)), None, {})
    assert (idle.status, idle.reason, idle.blocked) == (
        "False", "TransferProtocolMismatch", frozenset())  # fmt: skip


@pytest.mark.parametrize(
    ("protocol", "placement"),
    [
        ("sdma", {"scope": "Deployment"}),  # both roles in one domain
        ("sdma", {"scope": "Deployment", "mode": "Preferred"}),
        ("sdma", {"scope": "Instance", "domains": ["sp-0"]}),  # one domain for everything
        ("sdma", {"scope": "None", "domains": ["sp-0"]}),
        (RDMA, {"scope": "Instance"}),  # RDMA over the NICs crosses domains
        (RDMA, {"scope": "None"}),
    ],
)
def test_a_plan_the_protocol_can_serve_is_not_refused(
    protocol: str, placement: dict[str, Any]
) -> None:
    found = decide(OWNER, spec(protocol, **placement), ALL, {}, nodes(("sp-0", 8)), Usage(), {})
    assert found.reason != "TransferProtocolMismatch" and found.status == "True", found


@pytest.mark.parametrize("protocol", ["SDMA", "rdma", "host_rdma", ""])
def test_a_protocol_sglang_would_read_as_sdma_is_refused(protocol: str) -> None:
    # SGLang reads anything but its protocols as sdma (0.5.10: anything but sdma and
    # device_rdma), so a typo would move the KV over the wrong fabric without a word
    resource = copy.deepcopy(load_example("deepseek-v3-pp2.yaml"))
    resource["spec"]["ascend"]["transferProtocol"] = protocol
    with pytest.raises(SpecError) as refused:
        parse_spec(resource["spec"])
    assert str(refused.value) == (
        f"spec.ascend.transferProtocol: Input should be 'sdma' or 'device_rdma' (got {protocol!r})"
    )


def test_the_mooncake_backend_is_not_judged_by_memfabric_protocol() -> None:
    resource = copy.deepcopy(load_example("deepseek-v3-pp2.yaml"))
    resource["spec"]["placement"] = {"topologyKey": KEY, "scope": "Instance"}
    resource["spec"]["runtime"]["transferBackend"] = "mooncake"
    # mooncake pairs no pipelined MLA prefill: the prefill instances one node each
    resource["spec"]["prefill"]["parallelism"]["pipeline"] = 1
    resource["spec"]["prefill"].pop("layerPartition", None)
    found = decide(OWNER, parse_spec(resource["spec"]), ALL, {}, nodes(("sp-0", 8)), Usage(), {})
    assert found.reason == "DomainChosen"
