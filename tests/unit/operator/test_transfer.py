"""The transfer protocol against the domains the spec implies, without spec.placement.

An A2 server (8 NPUs) is its own HCCS domain; in the host network every runtime pod holds
a node alone, so a pod of 8 NPUs is a whole A2 server and the KV crosses servers from
prefill to decode, which ``sdma`` cannot do. Every expectation is derived here from those
two facts, not from the decision's code.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ascend_pd_operator.api.models import parse_spec
from ascend_pd_operator.decisions.observation import Observation
from ascend_pd_operator.decisions.planner import plan
from ascend_pd_operator.decisions.transfer import implied_mismatch
from ascend_pd_operator.wiring.render_cli import render

from .conftest import load_example
from .test_planner import NOW, conditions, resource

Json = dict[str, Any]


def a2_sdma() -> Json:
    """deepseek-v3-pp2.yaml (A2: devicesPerNode 8, host network) with sdma, no placement."""
    cr = copy.deepcopy(load_example("deepseek-v3-pp2.yaml"))
    cr["spec"]["ascend"]["transferProtocol"] = "sdma"
    cr["spec"].pop("placement", None)
    return cr


def test_an_a2_spec_with_sdma_across_servers_is_a_mismatch() -> None:
    message = implied_mismatch(parse_spec(a2_sdma()["spec"]))
    assert message.startswith(
        "ascend.transferProtocol sdma moves the KV only within one HCCS/UB domain, but "
        "prefill and decode pods each take devicesPerNode 8 NPUs with ascend.hostNetwork "
        "true, a whole A2 server each"
    )
    assert "use ascend.transferProtocol device_rdma" in message


def test_one_role_on_a2_servers_is_enough() -> None:
    # prefill on half an A3 node or an A2 one (4 NPUs: unknown), decode on whole A2 servers
    cr = a2_sdma()
    cr["spec"]["prefill"]["devicesPerNode"] = 4
    message = implied_mismatch(parse_spec(cr["spec"]))
    assert "but decode pods each take devicesPerNode 8" in message


def _patched(path: str, value: Any) -> Json:
    cr = a2_sdma()
    node = cr["spec"]
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return cr


@pytest.mark.parametrize(
    ("why", "cr"),
    [
        ("device_rdma crosses servers", _patched("ascend.transferProtocol", "device_rdma")),
        ("mooncake is not memfabric", _patched("runtime.transferBackend", "mooncake")),
        # off the host network a pod of 8 may be half an A3 node, two pods a node
        ("pod network", _patched("ascend.hostNetwork", False)),
        # spec.placement names the domains: the placement decision judges them
        ("placement", _patched("placement", {"topologyKey": "example.com/super-pod"})),
    ],
)
def test_what_the_spec_does_not_say_fails_is_not_judged(why: str, cr: Json) -> None:
    if why == "mooncake is not memfabric":  # mooncake pairs no pipelined MLA prefill
        cr["spec"]["prefill"]["parallelism"]["pipeline"] = 1
        cr["spec"]["prefill"].pop("layerPartition")
    assert implied_mismatch(parse_spec(cr["spec"])) == "", why


@pytest.mark.parametrize("example", ["deepseek-v3-a3.yaml", "deepseek-v2-lite.yaml"])
def test_fewer_or_more_npus_than_an_a2_server_are_not_judged(example: str) -> None:
    # 16 a pod: A3 nodes, joined in a super-pod by UB; 2 a pod: part of a node of either chip
    cr = copy.deepcopy(load_example(example))
    cr["spec"].setdefault("ascend", {})["transferProtocol"] = "sdma"
    assert implied_mismatch(parse_spec(cr["spec"])) == ""


def test_the_planner_says_it_and_still_creates_the_instances() -> None:
    cr = resource(a2_sdma())
    p = plan(Observation(cr), NOW)
    cond = conditions(p)["PlacementFeasible"]
    assert (cond["status"], cond["reason"]) == ("False", "TransferProtocolMismatch")
    assert cond["message"] == implied_mismatch(parse_spec(cr["spec"]))
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "TransferProtocolMismatch")]
    assert p.events[0].message == f"PlacementFeasible: {cond['message']}"
    # inferred from the spec's shape, not known from the nodes: nothing is held back
    created = sorted(w.name for w in p.applies if w.kind == "StatefulSet")
    assert created == ["dsv3-decode-0", "dsv3-prefill-0", "dsv3-prefill-1"]
    assert "placement" not in p.status and p.requeue_after is None
    # said once: the next reconcile, with this status, posts no second Event
    again = plan(Observation({**cr, "status": p.status}), NOW)
    assert conditions(again)["PlacementFeasible"] == cond and again.events == ()


def test_the_right_protocol_clears_the_condition() -> None:
    cr = resource(a2_sdma())
    before = plan(Observation(cr), NOW)
    cr["spec"]["ascend"]["transferProtocol"] = "device_rdma"
    after = plan(Observation({**cr, "status": before.status}), NOW)
    assert "PlacementFeasible" not in conditions(after) and after.events == ()


def test_render_warns_of_it() -> None:
    code, manifests, message = render(a2_sdma(), None, "llm")
    assert code == 0 and manifests
    why = implied_mismatch(parse_spec(a2_sdma()["spec"]))
    lines = message.split("\n")
    assert f"dsv3: warning: PlacementFeasible TransferProtocolMismatch: {why}" in lines
