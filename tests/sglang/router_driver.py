"""Runs inside the SGLang harness venv: sglang-router's own parser on the router's args.

Usage: ``python router_driver.py CASES.json RESULTS.json``. Each case's args go through
``sglang_router.launch_router.parse_router_args`` (what ``python -m
sglang_router.launch_router`` calls: ``RouterArgs.add_cli_args`` and ``from_cli_args``).
The launcher module imports the serving side at the top for ``launch_router`` (the Python
mini load balancer, a FastAPI app, and setproctitle); the parser never touches them, so
they are empty modules here. The parser itself (``router_args``, with the release's Rust
extension, abi3) is the real one.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import sys
import types


def _empty_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)

    def attribute(attr: str) -> type:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return type(attr, (), {})

    module.__getattr__ = attribute  # type: ignore[method-assign]
    return module


def _import_launch_router() -> types.ModuleType:
    for name in ("setproctitle", "sglang_router.mini_lb"):
        sys.modules[name] = _empty_module(name)
    from sglang_router import launch_router

    return launch_router


def main() -> int:
    with open(sys.argv[1]) as handle:
        cases = json.load(handle)["cases"]
    launch_router = _import_launch_router()
    results = {}
    for case in cases:
        try:
            record = launch_router.parse_router_args(case["args"])
        except SystemExit as exc:
            results[case["id"]] = {"ok": False, "error": f"SystemExit {exc.code}"}
            continue
        values = dataclasses.asdict(record)
        results[case["id"]] = {"ok": True, "values": {k: values.get(k) for k in case["report"]}}
    out = {"version": importlib.metadata.version("sglang-router"), "results": results}
    with open(sys.argv[2], "w") as handle:
        json.dump(out, handle, default=repr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
