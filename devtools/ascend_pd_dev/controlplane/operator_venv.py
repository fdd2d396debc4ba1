"""The operator's interpreter as the image has it: a virtualenv with the checkout's
``.[operator]`` only (editable, so it runs this checkout's code), for measuring what the
operator costs. The development venv also holds the tests' libraries, the kubernetes
client among them, and kopf imports that client whenever it is installed: an operator run
from there carries ~10 MiB the image's does not.

Built once per checkout (``.dev/operator-venv``) and again when ``pyproject.toml``
changes; concurrent callers wait on a file lock.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import ascend_pd_operator
from ascend_pd_dev.controlplane.build import file_lock


def checkout() -> Path:
    """The checkout the operator package is installed from (editable: its ``operator/``)."""
    return Path(ascend_pd_operator.__file__).resolve().parents[2]


def operator_python(root: Path | None = None) -> Path:
    """The python of the operator-only venv of ``root`` (default: this checkout)."""
    root = root or checkout()
    venv = root / ".dev" / "operator-venv"
    digest = hashlib.sha256((root / "pyproject.toml").read_bytes()).hexdigest()[:12]
    stamp = venv / f".installed-{digest}"
    python = venv / "bin" / "python"
    with file_lock(root / ".dev" / "operator-venv.lock"):
        if stamp.is_file() and python.is_file():
            return python
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "-e", f"{root}[operator]"],
            capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"installing .[operator] into {venv} failed:\n{done.stderr[-3000:]}")
        stamp.touch()
    return python
