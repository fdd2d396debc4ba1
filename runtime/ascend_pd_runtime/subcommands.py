"""Lazy subcommand dispatch shared by the ``ascend-pd``, ``ascend-pd-runtime`` and
``ascend-pd-dev`` CLIs.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; only the chosen one is imported, so a command pays only for
its own dependencies (``plan`` needs nothing but the layout core, the launcher
starts fast, ``dev`` does not import kopf). ``--version`` prints the installed
distribution's version, read from its package metadata (one source: ``pyproject.toml``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, Protocol

#: The distribution both CLIs (``ascend-pd``, ``ascend-pd-runtime``) come from.
DISTRIBUTION = "ascend-pd"


def distribution_version() -> str:
    """The installed ascend-pd's version, from its package metadata."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return f"unknown ({DISTRIBUTION} is not installed; run from a source tree)"


class _VersionAction(argparse.Action):
    """``--version``: read the metadata only when asked, so a command never pays for it."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(f"{parser.prog} {distribution_version()}", file=sys.stdout)
        parser.exit()


def dispatch(
    prog: str, description: str, commands: Mapping[str, tuple[str, str]], argv: Sequence[str]
) -> int:
    """Parse ``argv`` against ``commands`` (name -> (module, help)) and run the chosen one."""
    argv = list(argv)
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    modules: dict[str, ModuleType] = {}
    for name, (module_name, help_text) in commands.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            modules[name] = importlib.import_module(module_name)
            modules[name].add_arguments(sub_parser)
    args = parser.parse_args(argv)
    return int(modules[args.command].run(args))


class Main(Protocol):
    """A console script's ``main``: ``argv`` None means the process's arguments."""

    def __call__(self, argv: list[str] | None = None) -> int: ...


def entry_point(prog: str, doc: str | None, commands: Mapping[str, tuple[str, str]]) -> Main:
    """A CLI's ``main``: ``commands`` dispatched under ``prog``, described by the first line
    of ``doc`` (the CLI module's docstring)."""
    description = (doc or "").splitlines()[0]

    def main(argv: list[str] | None = None) -> int:
        return dispatch(prog, description, commands, sys.argv[1:] if argv is None else argv)

    return main
