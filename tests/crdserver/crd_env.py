"""What the CRD server tests share: paths, the CRD document, kubectl against the server."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_dev.testtools.kubectl import kubectl_path

REPO = Path(__file__).resolve().parents[2]
CEL_CRD = REPO / "crds" / "ascendpd.io_pddeployments.yaml"
CRD_NAME = "pddeployments.ascendpd.io"
CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
RESOURCES = "/apis/ascendpd.io/v1alpha1/namespaces/default/pddeployments"
Json = dict[str, Any]


class Kubectl:
    """kubectl against the CRD server (the project's kubectl, the server's kubeconfig)."""

    def __init__(self, kubeconfig: Path) -> None:
        # the discovery cache beside the server's state, not in ~/.kube (a new port each run)
        self.env = dict(
            os.environ, KUBECONFIG=str(kubeconfig), KUBECACHEDIR=str(kubeconfig.parent / "cache")
        )

    def __call__(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(kubectl_path()), *args], input=input, capture_output=True,
                              text=True, env=self.env, check=False, timeout=120)  # fmt: skip


def crd_document() -> Json:
    loaded: Json = yaml.safe_load(CEL_CRD.read_text())
    return loaded
