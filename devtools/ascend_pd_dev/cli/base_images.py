"""The SGLang Ascend base images per SGLang release and chip, as docs/compatibility.md shows them.

``devtools/base-images.txt`` is the one table: ``make images SGLANG_VERSION=<v> CHIP=a2|a3``
(``devtools/images.sh``) picks the runtime image's base from it, and this module renders it
as the Markdown table between ``<!-- base-images:start -->`` and ``<!-- base-images:end -->``
of docs/compatibility.md. ``ascend-pd-dev base-images --write`` rewrites the table there;
``--check`` exits 1 when the page's table is not the rendered one (a test compares them too).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from ascend_pd_dev.controlplane import paths

START, END = "<!-- base-images:start -->", "<!-- base-images:end -->"
CHIPS = {
    "a2": "A2 (Atlas 800I A2, 8 NPUs per node)",
    "a3": "A3 (Atlas 800I/900 A3, 16 NPUs per node)",
}
#: What a row's source says, in the rendered table.
SOURCES = {"published": "", "sibling": " †"}


class BaseImagesError(ValueError):
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


def page_with_table(page: str, rendered: str) -> str:
    """``page`` with ``rendered`` between its markers."""
    if page.count(START) != 1 or page.count(END) != 1:
        raise BaseImagesError(f"docs/compatibility.md needs one {START} and one {END}")
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{rendered}{END}{tail}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite docs/compatibility.md's table")
    mode.add_argument(
        "--check", action="store_true", help="exit 1 when the page's table is not the rendered one"
    )


def run(args: argparse.Namespace) -> int:
    page_path = docs_path()
    try:
        rendered = render(load())
        if not (args.write or args.check):
            print(rendered, end="")
            return 0
        page = page_path.read_text()
        wanted = page_with_table(page, rendered)
    except BaseImagesError as exc:
        print(f"ascend-pd-dev base-images: {exc}", file=sys.stderr)
        return 1
    if args.write:
        if wanted != page:
            page_path.write_text(wanted)
        return 0
    if wanted != page:
        print(
            f"{page_path}: the base images table is not {table_path().name}'s; run "
            "`ascend-pd-dev base-images --write`",
            file=sys.stderr,
        )
        return 1
    return 0
