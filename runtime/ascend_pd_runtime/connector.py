"""What the patched Ascend ``send_kvcache`` runs: the layout guard, then the layout core's plan.

SGLang's prefill never learns how decode laid out its KV pointers; it slices
decode's flat list by its own numbers, so a disagreement lands KV in the wrong
layer without an error. Before any transfer this module works out the prefill
stage's layout (``StageLayout`` of the layout core) from ``KVArgs`` and the
model's ``config.json``, checks that decode's pointer count fits a layout it
understands (``check_decode_pointer_count``), maps every prefill entry to its
decode entry (``stage_transfers``) and builds all descriptors at once
(``build_transfer_descriptors``), in the order SGLang's per-block loop would,
handed to the engine as the lists its binding converts fastest, a few entries per
call (``engine_batches``).

A refused transfer is logged with both sides' counts and layer ranges (or why
the model's config.json could not be read) and returns a failed status, so SGLang
fails that request and that decode session, never writes a byte, and keeps
serving correctly paired decodes. Nothing here raises into SGLang: an exception
in ``send_kvcache`` ends SGLang's transfer thread and the prefill is reported dead. Layouts this
module does not model (DeepSeek-V4's compression buckets) are handed back to
upstream's code with ``UPSTREAM``.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from .errors import AscendPDError, LayoutMismatch
from .layout import StageLayout, check_decode_pointer_count, stage_transfers
from .model_facts import ModelFacts, load_model_facts
from .transfer_plan import TransferDescriptors, build_transfer_descriptors

logger = logging.getLogger(__name__)

#: Environment variable naming the model's config.json (or its directory) when
#: SGLang's ``--model-path`` is not a local directory.
MODEL_CONFIG_ENV: Final = "ASCEND_PD_MODEL_CONFIG"


class _Upstream:
    def __repr__(self) -> str:
        return "UPSTREAM"


#: Returned by ``send_kvcache_planned`` when upstream's own code must run.
UPSTREAM: Final = _Upstream()

#: ``send_kvcache``'s status when the guard refuses a decode: SGLang fails the request
#: and marks that decode session failed; other decodes keep being served.
REFUSED: Final = -1

_CACHE_ATTR = "_ascend_pd_prefill_layout"


@dataclass(frozen=True)
class PrefillKVLayout:
    """The prefill stage's pointer layout and the model numbers the guard needs."""

    stage: StageLayout
    total_kv_layers: int
    num_nextn_predict_layers: int
    pp_size: int


def model_facts_for(manager: Any) -> ModelFacts:
    """The served model's facts: ``$ASCEND_PD_MODEL_CONFIG``, else SGLang's model path.

    Raises ``AscendPDError`` naming where it looked; ``send_kvcache_planned`` turns
    that into a refused transfer.
    """
    from_env = os.environ.get(MODEL_CONFIG_ENV)
    if from_env:
        if not os.path.exists(from_env):
            raise AscendPDError(
                f"the ascend-pd KV layout guard needs the model's config.json: "
                f"{MODEL_CONFIG_ENV}={from_env!r} does not exist; it must name the config.json "
                "or the model directory"
            )
        return load_model_facts(from_env)
    source = getattr(getattr(manager, "server_args", None), "model_path", None)
    if not source or not os.path.exists(source):
        raise AscendPDError(
            f"the ascend-pd KV layout guard needs the model's config.json: model path "
            f"{source!r} is not a local path; set {MODEL_CONFIG_ENV} to the config.json "
            "or the model directory"
        )
    return load_model_facts(source)


def _positive_int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def prefill_kv_layout(
    kv_args: Any, facts: ModelFacts, pp_size: int, is_mla: bool
) -> PrefillKVLayout:
    """Derive this prefill stage's layout from ``KVArgs``; raise if it contradicts the model.

    The buffer-group count comes from the model (MLA: 2, or 3 with an index buffer;
    MHA: K and V), as SGLang 0.5.22+ derives it. SGLang 0.5.12–0.5.21 record
    ``len(kv_data_ptrs) // layer_num`` instead, after the draft pool's pointers were
    appended: when groups × draft layers reaches the stage's target layers that
    quotient exceeds the real count, so it is accepted when it is exactly what that
    formula gives for the layout the model implies.
    """
    groups = facts.kv_buf_groups if is_mla else 2
    total = _positive_int(getattr(kv_args, "hidden_kv_layers", None)) or _positive_int(
        getattr(kv_args, "total_kv_layers", None)
    )
    total = total or facts.total_kv_layers
    declared_groups = _positive_int(getattr(kv_args, "kv_buf_groups", None))
    mtp = facts.num_nextn_predict_layers
    if total != facts.total_kv_layers:
        raise LayoutMismatch(
            f"KV layout mismatch: prefill registered {declared_groups or groups} buffer groups "
            f"× {total} target layers but the model config {facts.source} has "
            f"{facts.kv_buf_groups} groups × {facts.total_kv_layers} layers"
        )
    entries = len(kv_args.kv_data_ptrs)
    start = getattr(kv_args, "prefill_start_layer", None) or 0
    pp_rank = getattr(kv_args, "pp_rank", None) or 0
    per_group, remainder = divmod(entries, groups)
    end = min(start + per_group, total)
    draft = start + per_group - end
    problem = None
    item_lens = len(getattr(kv_args, "kv_item_lens", None) or ())
    if item_lens != entries:
        problem = f"{entries} KV pointers but {item_lens} item lengths"
    elif remainder or per_group == 0 or end <= start:
        problem = f"{entries} KV pointers from layer {start} do not form {groups} buffer groups"
    elif draft not in (0, mtp):
        problem = (
            f"{entries} KV pointers from layer {start} imply {draft} draft layers; the model "
            f"has {mtp} MTP layers"
        )
    declared = getattr(kv_args, "draft_kv_layers", None)
    if problem is None and isinstance(declared, int) and end == total and declared != draft:
        problem = f"KVArgs declares {declared} draft layers but the pointers hold {draft}"
    if problem is not None:
        raise LayoutMismatch(
            f"KV layout mismatch on prefill PP rank {pp_rank}: {problem} "
            f"({groups} groups × {total} target layers + 0 or {mtp} draft layers)"
        )
    # What SGLang 0.5.12–0.5.21 record for this layout (the pool's layer_num is the
    # stage's target layers); a prefill that really registered another group count
    # records neither this nor the model's count.
    sglang_quotient = entries // (end - start)
    if declared_groups is not None and declared_groups not in (groups, sglang_quotient):
        raise LayoutMismatch(
            f"KV layout mismatch: prefill registered {declared_groups} buffer groups × {total} "
            f"target layers but the model config {facts.source} has {groups} groups × "
            f"{facts.total_kv_layers} layers ({entries} KV pointers from layer {start})"
        )
    stage = StageLayout(
        pp_rank=pp_rank, start_layer=start, end_layer=end, kv_buf_groups=groups, draft_layers=draft
    )
    return PrefillKVLayout(stage, total, mtp, pp_size)


def manager_layout(manager: Any) -> PrefillKVLayout:
    """``prefill_kv_layout`` of a KV manager, computed once (``KVArgs`` never changes)."""
    cached = getattr(manager, _CACHE_ATTR, None)
    if isinstance(cached, PrefillKVLayout):
        return cached
    layout = prefill_kv_layout(
        manager.kv_args,
        model_facts_for(manager),
        int(getattr(manager, "pp_size", 1) or 1),
        bool(getattr(manager, "is_mla_backend", False)),
    )
    setattr(manager, _CACHE_ATTR, layout)
    return layout


def decode_stage_for(layout: PrefillKVLayout, decode_pointer_count: int) -> StageLayout:
    """The layout guard: the decode stage behind ``decode_pointer_count`` pointers.

    Decode at PP 1 holds every target layer and 0 or the model's MTP draft layers;
    a decode with the prefill's PP size holds the prefill stage's layers. Anything
    else raises ``LayoutMismatch`` naming both sides' counts and layer ranges.
    """
    stage = layout.stage
    total = layout.total_kv_layers
    groups = stage.kv_buf_groups
    try:
        draft = check_decode_pointer_count(
            prefill_stage=stage,
            decode_pointer_count=decode_pointer_count,
            total_kv_layers=total,
            num_nextn_predict_layers=layout.num_nextn_predict_layers,
        )
        return StageLayout(0, 0, total, groups, draft)
    except LayoutMismatch as pp1_mismatch:
        if layout.pp_size == 1:
            raise
        drafts = sorted({0, layout.num_nextn_predict_layers}) if stage.end_layer == total else [0]
        candidates = [
            StageLayout(stage.pp_rank, stage.start_layer, stage.end_layer, groups, d)
            for d in drafts
            if not stage.draft_layers or d == stage.draft_layers
        ]
        for candidate in candidates:
            if candidate.kv_pointer_count == decode_pointer_count:
                return candidate
        counts = " or ".join(str(c.kv_pointer_count) for c in candidates) or "none"
        raise LayoutMismatch(
            f"{pp1_mismatch} A decode at PP 1 holds layers [0, {total}); a decode stage with "
            f"the prefill's partition holds layers [{stage.start_layer}, {stage.end_layer}) "
            f"and registers {counts} pointers."
        ) from None


def plan_send(
    manager: Any,
    prefill_kv_indices: npt.ArrayLike,
    dst_kv_ptrs: list[int],
    dst_kv_indices: npt.ArrayLike,
) -> TransferDescriptors:
    """Guard and map: the descriptors of one request (entry by entry, factored)."""
    layout = manager_layout(manager)
    decode_stage = decode_stage_for(layout, len(dst_kv_ptrs))
    pairs = stage_transfers(layout.stage, decode_stage)
    plan = build_transfer_descriptors(
        manager.kv_args.kv_data_ptrs,
        dst_kv_ptrs,
        manager.kv_args.kv_item_lens,
        prefill_kv_indices,
        dst_kv_indices,
        pairs,
    )
    return plan


def send_kvcache_planned(
    manager: Any,
    session_id: str,
    prefill_kv_indices: npt.NDArray[np.int32],
    dst_kv_ptrs: list[int],
    dst_kv_indices: npt.NDArray[np.int32],
    executor: concurrent.futures.ThreadPoolExecutor,
) -> int | _Upstream:
    """Body of the patched ``AscendKVManager.send_kvcache``; returns the transfer status."""
    if getattr(manager.kv_args, "mla_compression_ratios", None):
        return UPSTREAM
    try:
        plan = plan_send(manager, prefill_kv_indices, dst_kv_ptrs, dst_kv_indices)
    except AscendPDError as exc:
        # A layout mismatch, or no readable model config: fail this request only.
        logger.error("refusing KV transfer to session %s: %s", session_id, exc)
        return REFUSED
    except Exception:
        # Anything raised here would end SGLang's transfer thread, and the whole prefill
        # instance would be reported dead; a refusal fails only this request.
        logger.exception(
            "refusing KV transfer to session %s: the ascend-pd transfer plan failed", session_id
        )
        return REFUSED
    if len(plan) == 0:
        return 0
    engine = manager.engine
    if not getattr(manager, "enable_custom_mem_pool", False):
        return _send_in_batches(engine, session_id, plan)
    # One batch per pointer entry on the executor, as upstream does with a custom pool.
    futures = [
        executor.submit(engine.batch_transfer_sync, session_id, *lists)
        for lists in plan.engine_batches(max_descriptors=plan.runs)
    ]
    for future in concurrent.futures.as_completed(futures):
        status = int(future.result())
        if status != 0:
            for other in futures:
                other.cancel()
            return status
    return 0


def _send_in_batches(engine: Any, session_id: str, plan: TransferDescriptors) -> int:
    """Hand the engine the plan in ``engine_batches``, one after the other, and stop at the
    first batch that fails (its status is the transfer's).

    Upstream sends all entries in one engine call here. The same descriptors in batches of
    whole entries keep one batch of Python ints alive at a time, so a long request does not
    map ~8 MB of fresh memory per call and fault on every page of it.
    """
    for lists in plan.engine_batches():
        status = int(engine.batch_transfer_sync(session_id, *lists))
        # Drop this batch before the generator builds the next, so the next reuses its
        # memory instead of needing more.
        del lists
        if status != 0:
            return status
    return 0
