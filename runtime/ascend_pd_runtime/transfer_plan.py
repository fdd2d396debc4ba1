"""The transfer plan: (src_addr, dst_addr, length) descriptors for one request, vectorized.

SGLang's Ascend connector builds these with a Python loop over every contiguous
block of every layer; for a long, fragmented request that is hundreds of
thousands of tuples per request. Here the runs of pages that are consecutive on
both sides are found once (adjacent pages coalesce into one longer descriptor,
never across a pointer entry, so never across a layer or buffer group), and a
plan is kept factored: entries × runs, expanded only into what is asked for.
The order equals the connector's: entry by entry, and within an entry run by run
in request order.

What the Ascend transfer engine takes is three Python lists of ints (its pybind11
binding converts any sequence element by element; lists convert fastest, see
``bench/connector.md``). ``engine_lists`` builds them with one ``tolist`` per
address list and the lengths by repeating one list per distinct entry length,
so no Python code runs per descriptor. ``engine_batches`` builds the same lists
a few entries at a time, so a long request never holds more than one batch's
ints: the memory they take is reused batch after batch instead of being mapped
in and out again on every call.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Final

import numpy as np
import numpy.typing as npt

from .errors import LayoutMismatch

IntArray = npt.NDArray[np.int64]
EngineLists = tuple[list[int], list[int], list[int]]

#: Descriptors per engine call in ``engine_batches`` (whole entries, at least one). A fully
#: fragmented 128K-token request is 125K descriptors: built in one go, its ~8 MB of Python
#: ints land in freshly mapped memory that is unmapped again when they are freed, and the
#: page faults cost about as much as making the ints. Batches of this size (~2 MB of ints)
#: reuse the same memory; 4K–32K timed alike, so the largest keeps the engine calls few
#: (see ``bench/connector.md``): a realistic 128K-token request on 2 groups is still one.
BATCH_DESCRIPTORS: Final = 32768


@dataclass(frozen=True)
class TransferDescriptors:
    """Descriptor ``e * runs + r`` moves run ``r`` of pointer entry ``e``.

    Per entry: ``entry_src``/``entry_dst`` (base pointers) and ``entry_len`` (bytes per
    page); per run: ``run_src``/``run_dst`` (first page) and ``run_pages``.
    """

    entry_src: IntArray
    entry_dst: IntArray
    entry_len: IntArray
    run_src: IntArray
    run_dst: IntArray
    run_pages: IntArray

    @property
    def entries(self) -> int:
        return int(self.entry_src.shape[0])

    @property
    def runs(self) -> int:
        return int(self.run_src.shape[0])

    def __len__(self) -> int:
        return self.entries * self.runs

    @cached_property
    def src_addrs(self) -> IntArray:
        return _addresses(self.entry_src, self.entry_len, self.run_src)

    @cached_property
    def dst_addrs(self) -> IntArray:
        return _addresses(self.entry_dst, self.entry_len, self.run_dst)

    @cached_property
    def lengths(self) -> IntArray:
        return np.multiply.outer(self.entry_len, self.run_pages).ravel()

    def engine_lists(self) -> EngineLists:
        """``(src_addrs, dst_addrs, lengths)`` as the Python lists the engine API takes."""
        return self._lists(0, self.entries, {})

    def engine_batches(self, max_descriptors: int = BATCH_DESCRIPTORS) -> Iterator[EngineLists]:
        """``engine_lists`` cut into consecutive batches of whole entries, each of at most
        ``max_descriptors`` descriptors (one entry when an entry alone has more); the
        batches, concatenated, are ``engine_lists()``. Each batch is built when it is asked
        for: a caller that drops a batch before asking for the next keeps one batch of
        ints alive at a time."""
        if max_descriptors < 1:
            raise ValueError(f"max_descriptors must be at least 1, not {max_descriptors}")
        if len(self) == 0:
            return
        step = max(1, max_descriptors // self.runs)
        per_length: dict[int, list[int]] = {}
        for first in range(0, self.entries, step):
            yield self._lists(first, min(first + step, self.entries), per_length)

    def _lists(self, first: int, end: int, per_length: dict[int, list[int]]) -> EngineLists:
        """The engine lists of entries ``first``..``end - 1``."""
        entry_len = self.entry_len[first:end]
        src = _addresses(self.entry_src[first:end], entry_len, self.run_src).tolist()
        dst = _addresses(self.entry_dst[first:end], entry_len, self.run_dst).tolist()
        # Entries share few page sizes (one per buffer group): each distinct length list
        # is built once and repeated, which copies pointers instead of making new ints.
        lengths: list[int] = []
        for n in entry_len.tolist():
            block = per_length.get(n)
            if block is None:
                block = per_length[n] = (self.run_pages * n).tolist()
            lengths += block
        return src, dst, lengths

    def as_tuples(self) -> list[tuple[int, int, int]]:
        """Python tuples, the shape SGLang's ``set_transfer_blocks`` returns."""
        return list(zip(*self.engine_lists(), strict=True))

    @property
    def total_bytes(self) -> int:
        return int(self.entry_len.sum() * self.run_pages.sum())


def _addresses(entry_ptr: IntArray, entry_len: IntArray, run_page: IntArray) -> IntArray:
    out = np.multiply.outer(entry_len, run_page)
    out += entry_ptr[:, None]
    return out.ravel()


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
    return TransferDescriptors(
        src[src_idx], dst[dst_idx], lens[src_idx], run_src, run_dst, run_pages
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
