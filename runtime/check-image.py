"""Fail the runtime image build when something the pods run cannot be imported.

runtime/Dockerfile runs this after ``install-and-patch.sh``. It checks, in this order:

1. ``sglang_router.launch_router``: the router Deployment runs
   ``python3 -m sglang_router.launch_router`` from the runtime image;
2. ``ascend_pd_runtime.connector``: what the patched SGLang connector calls into
   (``UPSTREAM``, ``send_kvcache_planned``);
3. SGLang's Ascend connector (``sglang/srt/disaggregation/ascend/conn.py``): it carries
   the ``vectorized-send`` patch, compiles, and imports. A build host has no Ascend driver
   (the pods mount it from the node); when the import fails only because a driver library
   is missing, the patched file's compiling is the check and a note says so.

Exit 0 when everything passed, 1 naming the first thing that did not.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

ROUTER_MODULE = "sglang_router.launch_router"
CONNECTOR_MODULE = "ascend_pd_runtime.connector"
CONNECTOR_NAMES = ("UPSTREAM", "send_kvcache_planned")
SGLANG_CONN = "srt/disaggregation/ascend/conn.py"
SGLANG_CONN_MODULE = "sglang.srt.disaggregation.ascend.conn"
PATCH_MARKER = "# ascend-pd patch: vectorized-send"
#: Libraries of the Ascend driver (the node's /usr/local/Ascend/driver), absent at build time.
DRIVER_LIBRARIES = ("libascend_hal", "libdrvdsmi", "libdcmi", "/usr/local/Ascend/driver")


class CheckFailed(Exception):
    """One check failed; the message says which and why."""


def _import(name: str, why: str) -> object:
    try:
        return importlib.import_module(name)
    except Exception as exc:  # any failure to import is the finding
        raise CheckFailed(f"cannot import {name} ({why}): {type(exc).__name__}: {exc}") from exc


def check_router() -> str:
    _import(ROUTER_MODULE, "the router container runs it")
    return f"{ROUTER_MODULE} imports"


def check_connector() -> str:
    module = _import(CONNECTOR_MODULE, "the patched SGLang connector calls it")
    missing = [n for n in CONNECTOR_NAMES if not hasattr(module, n)]
    if missing:
        raise CheckFailed(f"{CONNECTOR_MODULE} lacks {', '.join(missing)}")
    return f"{CONNECTOR_MODULE} imports"


def sglang_conn_path() -> Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise CheckFailed(f"SGLang is not installed for {sys.executable}")
    return Path(next(iter(spec.submodule_search_locations))) / SGLANG_CONN


def check_sglang_conn() -> str:
    path = sglang_conn_path()
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CheckFailed(f"cannot read SGLang's Ascend connector {path}: {exc}") from exc
    if PATCH_MARKER not in source:
        raise CheckFailed(f"{path} lacks the ascend-pd patch ({PATCH_MARKER!r})")
    try:
        compile(source, str(path), "exec")
    except SyntaxError as exc:
        raise CheckFailed(f"the patched {path} does not compile: {exc}") from exc
    try:
        importlib.import_module(SGLANG_CONN_MODULE)
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        if any(lib in text for lib in DRIVER_LIBRARIES):
            return (
                f"{path} is patched and compiles; importing it needs the Ascend driver, "
                f"which the pods mount from the node ({text})"
            )
        raise CheckFailed(f"cannot import the patched {SGLANG_CONN_MODULE}: {text}") from exc
    return f"{SGLANG_CONN_MODULE} is patched and imports"


def main() -> int:
    # Check the installed packages, not the source tree beside this script.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    for check in (check_router, check_connector, check_sglang_conn):
        try:
            print(f"check-image: {check()}", flush=True)
        except CheckFailed as exc:
            print(f"check-image: error: {exc}", file=sys.stderr, flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
