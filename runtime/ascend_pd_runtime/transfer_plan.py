"""The transfer plan: (src_addr, dst_addr, length) descriptors for one request, vectorized.

SGLang's Ascend connector builds these with a Python loop over every contiguous
block of every layer; for a long, fragmented request that is hundreds of
thousands of tuples per request. Here the runs of pages that are consecutive on
both sides are found once, then every mapped pointer entry is expanded against
them with numpy broadcasting. The order equals the connector's: entry by entry,
and within an entry run by run in request order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .errors import LayoutMismatch

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class TransferDescriptors:
    src_addrs: IntArray
    dst_addrs: IntArray
    lengths: IntArray

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    def as_tuples(self) -> list[tuple[int, int, int]]:
        """Python tuples, the shape SGLang's ``set_transfer_blocks`` returns."""
        return list(
            zip(
                self.src_addrs.tolist(), self.dst_addrs.tolist(), self.lengths.tolist(), strict=True
            )
        )

    @property
    def total_bytes(self) -> int:
        return int(self.lengths.sum())


def contiguous_runs(
    src_pages: npt.ArrayLike, dst_pages: npt.ArrayLike
) -> tuple[IntArray, IntArray, IntArray]:
    """Split page lists where either side stops being consecutive.

    Returns ``(src_start, dst_start, run_pages)``, one element per run.
    """
    src = np.asarray(src_pages, dtype=np.int64).ravel()
    dst = np.asarray(dst_pages, dtype=np.int64).ravel()
    if src.shape != dst.shape:
        raise LayoutMismatch(
            f"prefill sends {src.shape[0]} pages but decode offers {dst.shape[0]} pages"
        )
    if src.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    breaks = np.flatnonzero((np.diff(src) != 1) | (np.diff(dst) != 1)) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [src.size]))
    return src[starts], dst[starts], ends - starts


def build_transfer_descriptors(
    src_ptrs: Sequence[int] | npt.ArrayLike,
    dst_ptrs: Sequence[int] | npt.ArrayLike,
    item_lens: Sequence[int] | npt.ArrayLike,
    src_pages: npt.ArrayLike,
    dst_pages: npt.ArrayLike,
    pairs: npt.ArrayLike | None = None,
) -> TransferDescriptors:
    """Descriptors for every mapped pointer entry.

    ``pairs`` is the ``(k, 2)`` ``[src_index, dst_index]`` array of the layout core
    (``layout.stage_transfers``); without it, entry i of ``src_ptrs`` goes to entry
    i of ``dst_ptrs`` (lists already aligned). ``item_lens[src_index]`` is the bytes
    per page of that entry, the same on both sides.
    """
    src = np.asarray(src_ptrs, dtype=np.int64).ravel()
    dst = np.asarray(dst_ptrs, dtype=np.int64).ravel()
    lens = np.asarray(item_lens, dtype=np.int64).ravel()
    if pairs is None:
        if src.size != dst.size:
            raise LayoutMismatch(f"prefill has {src.size} KV pointers but decode offers {dst.size}")
        src_idx = np.arange(src.size, dtype=np.int64)
        dst_idx = src_idx
    else:
        p = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        src_idx, dst_idx = p[:, 0], p[:, 1]
        if p.size and (src_idx.max() >= src.size or dst_idx.max() >= dst.size):
            raise LayoutMismatch(
                f"the plan addresses prefill entry {int(src_idx.max())} and decode entry "
                f"{int(dst_idx.max())}, but prefill has {src.size} and decode {dst.size} "
                "KV pointers"
            )
    if lens.size < (int(src_idx.max()) + 1 if src_idx.size else 0):
        raise LayoutMismatch(f"{lens.size} item lengths for {src.size} prefill KV pointers")
    run_src, run_dst, run_pages = contiguous_runs(src_pages, dst_pages)
    entry_lens = lens[src_idx][:, None]
    src_addrs = src[src_idx][:, None] + run_src[None, :] * entry_lens
    dst_addrs = dst[dst_idx][:, None] + run_dst[None, :] * entry_lens
    lengths = np.broadcast_to(run_pages[None, :] * entry_lens, src_addrs.shape)
    return TransferDescriptors(
        src_addrs.ravel(), dst_addrs.ravel(), np.ascontiguousarray(lengths).ravel()
    )


def per_block_loop_reference(
    src_ptrs: Sequence[int],
    dst_ptrs: Sequence[int],
    item_lens: Sequence[int],
    src_pages: npt.ArrayLike,
    dst_pages: npt.ArrayLike,
) -> list[tuple[int, int, int]]:
    """SGLang's shape, for tests and the benchmark only: ``group_concurrent_contiguous``
    (``np.split`` into Python lists), then one tuple per block per entry in a Python loop."""
    src = np.asarray(src_pages, dtype=np.int64)
    dst = np.asarray(dst_pages, dtype=np.int64)
    if src.size == 0:
        return []
    brk = np.where((np.diff(src) != 1) | (np.diff(dst) != 1))[0] + 1
    src_blocks = [g.tolist() for g in np.split(src, brk)]
    dst_blocks = [g.tolist() for g in np.split(dst, brk)]
    out: list[tuple[int, int, int]] = []
    for src_ptr, dst_ptr, item_len in zip(src_ptrs, dst_ptrs, item_lens, strict=True):
        for src_block, dst_block in zip(src_blocks, dst_blocks, strict=True):
            out.append(
                (
                    src_ptr + int(src_block[0]) * item_len,
                    dst_ptr + int(dst_block[0]) * item_len,
                    item_len * len(src_block),
                )
            )
    return out
