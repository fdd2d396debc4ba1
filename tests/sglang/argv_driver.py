"""Runs inside the SGLang harness venv: SGLang's own parser on the launcher's argvs.

``run_all(cases)`` (a job of ``release_checks``, or ``python argv_driver.py CASES.json
RESULTS.json``). Every case is an argv of ``sglang.launch_server`` and the ``ServerArgs``
fields to report. Each is parsed twice:

* ``check``: the launcher's pre-exec check (``ascend_pd_runtime.sglang_args``), i.e.
  ``ServerArgs.add_cli_args`` on an argparse parser and ``parse_args``;
* ``server_args``: what ``launch_server`` does, ``prepare_server_args(argv)``
  (``parse_args`` and ``ServerArgs.from_cli_args``). Where ``ServerArgs.__post_init__``
  needs an NPU (it asks ``torch.npu`` for device memory before 0.5.2x), the record is
  built by ``from_cli_args`` with ``__post_init__`` skipped (``full: false``): the
  fields the parser produced are then exactly what SGLang would start from.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import sys
import traceback
from typing import Any

from ascend_pd_runtime.sglang_args import _json_safe, check


def _values(record: Any, report: list[str]) -> dict[str, Any]:
    return {d: _json_safe(getattr(record, d, None)) for d in report}


def server_args(argv: list[str], report: list[str]) -> dict[str, Any]:
    from sglang.srt import server_args as sa

    try:
        record = sa.prepare_server_args(list(argv))
        return {"ok": True, "full": True, "values": _values(record, report)}
    except SystemExit as exc:  # argparse refused it: check reports the message
        return {"ok": False, "error": f"SystemExit {exc.code}"}
    except Exception as exc:  # the environment (no NPU), checked by the test
        post_init_error = f"{type(exc).__name__}: {exc}"
        where = "".join(traceback.format_exception(exc)[-3:])[-600:]
    parser = argparse.ArgumentParser()
    sa.ServerArgs.add_cli_args(parser)
    namespace = parser.parse_args(list(argv))
    original = sa.ServerArgs.__post_init__
    sa.ServerArgs.__post_init__ = lambda self: None  # type: ignore[method-assign]
    try:
        record = sa.ServerArgs.from_cli_args(namespace)
    finally:
        sa.ServerArgs.__post_init__ = original  # type: ignore[method-assign]
    return {
        "ok": True,
        "full": False,
        "post_init_error": post_init_error,
        "post_init_where": where,
        "values": _values(record, report),
    }


def options() -> dict[str, Any]:
    """Every option string of the parser, with its choices (null when free)."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    found: dict[str, Any] = {}
    for action in parser._actions:
        choices = sorted(map(str, action.choices)) if action.choices else None
        for option in action.option_strings:
            found[option] = choices
    return found


def run_all(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """The release, each case's parse by id, and the parser's options. SGLang's logging is
    off meanwhile (a refused argv logs its error) and back on afterwards, for whatever
    runs next in the interpreter."""
    logging.disable(logging.CRITICAL)
    try:
        results: dict[str, Any] = {}
        for case in cases:
            parsed = check(case["argv"], case["report"])
            entry: dict[str, Any] = {"check": parsed}
            if parsed["ok"]:
                entry["server_args"] = server_args(case["argv"], case["report"])
            results[case["id"]] = entry
        return {
            "version": importlib.metadata.version("sglang"),
            "results": results,
            "options": options(),
        }
    finally:
        logging.disable(logging.NOTSET)


def main() -> int:
    with open(sys.argv[1]) as handle:
        cases = json.load(handle)["cases"]
    out = run_all(cases)
    with open(sys.argv[2], "w") as handle:
        json.dump(out, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
