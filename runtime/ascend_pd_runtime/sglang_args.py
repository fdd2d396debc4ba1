"""SGLang's own verdict on a server command line, from the SGLang that will run it.

``python -m sglang.launch_server ARGS`` builds an ``argparse`` parser with
``ServerArgs.add_cli_args`` and parses ``ARGS`` with it (``prepare_server_args``,
0.5.10 to 0.5.23). SGLang's flags drift between releases (a flag is renamed, a
prefix becomes ambiguous), and a user's ``extraArgs`` are free text, so the launcher
asks that very parser before it execs SGLang: a refusal then ends the pod at once
with the parser's message instead of after the model has started loading.

This file runs as a script in SGLang's interpreter (which need not have
``ascend_pd_runtime`` installed), so it imports nothing but the standard library
and SGLang. Protocol: ``python sglang_args.py RESULT_FILE`` with a JSON object
``{"argv": [...], "report": [dest, ...]}`` on stdin; it writes to ``RESULT_FILE``
(not stdout, where SGLang may log on import) ``{"ok": true, "values": {dest: value}}``
(the parsed values of the ``report`` dests, JSON-safe) or ``{"ok": false, "error":
<parser message>, "argument": <the argv element it is about, or "">}``, and exits 0
in both cases; any other exit means the parser could not be consulted (SGLang does
not import).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn


class Refused(Exception):
    """argparse's ``error()``: SGLang's parser refused the command line."""


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that raises instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise Refused(message)


def offending_argument(argv: Sequence[str], message: str) -> str:
    """The element of ``argv`` a parser message is about ("" when none is named).

    argparse names the flag (``argument --tp-size: invalid int value``, ``ambiguous
    option: --cuda-graph-max-bs could match ...``) or lists what it did not
    recognize (``unrecognized arguments: --foo``); the element is found by its flag,
    so ``--x=1`` is found for ``--x``.
    """
    named = re.search(r"(?:argument|option:?) (-{1,2}[^\s:/=,]+)", message)
    if named:
        flag = named.group(1)
        for item in argv:
            if item == flag or item.startswith(flag + "="):
                return item
    if "unrecognized arguments: " in message:
        rest = message.split("unrecognized arguments: ", 1)[1]
        # The first unrecognized element: the longest argv element the list starts with
        # (an element may itself contain spaces or newlines).
        candidates = [a for a in argv if a and rest.startswith(a)]
        if candidates:
            return max(candidates, key=len)
    return ""


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return repr(value)


def check(argv: Sequence[str], report: Sequence[str] = ()) -> dict[str, Any]:
    """Parse ``argv`` (``launch_server``'s arguments) with the installed SGLang's parser."""
    from sglang.srt.server_args import ServerArgs  # the parser launch_server uses

    parser = _Parser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    try:
        namespace = parser.parse_args(list(argv))
    except Refused as exc:
        message = str(exc)
        return {"ok": False, "error": message, "argument": offending_argument(argv, message)}
    return {"ok": True, "values": {d: _json_safe(getattr(namespace, d, None)) for d in report}}


def main() -> int:
    request = json.load(sys.stdin)
    result = check(request["argv"], request.get("report") or ())
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        json.dump(result, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
