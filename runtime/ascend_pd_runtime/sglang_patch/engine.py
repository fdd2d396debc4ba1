"""Exact-text patching of installed files: apply once, check, fail loudly.

A hunk names a file (relative to the ``sglang`` package), an anchor that must
occur exactly once, and the text that replaces it. The replacement carries a
marker comment, so a second run sees the hunk as applied and does nothing. A
file is rewritten through a temporary file and ``os.replace``: a hard-linked or
half-written copy never sees a partial edit.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ..errors import AscendPDError


class PatchError(AscendPDError):
    """A patch cannot be applied to (or checked against) the installed SGLang."""


class PatchState(StrEnum):
    APPLIED = "applied"
    NOT_APPLIED = "not applied"
    PARTIAL = "partially applied"


@dataclass(frozen=True)
class Hunk:
    path: str
    anchor: str
    replacement: str
    marker: str

    def __post_init__(self) -> None:
        if self.marker not in self.replacement:
            raise ValueError(f"hunk for {self.path}: the replacement must contain its marker")


@dataclass(frozen=True)
class Patch:
    name: str
    summary: str
    hunks: tuple[Hunk, ...]


def hunk_applied(root: Path, hunk: Hunk) -> bool:
    return hunk.marker in _read(root, hunk)


def patch_state(root: Path, patch: Patch) -> PatchState:
    applied = [hunk_applied(root, h) for h in patch.hunks]
    if all(applied):
        return PatchState.APPLIED
    if not any(applied):
        return PatchState.NOT_APPLIED
    return PatchState.PARTIAL


def apply_patch(root: Path, patch: Patch, version: str) -> bool:
    """Apply every hunk not yet applied; return True when anything changed.

    Every anchor is checked before any file is written, so a patch that does not
    fit leaves the installation as it was.
    """
    pending: dict[Path, str] = {}
    for hunk in patch.hunks:
        path = root / hunk.path
        text = pending.get(path, _read(root, hunk))
        if hunk.marker in text:
            continue
        count = text.count(hunk.anchor)
        if count != 1:
            first_line = hunk.anchor.strip().splitlines()[0]
            raise PatchError(
                f"patch {patch.name!r} does not apply to SGLang {version}: {hunk.path} has "
                f"{count} occurrences of the anchor {first_line!r}; expected exactly 1"
            )
        pending[path] = text.replace(hunk.anchor, hunk.replacement)
    for path, text in pending.items():
        _write_atomic(path, text)
    return bool(pending)


def _read(root: Path, hunk: Hunk) -> str:
    path = root / hunk.path
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PatchError(f"{path}: file to patch not found in the installed SGLang") from None


def _write_atomic(path: Path, text: str) -> None:
    mode = path.stat().st_mode & 0o777
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
