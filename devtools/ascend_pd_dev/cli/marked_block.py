"""A generated table kept in a document between two HTML comment markers.

The chart README's table of values (``values_table``) and docs/compatibility.md's base images
(``base_images``) are rendered from their sources and kept in the page between
``<!-- <name>:start -->`` and ``<!-- <name>:end -->``; this module owns the markers and the
``--write`` / ``--check`` of their commands.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


class BlockError(ValueError):
    """The source cannot be rendered, or the page lacks its markers; the message says which."""


@dataclass(frozen=True)
class Block:
    """The block ``name`` of a page, written by the command ``command``; its markers
    ``start`` and ``end`` follow from the name."""

    name: str
    command: str
    start: str = field(init=False)
    end: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", f"<!-- {self.name}:start -->")
        object.__setattr__(self, "end", f"<!-- {self.name}:end -->")

    def inside(self, page: str) -> str:
        """What ``page`` holds between the markers."""
        self.with_text(page, "")  # the markers are there, once each
        return page.split(self.start, 1)[1].split(self.end, 1)[0]

    def with_text(self, page: str, rendered: str) -> str:
        """``page`` with ``rendered`` between its markers."""
        if page.count(self.start) != 1 or page.count(self.end) != 1:
            raise BlockError(f"the page needs one {self.start} and one {self.end}")
        head, rest = page.split(self.start, 1)
        _, tail = rest.split(self.end, 1)
        return f"{head}{self.start}\n{rendered}{self.end}{tail}"


def add_arguments(parser: argparse.ArgumentParser, where: str) -> None:
    """``--write`` and ``--check`` of the block in ``where`` (the page, in words)."""
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"rewrite {where}'s table")
    mode.add_argument(
        "--check", action="store_true", help=f"exit 1 when {where}'s table is not the rendered one"
    )


def run(args: argparse.Namespace, block: Block, path: Path, render: Callable[[], str]) -> int:
    """Print the rendered table; with ``--write`` put it in the page, with ``--check`` exit 1
    when the page's is another."""
    try:
        rendered = render()
        if not (args.write or args.check):
            print(rendered, end="")
            return 0
        page = path.read_text()
        wanted = block.with_text(page, rendered)
    except BlockError as exc:
        print(f"{block.command}: {path}: {exc}", file=sys.stderr)
        return 1
    if args.write:
        if wanted != page:
            path.write_text(wanted)
        return 0
    if wanted != page:
        print(
            f"{path}: the table between {block.start} and {block.end} is not the rendered "
            f"one; run `{block.command} --write`",
            file=sys.stderr,
        )
        return 1
    return 0
