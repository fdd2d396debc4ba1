"""Freed heap memory goes back to the kernel on glibc (this machine), quietly elsewhere."""

from __future__ import annotations

import platform

from ascend_pd_operator.kubeio.memory import release_free_memory


def test_release_free_memory_trims_on_glibc() -> None:
    blocks = [bytearray(256 * 1024) for _ in range(64)]  # 16 MiB through malloc
    del blocks
    assert release_free_memory() == (platform.libc_ver()[0] == "glibc")
