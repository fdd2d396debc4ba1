"""``ascend-pd-runtime``: the serving container's entrypoint.

Subcommands are dispatched lazily (``subcommands.entry_point``).
"""

from __future__ import annotations

import sys

from .subcommands import entry_point

#: subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("ascend_pd_runtime.plan_cli", "print the KV layout of a model and parallel layout"),
    "launch": ("ascend_pd_runtime.launcher", "compute the layout, check it, exec SGLang"),
    "inspect": ("ascend_pd_runtime.inspector", "read config.json and publish the model facts"),
    "patch-sglang": ("ascend_pd_runtime.sglang_patch.cli", "patch the installed SGLang"),
}


main = entry_point("ascend-pd-runtime", __doc__, COMMANDS)

if __name__ == "__main__":
    sys.exit(main())
