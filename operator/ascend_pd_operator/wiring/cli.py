"""``ascend-pd``: the user CLI.

Subcommands are dispatched lazily (``ascend_pd_runtime.subcommands.dispatch``), so
``plan`` works with the runtime core alone. Development commands live in ``ascend-pd-dev``.
"""

from __future__ import annotations

import sys

from ascend_pd_runtime.subcommands import entry_point

#: subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("ascend_pd_runtime.plan_cli", "print the KV layout of a model and parallel layout"),
    "crd": ("ascend_pd_operator.wiring.crd_cli", "print (or write) the PDDeployment CRD"),
    "render": (
        "ascend_pd_operator.wiring.render_cli",
        "print every child manifest of a PDDeployment",
    ),
    "run": ("ascend_pd_operator.wiring.run_cli", "run the operator"),
}


main = entry_point("ascend-pd", __doc__, COMMANDS)

if __name__ == "__main__":
    sys.exit(main())
