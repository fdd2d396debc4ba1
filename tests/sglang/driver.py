"""Runs inside the SGLang harness venv: drive the real ``AscendKVManager.send_kvcache``.

``run_all(cases)`` (a job of ``release_checks``): for every case it builds the manager
the way SGLang's prefill does (``KVArgs`` fields as the version sets them), swaps the
transfer engine for one that records every descriptor, calls ``send_kvcache`` and
returns what was recorded, or the error it raised.
"""

from __future__ import annotations

import concurrent.futures
import importlib.metadata
import logging
import threading
from types import SimpleNamespace

import numpy as np


class RecordingEngine:
    """Stands in for the Ascend transfer engine; records (src, dst, length) triples."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], list[int], list[int]]] = []
        self._lock = threading.Lock()

    def batch_transfer_sync(self, session_id, src_addrs, dst_addrs, lengths):
        assert session_id == "decode-session"
        with self._lock:
            self.calls.append((list(src_addrs), list(dst_addrs), list(lengths)))
        return 0


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:3])


def build_kv_args(case: dict, version: tuple[int, ...], patched: bool):
    from sglang.srt.disaggregation.base.conn import KVArgs

    kv_args = KVArgs()
    kv_args.engine_rank = 0
    kv_args.pp_rank = case["pp_rank"]
    kv_args.kv_data_ptrs = list(case["src_ptrs"])
    kv_args.kv_data_lens = [1 << 30] * len(case["src_ptrs"])
    kv_args.kv_item_lens = list(case["item_lens"])
    kv_args.prefill_start_layer = case["start_layer"]
    # SGLang stores the pool's end_layer, which is inclusive.
    kv_args.prefill_end_layer = case["end_layer"] - 1
    kv_args.mla_compression_ratios = None
    kv_args.state_types = []
    kv_args.page_size = 1
    groups, total = case["groups"], case["total_kv_layers"]
    if not case["mla"]:
        return kv_args  # the MHA pool sets neither field in any version
    if version >= (0, 5, 20):
        kv_args.kv_buf_groups = groups
        kv_args.hidden_kv_layers = total
        kv_args.draft_kv_layers = case["prefill_draft_layers"]
    elif version >= (0, 5, 12):
        kv_args.kv_buf_groups = groups
        kv_args.total_kv_layers = total
    elif patched:
        from ascend_pd_runtime.sglang_patch.hooks import set_kv_layout_args

        pool = npu_mla_pool(case)
        set_kv_layout_args(kv_args, pool, total)
    return kv_args


def npu_mla_pool(case: dict):
    """A real (CPU, tiny) NPU MLA pool of the stage, for the start-up hook to inspect."""
    import inspect

    import torch
    from sglang.srt.hardware_backend.npu.memory_pool_npu import NPUMLATokenToKVPool

    params = inspect.signature(NPUMLATokenToKVPool.__init__).parameters
    kwargs = dict(
        size=8,
        page_size=1,
        dtype=torch.bfloat16,
        kv_lora_rank=4,
        qk_rope_head_dim=2,
        index_head_dim=2 if case["groups"] == 3 else None,
        layer_num=case["end_layer"] - case["start_layer"],
        device="cpu",
        enable_memory_saver=False,
        start_layer=case["start_layer"],
        end_layer=case["end_layer"] - 1,
    )
    return NPUMLATokenToKVPool(**{k: v for k, v in kwargs.items() if k in params})


def build_manager(conn, case: dict, version: tuple[int, ...], patched: bool):
    manager = conn.AscendKVManager.__new__(conn.AscendKVManager)
    manager.kv_args = build_kv_args(case, version, patched)
    manager.pp_size = case["pp_size"]
    manager.pp_rank = case["pp_rank"]
    manager.is_mla_backend = case["mla"]
    manager.is_hybrid_mla_backend = False
    manager.enable_custom_mem_pool = case["custom_mem_pool"]
    manager.attn_tp_size = 1
    manager.server_args = SimpleNamespace(model_path=case["model_path"])
    manager.engine = RecordingEngine()
    # Where a version asks the PP group whether this is the last stage.
    last = SimpleNamespace(is_last_rank=case["pp_rank"] == case["pp_size"] - 1)
    if hasattr(conn, "get_pp_group"):
        conn.get_pp_group = lambda: last
    if hasattr(conn, "get_parallel"):
        conn.get_parallel = lambda: SimpleNamespace(pp_group=last)
    # Published server config the envelope check reads (0.5.19+): the default.
    import sglang.srt.disaggregation.mooncake.conn as mooncake_conn

    if hasattr(mooncake_conn, "get_memory"):
        mooncake_conn.get_memory = lambda: SimpleNamespace(enable_unified_memory=False)
    return manager


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def run_case(conn, case: dict, version: tuple[int, ...], patched: bool) -> dict:
    manager = build_manager(conn, case, version, patched)
    errors = Collect()
    logging.getLogger("ascend_pd_runtime").addHandler(errors)
    src_pages = np.asarray(case["src_pages"], dtype=np.int32)
    dst_pages = np.asarray(case["dst_pages"], dtype=np.int32)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as executor:
        try:
            status = manager.send_kvcache(
                "decode-session", src_pages, list(case["dst_ptrs"]), dst_pages, executor
            )
        except Exception as exc:  # the result names it; the test decides
            return {"error": type(exc).__name__, "message": str(exc)}
        finally:
            logging.getLogger("ascend_pd_runtime").removeHandler(errors)
    calls = manager.engine.calls
    if case["custom_mem_pool"]:
        calls = sorted(calls)  # one call per entry, completed in any order
    descriptors = [list(t) for src, dst, ln in calls for t in zip(src, dst, ln, strict=True)]
    return {
        "status": status,
        "calls": len(manager.engine.calls),
        "descriptors": descriptors,
        "logged_errors": errors.messages,
    }


def run_all(cases: list[dict]) -> dict:
    """The release, whether its connector is patched, and each case's result by name."""
    import sglang.srt.disaggregation.ascend.conn as conn

    text = importlib.metadata.version("sglang")
    version = version_tuple(text)
    with open(conn.__file__) as handle:
        patched = "ascend-pd patch: vectorized-send" in handle.read()
    return {
        "version": text,
        "patched": patched,
        "results": {c["name"]: run_case(conn, c, version, patched) for c in cases},
    }
