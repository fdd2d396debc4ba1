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
router a memory limit), bounds ``/dev/shm``, spreads the router's replicas over nodes, so
that no pod is BestEffort, and adds the security defaults (``builders.security``: the
runtime container without privilege escalation, NET_RAW dropped, seccomp RuntimeDefault; the
router restricted). That rolls every instance and router once (CHANGELOG.md). The 0.1.0
digests below hold the rest: the specs opted out of the resource defaults
(``defaultResources: false``) and the always-on fields taken out (the security contexts,
the router's /tmp, dshm's sizeLimit, the router's spread) give 0.1.0's templates;
``GOLDEN_ISSUE_36`` holds the templates as built.

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
from ascend_pd_operator.api.vocabulary import (
    LABEL_FINGERPRINT,
    LABEL_LEGACY_ROUTABLE,
    VOLUME_ROUTER_TMP,
    Owner,
)
from ascend_pd_operator.builders.model_source import inspector_job
from ascend_pd_operator.builders.router import router_deployment
from ascend_pd_operator.wiring.render_cli import render

#: The examples as 0.1.0 shipped them: the specs of the running deployments to upgrade.
EXAMPLES_0_1_0 = Path(__file__).resolve().parent / "examples_0_1_0"


def _digest(template: Json) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:16]


def _without_security(template: Json) -> Json:
    """``template`` without what the security defaults add (the specs here set no security
    context of their own): the pod's and container's securityContext, the router's /tmp."""
    template = copy.deepcopy(template)
    pod = template["spec"]
    pod.pop("securityContext", None)
    container = pod["containers"][0]
    container.pop("securityContext", None)
    for key, where in (("volumes", pod), ("volumeMounts", container)):
        kept = [v for v in where.get(key, []) if v["name"] != VOLUME_ROUTER_TMP]
        if kept:
            where[key] = kept
        else:
            where.pop(key, None)
    return template


def _without_issue_36(resource: Json) -> Json:
    """The spec opted out of issue 36's resource defaults (``defaultResources: false``)."""
    resource = copy.deepcopy(resource)
    for part in ("prefill", "decode", "router"):
        resource["spec"].setdefault(part, {})["defaultResources"] = False
    return resource


def _strip_issue_36(template: Json) -> Json:
    """A template without the fields issue 36 adds to every pod: the security contexts and
    the router's /tmp (``_without_security``), dshm's sizeLimit, the router's spread over
    nodes and its ``enableServiceLinks: false``."""
    template = _without_security(template)
    pod = template["spec"]
    for volume in pod.get("volumes", []):
        if volume["name"] == "dshm":
            volume["emptyDir"].pop("sizeLimit")
    if pod["containers"][0]["name"] == "router":
        pod.pop("affinity", None)
        pod.pop("enableServiceLinks", None)
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
        "StatefulSet/dsv2-lite-prefill-0": "5877aee10a843ed0",
        "StatefulSet/dsv2-lite-decode-0": "ab14c5cfe67e3485",
        "StatefulSet/dsv2-lite-decode-1": "3adac5c41c2f27f6",
        "Deployment/dsv2-lite-router": "b66b20dd922354f5",
    },
    "deepseek-v3-a3.yaml": {
        "StatefulSet/dsv3-a3-prefill-0": "775e145d4e051683",
        "StatefulSet/dsv3-a3-decode-0": "f773903e2ff563c5",
        "Deployment/dsv3-a3-router": "6f49118449330a8a",
    },
    "deepseek-v3-pp2.yaml": {
        "StatefulSet/dsv3-prefill-0": "2b4cddcff2f3d598",
        "StatefulSet/dsv3-prefill-1": "ffa6c09a22e47d2b",
        "StatefulSet/dsv3-decode-0": "19111b15a33e2186",
        "Deployment/dsv3-router": "37e368e99b3caaa4",
    },
    "deepseek-v3.2.yaml": {
        "StatefulSet/dsv32-prefill-0": "1f3f293da1d3d1e9",
        "StatefulSet/dsv32-decode-0": "1398a787b56492b2",
        "Deployment/dsv32-router": "9e1cbb1892f26232",
    },
    "busy": {
        "StatefulSet/dsv3-prefill-0": "f152d158a0a89133",
        "StatefulSet/dsv3-prefill-1": "9a5febe5ae842973",
        "StatefulSet/dsv3-decode-0": "e6f8be38ba9a1fac",
        "Deployment/dsv3-router": "1ecf9ccb5040a67c",
    },
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_example_templates_are_those_of_issue_36(name: str) -> None:
    assert _templates(*_example(name), issue_36=True) == GOLDEN_ISSUE_36[name]
    assert _templates(*_busy(), issue_36=True) == GOLDEN_ISSUE_36["busy"]
