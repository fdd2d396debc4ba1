#!/usr/bin/env bash
# Install the ascend-pd runtime into the image's Python and patch its SGLang.
#
# runtime/Dockerfile runs exactly this script, and the SGLang tests run it against
# every supported SGLang release, so what the tests prove is what the image gets.
#   PYTHON          the interpreter whose SGLang is patched (default: python3)
#   ASCEND_PD_SRC   the ascend-pd source tree to install (default: this repository)
#   SGLANG_VERSION  the SGLang version the image must have (empty: accept any supported)
set -euo pipefail

PYTHON="${PYTHON:-python3}"
ASCEND_PD_SRC="${ASCEND_PD_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
SGLANG_VERSION="${SGLANG_VERSION:-}"

installed="$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null)" || {
    echo "error: SGLang is not installed for $PYTHON; use an SGLang Ascend base image" >&2
    exit 1
}
if [[ -n "$SGLANG_VERSION" && "$installed" != "$SGLANG_VERSION" ]]; then
    echo "error: SGLANG_VERSION is $SGLANG_VERSION but the base image has SGLang $installed;" \
        "use a base image with SGLang $SGLANG_VERSION or set SGLANG_VERSION=$installed" >&2
    exit 1
fi

# numpy and packaging, the runtime's only dependencies, come with SGLang.
"$PYTHON" -m pip install --quiet --no-deps --disable-pip-version-check "$ASCEND_PD_SRC"
"$PYTHON" -m ascend_pd_runtime.cli patch-sglang
"$PYTHON" -m ascend_pd_runtime.cli patch-sglang --check
