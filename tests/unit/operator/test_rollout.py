"""Whole-instance rollouts, KV-layout generations and routing, decided from hand-built
worlds (StatefulSets and pods as the API server reports them); expectations derived by hand
from the rules in ``rollout``'s docstring."""

from __future__ import annotations

from typing import Any

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import parse_spec
from ascend_pd_operator.api.vocabulary import Owner
from ascend_pd_operator.decisions.rollout import decide, instances

OWNER = Owner("dsv3", "llm", "uid-1", 2)


def spec(prefill: int = 3, decode: int = 1, **rollout: Any) -> Any:
    return parse_spec(
        {
            "model": {"name": "m", "path": "/models/m",
                      "config": {"numHiddenLayers": 4, "kvLoraRank": 512}},
            "runtime": {"image": "img:1", "sglangVersion": "0.5.20"},
            "speculative": {"algorithm": "NONE"},
            "prefill": {"replicas": prefill, "devicesPerNode": 8,
                        "parallelism": {"tensor": 16, "pipeline": 1}},
            "decode": {"replicas": decode, "devicesPerNode": 8,
                       "parallelism": {"tensor": 16, "pipeline": 1}},
            "rollout": rollout,
        }
    )  # fmt: skip


def sts(name: str, update: str = "new", nodes: int = 2) -> Json:
    return {
        "metadata": {"name": name, "generation": 2},
        "spec": {"replicas": nodes},
        "status": {"observedGeneration": 2, "updateRevision": f"{name}-{update}"},
    }


def pods(name: str, role: str, index: int, revision: str = "old", fp: str = "fpA",
         ready: bool = True, routable: bool = False, nodes: int = 2) -> list[Json]:  # fmt: skip
    out = []
    for k in range(nodes):
        labels = {
            "ascendpd.io/role": role,
            "ascendpd.io/instance": str(index),
            "controller-revision-hash": f"{name}-{revision}",
            "ascendpd.io/kv-fingerprint": fp,
        }
        if routable and k == 0:
            labels["ascendpd.io/leader"] = "true"
        out.append({
            "metadata": {"name": f"{name}-{k}", "uid": f"uid-{name}-{k}", "labels": labels},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
        })  # fmt: skip
    return out


def world(layout: dict[tuple[str, int], dict[str, Any]], update: str = "new") -> tuple[
    list[Json], list[Json]
]:  # fmt: skip
    statefulsets, all_pods = [], []
    for (role, i), state in layout.items():
        name = f"dsv3-{role}-{i}"
        statefulsets.append(sts(name, update))
        all_pods += pods(name, role, i, **state)
    return statefulsets, all_pods


def test_an_image_change_updates_one_prefill_instance_at_a_time_then_decode() -> None:
    s = spec(prefill=3, decode=1, maxUnavailable=1)
    old = {"revision": "old", "routable": True}
    statefulsets, live = world({("prefill", 0): old, ("prefill", 1): old, ("prefill", 2): old,
                                ("decode", 0): old})  # fmt: skip
    decision = decide(s, instances(OWNER, s, statefulsets, live), "fpA")
    # every pod of one instance at once, the highest index first; decode waits its turn
    assert decision.restarts == (
        ("dsv3-prefill-2", (("dsv3-prefill-2-0", "uid-dsv3-prefill-2-0"),
                            ("dsv3-prefill-2-1", "uid-dsv3-prefill-2-1"))),
    )  # fmt: skip
    assert decision.roles["prefill"].available == 3 and not decision.complete

    # prefill-2 comes back on the new template, not Ready yet: nothing else goes down
    statefulsets, live = world({("prefill", 0): old, ("prefill", 1): old,
                                ("prefill", 2): {"revision": "new", "ready": False},
                                ("decode", 0): old})  # fmt: skip
    decision = decide(s, instances(OWNER, s, statefulsets, live), "fpA")
    assert decision.restarts == ()
    assert decision.roles["prefill"].updated == 1 and decision.roles["prefill"].available == 2


def test_decode_starts_when_prefill_is_updated_and_ready() -> None:
    s = spec(prefill=2, decode=2, maxUnavailable=1)
    new = {"revision": "new", "routable": True}
    old = {"revision": "old", "routable": True}
    statefulsets, live = world({("prefill", 0): new, ("prefill", 1): new,
                                ("decode", 0): old, ("decode", 1): old})  # fmt: skip
    decision = decide(s, instances(OWNER, s, statefulsets, live), "fpA")
    assert [name for name, _ in decision.restarts] == ["dsv3-decode-1"]


def test_a_down_outdated_instance_is_updated_without_waiting_for_the_budget() -> None:
    s = spec(prefill=3, decode=1, maxUnavailable=1)
    old = {"revision": "old", "routable": True}
    statefulsets, live = world({("prefill", 0): {"revision": "old", "ready": False},
                                ("prefill", 1): old, ("prefill", 2): old,
                                ("decode", 0): {"revision": "new", "routable": True}})  # fmt: skip
    decision = decide(s, instances(OWNER, s, statefulsets, live), "fpA")
    # prefill-0 serves nothing: updated at once; then 2 serve, 3 - 1 = 2 must: no budget left
    assert [name for name, _ in decision.restarts] == ["dsv3-prefill-0"]


def test_a_group_running_two_templates_is_restarted_whatever_the_budget() -> None:
    s = spec(prefill=2, decode=1, maxUnavailable=1)
    statefulsets, live = world({("prefill", 0): {"revision": "new", "routable": True},
                                ("prefill", 1): {"revision": "new", "routable": True},
                                ("decode", 0): {"revision": "new", "routable": True}})  # fmt: skip
    # one worker of prefill-1 was replaced alone (new pod, new template); its leader is old
    live[2]["metadata"]["labels"]["controller-revision-hash"] = "dsv3-prefill-1-old"
    decision = decide(s, instances(OWNER, s, statefulsets, live), "fpA")
    assert decision.restarts == (
        ("dsv3-prefill-1", (("dsv3-prefill-1-0", "uid-dsv3-prefill-1-0"),
                            ("dsv3-prefill-1-1", "uid-dsv3-prefill-1-1"))),
    )  # fmt: skip


def test_nothing_moves_before_the_statefulset_has_seen_its_template() -> None:
    s = spec(prefill=1, decode=1)
    statefulsets, live = world({("prefill", 0): {"revision": "old"},
                                ("decode", 0): {"revision": "old"}})  # fmt: skip
    for each in statefulsets:
        each["status"]["observedGeneration"] = 1
    assert decide(s, instances(OWNER, s, statefulsets, live), "fpA").restarts == ()


def router(fingerprint: str, settled: bool = True) -> Json:
    return {
        "metadata": {"name": "dsv3-router", "generation": 3,
                     "labels": {"ascendpd.io/kv-fingerprint": fingerprint}},
        "spec": {"replicas": 1},
        "status": {"observedGeneration": 3 if settled else 2, "replicas": 1 if settled else 2,
                   "updatedReplicas": 1},
    }  # fmt: skip


def test_a_layout_change_moves_both_roles_and_switches_the_router_when_a_pair_is_ready() -> None:
    s = spec(prefill=2, decode=1, maxUnavailable=1)
    old = {"revision": "old", "fp": "fpA", "routable": True}
    statefulsets, live = world({("prefill", 0): old, ("prefill", 1): old, ("decode", 0): old})
    decision = decide(s, instances(OWNER, s, statefulsets, live), "fpB", router("fpA"),
                      frozenset({"fpA"}))  # fmt: skip
    # both roles at once: one prefill within its budget, and decode's only instance
    assert sorted(name for name, _ in decision.restarts) == ["dsv3-decode-0", "dsv3-prefill-1"]
    assert decision.serving == "fpA" and not decision.complete

    # the new generation has a Ready pair: the router is told to serve it ...
    new = {"revision": "new", "fp": "fpB", "routable": True}
    statefulsets, live = world({("prefill", 0): old, ("prefill", 1): new, ("decode", 0): new})
    by_role = instances(OWNER, s, statefulsets, live)
    decision = decide(s, by_role, "fpB", router("fpA"), frozenset({"fpA"}))
    assert decision.serving == "fpB"
    # ... but while a router pod still runs the old selectors, the old prefill serves on
    assert decision.restarts == ()
    decision = decide(s, by_role, "fpB", router("fpB", settled=False), frozenset({"fpA", "fpB"}))
    assert decision.restarts == () and not decision.complete
    # the old router pod is gone: the old generation serves nothing and is updated at once
    decision = decide(s, by_role, "fpB", router("fpB"), frozenset({"fpB"}))
    assert [name for name, _ in decision.restarts] == ["dsv3-prefill-0"]


def test_routing_only_ever_names_leaders() -> None:
    s = spec(prefill=2, decode=1)
    fresh = {"revision": "new", "fp": "fpA"}
    statefulsets, live = world({("prefill", 0): fresh, ("prefill", 1): fresh,
                                ("decode", 0): fresh})  # fmt: skip
    decision = decide(s, instances(OWNER, s, statefulsets, live), "fpA")
    leader = ("ascendpd.io/leader",)
    assert sorted(decision.routing) == [("dsv3-decode-0-0", leader), ("dsv3-prefill-0-0", leader),
                                        ("dsv3-prefill-1-0", leader)]  # fmt: skip
    assert decision.complete is False  # leaders still to be labelled
    assert decision.discovery == "ascendpd.io/leader"  # no router of 0.1.0 to keep


def _router_of_0_1_0() -> Json:
    """A router Deployment as 0.1.0 applied it: no discovery label (it selects on
    ascendpd.io/routable)."""
    return {"metadata": {"labels": {"ascendpd.io/kv-fingerprint": "fpA"}},
            "spec": {"replicas": 1}, "status": {"replicas": 1, "readyReplicas": 1,
                                                  "updatedReplicas": 1}}  # fmt: skip


def test_a_router_of_0_1_0_keeps_its_label_until_every_leader_has_the_new_one() -> None:
    s = spec(prefill=1, decode=1)
    old = {"revision": "new", "fp": "fpA", "routable": True}
    statefulsets, live = world({("prefill", 0): old, ("decode", 0): old})
    for pod in live:  # 0.1.0 labelled its leaders with the legacy label only
        labels = pod["metadata"]["labels"]
        if labels.pop("ascendpd.io/leader", None):
            labels["ascendpd.io/routable"] = "true"
    by_role = instances(OWNER, s, statefulsets, live)
    decision = decide(s, by_role, "fpA", _router_of_0_1_0(), frozenset({"fpA"}))
    # the router keeps selecting on the legacy label; the leaders get the new one now
    assert decision.discovery == "ascendpd.io/routable"
    assert sorted(decision.routing) == [("dsv3-decode-0-0", ("ascendpd.io/leader",)),
                                        ("dsv3-prefill-0-0", ("ascendpd.io/leader",))]  # fmt: skip
    # the next reconcile sees both labels: the router moves to the new one
    for pod in live:
        if pod["metadata"]["labels"].get("ascendpd.io/routable"):
            pod["metadata"]["labels"]["ascendpd.io/leader"] = "true"
    by_role = instances(OWNER, s, statefulsets, live)
    decision = decide(s, by_role, "fpA", _router_of_0_1_0(), frozenset({"fpA"}))
    assert decision.discovery == "ascendpd.io/leader" and decision.routing == ()


def test_while_a_router_of_0_1_0_serves_a_new_leader_gets_both_labels() -> None:
    s = spec(prefill=1, decode=2)
    old = {"revision": "new", "fp": "fpA", "routable": True}
    statefulsets, live = world({("prefill", 0): old, ("decode", 0): old,
                                ("decode", 1): {"revision": "new", "fp": "fpA"}})  # fmt: skip
    for pod in live:
        labels = pod["metadata"]["labels"]
        if labels.pop("ascendpd.io/leader", None):
            labels["ascendpd.io/routable"] = "true"
    decision = decide(s, instances(OWNER, s, statefulsets, live), "fpA", _router_of_0_1_0(),
                      frozenset({"fpA"}))  # fmt: skip
    assert decision.discovery == "ascendpd.io/routable"
    got = dict(decision.routing)
    assert got["dsv3-decode-1-0"] == ("ascendpd.io/leader", "ascendpd.io/routable")
    assert got["dsv3-prefill-0-0"] == ("ascendpd.io/leader",)


def test_surge_starts_new_instances_before_taking_any_down() -> None:
    s = spec(prefill=2, decode=1, maxUnavailable=0, maxSurge=1)
    old = {"revision": "old", "routable": True}
    statefulsets, live = world({("prefill", 0): old, ("prefill", 1): old, ("decode", 0): old})
    decision = decide(s, instances(OWNER, s, statefulsets, live), "fpA")
    assert decision.surge == {"prefill": 1, "decode": 0}
    assert decision.restarts == ()  # maxUnavailable 0: nothing goes before the surge serves
    # the surge instance (index 2) is Ready and routable: one old instance may go now
    statefulsets, live = world({("prefill", 0): old, ("prefill", 1): old,
                                ("prefill", 2): {"revision": "new", "routable": True},
                                ("decode", 0): old})  # fmt: skip
    decision = decide(s, instances(OWNER, s, statefulsets, live), "fpA")
    assert [name for name, _ in decision.restarts] == ["dsv3-prefill-1"]
    assert decision.roles["prefill"].surge == 1
