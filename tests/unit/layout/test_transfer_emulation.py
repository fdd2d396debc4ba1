"""CPU transfer emulation: real buffers, the plan's descriptors executed with memmove."""

import ctypes

import numpy as np
import pytest

from ascend_pd_runtime.errors import LayoutMismatch
from ascend_pd_runtime.layout import LayoutRequest, compute_layout
from ascend_pd_runtime.transfer_plan import (
    build_transfer_descriptors,
    contiguous_runs,
    per_block_loop_reference,
)

from .conftest import deepseek_shaped

SENTINEL = 0xDEADBEEF
POOL_PAGES = 64


def _code(layer: int, group: int, page: int) -> int:
    return layer * 1_000_000 + group * 10_000 + page


class Role:
    """One stage's registered KV buffers: one uint32 array per (group, layer) entry."""

    def __init__(self, stage, total_layers: int, words_per_page: list[int]):
        self.stage = stage
        self.buffers: list[np.ndarray] = []
        self.item_lens: list[int] = []
        self.slots: list[tuple[int, int]] = []  # (layer code, group) per entry
        n, groups = stage.num_layers, stage.kv_buf_groups
        for g in range(groups):
            for layer in range(stage.start_layer, stage.end_layer):
                self._add(layer, g, words_per_page[g])
        for g in range(groups):
            for d in range(stage.draft_layers):
                self._add(total_layers + d, g, words_per_page[g])
        assert len(self.buffers) == groups * (n + stage.draft_layers)

    def _add(self, layer: int, group: int, words: int) -> None:
        self.buffers.append(np.full(POOL_PAGES * words, SENTINEL, dtype=np.uint32))
        self.item_lens.append(words * 4)
        self.slots.append((layer, group))

    @property
    def ptrs(self) -> list[int]:
        return [b.ctypes.data for b in self.buffers]

    def fill(self, pages: np.ndarray) -> None:
        for buf, (layer, group), item_len in zip(
            self.buffers, self.slots, self.item_lens, strict=True
        ):
            words = item_len // 4
            for page in pages.tolist():
                buf[page * words : (page + 1) * words] = _code(layer, group, page)


def _fragmented_pages(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    src = rng.choice(POOL_PAGES, size=count, replace=False)
    dst = rng.choice(POOL_PAGES, size=count, replace=False)
    # splice in consecutive runs on both sides so runs are merged as well as split
    src[:4] = np.arange(10, 14)
    dst[:4] = np.arange(40, 44)
    dst[4:6] = [44, 45]
    src[4:6] = [20, 21]
    return src.astype(np.int32), dst.astype(np.int32)


CASES = [
    (
        "dsv3 pp2 → decode pp1, nextn on decode",
        61,
        1,
        2,
        LayoutRequest(prefill_pp=2, speculative="nextn", speculative_roles=("decode",)),
    ),
    (
        "dsv3.2 pp2 + draft on both, 0.5.20",
        61,
        1,
        3,
        LayoutRequest(prefill_pp=2, speculative="nextn", sglang_version="0.5.20"),
    ),
    (
        "pp3 explicit partition, decode pp3",
        13,
        2,
        3,
        LayoutRequest(
            prefill_pp=3,
            decode_pp=3,
            layer_partition=(2, 6, 5),
            speculative="eagle",
            sglang_version="0.5.23",
        ),
    ),
    ("pp4 no speculative", 10, 0, 2, LayoutRequest(prefill_pp=4)),
]


@pytest.mark.parametrize(("name", "layers", "mtp", "groups", "request_"), CASES)
def test_plan_moves_every_byte_to_the_right_slot(name, layers, mtp, groups, request_):
    facts = deepseek_shaped(layers, mtp, groups)
    layout = compute_layout(facts, request_)
    assert layout.compatible, layout.problems
    words = [8, 3, 5][:groups]
    rng = np.random.default_rng(7)
    src_pages, dst_pages = _fragmented_pages(rng, 24)
    decodes = {s.pp_rank: Role(s, layers, words) for s in layout.decode.stages}
    for p_stage in layout.prefill.stages:
        prefill = Role(p_stage, layers, words)
        prefill.fill(src_pages)
        decode = decodes[layout.decode_stage_for(p_stage).pp_rank]
        plan = build_transfer_descriptors(
            prefill.ptrs,
            decode.ptrs,
            prefill.item_lens,
            src_pages,
            dst_pages,
            pairs=layout.transfers(p_stage),
        )
        for src, dst, length in plan.as_tuples():
            ctypes.memmove(dst, src, length)
    # every decode byte: transferred pages hold the right (layer, group, prefill page)
    page_map = dict(zip(dst_pages.tolist(), src_pages.tolist(), strict=True))
    prefill_draft = layout.prefill.draft_layers
    for decode in decodes.values():
        for buf, (layer, group), item_len in zip(
            decode.buffers, decode.slots, decode.item_lens, strict=True
        ):
            words_pp = item_len // 4
            pages = buf.reshape(POOL_PAGES, words_pp)
            receives = layer < layers or prefill_draft > 0
            for page in range(POOL_PAGES):
                if receives and page in page_map:
                    expected = _code(layer, group, page_map[page])
                else:
                    expected = SENTINEL
                assert (pages[page] == expected).all(), (name, layer, group, page)


def test_vectorized_equals_per_block_loop():
    rng = np.random.default_rng(1)
    src_pages = rng.permutation(5000)[:3000]
    dst_pages = rng.permutation(5000)[:3000]
    src_pages[100:400] = np.arange(1000, 1300)
    dst_pages[100:400] = np.arange(2000, 2300)
    src_ptrs = [1 << 40 | i << 24 for i in range(122)]
    dst_ptrs = [1 << 41 | i << 24 for i in range(122)]
    lens = [128 * 1024] * 61 + [128 * 128] * 61
    plan = build_transfer_descriptors(src_ptrs, dst_ptrs, lens, src_pages, dst_pages)
    assert plan.as_tuples() == per_block_loop_reference(
        src_ptrs, dst_ptrs, lens, src_pages, dst_pages
    )


def test_runs_merge_only_when_both_sides_are_consecutive():
    src, dst, n = contiguous_runs([3, 4, 5, 9, 10, 11], [7, 8, 20, 21, 22, 30])
    assert src.tolist() == [3, 5, 9, 11]
    assert dst.tolist() == [7, 20, 21, 30]
    assert n.tolist() == [2, 1, 2, 1]


def test_empty_request_has_no_descriptors():
    plan = build_transfer_descriptors([1], [2], [8], [], [])
    assert len(plan) == 0


def test_mismatched_page_counts_are_refused():
    with pytest.raises(LayoutMismatch, match="prefill sends 2 pages but decode offers 1"):
        build_transfer_descriptors([1], [2], [8], [1, 2], [1])


def test_plan_addressing_beyond_pointer_lists_is_refused():
    with pytest.raises(LayoutMismatch, match="decode entry 5"):
        build_transfer_descriptors([1, 2], [3], [8, 8], [0], [0], pairs=[[0, 0], [1, 5]])
