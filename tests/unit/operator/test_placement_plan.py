"""spec.placement through the planner: an instance is pinned when it is created and only
then, waits (uncreated) while no domain fits, and a running instance's StatefulSet never
changes for a placement change.

The example (``deepseek-v3-pp2.yaml``) runs 2 prefill and 1 decode instance of 2 nodes with
8 NPUs each; the nodes are written by hand, the running StatefulSets are the ones a first
plan created, as the cache keeps them."""

from __future__ import annotations

import copy
import json
from typing import Any

from ascend_pd_operator.api.vocabulary import ANNOTATION_PLACEMENT, LABEL_EXCLUSIVE
from ascend_pd_operator.builders.pinning import Pin, pin_of, pinned_affinity
from ascend_pd_operator.decisions.observation import Observation
from ascend_pd_operator.decisions.placement import Usage
from ascend_pd_operator.decisions.planner import Plan, plan
from ascend_pd_operator.kubeio.kept import kept

from .test_placement import KEY, node
from .test_planner import NOW, conditions, owned, resource

Json = dict[str, Any]
STATEFULSETS = ["dsv3-prefill-0", "dsv3-prefill-1", "dsv3-decode-0"]


def with_placement(dsv3: Json, **placement: Any) -> Json:
    cr = resource(dsv3)
    cr["spec"]["placement"] = {"topologyKey": KEY, **placement}
    return cr


def topology(**domains: int) -> dict[str, Json]:
    return {f"{d}-n{i}": node(f"{d}-n{i}", d) for d, count in domains.items()
            for i in range(count)}  # fmt: skip


def statefulsets(p: Plan) -> dict[str, Json]:
    return {w.name: w.manifest or {} for w in p.applies if w.kind == "StatefulSet"}


def running(p: Plan, status: Json | None = None) -> dict[str, Any]:
    """What the next observation holds once ``p``'s writes are in: its StatefulSets as
    the cache keeps them (metadata, replicas and selector: no template) and its status."""
    return {"children": {"StatefulSet": [kept(owned(m)) for m in statefulsets(p).values()]},
            "status": status if status is not None else p.status}  # fmt: skip


def observe(cr: Json, world: dict[str, Any] | None = None, **extra: Any) -> Observation:
    cr = copy.deepcopy(cr)
    if world is not None:
        cr["status"] = world["status"]
    return Observation(cr, children=(world or {}).get("children", {}), **extra)


def test_a_new_deployment_is_pinned_to_its_domain(dsv3: Json) -> None:
    cr = with_placement(dsv3)
    unread = plan(observe(cr, nodes=topology(**{"sp-0": 8, "sp-1": 6})), NOW)
    assert unread.needs_usage  # the choice waits for the pods' usage: the reconciler reads it
    p = plan(observe(cr, nodes=topology(**{"sp-0": 8, "sp-1": 6}), node_usage=Usage()), NOW)
    assert not p.needs_usage and p.requeue_after is None
    sts = statefulsets(p)
    assert list(sts) == STATEFULSETS
    for manifest in sts.values():
        annotation = json.loads(manifest["metadata"]["annotations"][ANNOTATION_PLACEMENT])
        assert annotation == {"topologyKey": KEY, "domains": ["sp-1"], "mode": "Required",
                              "exclusive": False}  # fmt: skip
        affinity = manifest["spec"]["template"]["spec"]["affinity"]
        assert affinity == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": KEY, "operator": "In", "values": ["sp-1"]}]}]}}}  # fmt: skip
        assert LABEL_EXCLUSIVE not in manifest["spec"]["template"]["metadata"]["labels"]
    cond = conditions(p)["PlacementFeasible"]
    assert (cond["status"], cond["reason"]) == ("True", "DomainChosen")
    placed = p.status["placement"]
    assert (placed["topologyKey"], placed["scope"], placed["domain"]) == (KEY, "Deployment", "sp-1")
    assert placed["capacity"][0] == {"domain": "sp-1", "nodes": 6, "freeNpus": 48}
    names = ("dsv3-decode-0", "dsv3-prefill-0", "dsv3-prefill-1")
    assert placed["instances"] == [{"instance": n, "domain": "sp-1"} for n in names]
    assert [(e.type, e.reason) for e in p.events] == [("Normal", "DomainChosen")]


def test_no_domain_fits_creates_nothing_and_says_why(dsv3: Json) -> None:
    cr = with_placement(dsv3)
    p = plan(observe(cr, nodes=topology(**{"sp-0": 4, "sp-1": 3}), node_usage=Usage()), NOW)
    assert statefulsets(p) == {}
    assert not [w for w in p.applies if w.kind == "Service" and w.name != "dsv3-router"]
    cond = conditions(p)["PlacementFeasible"]
    assert (cond["status"], cond["reason"]) == ("False", "InsufficientDomainCapacity")
    assert cond["message"] == (
        "dsv3-prefill-0, dsv3-prefill-1, dsv3-decode-0 not created: needs 6 nodes with 8 free "
        "huawei.com/Ascend910 in one domain; best: sp-0 has 4, sp-1 has 3"
    )
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "InsufficientDomainCapacity")]
    assert "PlacementFeasible" in conditions(p)["Ready"]["message"]
    assert (
        "dsv3-prefill-0: not created, no placement domain fits"
        in (conditions(p)["PrefillReady"]["message"])
    )
    assert p.requeue_after == 30.0  # a node added or freed is seen within it
    # the same answer again tells no second Event
    same = {"children": {}, "status": p.status}
    nodes = topology(**{"sp-0": 4, "sp-1": 3})
    again = plan(observe(cr, same, nodes=nodes, node_usage=Usage()), NOW)
    assert again.events == ()


def test_a_scale_up_that_does_not_fit_keeps_the_running_instances(dsv3: Json) -> None:
    cr = with_placement(dsv3)
    nodes = topology(**{"sp-0": 6, "sp-1": 2})
    first = plan(observe(cr, nodes=nodes, node_usage=Usage()), NOW)
    assert first.status["placement"]["domain"] == "sp-0"
    world = running(first)
    cr["spec"]["decode"]["replicas"] = 2
    # sp-0's 6 nodes hold the 3 running instances; the deployment's domain is kept
    full = Usage(deployments={n: frozenset({"llm/dsv3"}) for n in nodes if n.startswith("sp-0")})
    p = plan(observe(cr, world, nodes=nodes, node_usage=full), NOW)
    assert statefulsets(p) == statefulsets(first)  # the running ones, untouched
    cond = conditions(p)["PlacementFeasible"]
    assert (cond["status"], cond["reason"]) == ("False", "InsufficientDomainCapacity")
    assert cond["message"].startswith("dsv3-decode-1 not created: needs 2 nodes with 8 free "
                                      "huawei.com/Ascend910 in domain sp-0")  # fmt: skip
    assert not any(w.name == "dsv3-decode-1" for w in p.applies)


def test_a_placement_change_leaves_every_running_statefulset_as_it_is(dsv3: Json) -> None:
    cr = with_placement(dsv3)
    nodes = topology(**{"sp-0": 8, "sp-1": 6})
    first = plan(observe(cr, nodes=nodes, node_usage=Usage()), NOW)
    world = running(first)
    for change in (
        {"topologyKey": "example.com/rack", "scope": "Instance", "mode": "Preferred",
         "exclusive": True, "domains": ["r-1"]},
        None,  # removed
    ):  # fmt: skip
        changed = copy.deepcopy(cr)
        if change is None:
            del changed["spec"]["placement"]
        else:
            changed["spec"]["placement"] = change
        p = plan(observe(changed, world, nodes=nodes, node_usage=Usage()), NOW)
        assert statefulsets(p) == statefulsets(first), change
        assert not p.needs_usage  # nothing to create: no pod is listed
    # without spec.placement neither its condition nor status.placement remain
    assert "PlacementFeasible" not in conditions(p) and "placement" not in p.status


def test_placement_added_to_a_running_deployment_pins_none_of_its_instances(dsv3: Json) -> None:
    cr = resource(dsv3)
    first = plan(observe(cr), NOW)
    assert all("affinity" not in m["spec"]["template"]["spec"]
               for m in statefulsets(first).values())  # fmt: skip
    p = plan(observe(with_placement(dsv3), running(first), nodes=topology(**{"sp-0": 8})), NOW)
    assert statefulsets(p) == statefulsets(first)
    cond = conditions(p)["PlacementFeasible"]
    assert (cond["status"], cond["reason"]) == ("True", "Placed")
    assert p.status["placement"]["instances"] == [] and p.events == ()


def test_a_recreated_instance_is_pinned_anew(dsv3: Json) -> None:
    cr = with_placement(dsv3, scope="Instance")
    cr["spec"]["ascend"]["transferProtocol"] = "device_rdma"  # sdma would not cross domains
    nodes = topology(**{"sp-0": 4, "sp-1": 2})
    first = plan(observe(cr, nodes=nodes, node_usage=Usage()), NOW)
    pins = {n: pin_of(m) for n, m in statefulsets(first).items()}
    assert pins["dsv3-prefill-0"] == Pin(KEY, ("sp-1",))  # best fit first
    world = running(first)
    # decode-0's StatefulSet is gone (deleted by hand): only it is decided again
    world["children"]["StatefulSet"] = [s for s in world["children"]["StatefulSet"]
                                        if s["metadata"]["name"] != "dsv3-decode-0"]  # fmt: skip
    held = {f"sp-1-n{i}": frozenset({"llm/dsv3"}) for i in range(2)}
    held |= {f"sp-0-n{i}": frozenset({"llm/dsv3"}) for i in range(2)}
    p = plan(observe(cr, world, nodes=nodes, node_usage=Usage(deployments=held)), NOW)
    again = {n: pin_of(m) for n, m in statefulsets(p).items()}
    assert again == {**pins, "dsv3-decode-0": Pin(KEY, ("sp-0",))}


def test_an_exclusive_instance_marks_its_pods(dsv3: Json) -> None:
    cr = with_placement(dsv3, exclusive=True, mode="Preferred")
    p = plan(observe(cr, nodes=topology(**{"sp-0": 6}), node_usage=Usage()), NOW)
    template = statefulsets(p)["dsv3-decode-0"]["spec"]["template"]
    assert template["metadata"]["labels"][LABEL_EXCLUSIVE] == "true"
    term = {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["sp-0"]}]}
    assert template["spec"]["affinity"] == {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": term}]
    }}  # fmt: skip


def test_the_pin_joins_every_term_of_the_users_affinity() -> None:
    user = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "chip", "operator": "In", "values": ["910b"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
        ]}},
        "podAntiAffinity": {"x": 1},
    }  # fmt: skip
    before = copy.deepcopy(user)
    pin = {"key": KEY, "operator": "In", "values": ["sp-0"]}
    required = pinned_affinity(user, Pin(KEY, ("sp-0",)))
    terms = required["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "chip", "operator": "In", "values": ["910b"]}, pin]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
         "matchExpressions": [pin]},
    ]  # fmt: skip
    assert required["podAntiAffinity"] == {"x": 1}
    preferred = pinned_affinity(user, Pin(KEY, ("sp-0",), "Preferred"))
    assert preferred["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {"weight": 100, "preference": {"matchExpressions": [pin]}}
    ]
    assert user == before  # the spec's own affinity is never changed
    assert pinned_affinity(user, None) == user


def test_an_annotation_that_is_not_a_pin_pins_nothing() -> None:
    for text in ("", "{", '{"topologyKey": "k"}', '{"topologyKey": "k", "domains": []}',
                 '{"topologyKey": "k", "domains": ["a"], "mode": "Soft"}'):  # fmt: skip
        sts = {"metadata": {"annotations": {ANNOTATION_PLACEMENT: text}}}
        assert pin_of(sts) is None, text


def test_render_offline_says_which_instances_it_cannot_place(dsv3: Json) -> None:
    from ascend_pd_operator.wiring.render_cli import render

    code, manifests, message = render(with_placement(dsv3), None, None)
    assert code == 0 and not [m for m in manifests if m["kind"] == "StatefulSet"]
    assert message == (
        "dsv3: note: spec.placement pins each instance to a domain of the cluster's nodes when "
        "the operator creates it; offline none is known, so dsv3-decode-0, dsv3-prefill-0, "
        "dsv3-prefill-1 are not rendered"
    )


def test_a_refused_change_keeps_what_the_last_placement_said(dsv3: Json) -> None:
    cr = with_placement(dsv3)
    nodes = topology(**{"sp-0": 6})
    first = plan(observe(cr, nodes=nodes, node_usage=Usage()), NOW)
    bad = copy.deepcopy(cr)
    bad["spec"]["prefill"]["devicesPerNode"] = 6  # 8 × 2 is not divisible by 6: refused
    p = plan(observe(bad, running(first), nodes=nodes), NOW)
    assert conditions(p)["Validated"]["status"] == "False" and p.applies == ()
    assert (
        conditions(p)["PlacementFeasible"]["message"]
        == (conditions(first)["PlacementFeasible"]["message"])
    )
    assert p.status["placement"] == first.status["placement"]


def test_a_preference_given_up_is_told_once(dsv3: Json) -> None:
    cr = with_placement(dsv3, mode="Preferred")
    nodes = topology(**{"sp-0": 2})
    p = plan(observe(cr, nodes=nodes, node_usage=Usage()), NOW)
    assert list(statefulsets(p)) == STATEFULSETS  # created, unpinned
    assert all(pin_of(m) is None for m in statefulsets(p).values())
    assert [(e.type, e.reason) for e in p.events] == [("Normal", "PreferredDomainUnavailable")]
    assert p.requeue_after is None


def test_a_protocol_that_cannot_cross_the_domains_creates_nothing_and_says_why(
    dsv3: Json,
) -> None:
    # sdma (the super-pods' UB fabric); 4 nodes a domain: only spread instances fit
    cr = with_placement(dsv3, scope="Instance")
    cr["spec"]["ascend"]["transferProtocol"] = "sdma"
    p = plan(observe(cr, nodes=topology(**{"sp-0": 4, "sp-1": 4}), node_usage=Usage()), NOW)
    assert statefulsets(p) == {}
    cond = conditions(p)["PlacementFeasible"]
    assert (cond["status"], cond["reason"]) == ("False", "TransferProtocolMismatch")
    assert cond["message"].startswith("ascend.transferProtocol sdma moves the KV only within "
                                      f"one {KEY} domain")  # fmt: skip
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "TransferProtocolMismatch")]
    # with room in one domain every instance goes there, each pinned on its own
    nodes = topology(**{"sp-0": 4, "sp-1": 6})
    together = plan(observe(cr, nodes=nodes, node_usage=Usage()), NOW)
    assert conditions(together)["PlacementFeasible"]["reason"] == "DomainChosen"
    assert {n: pin_of(m) for n, m in statefulsets(together).items()} == dict.fromkeys(
        ("dsv3-prefill-0", "dsv3-prefill-1", "dsv3-decode-0"), Pin(KEY, ("sp-1",)))  # fmt: skip


def test_a_running_deployment_spread_over_domains_keeps_its_instances(dsv3: Json) -> None:
    cr = with_placement(dsv3, scope="Instance")
    cr["spec"]["ascend"]["transferProtocol"] = "device_rdma"
    nodes = topology(**{"sp-0": 4, "sp-1": 2})
    first = plan(observe(cr, nodes=nodes, node_usage=Usage()), NOW)
    assert len({pin_of(m) for m in statefulsets(first).values()}) == 2  # spread, over RDMA
    cr["spec"]["ascend"]["transferProtocol"] = "sdma"  # now the KV cannot cross domains
    cr["metadata"]["generation"] += 1  # a spec change, as the API server counts it
    p = plan(observe(cr, running(first), nodes=nodes, node_usage=Usage()), NOW)
    pins = {n: pin_of(m) for n, m in statefulsets(p).items() if n in statefulsets(first)}
    assert pins == {n: pin_of(m) for n, m in statefulsets(first).items()}
    cond = conditions(p)["PlacementFeasible"]
    assert (cond["status"], cond["reason"]) == ("False", "TransferProtocolMismatch")
    assert "the running instances are in sp-0, sp-1" in cond["message"]
