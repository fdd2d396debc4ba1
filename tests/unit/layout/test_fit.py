"""The fit check: weight bytes per rank against NPU memory, with room for KV cache.

Every example must fit the hardware it names; the examples as 0.1.0 shipped them (BF16
DeepSeek-V3 on 16 A2 NPUs an instance) must not. The byte and memory rules are checked
against sums written out from config.json's numbers.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_pd_operator.decisions.observation import Observation
from ascend_pd_operator.decisions.planner import Plan, plan
from ascend_pd_operator.wiring.cli import main as ascend_pd
from ascend_pd_operator.wiring.render_cli import fit_report, render
from ascend_pd_runtime.fit import GIB, KV_MARGIN_TOKENS, RoleParallel, check_fit, flag
from ascend_pd_runtime.layout import LayoutRequest, compute_layout
from ascend_pd_runtime.model_facts import load_model_facts
from ascend_pd_runtime.plan_cli import example_config
from ascend_pd_runtime.weights import Sharding, rank_parameters

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.yaml")
                  if "kind: PDDeployment" in p.read_text())  # fmt: skip
OLD_PP2 = ROOT / "tests" / "unit" / "operator" / "examples_0_1_0" / "deepseek-v3-pp2.yaml"
Json = dict[str, Any]


def planned(path: Path) -> tuple[Json, list[Json], Plan]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    cr = copy.deepcopy(next(d for d in docs if d["kind"] == "PDDeployment"))
    cr["metadata"]["namespace"] = "llm"
    configmaps = [d for d in docs if d["kind"] == "ConfigMap"]
    todo = plan(Observation(cr, user_configmap=configmaps[0] if configmaps else None), "")
    assert todo.ok, todo.status
    return cr, configmaps, todo


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_fits_its_npus(path: Path) -> None:
    cr, configmaps, todo = planned(path)
    report = fit_report(todo)
    assert report.fits, report.warnings()
    assert len(report.stages) == sum(
        cr["spec"][r]["parallelism"].get("pipeline", 1) for r in ("prefill", "decode")
    )
    code, _, message = render(cr, None, None, configmaps)
    assert code == 0 and "warning" not in message, message


def test_the_examples_of_0_1_0_did_not_fit() -> None:
    # BF16 weights on 16 NPUs of 64 GB an instance: what issue 35 found
    _, _, todo = planned(OLD_PP2)
    warnings = fit_report(todo).warnings()
    assert [w.split(":")[0] for w in warnings] == [
        "prefill does not fit its NPUs", "decode does not fit its NPUs"]  # fmt: skip
    # the worst rank is named with its numbers
    worst = "decode does not fit its NPUs: PP rank 0 (layers [0, 61) + 1 draft): weights "
    assert warnings[1].startswith(worst)


@pytest.fixture
def v3():
    return load_model_facts(example_config("deepseek-v3"))


def layout_of(facts, prefill_pp=1, partition=()):
    return compute_layout(facts, LayoutRequest(prefill_pp=prefill_pp,
                                               layer_partition=tuple(partition)))  # fmt: skip


def test_bytes_are_the_parameters_at_the_checkpoints_width(v3) -> None:
    layout = layout_of(v3, 2, (30, 31))
    bf16 = check_fit(v3, layout, {"prefill": RoleParallel(8), "decode": RoleParallel(16)})
    w8a8 = check_fit(v3, layout, {
        "prefill": RoleParallel(8, 1, ("--quantization", "modelslim")),
        "decode": RoleParallel(16, 1, ("--quantization=w8a8_int8",))})  # fmt: skip
    for stage_bf16, stage_q in zip(bf16.stages, w8a8.stages, strict=True):
        s = stage_bf16.stage
        tp = 8 if stage_bf16.role == "prefill" else 16
        params = rank_parameters(
            v3.weights, Sharding(tp, tp, tp, tp, tp, tp), range(s.start_layer, s.end_layer),
            first=s.pp_rank == 0, last=s.end_layer == 61)  # fmt: skip
        assert stage_bf16.weight_bytes == round(2 * params.total)
        assert stage_q.weight_bytes == round(params.quantizable + 2 * params.kept)
        # room for the KV of 32768 tokens: latent 512 + rope 64, 2 bytes, every layer held
        assert stage_bf16.kv_bytes == (512 + 64) * 2 * KV_MARGIN_TOKENS * s.num_layers


def test_usable_memory_is_the_static_fraction_or_the_default_reserve(v3) -> None:
    layout = layout_of(v3)
    report = check_fit(v3, layout, {
        "prefill": RoleParallel(16, 1, ("--mem-fraction-static", "0.5")),
        "decode": RoleParallel(16)}, memory_bytes=32 * GIB)  # fmt: skip
    prefill, decode = report.stages
    assert prefill.usable_bytes == 16 * GIB
    assert decode.usable_bytes == 22 * GIB  # 32 less 10 GiB SGLang keeps by default
    assert prefill.fits is (prefill.weight_bytes + prefill.kv_bytes <= 16 * GIB)


def test_a_quantization_of_unknown_size_is_said_not_judged(v3) -> None:
    report = check_fit(v3, layout_of(v3), {
        "prefill": RoleParallel(16, 1, ("--quantization", "awq")),
        "decode": RoleParallel(16)})  # fmt: skip
    assert not report.fits and report.warnings() == [
        "the weights' fit was not checked: prefill --quantization awq: its weight size is not "
        "known here (known: none, modelslim, w8a8_int8, w8a8_fp8, fp8)"]  # fmt: skip


def test_flags_as_argparse_reads_them() -> None:
    args = ("--quantization", "fp8", "--mem-fraction-static=0.7", "--quantization=modelslim")
    assert flag(args, "--quantization") == "modelslim"  # the last one wins
    assert flag(args, "--mem-fraction-static") == "0.7"
    assert flag(args, "--kv-cache-dtype") is None


def run_plan(capsys, *args: str) -> tuple[int, str, str]:
    code = ascend_pd(["plan", "--model-config", "deepseek-v3", "--prefill-pp", "2",
                      "--layer-partition", "30,31", *args])  # fmt: skip
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_warns_when_the_weights_do_not_fit(capsys) -> None:
    code, out, err = run_plan(capsys, "--prefill-tp", "8", "--decode-tp", "16")
    assert code == 0 and out.startswith("{")  # the layout as before
    assert err.startswith("warning: prefill does not fit its NPUs: PP rank 1 (layers [30, 61))")
    assert "warning: decode does not fit its NPUs" in err
    quantized = ("--prefill-args=--quantization modelslim",
                 "--decode-args=--quantization modelslim")  # fmt: skip
    code, _, err = run_plan(capsys, "--prefill-tp", "8", "--decode-tp", "16", *quantized)
    assert (code, err) == (0, "")
    # without both tensor sizes nothing is judged
    assert run_plan(capsys, "--prefill-tp", "8")[2] == ""
    code, out, err = run_plan(capsys, "--prefill-tp", "8", "--decode-tp", "16",
                              "--decode-dp", "3")  # fmt: skip
    assert (code, out) == (1, "")
    assert err == ("error: --decode-tp 16 and --decode-dp 3: expected sizes >= 1, the tensor "
                   "size a multiple of the data size\n")  # fmt: skip


def test_render_takes_a_bundled_model_name(capsys, tmp_path: Path) -> None:
    # as `plan` does: the name of a bundled config.json for --model-config
    docs = [d for d in yaml.safe_load_all((ROOT / "examples" / "deepseek-v3-pp2.yaml")
                                          .read_text()) if d]  # fmt: skip
    docs[0]["spec"]["model"].pop("config")
    path = tmp_path / "dsv3.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    assert ascend_pd(["render", "-f", str(path), "--model-config", "deepseek-v3"]) == 0
    out, err = capsys.readouterr()
    assert "kind: StatefulSet" in out and err == ""
    # a small NPU: the same render warns
    assert ascend_pd(["render", "-f", str(path), "--model-config", "deepseek-v3",
                      "--npu-memory-gib", "32"]) == 0  # fmt: skip
    assert "dsv3: warning: prefill does not fit its NPUs" in capsys.readouterr().err
