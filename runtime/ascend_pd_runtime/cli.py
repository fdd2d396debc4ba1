"""``ascend-pd-runtime``: the serving container's entrypoint.

Subcommands are dispatched lazily (``subcommands.dispatch``).
"""

from __future__ import annotations

import sys

from .subcommands import dispatch

#: subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("ascend_pd_runtime.plan_cli", "print the KV layout of a model and parallel layout"),
    "launch": ("ascend_pd_runtime.launcher", "compute the layout, check it, exec SGLang"),
    "inspect": ("ascend_pd_runtime.inspector", "read config.json and publish the model facts"),
    "patch-sglang": ("ascend_pd_runtime.sglang_patch.cli", "patch the installed SGLang"),
}


def main(argv: list[str] | None = None) -> int:
    description = (__doc__ or "").splitlines()[0]
    return dispatch(
        "ascend-pd-runtime", description, COMMANDS, sys.argv[1:] if argv is None else argv
    )


if __name__ == "__main__":
    sys.exit(main())
