"""Where the chart is, the ci/ values matrix, and one `helm template` run (shared by the
chart tests and their fixtures)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ascend_pd_dev.controlplane import versions

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "ascend-pd-operator"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
#: the oldest Kubernetes the chart supports (the floor of the dev cluster's release table,
#: which the ``floor`` tier runs) and a current one
KUBE_VERSIONS = (f"{versions.FLOOR}.0", "1.31.0")
RELEASE = "apd"
NAMESPACE = "ascend-pd-system"

Render = Callable[..., list[dict[str, Any]]]


def run_template(
    helm: Path,
    values_files: Sequence[Path] = (),
    kube_version: str = KUBE_VERSIONS[-1],
    set_values: Sequence[str] = (),
    namespace: str = NAMESPACE,
    api_versions: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """``helm template``; ``api_versions``: what the cluster serves besides the built-ins
    (``.Capabilities.APIVersions``, e.g. ``monitoring.coreos.com/v1``)."""
    cmd = [str(helm), "template", RELEASE, str(CHART), "--namespace", namespace]
    cmd += ["--kube-version", kube_version]
    for api_version in api_versions:
        cmd += ["--api-versions", api_version]
    for path in values_files:
        cmd += ["--values", str(path)]
    for item in set_values:
        cmd += ["--set", item]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)
