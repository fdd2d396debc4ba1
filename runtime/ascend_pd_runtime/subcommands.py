"""Lazy subcommand dispatch shared by the ``ascend-pd`` and ``ascend-pd-runtime`` CLIs.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; only the chosen one is imported, so a command pays only for
its own dependencies (``plan`` needs nothing but the layout core, the launcher
starts fast, ``dev`` does not import kopf).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Mapping, Sequence
from types import ModuleType


def dispatch(
    prog: str, description: str, commands: Mapping[str, tuple[str, str]], argv: Sequence[str]
) -> int:
    """Parse ``argv`` against ``commands`` (name -> (module, help)) and run the chosen one."""
    argv = list(argv)
    parser = argparse.ArgumentParser(prog=prog, description=description)
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
