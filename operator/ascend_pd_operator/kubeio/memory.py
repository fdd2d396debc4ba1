"""Hands freed heap memory back to the kernel after each resync.

glibc keeps memory freed by the C allocator (large JSON bodies, big dict tables) in its
heaps; a burst of work leaves the process's RSS megabytes above what it holds. Trimming
once per resync gave back about 4 MiB with 100 deployments (bench/operator.md). Other C
libraries: nothing to do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging

log = logging.getLogger(__name__)


@functools.cache
def _trim() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def release_free_memory() -> bool:
    """``malloc_trim(0)`` where the C library has it; True if it was called."""
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
