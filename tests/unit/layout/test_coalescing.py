"""Coalesced descriptors move exactly the bytes the per-page descriptors move.

The oracle is hand-derived: one descriptor per page and pointer entry
(``src_ptr + src_page * item_len → dst_ptr + dst_page * item_len``, ``item_len`` bytes),
which is what the connector would send with no coalescing at all. The plan's
descriptors, expanded to bytes, must give the same byte → byte map (no byte twice,
none missing), each must stay inside one entry's buffer on both sides (entries are
laid out back to back, so a merge across a layer or group buffer would otherwise go
unseen), and the engine lists must equal the numpy arrays.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_pd_runtime.transfer_plan import build_transfer_descriptors

POOL_PAGES = 24


@st.composite
def requests(draw: st.DrawFn) -> dict[str, object]:
    entries = draw(st.integers(1, 5))
    item_lens = draw(st.lists(st.integers(1, 6), min_size=entries, max_size=entries))
    pages = draw(st.integers(0, 16))
    # pages drawn from a small pool, so runs of consecutive pages are common on each side
    src = draw(st.permutations(range(POOL_PAGES)))[:pages]
    dst = draw(st.permutations(range(POOL_PAGES)))[:pages]
    if draw(st.booleans()):  # long runs: sorted pages coalesce on both sides
        src, dst = sorted(src), sorted(dst)
    # buffers back to back: entry e's buffer ends where entry e + 1's begins
    sizes = [POOL_PAGES * n for n in item_lens]
    src_ptrs = [1000 + sum(sizes[:e]) for e in range(entries)]
    dst_ptrs = [50_000 + sum(sizes[:e]) for e in range(entries)]
    return {
        "src_ptrs": src_ptrs,
        "dst_ptrs": dst_ptrs,
        "item_lens": item_lens,
        "src_pages": src,
        "dst_pages": dst,
    }


def per_page_byte_map(r: dict) -> dict[int, int]:
    out: dict[int, int] = {}
    for sp, dp, n in zip(r["src_ptrs"], r["dst_ptrs"], r["item_lens"], strict=True):
        for s, d in zip(r["src_pages"], r["dst_pages"], strict=True):
            for b in range(n):
                assert sp + s * n + b not in out
                out[sp + s * n + b] = dp + d * n + b
    return out


@settings(max_examples=300, deadline=None)
@given(requests())
def test_coalesced_descriptors_cover_exactly_the_per_page_bytes(r: dict) -> None:
    plan = build_transfer_descriptors(
        r["src_ptrs"], r["dst_ptrs"], r["item_lens"], r["src_pages"], r["dst_pages"]
    )
    src, dst, lengths = plan.engine_lists()
    assert (src, dst, lengths) == (
        plan.src_addrs.tolist(),
        plan.dst_addrs.tolist(),
        plan.lengths.tolist(),
    )
    byte_map: dict[int, int] = {}
    for s, d, n in zip(src, dst, lengths, strict=True):
        assert n > 0
        # inside one entry's buffer on both sides, and the same entry
        (entry,) = [
            e
            for e, (sp, dp, item) in enumerate(
                zip(r["src_ptrs"], r["dst_ptrs"], r["item_lens"], strict=True)
            )
            if sp <= s and s + n <= sp + POOL_PAGES * item
        ]
        dp, item = r["dst_ptrs"][entry], r["item_lens"][entry]
        assert dp <= d and d + n <= dp + POOL_PAGES * item
        for b in range(n):
            assert s + b not in byte_map, "a byte sent twice"
            byte_map[s + b] = d + b
    assert byte_map == per_page_byte_map(r)
    # fewer descriptors exactly where pages run on both sides
    pairs = list(zip(r["src_pages"], r["dst_pages"], strict=True))
    breaks = sum(1 for (s0, d0), (s1, d1) in pairwise(pairs) if (s1, d1) != (s0 + 1, d0 + 1))
    assert len(lengths) == len(r["item_lens"]) * (breaks + 1 if pairs else 0)


def test_runs_coalesce_only_where_both_sides_continue() -> None:
    # pages 3,4,5 → 7,8,20: only 3,4 → 7,8 continue on both sides
    plan = build_transfer_descriptors([0], [10_000], [10], [3, 4, 5], [7, 8, 20])
    assert plan.as_tuples() == [(30, 10_070, 20), (50, 10_200, 10)]
    two_entries = build_transfer_descriptors(
        [0, 1000], [5000, 9000], [10, 4], np.array([1, 2]), np.array([5, 6])
    )
    assert two_entries.as_tuples() == [(10, 5050, 20), (1004, 9020, 8)]
    assert two_entries.total_bytes == 28


@settings(max_examples=300, deadline=None)
@given(requests(), st.integers(1, 40))
def test_engine_batches_are_the_engine_lists_cut_at_entries(r: dict, limit: int) -> None:
    plan = build_transfer_descriptors(
        r["src_ptrs"], r["dst_ptrs"], r["item_lens"], r["src_pages"], r["dst_pages"]
    )
    batches = list(plan.engine_batches(limit))
    src, dst, lengths = plan.engine_lists()
    flat = [t for b in batches for t in zip(*b, strict=True)]
    assert flat == list(zip(src, dst, lengths, strict=True))
    if len(plan) == 0:
        assert batches == []
        return
    # whole entries, as many as fit under the limit (one when one entry alone exceeds it)
    per_batch = max(1, limit // plan.runs) * plan.runs
    assert [len(b[0]) for b in batches[:-1]] == [per_batch] * (len(batches) - 1)
    assert 0 < len(batches[-1][0]) <= per_batch
    assert all(len(b[0]) == len(b[1]) == len(b[2]) for b in batches)


def test_engine_batches_by_hand() -> None:
    # 3 entries × 2 runs (pages 1,2 → 5,6 coalesce; page 7 → 9 alone)
    plan = build_transfer_descriptors(
        [0, 1000, 2000], [10_000, 20_000, 30_000], [10, 4, 10], [1, 2, 7], [5, 6, 9]
    )
    assert list(plan.engine_batches(4)) == [
        ([10, 70, 1004, 1028], [10_050, 10_090, 20_020, 20_036], [20, 10, 8, 4]),
        ([2010, 2070], [30_050, 30_090], [20, 10]),
    ]
    # fewer than one entry's runs: one entry per batch
    assert [b[2] for b in plan.engine_batches(1)] == [[20, 10], [8, 4], [20, 10]]
    with pytest.raises(ValueError, match="at least 1"):
        next(plan.engine_batches(0))
