"""Pod templates of specs that use none of the newer pod fields stay byte for byte what
0.1.0 built.

A pod template that changes gives a Deployment a new pod-template-hash and a StatefulSet a
new controller revision: after an operator upgrade the router would roll and every runtime
instance would be deleted and recreated (``rollout``), for nothing. So a field added to the
API reaches a template only when a spec sets it. The digests below were taken from the
templates 0.1.0 builds (before the escape hatches of issue 26; with the env contract's
``ASCEND_PD_CONTRACT_VERSION``, which 0.1.0 carries from its first release, and nothing
else new: the runtime templates differ from the earlier digests by that variable alone,
the routers not at all); a change here is a decision
to restart every running deployment on upgrade, to be made on purpose and told in
CHANGELOG.md, never by accident.

One such decision: the router discovers leaders by ``ascendpd.io/leader`` instead of
0.1.0's ``ascendpd.io/routable`` (CHANGELOG.md). A 0.1.0 router keeps its exact template
until every leader carries the new label (``rollout.discovery_label``), then rolls once;
``GOLDEN_ROUTER_0_1_0`` holds that first template to 0.1.0's digests.

Another: issue 36 gives every runtime and router container CPU and memory requests (the
router a memory limit), bounds ``/dev/shm`` and spreads the router's replicas over nodes,
so that no pod is BestEffort. That rolls every instance and router once (CHANGELOG.md). The
0.1.0 digests below hold the rest: the specs opted out of the defaults
(``defaultResources: false``) and the two always-on fields taken out give 0.1.0's
templates; ``GOLDEN_ISSUE_36`` holds the templates as built.

The specs are the examples as 0.1.0 shipped them (``examples_0_1_0/``): a running
deployment keeps the spec it was applied with, whatever the examples say today (they since
load W8A8 weights, use the transfer protocol their chip needs and a decode that fits, which
a user applying them changes on purpose).
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest
import yaml

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import parse_spec
from ascend_pd_operator.api.vocabulary import LABEL_FINGERPRINT, LABEL_LEGACY_ROUTABLE, Owner
from ascend_pd_operator.builders.model_source import inspector_job
from ascend_pd_operator.builders.router import router_deployment
from ascend_pd_operator.wiring.render_cli import render

#: The examples as 0.1.0 shipped them: the specs of the running deployments to upgrade.
EXAMPLES_0_1_0 = Path(__file__).resolve().parent / "examples_0_1_0"


def _digest(template: Json) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:16]


def _without_issue_36(resource: Json) -> Json:
    """The spec opted out of issue 36's resource defaults (``defaultResources: false``)."""
    resource = copy.deepcopy(resource)
    for part in ("prefill", "decode", "router"):
        resource["spec"].setdefault(part, {})["defaultResources"] = False
    return resource


def _strip_issue_36(template: Json) -> Json:
    """A template without the two fields issue 36 adds to every pod: dshm's sizeLimit and
    the router's spread over nodes."""
    template = copy.deepcopy(template)
    pod = template["spec"]
    for volume in pod.get("volumes", []):
        if volume["name"] == "dshm":
            volume["emptyDir"].pop("sizeLimit")
    if pod["containers"][0]["name"] == "router":
        pod.pop("affinity")
    return template


def _templates(
    resource: Json, configmaps: list[Json], legacy: bool = False, issue_36: bool = False
) -> dict[str, str]:
    """The digests of the workloads' pod templates; ``legacy``: the router's as the operator
    keeps it for a router of 0.1.0 while a leader lacks the new label; ``issue_36``: as
    built (else without what issue 36 adds: its one decided roll, CHANGELOG.md)."""
    if not issue_36:
        resource = _without_issue_36(resource)
    code, manifests, message = render(resource, None, "llm", configmaps)
    assert code == 0, message
    out = {}
    for m in manifests:
        if m["kind"] not in ("StatefulSet", "Deployment"):
            continue
        if legacy and m["kind"] == "Deployment":
            owner = Owner(resource["metadata"]["name"], "llm")
            serving = m["metadata"]["labels"][LABEL_FINGERPRINT]
            m = router_deployment(owner, parse_spec(resource["spec"]), serving,
                                  LABEL_LEGACY_ROUTABLE)  # fmt: skip
        template = m["spec"]["template"] if issue_36 else _strip_issue_36(m["spec"]["template"])
        out[f"{m['kind']}/{m['metadata']['name']}"] = _digest(template)
    return out


#: What the examples said when the digests were taken. The examples move on (an SGLang
#: release that has a base image: 0.5.20); the question here is whether the operator builds
#: other templates for the same spec, so the spec is held to what it was.
EXAMPLE_RUNTIME_0_1_0 = {"sglangVersion": "0.5.23"}


def _example(name: str) -> tuple[Json, list[Json]]:
    docs = [d for d in yaml.safe_load_all((EXAMPLES_0_1_0 / name).read_text()) if d]
    resource = next(d for d in docs if d["kind"] == "PDDeployment")
    resource["spec"]["runtime"].update(EXAMPLE_RUNTIME_0_1_0)
    return resource, [d for d in docs if d["kind"] == "ConfigMap"]


#: Every optional pod field 0.1.0 had, set: the new fields must not disturb these either.
_BUSY_ROLE = {
    "nodeSelector": {"accelerator": "ascend-910b"},
    "tolerations": [{"key": "npu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
    "podAnnotations": {"prometheus.io/scrape": "true"},
    "env": [{"name": "HCCL_BUFFSIZE", "value": "512"},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
    "resources": {"requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"memory": "128Gi"}},
}  # fmt: skip


def _busy() -> tuple[Json, list[Json]]:
    resource, configmaps = _example("deepseek-v3-pp2.yaml")
    resource = copy.deepcopy(resource)
    spec = resource["spec"]
    for role in ("prefill", "decode"):
        spec[role].update(copy.deepcopy(_BUSY_ROLE))
    spec["router"].update({"image": "registry.example.com/router:1",
                           "resources": {"requests": {"cpu": "1"}}})  # fmt: skip
    spec["scheduling"] = {"gang": "volcano", "priorityClassName": "llm-high"}
    return resource, configmaps


GOLDEN_0_1_0: dict[str, dict[str, str]] = {
    "deepseek-v2-lite.yaml": {
        "StatefulSet/dsv2-lite-prefill-0": "81ae9fbd7f542b85",
        "StatefulSet/dsv2-lite-decode-0": "7968b9979cd8e09f",
        "StatefulSet/dsv2-lite-decode-1": "53676773ac9e8adf",
        "Deployment/dsv2-lite-router": "e174fb886b6728cf",
    },
    "deepseek-v3-a3.yaml": {
        "StatefulSet/dsv3-a3-prefill-0": "cd572531024a0158",
        "StatefulSet/dsv3-a3-decode-0": "6b71317af37a2e70",
        "Deployment/dsv3-a3-router": "5a95d8ca6e9842b8",
    },
    "deepseek-v3-pp2.yaml": {
        "StatefulSet/dsv3-prefill-0": "3afcddf919dbd85e",
        "StatefulSet/dsv3-prefill-1": "ac8437e8c73fa9a4",
        "StatefulSet/dsv3-decode-0": "e00fe7ed616f574f",
        "Deployment/dsv3-router": "66bc0c563abcb377",
    },
    "deepseek-v3.2.yaml": {
        "StatefulSet/dsv32-prefill-0": "9c77a3587dd5b440",
        "StatefulSet/dsv32-decode-0": "b461c953cd9de40e",
        "Deployment/dsv32-router": "47ad59c6ba51bb5f",
    },
}
GOLDEN_BUSY_0_1_0 = {
    "StatefulSet/dsv3-prefill-0": "7c4b8cc1081de280",
    "StatefulSet/dsv3-prefill-1": "dabd51e19c4ec42a",
    "StatefulSet/dsv3-decode-0": "f80014364db48c0e",
    "Deployment/dsv3-router": "2b1dc04ccb282fe0",
}
#: The routers once every leader carries ``ascendpd.io/leader`` (their one roll).
ROUTERS_ON_THE_LEADER_LABEL = {
    "deepseek-v2-lite.yaml": {"Deployment/dsv2-lite-router": "2685d6ae72a7f3ef"},
    "deepseek-v3-a3.yaml": {"Deployment/dsv3-a3-router": "3878c4edf4ec06ba"},
    "deepseek-v3-pp2.yaml": {"Deployment/dsv3-router": "0a8d875a0680f712"},
    "deepseek-v3.2.yaml": {"Deployment/dsv32-router": "15f2dc07abdc743b"},
    "busy": {"Deployment/dsv3-router": "05ec8b704c80bb8c"},
}
GOLDEN = {name: {**g, **ROUTERS_ON_THE_LEADER_LABEL[name]} for name, g in GOLDEN_0_1_0.items()}
GOLDEN_BUSY = {**GOLDEN_BUSY_0_1_0, **ROUTERS_ON_THE_LEADER_LABEL["busy"]}
#: The model inspector Job's carry ``ASCEND_PD_CONTRACT_VERSION`` too, as 0.1.0's does (a Job
#: is written once per inspection, never rolled; the earlier digests lacked the variable) ...
GOLDEN_INSPECTOR_0_1_0 = {"example": "8faae304f7ee122d", "busy": "0b86a8b74f07e163"}
#: ... and now ``ASCEND_PD_SGLANG_VERSION``, the spec's, which the inspector checks the image's
#: SGLang against: nothing else differs (an operator upgrade writes no existing Job again).
GOLDEN_INSPECTOR = {"example": "3f56588d2a88f77c", "busy": "5d81edcaf09714b9"}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_example_templates_are_those_of_0_1_0(name: str) -> None:
    assert _templates(*_example(name)) == GOLDEN[name]


def test_templates_with_every_older_field_are_those_of_0_1_0() -> None:
    assert _templates(*_busy()) == GOLDEN_BUSY


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_a_router_of_0_1_0_keeps_its_template_until_every_leader_is_labelled(name: str) -> None:
    assert _templates(*_example(name), legacy=True) == GOLDEN_0_1_0[name]
    assert _templates(*_busy(), legacy=True) == GOLDEN_BUSY_0_1_0


def test_inspector_templates_are_those_of_0_1_0() -> None:
    got, before = {}, {}
    for name, (resource, _) in {"example": _example("deepseek-v3-pp2.yaml"),
                                "busy": _busy()}.items():  # fmt: skip
        spec = copy.deepcopy(resource["spec"])
        spec["model"].pop("config")
        job = inspector_job(Owner("dsv3", "llm", uid="u", generation=2), parse_spec(spec))
        got[name] = _digest(job["spec"]["template"])
        container = job["spec"]["template"]["spec"]["containers"][0]
        container["env"] = [e for e in container["env"] if e["name"] != "ASCEND_PD_SGLANG_VERSION"]
        before[name] = _digest(job["spec"]["template"])
    assert got == GOLDEN_INSPECTOR
    assert before == GOLDEN_INSPECTOR_0_1_0


#: The templates as built since issue 36 (its one roll): a change here is another roll.
GOLDEN_ISSUE_36 = {
    "deepseek-v2-lite.yaml": {
        "StatefulSet/dsv2-lite-prefill-0": "a52b1bd71a41def0",
        "StatefulSet/dsv2-lite-decode-0": "64e0e0e72a562fa4",
        "StatefulSet/dsv2-lite-decode-1": "8fdc98d95d6b0f81",
        "Deployment/dsv2-lite-router": "257944bf962d72e2",
    },
    "deepseek-v3-a3.yaml": {
        "StatefulSet/dsv3-a3-prefill-0": "17bf551d99f90657",
        "StatefulSet/dsv3-a3-decode-0": "3266969a21df6220",
        "Deployment/dsv3-a3-router": "66e42b76cc77241d",
    },
    "deepseek-v3-pp2.yaml": {
        "StatefulSet/dsv3-prefill-0": "ac406795b0a02ac1",
        "StatefulSet/dsv3-prefill-1": "80443809df35ac04",
        "StatefulSet/dsv3-decode-0": "619392777b517de4",
        "Deployment/dsv3-router": "e702abb399d97777",
    },
    "deepseek-v3.2.yaml": {
        "StatefulSet/dsv32-prefill-0": "4cd499262984db32",
        "StatefulSet/dsv32-decode-0": "d6743a552e3b1321",
        "Deployment/dsv32-router": "c9d100f5d40c2b29",
    },
    "busy": {
        "StatefulSet/dsv3-prefill-0": "ea3072b279e9051a",
        "StatefulSet/dsv3-prefill-1": "8d1692175ad0f522",
        "StatefulSet/dsv3-decode-0": "c00d04dcba9f90ed",
        "Deployment/dsv3-router": "0045a81a71f70430",
    },
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_example_templates_are_those_of_issue_36(name: str) -> None:
    assert _templates(*_example(name), issue_36=True) == GOLDEN_ISSUE_36[name]
    assert _templates(*_busy(), issue_36=True) == GOLDEN_ISSUE_36["busy"]
