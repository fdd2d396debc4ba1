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

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(1800)]

POOL = """
import inspect, torch
from sglang.srt.hardware_backend.npu.memory_pool_npu import NPUMLATokenToKVPool
from sglang.srt.disaggregation.base.conn import KVArgs
params = inspect.signature(NPUMLATokenToKVPool.__init__).parameters
kwargs = dict(size=8, page_size=1, dtype=torch.bfloat16, kv_lora_rank=4, qk_rope_head_dim=2,
              index_head_dim=INDEX, layer_num=3, device="cpu", enable_memory_saver=False,
              start_layer=0, end_layer=2)
pool = NPUMLATokenToKVPool(**{k: v for k, v in kwargs.items() if k in params})
kv_args = KVArgs()
kv_args.kv_data_ptrs, kv_args.kv_data_lens, kv_args.kv_item_lens = pool.get_contiguous_buf_infos()
"""

SETUP = (
    POOL
    + """
from sglang.srt.disaggregation.utils import setup_state_kv_args
setup_state_kv_args(kv_args, pool, None, 3)
print("groups", kv_args.kv_buf_groups, "layers", kv_args.total_kv_layers,
      "pointers", len(kv_args.kv_data_ptrs))
"""
)

HOOK = (
    POOL
    + """
from ascend_pd_runtime.sglang_patch.hooks import set_kv_layout_args
set_kv_layout_args(kv_args, pool, 3)
print("groups", kv_args.kv_buf_groups, "layers", kv_args.total_kv_layers,
      "pointers", len(kv_args.kv_data_ptrs))
"""
)


def _last_line(out: str) -> str:
    return out.strip().splitlines()[-1] if out.strip() else ""


@pytest.mark.parametrize(("index", "groups"), [("None", 2), ("2", 3)])
def test_0_5_12_set_up_survives_a_model_without_index_buffer(
    index: str, groups: int, sglang_envs: harness.Envs
) -> None:
    env = sglang_envs.get("0.5.12")
    code = SETUP.replace("INDEX", index)
    patched = harness.run_python((env.patched, env.pristine), code)
    assert patched.returncode == 0, patched.stderr[-3000:]
    assert _last_line(patched.stdout) == f"groups {groups} layers 3 pointers {groups * 3}"
    upstream = harness.run_python((env.pristine,), code)
    if index == "None":
        assert upstream.returncode != 0
        assert "TypeError: 'NoneType' object is not subscriptable" in upstream.stderr
    else:
        assert upstream.returncode == 0, upstream.stderr[-3000:]
        assert _last_line(upstream.stdout) == _last_line(patched.stdout)


@pytest.mark.parametrize("version", ["0.5.10", "0.5.11"])
def test_npu_pool_imports_without_torch_npu_once_patched(
    version: str, sglang_envs: harness.Envs, tmp_path: Path
) -> None:
    env = sglang_envs.get(version)
    no_torch_npu = tmp_path / "stubs"
    no_torch_npu.mkdir()
    (no_torch_npu / "torchvision").symlink_to(harness.STUBS / "torchvision")
    code = "import sglang.srt.hardware_backend.npu.memory_pool_npu as m; print(m.torch_npu)"
    patched = harness.run_python((env.patched, env.pristine), code, stubs=no_torch_npu)
    assert patched.returncode == 0, patched.stderr[-3000:]
    assert _last_line(patched.stdout) == "None"
    upstream = harness.run_python((env.pristine,), code, stubs=no_torch_npu)
    assert "No module named 'torch_npu'" in upstream.stderr


@pytest.mark.parametrize("version", ["0.5.10", "0.5.11"])
@pytest.mark.parametrize(("index", "groups"), [("None", 2), ("2", 3)])
def test_start_up_hook_records_the_real_pool_layout(
    version: str, index: str, groups: int, sglang_envs: harness.Envs
) -> None:
    env = sglang_envs.get(version)
    out = harness.run_python((env.patched, env.pristine), HOOK.replace("INDEX", index))
    assert out.returncode == 0, out.stderr[-3000:]
    assert _last_line(out.stdout) == f"groups {groups} layers 3 pointers {groups * 3}"
    # and the patched prefill and decode call it right after setting kv_item_lens
    for role in ("prefill", "decode"):
        text = (env.patched / f"sglang/srt/disaggregation/{role}.py").read_text()
        _, _, tail = text.partition("kv_args.kv_item_lens = kv_item_lens\n")
        assert tail.lstrip().startswith("# ascend-pd patch: mla-pp-kv-args")
