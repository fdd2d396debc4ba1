"""``ascend-pd-runtime``: the serving container's entrypoint.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; only the chosen one is imported, so the launcher starts
fast and ``plan`` needs nothing but the layout core.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

#: subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("ascend_pd_runtime.plan_cli", "print the KV layout of a model and parallel layout"),
    "launch": ("ascend_pd_runtime.launcher", "compute the layout, check it, exec SGLang"),
    "inspect": ("ascend_pd_runtime.inspector", "read config.json and publish the model facts"),
    "patch-sglang": ("ascend_pd_runtime.sglang_patch.cli", "patch the installed SGLang"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    doc = (__doc__ or "").splitlines()[0]
    parser = argparse.ArgumentParser(prog="ascend-pd-runtime", description=doc)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    modules: dict[str, ModuleType] = {}
    for name, (module_name, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            modules[name] = importlib.import_module(module_name)
            modules[name].add_arguments(sub_parser)
    args = parser.parse_args(argv)
    return int(modules[args.command].run(args))


if __name__ == "__main__":
    sys.exit(main())
