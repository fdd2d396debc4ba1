"""The start-up patches, on the real NPU memory pool and disaggregation set-up code (CPU).

* 0.5.12: ``setup_state_kv_args`` on an MLA model without an index buffer
  (DeepSeek-V3/R1, Kimi-K2) crashes upstream; patched, it records 2 groups.
* 0.5.10–0.5.11: the NPU memory pool imports without torch_npu once patched, and
  the start-up hook records ``kv_buf_groups``/``total_kv_layers`` from the real pool.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sglang_harness as harness
from release_checks import Job, ReleaseChecks, release_check

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(1800)]

#: For a pool without and with an index buffer: build the real NPU MLA pool of
#: 3 layers on CPU, then run SET_UP on it; print one line per pool.
POOLS = """
import inspect, torch
from sglang.srt.hardware_backend.npu import memory_pool_npu
from sglang.srt.hardware_backend.npu.memory_pool_npu import NPUMLATokenToKVPool
from sglang.srt.disaggregation.base.conn import KVArgs
print("torch_npu", getattr(memory_pool_npu, "torch_npu", None))
params = inspect.signature(NPUMLATokenToKVPool.__init__).parameters
for index in (None, 2):
    kwargs = dict(size=8, page_size=1, dtype=torch.bfloat16, kv_lora_rank=4,
                  qk_rope_head_dim=2, index_head_dim=index, layer_num=3, device="cpu",
                  enable_memory_saver=False, start_layer=0, end_layer=2)
    pool = NPUMLATokenToKVPool(**{k: v for k, v in kwargs.items() if k in params})
    kv_args = KVArgs()
    kv_args.kv_data_ptrs, kv_args.kv_data_lens, kv_args.kv_item_lens = (
        pool.get_contiguous_buf_infos())
    try:
        SET_UP
        print("index", index, "groups", kv_args.kv_buf_groups, "layers",
              kv_args.total_kv_layers, "pointers", len(kv_args.kv_data_ptrs))
    except Exception as exc:
        print("index", index, type(exc).__name__, exc)
"""

SETUP_STATE = "from sglang.srt.disaggregation.utils import setup_state_kv_args; " + (
    "setup_state_kv_args(kv_args, pool, None, 3)"
)
HOOK = "from ascend_pd_runtime.sglang_patch.hooks import set_kv_layout_args; " + (
    "set_kv_layout_args(kv_args, pool, 3)"
)


def _lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(("index", "torch_npu"))]


@release_check("patched")
@release_check("upstream")
def _set_up_state_jobs(env: harness.SGLangEnv) -> list[Job]:
    """SGLang's own set-up code on the pools, in 0.5.12 (patched and upstream)."""
    if env.version != "0.5.12":
        return []
    return [Job("npu-pool", POOLS.replace("SET_UP", SETUP_STATE))]


def test_0_5_12_set_up_survives_a_model_without_index_buffer(
    release_checks: ReleaseChecks,
) -> None:
    patched = release_checks.result("0.5.12", "patched", "npu-pool")
    assert patched.error is None, patched.error
    assert _lines(patched.stdout)[1:] == [
        "index None groups 2 layers 3 pointers 6",
        "index 2 groups 3 layers 3 pointers 9",
    ]
    upstream = release_checks.result("0.5.12", "upstream", "npu-pool")
    assert upstream.error is None, upstream.error
    assert _lines(upstream.stdout)[1:] == [
        "index None TypeError 'NoneType' object is not subscriptable",
        "index 2 groups 3 layers 3 pointers 9",
    ]


@pytest.mark.parametrize("version", ["0.5.10", "0.5.11"])
def test_patched_pool_imports_without_torch_npu_and_the_hook_records_its_layout(
    version: str, sglang_envs: harness.Envs, tmp_path: Path
) -> None:
    env = sglang_envs.get(version)
    no_torch_npu = tmp_path / "stubs"
    no_torch_npu.mkdir()
    (no_torch_npu / "torchvision").symlink_to(harness.STUBS / "torchvision")
    code = POOLS.replace("SET_UP", HOOK)
    patched = harness.run_python((env.patched, env.pristine), code, stubs=no_torch_npu)
    assert patched.returncode == 0, patched.stderr[-3000:]
    assert _lines(patched.stdout) == [
        "torch_npu None",
        "index None groups 2 layers 3 pointers 6",
        "index 2 groups 3 layers 3 pointers 9",
    ]
    upstream = harness.run_python((env.pristine,), code, stubs=no_torch_npu)
    assert upstream.returncode != 0
    assert "No module named 'torch_npu'" in upstream.stderr
    # the patched prefill and decode call the hook right after setting kv_item_lens
    for role in ("prefill", "decode"):
        text = (env.patched / f"sglang/srt/disaggregation/{role}.py").read_text()
        _, _, tail = text.partition("kv_args.kv_item_lens = kv_item_lens\n")
        assert tail.lstrip().startswith("# ascend-pd patch: mla-pp-kv-args")
