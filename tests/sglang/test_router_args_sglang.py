"""The router's arguments (``router.router_args``) are accepted by the real sglang-router
releases (``harness.ROUTER_VERSIONS``, from PyPI) and mean what the spec asked for.

``parse_router_args`` of the release (what ``python -m sglang_router.launch_router``
calls) parses the args of the router Deployment the operator builds, for the examples
and for generated specs (replicas of each role, every policy); the intent (every prefill
leader's URL with its bootstrap port, every decode leader, the policy, host and port) is
written from the spec by hand.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import sglang_harness as harness
from argv_cases import resources

from ascend_pd_operator import render_cli

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(600)]

DRIVER = Path(__file__).resolve().parent / "router_driver.py"
POLICIES = ("cache_aware", "round_robin", "random", "power_of_two")
REPORTED = ("pd_disaggregation", "prefill_urls", "decode_urls", "policy", "host", "port")


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


def intent(resource: dict[str, Any]) -> dict[str, Any]:
    name, ns = resource["metadata"]["name"], resource["metadata"]["namespace"]
    spec = resource["spec"]
    router = spec.get("router") or {}

    def leader(role: str, i: int) -> str:
        return f"http://{name}-{role}-{i}-0.{name}-{role}-{i}.{ns}.svc:30000"

    prefills = range(spec["prefill"]["replicas"])
    return {
        "pd_disaggregation": True,
        "prefill_urls": [[leader("prefill", i), 8998 + i] for i in prefills],
        "decode_urls": [leader("decode", j) for j in range(spec["decode"]["replicas"])],
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
        cases.append({"id": case_id, "args": container["args"], "report": list(REPORTED)})
        intents[case_id] = intent(resource)
    request, out = tmp_path / "cases.json", tmp_path / "results.json"
    request.write_text(json.dumps({"cases": cases}))
    done = subprocess.run(
        ["nice", str(harness.PYTHON), str(DRIVER), str(request), str(out)],
        env={**harness.os.environ, "PYTHONPATH": harness.pythonpath(site)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    parsed = json.loads(out.read_text())
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
