"""``ascend-pd``: the user CLI.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; only the chosen one is imported, so ``plan`` works with
the runtime core alone and ``dev`` does not pay for kopf.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

#: subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("ascend_pd_runtime.plan_cli", "print the KV layout of a model and parallel layout"),
    "crd": ("ascend_pd_operator.crd_cli", "print (or write) the PDDeployment CRD"),
    "render": ("ascend_pd_operator.render_cli", "print every child manifest of a PDDeployment"),
    "run": ("ascend_pd_operator.run_cli", "run the operator"),
    "demo": ("ascend_pd_operator.demo", "the operator on the local control plane, end to end"),
    "dev": ("ascend_pd_operator.dev.cli", "local control plane with simulated Ascend nodes"),
    "tools": ("ascend_pd_operator.tools", "print the path of a tool ascend-pd uses, installing it"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    doc = (__doc__ or "").splitlines()[0]
    parser = argparse.ArgumentParser(prog="ascend-pd", description=doc)
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
