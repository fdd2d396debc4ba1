"""``ascend-pd-dev tools helm|promtool|prometheus``: print the path of a tool the tests use,
installing it."""

from __future__ import annotations

import argparse
import sys

from ascend_pd_dev.controlplane import prometheus
from ascend_pd_dev.testtools.helm import ToolError, ensure_helm


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "tool",
        choices=["helm", "promtool", "prometheus"],
        help="the tool to locate (installed if missing)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        if args.tool == "helm":
            print(ensure_helm())
        else:
            print(prometheus.ensure() / args.tool)
    except (ToolError, prometheus.PrometheusError) as exc:
        print(f"ascend-pd-dev tools: {exc}", file=sys.stderr)
        return 1
    return 0
