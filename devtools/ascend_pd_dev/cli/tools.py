"""``ascend-pd-dev tools helm``: print the path of a tool the tests use, installing it."""

from __future__ import annotations

import argparse
import sys

from ascend_pd_dev.testtools.helm import ToolError, ensure_helm


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("tool", choices=["helm"], help="the tool to locate (installed if missing)")


def run(args: argparse.Namespace) -> int:
    try:
        print(ensure_helm())
    except ToolError as exc:
        print(f"ascend-pd-dev tools: {exc}", file=sys.stderr)
        return 1
    return 0
