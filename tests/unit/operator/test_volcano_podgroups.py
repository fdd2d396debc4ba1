"""The Volcano PodGroups the operator builds, checked against Volcano's own PodGroup CRD.

``fixtures/volcano`` holds that CRD as Volcano publishes it, of v1.15.1 (networkTopology and
subGroupPolicy) and of v1.13.3 (networkTopology only); see its README for the commits. Every
PodGroup the builders make (no placement, scope Instance, scope Deployment with each
instance's own group and with the deployment's gang) is validated against the schema as
the API server with strict field validation reads it: an unknown field is refused, not
pruned, so that a misspelled field fails here rather than vanish on the server.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from ascend_pd_operator.api.models import parse_spec
from ascend_pd_operator.api.vocabulary import (
    ANNOTATION_PLACEMENT,
    ANNOTATION_VOLCANO_GROUP,
    LABEL_INSTANCE,
    Owner,
)
from ascend_pd_operator.builders.desired import desired_layout, with_children
from ascend_pd_operator.builders.model_source import resolve_facts
from ascend_pd_operator.builders.pinning import Pin, pin_of
from ascend_pd_operator.builders.volcano import PODGROUP_API_VERSION, podgroup_subgroups
from ascend_pd_operator.decisions.placement import Usage
from ascend_pd_operator.decisions.planner import plan
from ascend_pd_operator.wiring.reconciler import observe_podgroup_subgroups

from .test_placement import KEY
from .test_placement_plan import observe, running, statefulsets, topology
from .test_planner import NOW, resource
from .volcano_schema import CURRENT, WITHOUT_SUBGROUPS, crd, errors

Json = dict[str, Any]
OWNER = Owner("dsv3", "llm", uid="0b6f8d4e-0000-4000-8000-000000000001", generation=1)


# --- what Volcano's CRD says -------------------------------------------------------------


def _spec_schema(name: str) -> Json:
    (version,) = crd(name)["spec"]["versions"]
    spec: Json = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    return spec


def test_the_fixtures_are_volcanos_podgroup_crd_with_the_fields_the_builders_write() -> None:
    for name in (CURRENT, WITHOUT_SUBGROUPS):
        doc = crd(name)
        assert doc["metadata"]["name"] == "podgroups.scheduling.volcano.sh"
        assert f"{doc['spec']['group']}/{doc['spec']['versions'][0]['name']}" == (
            PODGROUP_API_VERSION
        )
        topology = _spec_schema(name)["networkTopology"]["properties"]
        assert topology["mode"]["enum"] == ["hard", "soft"]
        assert topology["highestTierAllowed"]["type"] == "integer"
    policy = _spec_schema(CURRENT)["subGroupPolicy"]["items"]["properties"]
    assert {"name", "labelSelector", "matchLabelKeys", "subGroupSize", "minSubGroups",
            "networkTopology"} <= set(policy)  # fmt: skip
    assert policy["subGroupSize"]["minimum"] == 1
    assert "subGroupPolicy" not in _spec_schema(WITHOUT_SUBGROUPS)
    # v1.13 defaults a missing tier to 1, v1.14 and later to none: why the operator writes
    # no networkTopology without a tier the user named
    assert _spec_schema(WITHOUT_SUBGROUPS)["networkTopology"]["properties"][
        "highestTierAllowed"]["default"] == 1  # fmt: skip
    assert "default" not in _spec_schema(CURRENT)["networkTopology"]["properties"][
        "highestTierAllowed"]  # fmt: skip


def test_the_installed_crd_is_read_for_subgroup_policy() -> None:
    assert podgroup_subgroups(crd(CURRENT)) is True
    assert podgroup_subgroups(crd(WITHOUT_SUBGROUPS)) is False
    assert podgroup_subgroups(None) is None  # no Volcano
    no_schema = copy.deepcopy(crd(CURRENT))
    del no_schema["spec"]["versions"][0]["schema"]
    assert podgroup_subgroups(no_schema) is None
    other = copy.deepcopy(crd(CURRENT))
    other["spec"]["versions"][0]["name"] = "v1"
    assert podgroup_subgroups(other) is None


# --- what the builders make ------------------------------------------------------------


def build(dsv3: Json, pins: dict[tuple[str, int], Pin] | None = None, **spec: Any) -> list[Json]:
    """The PodGroups of the example with ``spec`` merged into its spec (gang volcano)."""
    raw = copy.deepcopy(dsv3["spec"])
    raw["scheduling"] = {"gang": "volcano"}
    raw.update(spec)
    parsed = parse_spec(raw)
    facts = resolve_facts(parsed).facts
    assert facts is not None
    desired = with_children(desired_layout(parsed, facts), OWNER, parsed, pins=pins)  # fmt: skip
    return [c for c in desired.children if c["kind"] == "PodGroup"]


def _placement(**fields: Any) -> Json:
    return {"placement": {"topologyKey": KEY, **fields}}


GANG = Pin(KEY, ("sp-0",), gang="dsv3-gang")
ALL_GANGED = {(r, i): GANG for r, i in (("prefill", 0), ("prefill", 1), ("decode", 0))}

CASES: list[tuple[str, dict[tuple[str, int], Pin] | None, Json]] = [
    ("no placement", None, {}),
    ("scope Instance, tier 1, Required", None, _placement(scope="Instance", highestTierAllowed=1)),
    ("scope Instance, tier 2, Preferred", None,
     _placement(scope="Instance", mode="Preferred", highestTierAllowed=2)),
    ("scope Instance, no tier", None, _placement(scope="Instance")),
    ("scope None", None, _placement(scope="None", domains=["sp-0"])),
    ("scope Deployment, each instance's own group", None, _placement(highestTierAllowed=2)),
    ("scope Deployment, the deployment's gang", ALL_GANGED, _placement(highestTierAllowed=2)),
    ("scope Deployment, the gang and a running instance's own group",
     {("prefill", 0): GANG, ("prefill", 1): GANG}, _placement(mode="Preferred")),
]  # fmt: skip


@pytest.mark.parametrize(("case", "pins", "spec"), CASES, ids=[c[0] for c in CASES])
def test_every_podgroup_is_valid_against_volcanos_crd(
    dsv3: Json, case: str, pins: dict[tuple[str, int], Pin] | None, spec: Json
) -> None:
    groups = build(dsv3, pins, **spec)
    assert groups, case
    for group in groups:
        assert errors(CURRENT, group) == [], (case, group)
        # a Volcano without subGroupPolicy takes every group but the deployment's gang
        # (which the operator makes only where the installed CRD has it)
        refused = errors(WITHOUT_SUBGROUPS, group)
        assert bool(refused) == ("subGroupPolicy" in group["spec"]), refused


def test_the_validator_refuses_what_volcano_refuses(dsv3: Json) -> None:
    """The check above can fail: a misspelled field, a mode Volcano does not know, a
    subgroup of no pods."""
    (gang,) = [g for g in build(dsv3, ALL_GANGED, **_placement(highestTierAllowed=2))
               if g["metadata"]["name"] == "dsv3-gang"]  # fmt: skip
    misspelled = copy.deepcopy(gang)
    misspelled["spec"]["networkTopology"]["highestTierAllow"] = 2
    assert errors(CURRENT, misspelled) == [
        "spec.networkTopology: Additional properties are not allowed ('highestTierAllow' "
        "was unexpected)"
    ]
    capital = copy.deepcopy(gang)
    capital["spec"]["networkTopology"]["mode"] = "Hard"
    assert errors(CURRENT, capital) == ["spec.networkTopology.mode: 'Hard' is not one of "
                                        "['hard', 'soft']"]  # fmt: skip
    empty = copy.deepcopy(gang)
    empty["spec"]["subGroupPolicy"][0]["subGroupSize"] = 0
    assert errors(CURRENT, empty) == [
        "spec.subGroupPolicy.0.subGroupSize: 0 is less than the minimum of 1"
    ]
    subgroups = copy.deepcopy(gang)
    subgroups["spec"]["subGroups"] = subgroups["spec"].pop("subGroupPolicy")
    assert errors(CURRENT, subgroups) == [
        "spec: Additional properties are not allowed ('subGroups' was unexpected)"
    ]


def test_placement_maps_onto_network_topology(dsv3: Json) -> None:
    def topologies(**placement: Any) -> dict[str, Any]:
        groups = build(dsv3, **_placement(**placement))
        return {g["metadata"]["name"]: g["spec"].get("networkTopology") for g in groups}

    required = topologies(scope="Instance", highestTierAllowed=1)
    assert set(required) == {"dsv3-prefill-0", "dsv3-prefill-1", "dsv3-decode-0"}
    assert set(map(json.dumps, required.values())) == {
        json.dumps({"mode": "hard", "highestTierAllowed": 1})
    }
    preferred = topologies(mode="Preferred", highestTierAllowed=3)
    assert set(map(json.dumps, preferred.values())) == {
        json.dumps({"mode": "soft", "highestTierAllowed": 3})
    }
    # without a tier, none: Volcano 1.13 would read tier 1, later releases no bound at all
    assert set(topologies(scope="Instance").values()) == {None}
    assert set(topologies(scope="None").values()) == {None}


def test_the_deployment_gang_has_one_subgroup_per_instance(dsv3: Json) -> None:
    built = build(dsv3, ALL_GANGED, **_placement(highestTierAllowed=2))
    groups = {g["metadata"]["name"]: g for g in built}
    assert list(groups) == ["dsv3-gang"]  # no instance has a group of its own
    gang = groups["dsv3-gang"]
    assert gang["metadata"]["labels"]["app.kubernetes.io/component"] == "gang"
    assert gang["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid
    # 2 prefill instances and 1 decode instance of 2 nodes with 8 NPUs each
    assert gang["spec"]["minMember"] == 6
    assert gang["spec"]["minResources"] == {"huawei.com/Ascend910": "48"}
    assert gang["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 2}
    policies = {p["name"]: p for p in gang["spec"]["subGroupPolicy"]}
    assert list(policies) == ["prefill", "decode"]
    for role, count in (("prefill", 2), ("decode", 1)):
        p = policies[role]
        assert p["labelSelector"] == {"matchLabels": {"ascendpd.io/deployment": "dsv3",
                                                      "ascendpd.io/role": role}}  # fmt: skip
        assert p["matchLabelKeys"] == [LABEL_INSTANCE]  # an instance is one subgroup
        assert (p["subGroupSize"], p["minSubGroups"]) == (2, count)


def test_the_subgroup_selectors_select_the_pods_the_statefulsets_make(dsv3: Json) -> None:
    """Volcano splits the gang by the pods' labels: each pod matches its role's policy and
    carries the instance label its subgroup is keyed on."""
    raw = copy.deepcopy(dsv3["spec"])
    raw.update(scheduling={"gang": "volcano"}, **_placement())
    parsed = parse_spec(raw)
    facts = resolve_facts(parsed).facts
    assert facts is not None
    children = with_children(desired_layout(parsed, facts), OWNER, parsed,
                             pins=ALL_GANGED).children  # fmt: skip
    (gang,) = [c for c in children if c["kind"] == "PodGroup"]
    policies = {p["name"]: p for p in gang["spec"]["subGroupPolicy"]}
    for sts in (c for c in children if c["kind"] == "StatefulSet"):
        template = sts["spec"]["template"]["metadata"]
        assert template["annotations"][ANNOTATION_VOLCANO_GROUP] == "dsv3-gang"
        role = template["labels"]["ascendpd.io/role"]
        selector = policies[role]["labelSelector"]["matchLabels"]
        assert selector.items() <= template["labels"].items()
        assert template["labels"][LABEL_INSTANCE] == sts["metadata"]["labels"][LABEL_INSTANCE]


def test_a_pin_records_the_gang_and_a_pin_without_one_reads_back_equal() -> None:
    sts = {"metadata": {"annotations": {ANNOTATION_PLACEMENT: GANG.annotation()}}}
    assert pin_of(sts) == GANG
    plain = Pin(KEY, ("sp-0",))
    assert "gang" not in json.loads(plain.annotation())  # pins made before it, unchanged
    assert pin_of({"metadata": {"annotations": {ANNOTATION_PLACEMENT: plain.annotation()}}}) == (
        plain
    )


# --- through the planner ---------------------------------------------------------------


def with_gang(dsv3: Json, **placement: Any) -> Json:
    cr = resource(dsv3)
    cr["spec"]["scheduling"] = {"gang": "volcano"}
    cr["spec"]["placement"] = {"topologyKey": KEY, **placement}
    return cr


def podgroups(p: Any) -> dict[str, Json]:
    return {w.name: w.manifest for w in p.applies if w.kind == "PodGroup"}


def test_scope_deployment_gangs_the_deployment_where_volcano_has_subgroups(dsv3: Json) -> None:
    cr = with_gang(dsv3, highestTierAllowed=2)
    nodes = topology(**{"sp-0": 8})
    p = plan(observe(cr, nodes=nodes, node_usage=Usage(), podgroup_subgroups=True), NOW)
    assert list(podgroups(p)) == ["dsv3-gang"]
    for sts in statefulsets(p).values():
        template = sts["spec"]["template"]["metadata"]
        assert template["annotations"][ANNOTATION_VOLCANO_GROUP] == "dsv3-gang"
        assert json.loads(sts["metadata"]["annotations"][ANNOTATION_PLACEMENT])["gang"] == (
            "dsv3-gang"
        )
    assert p.status["placement"]["gang"] == (
        "new instances join PodGroup dsv3-gang, one gang of the deployment with a subgroup "
        "per instance"
    )
    for group in podgroups(p).values():
        assert errors(CURRENT, group) == []


def test_without_subgroups_each_instance_keeps_its_own_group_and_the_status_says_why(
    dsv3: Json,
) -> None:
    cr = with_gang(dsv3, highestTierAllowed=2)
    nodes = topology(**{"sp-0": 8})
    p = plan(observe(cr, nodes=nodes, node_usage=Usage(), podgroup_subgroups=False), NOW)
    assert sorted(podgroups(p)) == ["dsv3-decode-0", "dsv3-prefill-0", "dsv3-prefill-1"]
    for name, sts in statefulsets(p).items():
        template = sts["spec"]["template"]["metadata"]
        assert template["annotations"][ANNOTATION_VOLCANO_GROUP] == name
    assert p.status["placement"]["gang"] == (
        "each instance has its own PodGroup, not one of the deployment: the installed "
        "PodGroup CRD (scheduling.volcano.sh/v1beta1) has no spec.subGroupPolicy (Volcano "
        "before 1.14); the deployment's domain is kept by node affinity alone"
    )
    for group in podgroups(p).values():
        assert errors(WITHOUT_SUBGROUPS, group) == []
        assert group["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 2}
    # scope Instance has nothing to say: each instance is its own gang anyway
    inst = with_gang(dsv3, scope="Instance")
    q = plan(observe(inst, nodes=nodes, node_usage=Usage(), podgroup_subgroups=None), NOW)
    assert "gang" not in q.status["placement"]


def test_a_running_instance_keeps_its_group_when_volcano_gains_subgroups(dsv3: Json) -> None:
    """The pods' group is in their template: an instance created with its own group keeps
    it (no rollout); only an instance created later joins the deployment's gang."""
    cr = with_gang(dsv3)
    nodes = topology(**{"sp-0": 8})
    first = plan(observe(cr, nodes=nodes, node_usage=Usage(), podgroup_subgroups=False), NOW)
    world = running(first)
    cr["spec"]["decode"]["replicas"] = 2
    p = plan(observe(cr, world, nodes=nodes, node_usage=Usage(), podgroup_subgroups=True), NOW)
    sts = statefulsets(p)
    for name, manifest in statefulsets(first).items():
        assert sts[name] == manifest, name
    group = sts["dsv3-decode-1"]["spec"]["template"]["metadata"]["annotations"]
    assert group[ANNOTATION_VOLCANO_GROUP] == "dsv3-gang"
    groups = podgroups(p)
    assert sorted(groups) == ["dsv3-decode-0", "dsv3-gang", "dsv3-prefill-0", "dsv3-prefill-1"]
    assert groups["dsv3-gang"]["spec"]["minMember"] == 2  # decode-1 alone
    assert [(s["name"], s["minSubGroups"]) for s in groups["dsv3-gang"]["spec"]["subGroupPolicy"]
            ] == [("decode", 1)]  # fmt: skip


# --- the reconciler's read of the installed CRD ------------------------------------------


class _Kube:
    def __init__(self, answer: Json | None) -> None:
        self.answer = answer
        self.gets: list[tuple[str, str, str]] = []

    def get(self, kind: str, namespace: str, name: str) -> Json | None:
        self.gets.append((kind, namespace, name))
        return self.answer


def test_the_reconciler_reads_the_crd_only_for_a_deployment_scoped_volcano_gang(
    dsv3: Json,
) -> None:
    kube = _Kube(crd(CURRENT))
    assert observe_podgroup_subgroups(kube, with_gang(dsv3)) is True  # type: ignore[arg-type]
    assert kube.gets == [("CustomResourceDefinition", "", "podgroups.scheduling.volcano.sh")]
    kube = _Kube(crd(WITHOUT_SUBGROUPS))
    assert observe_podgroup_subgroups(kube, with_gang(dsv3)) is False  # type: ignore[arg-type]
    for cr in (with_gang(dsv3, scope="Instance"), resource(dsv3)):
        kube = _Kube(crd(CURRENT))
        assert observe_podgroup_subgroups(kube, cr) is None  # type: ignore[arg-type]
        assert kube.gets == []
