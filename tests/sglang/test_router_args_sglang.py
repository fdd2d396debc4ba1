"""The router's arguments (``router.router_args``) are accepted by the real sglang-router
releases (``harness.ROUTER_VERSIONS``, from PyPI) and mean what the spec asked for.

``parse_router_args`` of the release (what ``python -m sglang_router.launch_router``
calls) parses the args of the router Deployment the operator builds, for the examples
and for generated specs (replicas of each role, every policy); the intent (PD mode,
Kubernetes service discovery in the deployment's namespace on the runtime pods' HTTP port,
the prefill and decode selectors as label dicts, no static worker URLs, the bootstrap-port
annotation the prefill pods carry, the policy, host and port) is written from the spec by
hand, and the same for every replica count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sglang_harness as harness
from argv_cases import resources

from ascend_pd_operator.api.vocabulary import ANNOTATION_BOOTSTRAP_PORT
from ascend_pd_operator.wiring import render_cli

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(600)]

DRIVER = Path(__file__).resolve().parent / "router_driver.py"
POLICIES = ("cache_aware", "round_robin", "random", "power_of_two")
REPORTED = (
    "pd_disaggregation", "service_discovery", "service_discovery_namespace",
    "service_discovery_port", "prefill_selector", "decode_selector", "selector",
    "bootstrap_port_annotation", "prefill_urls", "decode_urls", "policy", "host", "port",
)  # fmt: skip


def router_specs() -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(id, PDDeployment, ConfigMaps): the examples, then each policy × role counts."""
    out = [(name, res, cms) for name, (res, _, cms) in resources("0.5.23").items()]
    base = resources("0.5.23")["pp1-plain"][0]
    for i, policy in enumerate(POLICIES):
        resource = json.loads(json.dumps(base))
        resource["spec"]["prefill"]["replicas"] = 1 + i
        resource["spec"]["decode"]["replicas"] = 3 - i % 3
        resource["spec"]["router"] = {"policy": policy, "port": 8000 + i}
        out.append((f"policy-{policy}", resource, []))
    return out


def intent(resource: dict[str, Any], fingerprint: str) -> dict[str, Any]:
    """What the router must parse: leaders of this deployment's role, of one generation."""
    name, ns = resource["metadata"]["name"], resource["metadata"]["namespace"]
    router = resource["spec"].get("router") or {}

    def routable(role: str) -> dict[str, str]:
        return {
            "ascendpd.io/deployment": name,
            "ascendpd.io/role": role,
            "ascendpd.io/leader": "true",
            "ascendpd.io/kv-fingerprint": fingerprint,
        }

    return {
        "pd_disaggregation": True,
        "service_discovery": True,
        "service_discovery_namespace": ns,
        "service_discovery_port": 30000,
        "prefill_selector": routable("prefill"),
        "decode_selector": routable("decode"),
        "selector": {},
        # the annotation these releases read, and the one our prefill pods carry
        "bootstrap_port_annotation": ANNOTATION_BOOTSTRAP_PORT,
        "prefill_urls": [],
        "decode_urls": [],
        "policy": router.get("policy", "cache_aware"),
        "host": "0.0.0.0",
        "port": router.get("port", 8000),
    }  # fmt: skip


@pytest.mark.parametrize("version", harness.ROUTER_VERSIONS)
def test_router_args_parse_to_their_intent(version: str, tmp_path: Path) -> None:
    site = harness.ensure_router(version)
    cases, intents = [], {}
    for case_id, resource, configmaps in router_specs():
        code, manifests, message = render_cli.render(resource, None, None, configmaps)
        assert code == render_cli.EXIT_OK, message
        router = next(m for m in manifests if m["kind"] == "Deployment")
        container = router["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == ["python3", "-m", "sglang_router.launch_router"]
        for sts in (m for m in manifests if m["kind"] == "StatefulSet"):
            if "-prefill-" in sts["metadata"]["name"]:  # where discovery reads the port
                index = int(sts["metadata"]["name"].rsplit("-", 1)[1])
                annotations = sts["spec"]["template"]["metadata"]["annotations"]
                assert annotations[ANNOTATION_BOOTSTRAP_PORT] == str(8998 + index)
        cases.append({"id": case_id, "args": container["args"], "report": list(REPORTED)})
        # the generation: the layout's fingerprint, as the plan document states it
        layout = next(m for m in manifests if m["metadata"]["name"].endswith("-kv-layout"))
        intents[case_id] = intent(resource, json.loads(layout["data"]["plan.json"])["fingerprint"])
    parsed = harness.run_cases(DRIVER, (site,), cases, tmp_path / "cases.json")
    assert parsed["version"] == version
    problems = [
        f"{case_id}: {result}"
        for case_id, result in parsed["results"].items()
        if not result["ok"] or result["values"] != intents[case_id]
    ]
    assert not problems, "\n".join(problems)
    line = (
        f"sglang-router {version}: {len(cases)} router argument lists parsed by "
        f"parse_router_args, {len(cases)} matched their intent"
    )
    harness.SUMMARY.append(line)
    print(line)
