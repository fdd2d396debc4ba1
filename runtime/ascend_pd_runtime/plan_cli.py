"""``ascend-pd plan``: print the KV layout for a model config and a parallel layout.

Exit 0 when compatible, 2 when incompatible (the JSON is still printed), 1 on
bad input (message on stderr, nothing on stdout). With both roles' tensor sizes
(``--prefill-tp``, ``--decode-tp``) it also checks that the weights fit the NPUs
(``fit``) and warns on stderr when they do not; the exit code does not change.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from .errors import BadInput
from .fit import GIB, NPU_MEMORY_BYTES, RoleParallel, check_fit
from .layout import (
    DEFAULT_SGLANG_VERSION,
    SPECULATIVE_ALGORITHMS,
    TRANSFER_BACKENDS,
    KVLayout,
    LayoutRequest,
    compute_layout,
)
from .model_facts import (
    BUNDLED_MODELS,
    ModelFacts,
    bundled_config,
    config_path,
    load_model_facts,
)
from .partition import parse_partition
from .plan import plan_document, plan_table

EXIT_OK, EXIT_BAD_INPUT, EXIT_INCOMPATIBLE = 0, 1, 2


def example_config(name: str) -> Path:
    """Path of a bundled example ``config.json`` (deepseek-v3, deepseek-v3.2, ...)."""
    return bundled_config(name)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model-config",
        required=True,
        help="config.json of the model (or its directory); bundled examples: "
        + ", ".join(BUNDLED_MODELS),
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
    for role in ("prefill", "decode"):
        parser.add_argument(
            f"--{role}-tp", type=int, help=f"{role} tensor size: with both, check the fit"
        )
        parser.add_argument(f"--{role}-dp", type=int, default=1, help=f"{role} data size (1)")
        parser.add_argument(
            f"--{role}-args",
            default="",
            help=f"{role}'s SGLang extraArgs as one string, after '=' "
            f"(--{role}-args='--quantization modelslim --enable-dp-attention')",
        )
    parser.add_argument(
        "--npu-memory-gib",
        type=float,
        default=NPU_MEMORY_BYTES / GIB,
        help="memory of one NPU for the fit check (64: A2's 910B, each A3 die)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        facts = load_model_facts(config_path(args.model_config))
        request = LayoutRequest(
            prefill_pp=args.prefill_pp,
            decode_pp=args.decode_pp,
            layer_partition=tuple(parse_partition(args.layer_partition)),
            speculative=args.speculative,
            speculative_roles=tuple(r.strip() for r in args.speculative_roles.split(",") if r),
            sglang_version=args.sglang_version,
            transfer_backend=args.transfer_backend,
        )
        layout = compute_layout(facts, request)
        doc = plan_document(layout)
        warnings = fit_warnings(args, facts, layout)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.output == "table":
        print(plan_table(doc))
    else:
        print(json.dumps(doc, separators=(",", ":")))
    return EXIT_OK if doc["compatible"] else EXIT_INCOMPATIBLE


def fit_warnings(args: argparse.Namespace, facts: ModelFacts, layout: KVLayout) -> list[str]:
    """The fit check's warnings, when both roles' tensor sizes are given."""
    if args.prefill_tp is None or args.decode_tp is None:
        return []
    roles = {}
    for role in ("prefill", "decode"):
        tp, dp = getattr(args, f"{role}_tp"), getattr(args, f"{role}_dp")
        if tp < 1 or dp < 1 or tp % dp:
            raise BadInput(f"--{role}-tp {tp} and --{role}-dp {dp}: expected sizes >= 1, the "
                           "tensor size a multiple of the data size")  # fmt: skip
        try:
            extra = tuple(shlex.split(getattr(args, f"{role}_args")))
        except ValueError as exc:
            raise BadInput(f"--{role}-args: {exc}") from None
        roles[role] = RoleParallel(tp, dp, extra)
    if args.npu_memory_gib <= 0:
        raise BadInput(f"--npu-memory-gib {args.npu_memory_gib}: expected a size > 0")
    return check_fit(facts, layout, roles, round(args.npu_memory_gib * GIB)).warnings()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ascend-pd plan", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
