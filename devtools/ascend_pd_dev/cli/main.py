"""``ascend-pd-dev``: the development toolbox's CLI (never installed in an image).

The production ``ascend-pd`` command offers only what a cluster needs (``plan``, ``crd``,
``render``, ``run``); the local control plane, the demo and the tool installers live here,
in the ``ascend-pd-dev`` distribution that only ``make venv`` installs.
"""

from __future__ import annotations

import sys

from ascend_pd_runtime.subcommands import entry_point

#: subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "base-images": ("ascend_pd_dev.cli.base_images", "docs/compatibility.md's base images"),
    "cluster": ("ascend_pd_dev.cli.cluster", "local control plane with simulated Ascend nodes"),
    "demo": ("ascend_pd_dev.cli.demo", "the operator on the local control plane, end to end"),
    "dashboard-picture": (
        "ascend_pd_dev.cli.dashboard_picture",
        "docs/dashboard-layout.svg from the Prometheus e2e tier's data",
    ),
    "release": (
        "ascend_pd_dev.cli.release",
        "check the versions, package the chart, build the images of a release",
    ),
    "tools": ("ascend_pd_dev.cli.tools", "print the path of a tool the tests use, installing it"),
    "values-table": ("ascend_pd_dev.cli.values_table", "the chart README's table of values"),
}


main = entry_point("ascend-pd-dev", __doc__, COMMANDS)

if __name__ == "__main__":
    sys.exit(main())
