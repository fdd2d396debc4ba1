"""Runs inside the SGLang harness venv, next to ``driver.py``: real NPU MLA KV pools on CPU.

The scripts of ``test_kv_lands_sglang`` and ``test_spec_small_models_sglang`` (run by
``sglang_harness.run_report``) import it: ``pool`` builds an ``NPUMLATokenToKVPool``,
``buffers`` lists its buffer groups, ``pointers`` and ``version_setup`` fill ``KVArgs`` as
the SGLang release under test does. It imports torch and SGLang, so only those scripts can
import it, never the tests' own interpreter.
"""

import inspect

import torch
from sglang.srt.disaggregation.base.conn import KVArgs

try:  # 0.5.23 derives the DCP width from a published parallel config
    from sglang.srt.runtime_context import get_parallel

    get_parallel().override_permanently(attn_dcp_size=1, attn_dcp_rank=0)
except (ImportError, AttributeError):  # older releases need nothing here
    pass
# the connector after the DCP width
import sglang.srt.disaggregation.ascend.conn as conn
from sglang.srt.hardware_backend.npu.memory_pool_npu import NPUMLATokenToKVPool

__all__ = ["KVArgs", "buffers", "conn", "pointers", "pool", "version_setup"]

#: tokens per page in every pool here
PAGE = 2
_PARAMS = inspect.signature(NPUMLATokenToKVPool.__init__).parameters


def pool(start, count, index, pages):
    """Layers ``start``..``start + count - 1`` of ``pages`` pages (and the padding page);
    ``index``: the index head's width (DeepSeek-V3.2's third buffer group), None: none. The
    widths match ``sglang_harness.mla_model``'s config."""
    kwargs = dict(size=pages * PAGE, page_size=PAGE, dtype=torch.float32, kv_lora_rank=4,
                  qk_rope_head_dim=2, index_head_dim=index, layer_num=count, device="cpu",
                  enable_memory_saver=False, start_layer=start,
                  end_layer=start + count - 1)  # fmt: skip
    # each release takes its own subset of these
    return NPUMLATokenToKVPool(**{k: v for k, v in kwargs.items() if k in _PARAMS})


def buffers(p):
    """The pool's buffer groups, in SGLang's pointer order."""
    out = [p.k_buffer, p.v_buffer]
    if getattr(p, "index_k_buffer", None) is not None:
        out.append(p.index_k_buffer)
    return out


def pointers(target, draft=None):
    """``KVArgs``' (kv_data_ptrs, kv_data_lens, kv_item_lens) of ``target``, with the draft
    pool's appended after them as SGLang's prefill and decode append them."""
    ptrs, lens, items = target.get_contiguous_buf_infos()
    if draft is not None:
        d_ptrs, d_lens, d_items = draft.get_contiguous_buf_infos()
        ptrs, lens, items = ptrs + d_ptrs, lens + d_lens, items + d_items
    return ptrs, lens, items


def version_setup(args, target, draft, layers, version):
    """``args`` after SGLang ``version``'s own set-up code (``setup_state_kv_args``; the
    start-up hook on 0.5.10/11, which have none) for ``target`` of ``layers`` layers."""
    args.mla_compression_ratios = None
    args.state_types = []
    if version >= (0, 5, 12):
        from sglang.srt.disaggregation.utils import setup_state_kv_args

        setup_state_kv_args(args, target, draft, layers)
    else:
        from ascend_pd_runtime.sglang_patch.hooks import set_kv_layout_args

        set_kv_layout_args(args, target, layers)
    return args
