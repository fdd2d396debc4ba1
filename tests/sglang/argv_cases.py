"""The launcher's argvs for every pod of a set of PDDeployments, and what each must mean.

For one SGLang version, every example (``examples/*.yaml``, its ``sglangVersion`` set
to that version) and a set of generated specs (each role, PP, speculative setting,
transfer backend and extraArgs form) is rendered by the operator's own builders; each
runtime pod's env (the env contract the pod gets) goes through ``plan_launch``, as in the
pod. ``intent`` is derived from the spec alone, by hand, never from the argv: the values
SGLang's parser must produce.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_operator.api import models
from ascend_pd_operator.wiring import render_cli
from ascend_pd_runtime import env_contract
from ascend_pd_runtime.launcher import plan_launch
from ascend_pd_runtime.plan_cli import example_config
from reliability.specs import DEEPSEEK_V3, document

REPO = Path(__file__).resolve().parents[2]
#: the examples holding a PDDeployment (examples/ also holds the models PVC and its Job)
EXAMPLES = sorted(
    p for p in (REPO / "examples").glob("*.yaml") if "kind: PDDeployment" in p.read_text()
)

#: The ServerArgs fields every case reports (besides its extraArgs' fields).
REPORTED = (
    "model_path",
    "served_model_name",
    "tp_size",
    "pp_size",
    "dp_size",
    "nnodes",
    "node_rank",
    "dist_init_addr",
    "host",
    "port",
    "device",
    "disaggregation_mode",
    "disaggregation_transfer_backend",
    "disaggregation_bootstrap_port",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)

QWEN2_7B = {"architecture": "Qwen2ForCausalLM", "numHiddenLayers": 28}

#: extraArgs forms and the ServerArgs fields they must set.
EXTRA_FORMS: dict[str, tuple[list[str], dict[str, Any]]] = {
    "none": ([], {}),
    "separate-value": (["--mem-fraction-static", "0.85"], {"mem_fraction_static": 0.85}),
    "equals-value": (["--mem-fraction-static=0.8"], {"mem_fraction_static": 0.8}),
    "switch": (["--enable-dp-attention"], {"enable_dp_attention": True}),
    "mixed": (
        ["--chunked-prefill-size", "4096", "--disable-radix-cache", "--max-running-requests=64"],
        {"chunked_prefill_size": 4096, "disable_radix_cache": True, "max_running_requests": 64},
    ),
}


@dataclass(frozen=True)
class ArgvCase:
    id: str
    argv: list[str]
    intent: dict[str, Any]

    def request(self) -> dict[str, Any]:
        return {"id": self.id, "argv": self.argv, "report": sorted(self.intent)}


@dataclass(frozen=True)
class Refusal:
    """A spec the operator refuses for this version (the version lacks what it needs)."""

    id: str
    message: str


def generated_specs() -> dict[str, tuple[dict[str, Any], str]]:
    """name -> (spec, extraArgs form): each role, PP, speculative, backend, extraArgs form."""

    def spec(
        prefill: dict[str, Any],
        decode: dict[str, Any],
        speculative: dict[str, Any] | None = None,
        backend: str = "ascend",
        model: dict[str, Any] = DEEPSEEK_V3,
    ) -> dict[str, Any]:
        return {
            "model": {"name": "served-name", "path": "/models/m", "config": dict(model)},
            "runtime": {"image": "img", "transferBackend": backend},
            "speculative": speculative or {"algorithm": "NONE"},
            "prefill": prefill,
            "decode": decode,
        }

    one = {"replicas": 1, "parallelism": {"tensor": 2}, "devicesPerNode": 2}
    return {
        "pp1-plain": (
            spec({"replicas": 1, "parallelism": {"tensor": 4}, "devicesPerNode": 2}, one),
            "none",
        ),
        "pp2-partition-decode-pp2-nextn-decode": (
            spec(
                {
                    "replicas": 2,
                    "parallelism": {"tensor": 2, "pipeline": 2},
                    "layerPartition": [30, 31],
                    "devicesPerNode": 2,
                },
                {"replicas": 1, "parallelism": {"tensor": 2, "pipeline": 2}, "devicesPerNode": 4},
                {"algorithm": "NEXTN", "roles": ["decode"], "numSteps": 2, "numDraftTokens": 3},
            ),
            "equals-value",
        ),
        "pp1-nextn-both-roles": (
            spec(one, one, {"algorithm": "NEXTN", "roles": ["prefill", "decode"]}),
            "separate-value",
        ),
        "pp4-nextn-both-roles": (
            spec(
                {"replicas": 1, "parallelism": {"tensor": 1, "pipeline": 4}, "devicesPerNode": 2},
                one,
                {"algorithm": "NEXTN", "roles": ["prefill", "decode"], "numSteps": 1},
            ),
            "none",
        ),
        "eagle-decode-dp-attention": (
            spec(
                {"replicas": 2, "parallelism": {"tensor": 2}, "devicesPerNode": 2},
                {"replicas": 2, "parallelism": {"tensor": 4, "data": 4}, "devicesPerNode": 4},
                {"algorithm": "EAGLE", "roles": ["decode"], "eagleTopk": 2, "numDraftTokens": 8},
            ),
            "switch",
        ),
        "mooncake-pp1-mla": (spec(one, one, backend="mooncake"), "mixed"),
        "mooncake-pp2-mha": (
            spec(
                {"replicas": 1, "parallelism": {"tensor": 1, "pipeline": 2}, "devicesPerNode": 1},
                one,
                backend="mooncake",
                model=QWEN2_7B,
            ),
            "separate-value",
        ),
    }


def pdd(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return document(name, "ns", spec)


Resource = tuple[dict[str, Any], str, list[dict[str, Any]]]


def resources(version: str) -> dict[str, Resource]:
    """name -> (PDDeployment, extraArgs form, ConfigMaps beside it) for ``version``:
    the examples and the generated specs."""
    out: dict[str, Resource] = {}
    for path in EXAMPLES:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        doc = copy.deepcopy(next(d for d in docs if d.get("kind") == models.KIND))
        doc["spec"]["runtime"]["sglangVersion"] = version
        # the examples name no namespace (`kubectl apply -n <namespace>`): give them pdd()'s
        doc["metadata"]["namespace"] = "ns"
        configmaps = [d for d in docs if d.get("kind") == "ConfigMap"]
        out[f"example-{path.stem}"] = (doc, "example", configmaps)
    for name, (spec, form) in generated_specs().items():
        spec = copy.deepcopy(spec)
        spec["runtime"]["sglangVersion"] = version
        extra, _ = EXTRA_FORMS[form]
        for role in ("prefill", "decode"):
            spec[role]["extraArgs"] = list(extra)
        out[name] = (pdd("gen", spec), form, [])
    return out


def leader_address(role: str, instance: int) -> str:
    """The fake address the test resolver gives instance ``instance``'s leader."""
    return f"10.{1 if role == 'prefill' else 2}.{instance}.1"


def _resolver(host: str) -> str:
    sts = host.split(".")[0].rsplit("-", 1)[0]  # <name>-<role>-<i>-0.<svc>... -> <name>-<role>-<i>
    _, role, instance = sts.rsplit("-", 2)
    return leader_address(role, int(instance))


def intent(
    spec: dict[str, Any], role: str, instance: int, ordinal: int, model_dir: str, form: str
) -> dict[str, Any]:
    """What SGLang must parse for pod ``ordinal`` of instance ``instance`` of ``role``."""
    r = spec[role]
    par = {"tensor": 1, "pipeline": 1, "data": 1, **r.get("parallelism", {})}
    per_node = r.get("devicesPerNode", 8)
    sp = {"algorithm": "NONE", "roles": ["prefill", "decode"], "numSteps": 3, "eagleTopk": 1,
          "numDraftTokens": 4, **(spec.get("speculative") or {})}  # fmt: skip
    runs_draft = sp["algorithm"] != "NONE" and role in sp["roles"]
    want: dict[str, Any] = {
        "model_path": model_dir,
        "served_model_name": spec["model"]["name"],
        "tp_size": par["tensor"],
        "pp_size": par["pipeline"],
        "dp_size": par["data"],
        "nnodes": par["tensor"] * par["pipeline"] // per_node,
        "node_rank": ordinal,
        "dist_init_addr": f"{leader_address(role, instance)}:5757",
        "host": "0.0.0.0",
        "port": 30000,
        "device": "npu",
        "enable_metrics": True,  # /metrics on the HTTP port (the PodMonitor scrapes it)
        "disaggregation_mode": role,
        "disaggregation_transfer_backend": spec["runtime"].get("transferBackend", "ascend"),
        "speculative_algorithm": sp["algorithm"] if runs_draft else None,
    }
    if role == "prefill":
        want["disaggregation_bootstrap_port"] = 8998 + instance
    if runs_draft:
        want["speculative_num_steps"] = sp["numSteps"]
        want["speculative_eagle_topk"] = sp["eagleTopk"]
        want["speculative_num_draft_tokens"] = sp["numDraftTokens"]
    if form == "example":
        want.update(_example_extra(r.get("extraArgs") or []))
    else:
        want.update(EXTRA_FORMS[form][1])
    return want


def _example_extra(args: list[str]) -> dict[str, Any]:
    """The examples' extraArgs, read by hand (each flag the examples use)."""
    known = {"--mem-fraction-static": ("mem_fraction_static", float),
             "--quantization": ("quantization", str)}  # fmt: skip
    switches = {"--enable-dp-attention": "enable_dp_attention"}
    want: dict[str, Any] = {}
    i = 0
    while i < len(args):
        if args[i] in known:
            dest, kind = known[args[i]]
            want[dest] = kind(args[i + 1])
            i += 2
        elif args[i] in switches:
            want[switches[args[i]]] = True
            i += 1
        else:
            raise AssertionError(f"an example uses {args[i]!r}: add it to _example_extra")
    return want


def _config_json(spec: dict[str, Any], configmaps: list[dict[str, Any]]) -> str:
    """The model's config.json: the bundled real one the inline facts describe (SGLang
    0.5.14+ reads it with transformers in ``ServerArgs.__post_init__``), or the
    referenced ConfigMap's key. The launcher checks it gives the operator's layout."""
    model = spec["model"]
    config = model.get("config")
    if config:
        name = {"Qwen2ForCausalLM": "qwen2-7b"}.get(config.get("architecture", ""), "")
        name = name or ("deepseek-v3.2" if config.get("indexHeadDim") else "deepseek-v3")
        return example_config(name).read_text()
    ref = model["configMapRef"]
    cm = next(c for c in configmaps if c["metadata"]["name"] == ref["name"])
    return str(cm["data"][ref.get("key", "config.json")])


def cases_for(version: str, workdir: Path) -> tuple[list[ArgvCase], list[Refusal]]:
    """Every pod's argv for ``version``, and the specs the operator refuses for it."""
    cases: list[ArgvCase] = []
    refused: list[Refusal] = []
    for name, (resource, form, configmaps) in resources(version).items():
        code, manifests, message = render_cli.render(resource, None, None, configmaps)
        if code != render_cli.EXIT_OK:
            refused.append(Refusal(f"{version}/{name}", message))
            continue
        spec = resource["spec"]
        model_dir = workdir / version / name / "model"
        model_dir.mkdir(parents=True, exist_ok=True)
        (model_dir / "config.json").write_text(_config_json(spec, configmaps))
        layout = next(m for m in manifests if m["metadata"]["name"].endswith("-kv-layout"))
        plan = model_dir.parent / "plan.json"
        plan.write_text(layout["data"][env_contract.KV_LAYOUT_KEY])
        for sts in (m for m in manifests if m["kind"] == "StatefulSet"):
            container = sts["spec"]["template"]["spec"]["containers"][0]
            env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
            env[env_contract.MODEL_PATH] = str(model_dir)
            env[env_contract.KV_LAYOUT_FILE] = str(plan)
            role = env[env_contract.ROLE]
            instance = int(env[env_contract.INSTANCE])
            for ordinal in range(sts["spec"]["replicas"]):
                pod = f"{sts['metadata']['name']}-{ordinal}"
                launch = plan_launch(
                    {**env, env_contract.POD_NAME: pod}, _resolver, python="python3"
                )
                cases.append(
                    ArgvCase(
                        id=f"{version}/{name}/{pod}",
                        argv=launch.server_args,
                        intent=intent(spec, role, instance, ordinal, str(model_dir), form),
                    )
                )
    return cases, refused
