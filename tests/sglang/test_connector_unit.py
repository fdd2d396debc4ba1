"""Unit tests of the connector logic and the patch engine (no SGLang needed)."""

from __future__ import annotations

import argparse
import concurrent.futures
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from ascend_pd_runtime import connector
from ascend_pd_runtime.errors import LayoutMismatch
from ascend_pd_runtime.layout import StageLayout
from ascend_pd_runtime.model_facts import load_model_facts
from ascend_pd_runtime.plan_cli import example_config
from ascend_pd_runtime.sglang_patch import cli as patch_cli
from ascend_pd_runtime.sglang_patch.patches import (
    MLA_PP_KV_ARGS,
    TORCH_NPU_OPTIONAL,
    VECTORIZED_SEND,
)
from ascend_pd_runtime.transfer_plan import per_block_loop_reference

V3 = load_model_facts(example_config("deepseek-v3"))  # 61 layers, 1 MTP, 2 groups
V32 = load_model_facts(example_config("deepseek-v3.2"))  # 61 layers, 1 MTP, 3 groups


def kv_args(entries: int, start: int = 0, **fields: Any) -> SimpleNamespace:
    return SimpleNamespace(
        kv_data_ptrs=[0x1000_0000 * (i + 1) for i in range(entries)],
        kv_item_lens=[64] * entries,
        prefill_start_layer=start,
        pp_rank=fields.pop("pp_rank", 0),
        **fields,
    )


def test_stage_of_a_middle_pp_stage() -> None:
    layout = connector.prefill_kv_layout(kv_args(3 * 20, start=20, pp_rank=1), V32, 3, True)
    assert layout.stage == StageLayout(1, 20, 40, 3, 0)
    assert (layout.total_kv_layers, layout.num_nextn_predict_layers) == (61, 1)


def test_stage_of_a_last_stage_holding_draft_layers() -> None:
    args = kv_args(2 * 32, start=30, pp_rank=1, kv_buf_groups=2, hidden_kv_layers=61,
                   draft_kv_layers=1)  # fmt: skip
    layout = connector.prefill_kv_layout(args, V3, 2, True)
    assert layout.stage == StageLayout(1, 30, 61, 2, 1)


def test_stage_of_a_pp1_prefill_with_draft() -> None:
    layout = connector.prefill_kv_layout(kv_args(2 * 62, total_kv_layers=61), V3, 1, True)
    assert layout.stage == StageLayout(0, 0, 61, 2, 1)


def test_mha_prefill_uses_two_groups() -> None:
    qwen = load_model_facts(example_config("qwen2-7b"))
    layout = connector.prefill_kv_layout(kv_args(2 * 14, start=14, pp_rank=1), qwen, 2, False)
    assert layout.stage == StageLayout(1, 14, 28, 2, 0)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (kv_args(2 * 30, kv_buf_groups=3), "prefill registered 3 buffer groups × 61 target"),
        (kv_args(2 * 30, total_kv_layers=60), "prefill registered 2 buffer groups × 60 target"),
        (kv_args(61), "61 KV pointers from layer 0 do not form 2 buffer groups"),
        (kv_args(2 * 34, start=30), "imply 3 draft layers; the model has 1 MTP layers"),
        (
            kv_args(2 * 31, start=30, draft_kv_layers=1),
            "KVArgs declares 1 draft layers but the pointers hold 0",
        ),
    ],
)
def test_prefill_layout_contradicting_the_model_is_refused(args: Any, needle: str) -> None:
    with pytest.raises(LayoutMismatch, match="KV layout mismatch") as err:
        connector.prefill_kv_layout(args, V3, 2, True)
    assert needle in str(err.value)


def _layout(stage: StageLayout, pp: int, facts: Any = V3) -> connector.PrefillKVLayout:
    return connector.PrefillKVLayout(stage, 61, facts.num_nextn_predict_layers, pp)


def test_guard_accepts_pp1_decode_with_or_without_draft() -> None:
    layout = _layout(StageLayout(0, 0, 30, 2), 2)
    assert connector.decode_stage_for(layout, 122) == StageLayout(0, 0, 61, 2, 0)
    assert connector.decode_stage_for(layout, 124) == StageLayout(0, 0, 61, 2, 1)


def test_guard_accepts_decode_with_the_prefill_partition() -> None:
    assert connector.decode_stage_for(_layout(StageLayout(0, 0, 30, 2), 2), 60) == StageLayout(
        0, 0, 30, 2
    )
    last = _layout(StageLayout(1, 30, 61, 2), 2)
    assert connector.decode_stage_for(last, 64) == StageLayout(1, 30, 61, 2, 1)


@pytest.mark.parametrize("count", [120, 126, 128, 61, 0])
def test_guard_refuses_other_counts_naming_both_sides(count: int) -> None:
    layout = _layout(StageLayout(1, 30, 61, 2), 2)
    with pytest.raises(LayoutMismatch) as err:
        connector.decode_stage_for(layout, count)
    message = str(err.value)
    assert f"decode registered {count} KV pointers, expected 122 or 124" in message
    assert "prefill PP rank 1 layers [30, 61) × 2 groups = 62 pointers" in message
    assert "A decode at PP 1 holds layers [0, 61)" in message
    assert "holds layers [30, 61) and registers 62 or 64 pointers" in message


def test_guard_refuses_a_decode_without_the_prefills_draft_layers() -> None:
    layout = _layout(StageLayout(0, 0, 61, 2, 1), 1)
    with pytest.raises(LayoutMismatch, match="decode registered 122 KV pointers"):
        connector.decode_stage_for(layout, 122)


class Engine:
    def __init__(self, status: int = 0, statuses: list[int] | None = None) -> None:
        self.status = status
        self.statuses = statuses  # one status per call, in order
        self.calls: list[tuple[list[int], list[int], list[int]]] = []

    def batch_transfer_sync(
        self, session: str, src: list[int], dst: list[int], lengths: list[int]
    ) -> int:
        self.calls.append((src, dst, lengths))
        if self.statuses is not None:
            return self.statuses[len(self.calls) - 1]
        return self.status


def manager(custom_pool: bool = False, status: int = 0, **args: Any) -> SimpleNamespace:
    return SimpleNamespace(
        kv_args=kv_args(2 * 30, kv_buf_groups=2, total_kv_layers=61, **args),
        pp_size=2,
        is_mla_backend=True,
        enable_custom_mem_pool=custom_pool,
        server_args=SimpleNamespace(model_path=str(example_config("deepseek-v3"))),
        engine=Engine(status),
    )


def _send(mgr: SimpleNamespace, pages: list[int], dst_count: int = 122) -> object:
    dst_ptrs = [0x9000_0000_0000 + i * 0x1000_0000 for i in range(dst_count)]
    idx = np.asarray(pages, dtype=np.int32)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return connector.send_kvcache_planned(mgr, "s", idx, dst_ptrs, idx + 5, pool)


def test_one_batch_without_custom_pool_and_one_per_entry_with_it() -> None:
    plain, custom = manager(), manager(custom_pool=True)
    assert _send(plain, [1, 2, 3, 9]) == 0
    assert _send(custom, [1, 2, 3, 9]) == 0
    assert len(plain.engine.calls) == 1 and len(plain.engine.calls[0][0]) == 60 * 2
    assert len(custom.engine.calls) == 60
    flat = [t for c in sorted(custom.engine.calls) for t in zip(*c, strict=True)]
    assert flat == list(zip(*plain.engine.calls[0], strict=True))


def test_a_long_request_goes_in_batches_of_whole_entries_in_upstream_order() -> None:
    # 1,200 fragmented pages × 60 entries = 72,000 descriptors: 27 entries (32,400) per batch
    pages = list(range(0, 2400, 2))
    mgr = manager()
    assert _send(mgr, pages) == 0
    assert [len(c[0]) for c in mgr.engine.calls] == [27 * 1200, 27 * 1200, 6 * 1200]
    sent = [t for c in mgr.engine.calls for t in zip(*c, strict=True)]
    args = mgr.kv_args
    dst_ptrs = [0x9000_0000_0000 + i * 0x1000_0000 for i in range(122)]
    # prefill PP stage 0 of 2 holds layers 0..29 of both groups; decode holds all 61 layers
    dst_entries = [*range(30), *range(61, 91)]
    expected = per_block_loop_reference(
        args.kv_data_ptrs,
        [dst_ptrs[e] for e in dst_entries],
        args.kv_item_lens,
        pages,
        [p + 5 for p in pages],
    )
    assert sent == expected


def test_the_first_failed_batch_ends_the_transfer() -> None:
    mgr = manager()
    mgr.engine = Engine(statuses=[0, -7, 0])
    assert _send(mgr, list(range(0, 2400, 2))) == -7
    assert len(mgr.engine.calls) == 2


def test_failed_transfer_status_is_returned() -> None:
    assert _send(manager(status=-1), [4]) == -1
    assert _send(manager(custom_pool=True, status=-1), [4]) == -1


def test_empty_request_sends_nothing_but_still_checks_the_layout() -> None:
    mgr = manager()
    assert _send(mgr, []) == 0
    assert mgr.engine.calls == []
    assert _send(mgr, [], dst_count=126) == connector.REFUSED


def test_refused_transfer_is_logged_and_sends_nothing(caplog: pytest.LogCaptureFixture) -> None:
    mgr = manager()
    assert _send(mgr, [1, 2, 3], dst_count=126) == connector.REFUSED
    assert mgr.engine.calls == []
    (record,) = [r for r in caplog.records if r.name == "ascend_pd_runtime.connector"]
    assert record.levelname == "ERROR"
    assert "refusing KV transfer to session s: KV layout mismatch: decode registered 126" in (
        record.getMessage()
    )


def test_compression_bucket_layouts_go_to_upstream() -> None:
    assert _send(manager(mla_compression_ratios=[4, 128]), [1]) is connector.UPSTREAM


def test_model_config_is_required_and_can_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("ASCEND_PD_MODEL_CONFIG", raising=False)
    mgr = manager()
    mgr.server_args.model_path = "deepseek-ai/DeepSeek-V3"
    assert _send(mgr, [1]) == connector.REFUSED  # refused, never raised into SGLang
    assert mgr.engine.calls == []
    (message,) = [r.getMessage() for r in caplog.records if r.name == "ascend_pd_runtime.connector"]
    assert "model path 'deepseek-ai/DeepSeek-V3' is not a local path" in message
    assert "set ASCEND_PD_MODEL_CONFIG to the config.json or the model directory" in message
    monkeypatch.setenv("ASCEND_PD_MODEL_CONFIG", "/nowhere/config.json")
    caplog.clear()
    assert _send(mgr, [1]) == connector.REFUSED
    assert "ASCEND_PD_MODEL_CONFIG='/nowhere/config.json' does not exist" in caplog.text
    monkeypatch.setenv("ASCEND_PD_MODEL_CONFIG", str(example_config("deepseek-v3")))
    assert _send(mgr, [1]) == 0


def test_unreadable_model_config_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("ASCEND_PD_MODEL_CONFIG", raising=False)
    (tmp_path / "config.json").write_text("{not json")
    mgr = manager()
    mgr.server_args.model_path = str(tmp_path)
    assert _send(mgr, [1]) == connector.REFUSED
    assert mgr.engine.calls == []
    assert f"{tmp_path / 'config.json'}: not valid JSON (line 1, column 2" in caplog.text


def test_kv_args_with_missing_item_lengths_are_refused(caplog: pytest.LogCaptureFixture) -> None:
    mgr = manager()
    mgr.kv_args.kv_item_lens = mgr.kv_args.kv_item_lens[:-1]
    assert _send(mgr, [1, 2]) == connector.REFUSED
    assert "60 KV pointers but 59 item lengths" in caplog.text


def test_an_unexpected_error_in_the_plan_is_a_refusal(caplog: pytest.LogCaptureFixture) -> None:
    mgr = manager()
    del mgr.kv_args.kv_data_ptrs  # a KVArgs this code does not understand
    assert _send(mgr, [1, 2]) == connector.REFUSED
    assert mgr.engine.calls == []
    (record,) = [r for r in caplog.records if r.name == "ascend_pd_runtime.connector"]
    assert "refusing KV transfer to session s: the ascend-pd transfer plan failed" in (
        record.getMessage()
    )
    assert record.exc_info is not None and record.exc_info[0] is AttributeError


def _small_model(tmp_path: Path, layers: int, mtp: int, groups: int) -> Any:
    config = {"num_hidden_layers": layers, "num_nextn_predict_layers": mtp,
              "kv_lora_rank": 4, "qk_rope_head_dim": 2}  # fmt: skip
    if groups == 3:
        config["index_head_dim"] = 2
    (tmp_path / "config.json").write_text(json.dumps(config))
    return load_model_facts(tmp_path)


@pytest.mark.parametrize(
    ("layers", "mtp", "groups"), [(2, 1, 2), (3, 1, 3), (1, 1, 2), (4, 2, 2), (2, 2, 3), (7, 1, 2)]
)
def test_sglang_quotient_of_a_pp1_prefill_with_draft_is_accepted(
    tmp_path: Path, layers: int, mtp: int, groups: int
) -> None:
    """SGLang 0.5.12–0.5.21 record len(kv_data_ptrs) // layer_num after the draft pool's
    pointers were appended; at these sizes that is more than the model's groups."""
    facts = _small_model(tmp_path, layers, mtp, groups)
    entries = groups * (layers + mtp)
    recorded = entries // layers  # SGLang's own formula, the pool's layer_num = layers
    args = kv_args(entries, kv_buf_groups=recorded, total_kv_layers=layers)
    layout = connector.prefill_kv_layout(args, facts, 1, True)
    assert layout.stage == StageLayout(0, 0, layers, groups, mtp)
    assert connector.decode_stage_for(layout, entries) == StageLayout(0, 0, layers, groups, mtp)


def test_a_group_count_neither_the_model_nor_sglangs_formula_gives_is_refused(
    tmp_path: Path,
) -> None:
    facts = _small_model(tmp_path, 2, 1, 2)  # 6 pointers: SGLang records 3, the model says 2
    with pytest.raises(LayoutMismatch, match="prefill registered 4 buffer groups × 2 target"):
        connector.prefill_kv_layout(kv_args(6, kv_buf_groups=4, total_kv_layers=2), facts, 1, True)


# -- the patch engine on a fake installed SGLang -------------------------------------------


def fake_site(tmp_path: Path, version: str, drop_anchor: bool = False) -> Path:
    site = tmp_path / "site"
    dist = site / f"sglang-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    for patch in (VECTORIZED_SEND, MLA_PP_KV_ARGS, TORCH_NPU_OPTIONAL):
        for hunk in patch.hunks:
            path = site / "sglang" / hunk.path
            path.parent.mkdir(parents=True, exist_ok=True)
            anchor = "" if drop_anchor and patch is VECTORIZED_SEND else hunk.anchor
            path.write_text(f"# {path.name}\nbefore = 1\n{anchor}after = 2\n")
    return site


def run_cli(site: Path, check: bool = False) -> int:
    return patch_cli.run(argparse.Namespace(check=check, site_dir=str(site)))


def test_patch_check_apply_idempotent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    site = fake_site(tmp_path, "0.5.10")
    assert run_cli(site, check=True) == patch_cli.EXIT_NOT_APPLIED
    assert "vectorized-send      not applied" in capsys.readouterr().out
    assert run_cli(site) == 0
    out = capsys.readouterr().out
    assert "mla-pp-kv-args       applied" in out and "(3 patches)" in out
    files = {p: p.read_text() for p in (site / "sglang").rglob("*.py")}
    assert run_cli(site) == 0
    assert capsys.readouterr().out.count("already applied") == 3
    assert {p: p.read_text() for p in files} == files
    assert run_cli(site, check=True) == 0
    assert "vectorized-send      applied" in capsys.readouterr().out
    conn = (site / "sglang" / VECTORIZED_SEND.hunks[0].path).read_text()
    assert conn.index("send_kvcache_planned(") < conn.index("# Group by indices")


def test_anchor_missing_fails_loudly_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = fake_site(tmp_path, "0.5.23", drop_anchor=True)
    before = (site / "sglang" / VECTORIZED_SEND.hunks[0].path).read_text()
    assert run_cli(site) == patch_cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert "patch 'vectorized-send' does not apply to SGLang 0.5.23" in err
    assert "srt/disaggregation/ascend/conn.py has 0 occurrences of the anchor" in err
    assert (site / "sglang" / VECTORIZED_SEND.hunks[0].path).read_text() == before


def test_partially_applied_patch_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = fake_site(tmp_path, "0.5.10")
    assert run_cli(site) == 0
    decode = site / "sglang" / MLA_PP_KV_ARGS.hunks[1].path
    decode.write_text(decode.read_text().replace("ascend-pd patch: mla-pp-kv-args", "edited"))
    capsys.readouterr()
    assert run_cli(site, check=True) == patch_cli.EXIT_NOT_APPLIED
    assert "mla-pp-kv-args       partially applied" in capsys.readouterr().out
    assert run_cli(site) == patch_cli.EXIT_ERROR
    assert "'mla-pp-kv-args' is partially applied" in capsys.readouterr().err


@pytest.mark.parametrize("version", ["0.5.9", "0.5.24", "0.6.0"])
def test_unsupported_version_fails(
    version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(fake_site(tmp_path, version)) == patch_cli.EXIT_ERROR
    assert (
        f"SGLang {version} is not supported by the ascend-pd patch set: supported versions "
        "are 0.5.10 to 0.5.23" in capsys.readouterr().err
    )


def test_missing_sglang_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(tmp_path) == patch_cli.EXIT_ERROR
    assert "no installed sglang package there" in capsys.readouterr().err


# -- the image ------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def test_dockerfile_runs_install_and_patch_on_the_chosen_base_image() -> None:
    lines = [
        line.strip()
        for line in (REPO / "runtime" / "Dockerfile").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    text = "\n".join(lines)
    assert lines[:2] == ["ARG BASE_IMAGE", "FROM ${BASE_IMAGE}"]
    assert "ARG SGLANG_VERSION" in lines
    assert 'SGLANG_VERSION="${SGLANG_VERSION}"' in text
    assert "bash /opt/ascend-pd/src/runtime/install-and-patch.sh" in text
    assert lines[-1] == 'ENTRYPOINT ["ascend-pd-runtime", "launch"]'
    for line in lines:
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (REPO / source).exists(), source


def test_install_and_patch_refuses_a_python_without_sglang(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run(
        ["bash", str(REPO / "runtime" / "install-and-patch.sh")],
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 1
    assert f"SGLang is not installed for {sys.executable}" in out.stderr
