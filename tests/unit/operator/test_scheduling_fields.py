"""Tolerations and affinity (issue 36): typed as Kubernetes types them, yet passed to the
pods exactly as written; a bad one is refused naming the field.

Expectations are written out by hand from the spec below, not taken from the builders.
"""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import SpecError, parse_spec
from ascend_pd_operator.api.vocabulary import Owner
from ascend_pd_operator.builders.model_source import inspector_job
from ascend_pd_operator.wiring.render_cli import render

from .conftest import load_example

OWNER = Owner("dsv3", "llm", uid="u", generation=2)

#: Every toleration field, empty strings included: the pods get them as written.
TOLERATIONS = [
    {"key": "example.com/npu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "pool", "operator": "Equal", "value": "llm", "effect": ""},
    {"key": "dedicated", "value": "", "operator": ""},
    {"operator": "Exists"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
]  # fmt: skip
#: Every affinity field Kubernetes 1.30 has, Gt with its one integer value included.
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]},
                                  {"key": "npu-count", "operator": "Gt", "values": ["7"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]},
        ]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [
                {"key": "fast", "operator": "Exists"}]}}],
    },
    "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {
            "labelSelector": {"matchLabels": {"app": "cache"}},
            "namespaceSelector": {"matchExpressions": [
                {"key": "team", "operator": "DoesNotExist"}]},
            "topologyKey": "topology.kubernetes.io/zone"}}]},
    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In",
                                                 "values": ["other"]}]},
         "namespaces": ["llm"], "topologyKey": "kubernetes.io/hostname",
         "matchLabelKeys": ["pod-template-hash"], "mismatchLabelKeys": ["tenant"]}]},
}  # fmt: skip


def _resource() -> Json:
    resource = copy.deepcopy(load_example("deepseek-v3-pp2.yaml"))
    resource["metadata"]["namespace"] = "llm"
    for role in ("prefill", "decode"):
        resource["spec"][role]["tolerations"] = copy.deepcopy(TOLERATIONS)
        resource["spec"][role]["affinity"] = copy.deepcopy(AFFINITY)
    resource["spec"]["router"]["tolerations"] = copy.deepcopy(TOLERATIONS[:2])
    return resource


@pytest.fixture(scope="module")
def children() -> dict[tuple[str, str], Json]:
    code, manifests, message = render(_resource(), None, "llm")
    assert code == 0, message
    return {(m["kind"], m["metadata"]["name"]): m for m in manifests}


def _pod(children: dict, kind: str, name: str) -> Json:
    pod: Json = children[(kind, name)]["spec"]["template"]["spec"]
    return pod


@pytest.mark.parametrize("name", ["dsv3-prefill-0", "dsv3-prefill-1", "dsv3-decode-0"])
def test_runtime_pods_get_them_as_written(children: dict, name: str) -> None:
    pod = _pod(children, "StatefulSet", name)
    assert pod["tolerations"] == TOLERATIONS
    assert pod["affinity"] == AFFINITY
    kubernetes_validate.validate(
        children[("StatefulSet", name)], kubernetes_validate.latest_version(), strict=True
    )


def test_the_router_and_the_inspector_get_theirs(children: dict) -> None:
    assert _pod(children, "Deployment", "dsv3-router")["tolerations"] == TOLERATIONS[:2]
    spec = _resource()["spec"]
    del spec["model"]["config"]  # inspected: the Job runs where prefill runs
    pod = inspector_job(OWNER, parse_spec(spec))["spec"]["template"]["spec"]
    assert pod["tolerations"] == TOLERATIONS


def test_without_them_the_pods_have_none() -> None:
    spec = copy.deepcopy(load_example("deepseek-v3-pp2.yaml"))
    code, manifests, message = render(spec, None, "llm")
    assert code == 0, message
    for m in manifests:
        if m["kind"] == "StatefulSet":
            assert "tolerations" not in m["spec"]["template"]["spec"]
            assert "affinity" not in m["spec"]["template"]["spec"]


def _refusal(path: str, value: Any) -> str:
    spec = copy.deepcopy(load_example("deepseek-v3-pp2.yaml"))["spec"]
    node = spec
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    with pytest.raises(SpecError) as refused:
        parse_spec(spec)
    return str(refused.value)


_TERMS = "nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        ("prefill.tolerations", [{"key": "k", "operator": "Maybe"}],
         "prefill.tolerations.0.operator"),
        ("router.tolerations", [{"key": "k", "effect": "NoRun"}], "router.tolerations.0.effect"),
        ("decode.tolerations", [{"key": "k", "operator": "Exists", "colour": "red"}],
         "decode.tolerations.0.colour"),
        ("decode.tolerations", [{"key": "k", "operator": "Exists", "tolerationSeconds": 1.5}],
         "decode.tolerations.0.tolerationSeconds"),
        ("router.nodeSelector", {"zone": True}, "router.nodeSelector.zone"),
        ("prefill.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "z", "operator": "Near"}]}]}}},
         f"prefill.affinity.{_TERMS}.0.matchExpressions.0.operator"),
        ("decode.affinity", {"nodeAffinitty": {}}, "decode.affinity.nodeAffinitty"),
        ("decode.affinity", {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {
                "matchLabels": {"app": 1}}}]}},
         "decode.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution.0."
         "labelSelector.matchLabels.app"),
        ("prefill.env", [{"name": "N", "valueFrom": {"fieldRef": {"path": "spec.nodeName"}}}],
         "prefill.env.0.valueFrom.fieldRef"),
        ("decode.env", [{"name": "N", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k",
                                                                     "optional": "yes"}}}],
         "decode.env.0.valueFrom.secretKeyRef.optional"),
    ],
    ids=["operator-maybe", "effect", "unknown-key", "seconds-fraction", "selector-bool",
         "affinity-operator", "affinity-typo", "match-label-int", "field-ref-typo",
         "optional-not-bool"],
)  # fmt: skip
def test_a_bad_value_is_refused_naming_the_field(path: str, value: Any, named: str) -> None:
    assert f"spec.{named}" in _refusal(path, value)
