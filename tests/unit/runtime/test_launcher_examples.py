"""The launcher's dry run for every pod of every example: the operator's manifests
(``ascend-pd render``) and the runtime's launcher agree on the env contract."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ascend_pd_runtime import env_contract
from ascend_pd_runtime.errors import LayoutMismatch
from ascend_pd_runtime.launcher import plan_launch
from ascend_pd_runtime.plan_cli import example_config

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = {
    "deepseek-v3-pp2.yaml": "deepseek-v3",
    "deepseek-v3.2.yaml": "deepseek-v3.2",
    "deepseek-v2-lite.yaml": "deepseek-v2-lite",
}


def _render(example: str) -> list[dict]:
    args = [
        sys.executable,
        "-m",
        "ascend_pd_operator.wiring.cli",
        "render",
        "-f",
        str(ROOT / "examples" / example),
    ]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _resolver(host: str) -> str:
    # <sts>-<ordinal>.<svc>.<ns>.svc -> a distinct fake address per pod
    return f"addr-of-{host.split('.')[0]}"


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_every_pod_gets_the_right_command(example, tmp_path):
    docs = _render(example)
    layout_cm = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-kv-layout")
    )
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(layout_cm["data"][env_contract.KV_LAYOUT_KEY])
    plan = json.loads(plan_file.read_text())
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(example_config(EXAMPLES[example]).read_text())
    bootstrap_ports = set()
    seen_roles = set()
    for sts in (d for d in docs if d["kind"] == "StatefulSet"):
        container = sts["spec"]["template"]["spec"]["containers"][0]
        assert container["command"][:2] == ["ascend-pd-runtime", "launch"]
        base = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        role = base[env_contract.ROLE]
        seen_roles.add(role)
        base[env_contract.MODEL_PATH] = str(model)
        base[env_contract.KV_LAYOUT_FILE] = str(plan_file)
        replicas = sts["spec"]["replicas"]
        launches = []
        for ordinal in range(replicas):
            env = {**base, env_contract.POD_NAME: f"{sts['metadata']['name']}-{ordinal}"}
            launch = plan_launch(env, _resolver, python="python3")
            argv = launch.argv
            assert _flag(argv, "--node-rank") == str(ordinal)
            assert _flag(argv, "--nnodes") == str(replicas)
            assert _flag(argv, "--disaggregation-mode") == role
            assert _flag(argv, "--dist-init-addr").startswith(
                f"addr-of-{sts['metadata']['name']}-0:"
            )
            tp, pp = int(_flag(argv, "--tp-size")), int(_flag(argv, "--pp-size"))
            assert tp * pp == replicas * int(base[env_contract.DEVICES_PER_NODE])
            assert pp == plan[role]["pp"]
            speculative = role in base[env_contract.SPECULATIVE_ROLES].split(",") and (
                base[env_contract.SPECULATIVE_ALGORITHM] != "NONE"
            )
            assert ("--speculative-algorithm" in argv) == speculative
            launches.append(launch)
        if role == "prefill":
            port = _flag(launches[0].argv, "--disaggregation-bootstrap-port")
            assert port not in bootstrap_ports, "bootstrap ports must be unique per instance"
            bootstrap_ports.add(port)
            # every stage of the layout runs on exactly one node of the instance
            stages = [
                s
                for launch in launches
                for s in launch.summary.split("stages ")[1].split(" fingerprint")[0].split(", ")
            ]
            assert len(stages) == plan["prefill"]["pp"]
    assert seen_roles == {"prefill", "decode"}


def test_decode_of_a_different_model_refuses_to_start(tmp_path):
    docs = _render("deepseek-v3-pp2.yaml")
    layout_cm = next(d for d in docs if d["kind"] == "ConfigMap")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(layout_cm["data"][env_contract.KV_LAYOUT_KEY])
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(example_config("deepseek-v3.2").read_text())
    sts = next(d for d in docs if d["kind"] == "StatefulSet" and "decode" in d["metadata"]["name"])
    env = {
        e["name"]: e["value"]
        for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]
        if "value" in e
    }
    env.update(
        {
            env_contract.MODEL_PATH: str(model),
            env_contract.KV_LAYOUT_FILE: str(plan_file),
            env_contract.POD_NAME: "dsv3-decode-0-0",
        }
    )
    with pytest.raises(
        LayoutMismatch, match="kv_buf_groups: the model here gives 3, the operator expects 2"
    ):
        plan_launch(env, _resolver, python="python3")
