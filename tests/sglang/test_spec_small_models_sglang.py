"""Speculative decoding on both roles, prefill PP 1, small models: KV lands, nothing refused.

SGLang 0.5.12–0.5.21 record ``kv_buf_groups = len(kv_data_ptrs) // layer_num``
after the draft pool's pointers were appended to the prefill's list. When buffer
groups × draft layers reaches the target layers, that quotient is higher than the
real group count (2 layers + 1 MTP with 2 groups records 3). Per version, real
``NPUMLATokenToKVPool``s (target and draft, on CPU) of such models get ``KVArgs``
from SGLang's own set-up code (``setup_state_kv_args``; the start-up hook on
0.5.10/11); the patched ``send_kvcache`` copies a fragmented request's bytes into a
decode holding the same target and draft layers. Every decode page of the request,
in every target and draft layer and buffer group, must hold the prefill value of the
same layer, group and page, and nothing else may change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sglang_harness as harness

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(1800)]

#: (target layers, MTP layers, buffer groups): all but the last break SGLang's quotient
#: (groups × (layers + MTP) // layers exceeds groups); the last is a control.
MODELS = ((2, 1, 2), (3, 1, 3), (1, 1, 2), (4, 2, 2), (2, 2, 3), (7, 1, 2))


def test_the_small_models_break_sglangs_quotient() -> None:
    broken = [m for m in MODELS if m[2] * (m[0] + m[1]) // m[0] > m[2]]
    assert broken == list(MODELS[:-1])


SCRIPT = r"""
import concurrent.futures, ctypes, inspect, json, sys
import torch
sys.path.insert(0, TESTS)
import driver
from sglang.srt.disaggregation.base.conn import KVArgs
try:  # 0.5.23 derives the DCP width from a published parallel config
    from sglang.srt.runtime_context import get_parallel
    get_parallel().override_permanently(attn_dcp_size=1, attn_dcp_rank=0)
except (ImportError, AttributeError):  # older releases need nothing here
    pass
import sglang.srt.disaggregation.ascend.conn as conn
from sglang.srt.hardware_backend.npu.memory_pool_npu import NPUMLATokenToKVPool

PAGE, PAGES = 2, 16
SRC_PAGES = [3, 4, 5, 9, 1, 12, 13, 7]
DST_PAGES = [2, 3, 11, 12, 13, 5, 6, 15]
VERSION = tuple(int(p) for p in VERSION_TEXT.split("."))
params = inspect.signature(NPUMLATokenToKVPool.__init__).parameters

def pool(start, count, index):
    kwargs = dict(size=PAGES * PAGE, page_size=PAGE, dtype=torch.float32, kv_lora_rank=4,
                  qk_rope_head_dim=2, index_head_dim=index, layer_num=count, device="cpu",
                  enable_memory_saver=False, start_layer=start, end_layer=start + count - 1)
    return NPUMLATokenToKVPool(**{k: v for k, v in kwargs.items() if k in params})

def buffers(p):
    out = [p.k_buffer, p.v_buffer]
    if getattr(p, "index_k_buffer", None) is not None:
        out.append(p.index_k_buffer)
    return out

def kv_args_for(target, draft, layers):
    # As SGLang's prefill (and decode) set up KVArgs: the draft pool's pointers are
    # appended to the target's, then the version's own set-up code runs.
    args = KVArgs()
    ptrs, lens, items = target.get_contiguous_buf_infos()
    d_ptrs, d_lens, d_items = draft.get_contiguous_buf_infos()
    args.kv_data_ptrs, args.kv_data_lens = ptrs + d_ptrs, lens + d_lens
    args.kv_item_lens = items + d_items
    args.prefill_start_layer = target.start_layer
    args.prefill_end_layer = target.end_layer
    args.mla_compression_ratios = None
    args.state_types = []
    if VERSION >= (0, 5, 12):
        from sglang.srt.disaggregation.utils import setup_state_kv_args
        setup_state_kv_args(args, target, draft, layers)
    else:
        from ascend_pd_runtime.sglang_patch.hooks import set_kv_layout_args
        set_kv_layout_args(args, target, layers)
    return args

class CopyEngine:
    def batch_transfer_sync(self, session_id, src, dst, lengths):
        for s, d, n in zip(src, dst, lengths, strict=True):
            ctypes.memmove(d, s, n)
        return 0

report = {}
for name, (layers, mtp, groups, model_path) in MODELS.items():
    index = 2 if groups == 3 else None
    decode, decode_draft = pool(0, layers, index), pool(layers, mtp, index)
    dst_ptrs = kv_args_for(decode, decode_draft, layers).kv_data_ptrs
    prefill, prefill_draft = pool(0, layers, index), pool(layers, mtp, index)
    for offset, p in ((0, prefill), (layers, prefill_draft)):
        for group, buf in enumerate(buffers(p)):
            for local in range(p.layer_num):
                for page in range(PAGES + 1):
                    buf[local][page].fill_((offset + local) * 1000 + group * 100 + page)
    case = {"pp_size": 1, "pp_rank": 0, "mla": True, "custom_mem_pool": False,
            "model_path": model_path, "src_ptrs": [], "item_lens": [], "start_layer": 0,
            "end_layer": layers, "groups": 0, "total_kv_layers": 0, "prefill_draft_layers": 0}
    manager = driver.build_manager(conn, case, VERSION, True)
    manager.kv_args = kv_args_for(prefill, prefill_draft, layers)
    manager.kv_args.pp_rank = 0
    manager.engine = CopyEngine()
    errors = driver.Collect()
    import logging
    logging.getLogger("ascend_pd_runtime").addHandler(errors)
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        try:
            status = manager.send_kvcache(
                "decode-session", torch.tensor(SRC_PAGES, dtype=torch.int32).numpy(),
                dst_ptrs, torch.tensor(DST_PAGES, dtype=torch.int32).numpy(), executor)
        except Exception as exc:
            status = f"raised {type(exc).__name__}: {exc}"
    logging.getLogger("ascend_pd_runtime").removeHandler(errors)
    wrong = []
    for offset, p in ((0, decode), (layers, decode_draft)):
        for group, buf in enumerate(buffers(p)):
            for local in range(p.layer_num):
                for page in range(PAGES + 1):
                    want = 0.0
                    if page in DST_PAGES:
                        src = SRC_PAGES[DST_PAGES.index(page)]
                        want = (offset + local) * 1000 + group * 100 + src
                    got = buf[local][page]
                    if not bool((got == want).all()):
                        wrong.append([group, offset + local, page, want, float(got.flatten()[0])])
    report[name] = {"status": status, "recorded_groups": manager.kv_args.kv_buf_groups,
                    "pointers": len(manager.kv_args.kv_data_ptrs), "groups": len(buffers(decode)),
                    "wrong": wrong[:10], "wrong_count": len(wrong),
                    "logged_errors": errors.messages}
print("REPORT " + json.dumps(report))
"""


def _name(layers: int, mtp: int, groups: int) -> str:
    return f"{layers}L+{mtp}MTP×{groups}g"


def _model_dir(root: Path, layers: int, mtp: int, groups: int) -> str:
    config: dict[str, object] = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "num_hidden_layers": layers,
        "num_nextn_predict_layers": mtp,
        "kv_lora_rank": 4,
        "qk_rope_head_dim": 2,
    }
    if groups == 3:
        config["index_head_dim"] = 2
    path = root / _name(layers, mtp, groups).replace("×", "x")
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def _run(env: harness.SGLangEnv, tmp_path: Path) -> dict[str, dict]:
    models = {_name(*m): [*m, _model_dir(tmp_path, *m)] for m in MODELS}
    code = (
        SCRIPT.replace("TESTS", repr(str(harness.DRIVER.parent)))
        .replace("VERSION_TEXT", repr(env.version))
        .replace("MODELS.items()", f"{models!r}.items()")
    )
    out = harness.run_python((env.patched, env.pristine), code)
    lines = [line for line in out.stdout.splitlines() if line.startswith("REPORT ")]
    assert out.returncode == 0 and lines, out.stderr[-3000:]
    report: dict[str, dict] = json.loads(lines[-1][len("REPORT ") :])
    return report


@pytest.mark.parametrize("version", harness.VERSIONS)
def test_pp1_prefill_with_draft_sends_every_layer_of_small_models(
    version: str, sglang_envs: harness.Envs, tmp_path: Path
) -> None:
    env = sglang_envs.get(version)
    report = _run(env, tmp_path)
    quotient_versions = (0, 5, 12) <= env.version_tuple <= (0, 5, 21)
    for layers, mtp, groups in MODELS:
        result = report[_name(layers, mtp, groups)]
        pointers = groups * (layers + mtp)
        assert (result["pointers"], result["groups"]) == (pointers, groups)
        # The test drives the defect: what this version records is SGLang's own value.
        recorded = pointers // layers if quotient_versions else groups
        assert result["recorded_groups"] == recorded, result
        assert result["status"] == 0, f"{version} {_name(layers, mtp, groups)}: {result}"
        assert result["logged_errors"] == []
        assert result["wrong_count"] == 0, result
