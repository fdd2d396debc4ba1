"""The SGLang Ascend base images per SGLang release and chip, as docs/compatibility.md shows them.

``devtools/base-images.txt`` is the one table: ``make images SGLANG_VERSION=<v> CHIP=a2|a3``
(``devtools/images.sh``) picks the runtime image's base from it, and this module renders it
as the Markdown table between the ``base-images`` markers of docs/compatibility.md
(``marked_block``). ``ascend-pd-dev base-images --write`` rewrites the table there;
``--check`` exits 1 when the page's table is not the rendered one (a test compares them too).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ascend_pd_dev.cli import marked_block
from ascend_pd_dev.cli.marked_block import Block, BlockError
from ascend_pd_dev.controlplane import paths

BLOCK = Block("base-images", "ascend-pd-dev base-images")
CHIPS = {
    "a2": "A2 (Atlas 800I A2, 8 NPUs per node)",
    "a3": "A3 (Atlas 800I/900 A3, 16 NPUs per node)",
}
#: What a row's source says, in the rendered table.
SOURCES = {"published": "", "sibling": " †"}


class BaseImagesError(BlockError):
    """The table or the page cannot be used as it is; the message names the line."""


@dataclass(frozen=True)
class BaseImage:
    sglang: str
    chip: str
    image: str
    source: str


def table_path() -> Path:
    return paths.project_root() / "devtools" / "base-images.txt"


def docs_path() -> Path:
    return paths.project_root() / "docs" / "compatibility.md"


def load(path: Path | None = None) -> list[BaseImage]:
    """The table's rows, in its order; refuses a malformed row or a repeated pair."""
    path = path or table_path()
    rows: list[BaseImage] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 4 or fields[1] not in CHIPS or fields[3] not in SOURCES:
            raise BaseImagesError(
                f"{path}:{number}: expected '<sglang> <{'|'.join(CHIPS)}> <image> "
                f"<{'|'.join(SOURCES)}>', got {line.strip()!r}"
            )
        row = BaseImage(*fields)
        if any((r.sglang, r.chip) == (row.sglang, row.chip) for r in rows):
            raise BaseImagesError(f"{path}:{number}: SGLang {row.sglang} on {row.chip} twice")
        rows.append(row)
    return rows


def render(rows: list[BaseImage]) -> str:
    """One line per SGLang release, a column per chip (``—``: no known image)."""
    by_pair = {(r.sglang, r.chip): r for r in rows}
    versions = list(dict.fromkeys(r.sglang for r in rows))
    lines = [
        "| SGLang | " + " | ".join(CHIPS.values()) + " |",
        "|---|" + "---|" * len(CHIPS),
    ]
    for version in versions:
        cells = []
        for chip in CHIPS:
            row = by_pair.get((version, chip))
            cells.append(f"`{row.image}`{SOURCES[row.source]}" if row else "—")
        lines.append(f"| {version} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    marked_block.add_arguments(parser, "docs/compatibility.md")


def run(args: argparse.Namespace) -> int:
    return marked_block.run(args, BLOCK, docs_path(), lambda: render(load()))
