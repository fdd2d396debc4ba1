"""An interpreter that sees an SGLang of a chosen version, or none, for the version check.

The launcher and the inspector ask SGLang's interpreter (``--python``) for the installed
``sglang`` distribution's version. This makes one from the test's own Python, started with
``-S`` so that no site-packages are on its path (whatever this venv holds), and a directory
on ``PYTHONPATH`` holding only an ``sglang-<version>.dist-info``: what ``pip install``
leaves, read by ``importlib.metadata`` as in a real image. ``version`` None: no SGLang.
"""

from __future__ import annotations

import sys
from pathlib import Path


def sglang_site(root: Path, version: str | None) -> Path:
    """A directory holding an ``sglang`` distribution's metadata (none if ``version`` is None)."""
    site = root / "site"
    site.mkdir(parents=True, exist_ok=True)
    if version is not None:
        info = site / f"sglang-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n", encoding="utf-8"
        )
    return site


def fake_python(root: Path, version: str | None) -> str:
    """An executable that runs this Python with only ``sglang_site`` beside the stdlib."""
    site = sglang_site(root, version)
    python = root / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    return str(python)
