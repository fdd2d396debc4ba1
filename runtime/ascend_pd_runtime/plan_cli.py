"""``ascend-pd plan``: print the KV layout for a model config and a parallel layout.

Exit 0 when compatible, 2 when incompatible (the JSON is still printed), 1 on
bad input (message on stderr, nothing on stdout).
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from pathlib import Path

from .errors import BadInput
from .layout import (
    DEFAULT_SGLANG_VERSION,
    SPECULATIVE_ALGORITHMS,
    TRANSFER_BACKENDS,
    LayoutRequest,
    compute_layout,
)
from .model_facts import load_model_facts
from .partition import parse_partition
from .plan import plan_document, plan_table

EXIT_OK, EXIT_BAD_INPUT, EXIT_INCOMPATIBLE = 0, 1, 2


def example_config(name: str) -> Path:
    """Path of a bundled example ``config.json`` (deepseek-v3, deepseek-v3.2, ...)."""
    return Path(str(resources.files("ascend_pd_runtime") / "examples" / f"{name}.json"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model-config",
        required=True,
        help="config.json of the model (or its directory); bundled examples: "
        "deepseek-v3, deepseek-v3.2, deepseek-v2-lite, qwen2-7b",
    )
    parser.add_argument("--prefill-pp", type=int, required=True, help="prefill pipeline size")
    parser.add_argument("--decode-pp", type=int, default=1, help="decode pipeline size (1)")
    parser.add_argument(
        "--layer-partition", default="", help="explicit prefill partition, e.g. 30,31"
    )
    parser.add_argument(
        "--speculative", default="none", choices=[a.lower() for a in SPECULATIVE_ALGORITHMS]
    )
    parser.add_argument(
        "--speculative-roles",
        default="prefill,decode",
        help="roles that run speculative decoding (prefill,decode)",
    )
    parser.add_argument("--sglang-version", default=DEFAULT_SGLANG_VERSION)
    parser.add_argument("--transfer-backend", default="ascend", choices=TRANSFER_BACKENDS)
    parser.add_argument("--output", default="json", choices=("json", "table"))


def run(args: argparse.Namespace) -> int:
    try:
        config = Path(args.model_config)
        if not config.exists() and example_config(args.model_config).exists():
            config = example_config(args.model_config)
        facts = load_model_facts(config)
        request = LayoutRequest(
            prefill_pp=args.prefill_pp,
            decode_pp=args.decode_pp,
            layer_partition=tuple(parse_partition(args.layer_partition)),
            speculative=args.speculative,
            speculative_roles=tuple(r.strip() for r in args.speculative_roles.split(",") if r),
            sglang_version=args.sglang_version,
            transfer_backend=args.transfer_backend,
        )
        doc = plan_document(compute_layout(facts, request))
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.output == "table":
        print(plan_table(doc))
    else:
        print(json.dumps(doc, separators=(",", ":")))
    return EXIT_OK if doc["compatible"] else EXIT_INCOMPATIBLE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ascend-pd plan", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
