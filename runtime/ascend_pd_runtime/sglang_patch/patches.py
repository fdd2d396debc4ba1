"""The patch set per SGLang version (0.5.10–0.5.23); each hunk is small and calls into us.

* ``vectorized-send`` (every version): before the per-block loop of the Ascend
  ``send_kvcache``, run the layout guard and the layout core's vectorized plan
  (``ascend_pd_runtime.connector``).
* ``mla-pp-kv-args`` (0.5.10–0.5.11): both roles record ``kv_buf_groups`` and
  ``total_kv_layers`` in ``KVArgs``, as 0.5.12 does, so MLA KV can go per buffer
  group and layer under prefill PP.
* ``torch-npu-optional`` (0.5.10–0.5.11): the NPU memory pool imports
  ``torch_npu`` only where it is installed.
* ``index-buffer-guard`` (0.5.12): the NPU MLA pool's ``get_state_buf_infos``
  returns nothing when the model has no index buffer instead of indexing ``None``
  (start-up crash on DeepSeek-V3/R1 and Kimi-K2; fixed upstream in 0.5.13).
"""

from __future__ import annotations

from ..layout import SUPPORTED_SGLANG_MAX, SUPPORTED_SGLANG_MIN
from .engine import Hunk, Patch

Version = tuple[int, int, int]

CONN = "srt/disaggregation/ascend/conn.py"
NPU_POOL = "srt/hardware_backend/npu/memory_pool_npu.py"

_SEND_ANCHOR = (
    "        # Group by indices\n"
    "        prefill_kv_blocks, dst_kv_blocks = group_concurrent_contiguous(\n"
)
VECTORIZED_SEND = Patch(
    name="vectorized-send",
    summary="layout guard and vectorized transfer plan in AscendKVManager.send_kvcache",
    hunks=(
        Hunk(
            path=CONN,
            anchor=_SEND_ANCHOR,
            marker="# ascend-pd patch: vectorized-send",
            replacement=(
                "        # ascend-pd patch: vectorized-send (layout guard + layout-core plan)\n"
                "        from ascend_pd_runtime.connector import UPSTREAM, send_kvcache_planned\n"
                "\n"
                "        status = send_kvcache_planned(\n"
                "            self, mooncake_session_id, prefill_kv_indices, dst_kv_ptrs,\n"
                "            dst_kv_indices, executor,\n"
                "        )\n"
                "        if status is not UPSTREAM:\n"
                "            return status\n" + _SEND_ANCHOR
            ),
        ),
    ),
)

_KV_ARGS_ANCHOR = "        kv_args.kv_item_lens = kv_item_lens\n"


def _kv_args_hunk(path: str) -> Hunk:
    return Hunk(
        path=path,
        anchor=_KV_ARGS_ANCHOR,
        marker="# ascend-pd patch: mla-pp-kv-args",
        replacement=_KV_ARGS_ANCHOR
        + (
            "        # ascend-pd patch: mla-pp-kv-args\n"
            "        from ascend_pd_runtime.sglang_patch.hooks import set_kv_layout_args\n"
            "\n"
            "        set_kv_layout_args(\n"
            "            kv_args, self.token_to_kv_pool,\n"
            "            self.scheduler.model_config.num_hidden_layers,\n"
            "        )\n"
        ),
    )


MLA_PP_KV_ARGS = Patch(
    name="mla-pp-kv-args",
    summary="prefill and decode record kv_buf_groups and total_kv_layers in KVArgs",
    hunks=(
        _kv_args_hunk("srt/disaggregation/prefill.py"),
        _kv_args_hunk("srt/disaggregation/decode.py"),
    ),
)

TORCH_NPU_OPTIONAL = Patch(
    name="torch-npu-optional",
    summary="the NPU memory pool imports torch_npu only where it is installed",
    hunks=(
        Hunk(
            path=NPU_POOL,
            anchor="\nimport torch_npu\n",
            marker="# ascend-pd patch: torch-npu-optional",
            replacement=(
                "\ntry:  # ascend-pd patch: torch-npu-optional\n"
                "    import torch_npu\n"
                "except ImportError:  # CPU-only tooling; only the NPU kernels need it\n"
                "    torch_npu = None\n"
            ),
        ),
    ),
)

_STATE_ANCHOR = (
    "    def get_state_buf_infos(self):\n"
    "        data_ptrs = [self.index_k_buffer[i].data_ptr() for i in range(self.layer_num)]\n"
)
INDEX_BUFFER_GUARD = Patch(
    name="index-buffer-guard",
    summary="NPU MLA pool without an index buffer reports no state buffers",
    hunks=(
        Hunk(
            path=NPU_POOL,
            anchor=_STATE_ANCHOR,
            marker="# ascend-pd patch: index-buffer-guard",
            replacement=_STATE_ANCHOR.replace(
                "        data_ptrs",
                "        if self.index_k_buffer is None:  # ascend-pd patch: index-buffer-guard\n"
                "            return [], [], []\n"
                "        data_ptrs",
                1,
            ),
        ),
    ),
)


def patches_for(version: Version) -> tuple[Patch, ...]:
    """The patch set of a supported version; ``version`` must be in range (see ``supported``)."""
    chosen = [VECTORIZED_SEND]
    if version <= (0, 5, 11):
        chosen += [MLA_PP_KV_ARGS, TORCH_NPU_OPTIONAL]
    if version == (0, 5, 12):
        chosen.append(INDEX_BUFFER_GUARD)
    return tuple(chosen)


def supported(version: Version) -> bool:
    return SUPPORTED_SGLANG_MIN <= version <= SUPPORTED_SGLANG_MAX
