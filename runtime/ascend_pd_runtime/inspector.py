"""``ascend-pd-runtime inspect``: the model inspector Job's entrypoint.

It reads ``<model path>/config.json`` with the same parser the launcher uses
and writes the result (the facts, or the exact error) as the container's
termination message, so the operator learns the model without mounting it and
the inspector needs no Kubernetes credentials (see ``env_contract``).

In the Job the operator's env is its input, so it first checks the env contract's
version as the launcher does: one it does not speak ends it with
``EXIT_CONTRACT_VERSION`` and a message naming both versions (the operator shows
``EnvContractMismatch``). Then, as the launcher, it checks that the image's SGLang is the
version the spec names (``sglang_version``): one that is not ends it with
``EXIT_SGLANG_VERSION`` naming both (``SGLangVersionMismatch``), before the model is read.
Given ``--model-path`` by a person, it reads no contract and checks no version.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .env_contract import (
    DEFAULT_INSPECT_OUTPUT,
    EXIT_CONTRACT_VERSION,
    EXIT_SGLANG_VERSION,
    INSPECT_OUTPUT,
    encode_inspect_result,
    model_config_subset,
    read_inspector_env,
)
from .errors import BadInput, ContractMismatch, SGLangVersionMismatch
from .model_facts import load_model_facts
from .sglang_version import check_installed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-path", help="overrides ASCEND_PD_MODEL_PATH")
    parser.add_argument("--output", help="overrides ASCEND_PD_INSPECT_OUTPUT ('-': stdout)")
    parser.add_argument("--python", default=sys.executable, help="python that runs SGLang")


def run(args: argparse.Namespace) -> int:
    environ = dict(os.environ)
    if args.model_path:
        environ["ASCEND_PD_MODEL_PATH"] = args.model_path
    if args.output:
        environ["ASCEND_PD_INSPECT_OUTPUT"] = args.output
    try:
        env = read_inspector_env(environ, check_version=not args.model_path)
    except ContractMismatch as exc:
        # The result's place is the one every contract version names (the Job's
        # terminationMessagePath): the other variables may mean something else.
        output = args.output or environ.get(INSPECT_OUTPUT) or DEFAULT_INSPECT_OUTPUT
        return _report(output, encode_inspect_result(error=str(exc)), EXIT_CONTRACT_VERSION)
    except BadInput as exc:
        print(f"ascend-pd-runtime inspect: {exc}", file=sys.stderr)
        return 1
    if env.sglang_version:
        try:
            check_installed(env.sglang_version, args.python, environ)
        except SGLangVersionMismatch as exc:
            return _report(env.output, encode_inspect_result(error=str(exc)), EXIT_SGLANG_VERSION)
        except BadInput as exc:
            return _report(env.output, encode_inspect_result(error=str(exc)), 1)
    message, code = inspect_model(Path(env.model_path))
    return _report(env.output, message, code)


def _report(output: str, message: str, code: int) -> int:
    """Write the result to ``output`` ('-': stdout), an error on stderr too; ``code``."""
    if output == "-":
        print(message)
    else:
        Path(output).write_text(message, encoding="utf-8")
    if code:
        print(f"ascend-pd-runtime inspect: {json.loads(message)['error']}", file=sys.stderr)
    return code


def inspect_model(model_path: Path) -> tuple[str, int]:
    """``(termination message, exit code)`` for the model at ``model_path``."""
    config = model_path / "config.json"
    try:
        load_model_facts(config)
        raw = json.loads(config.read_text(encoding="utf-8"))
    except BadInput as exc:
        return encode_inspect_result(error=str(exc)), 1
    except UnicodeDecodeError as exc:
        # Without this the inspector dies with a traceback and no termination message,
        # and the user sees only "the model inspector Job failed".
        return encode_inspect_result(
            error=f"{config}: cannot read model config: not UTF-8 text "
            f"(byte {exc.start}: {exc.reason})"
        ), 1
    return encode_inspect_result(config=model_config_subset(raw)), 0
