"""A control plane of a test module's own, for the e2e tests that change what no other test
may see (nodes added during the test, a third-party CRD installed).

``own_plane(name, nodes, ...)`` brings up kubelet-sim's nodes of ``NPUS`` NPUs over
``DOMAINS`` domains, the project's CRD, a namespace ``name`` and the operator watching it,
and tears all of it down afterwards; ``small_spec`` is an AscendPDDeployment of whole-node
runtime pods with no router, on a small model.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdd_e2e import Operator

from ascend_pd_dev.controlplane import cluster as dev_cluster
from ascend_pd_dev.controlplane import paths
from ascend_pd_dev.kubelet_sim.nodes import DOMAIN_LABEL
from ascend_pd_dev.testtools.kubectl import install_crd, kubectl_path
from reliability.specs import document

NPUS, DOMAINS = 8, 2
#: a small DeepSeek-V2 (MLA) model's config, as the operator reads it
CONFIG = {
    "architecture": "DeepseekV2ForCausalLM", "numHiddenLayers": 27, "numNextnPredictLayers": 0,
    "kvLoraRank": 512, "qkRopeHeadDim": 64, "indexHeadDim": 0,
}  # fmt: skip
IMAGE = "registry.example.com/ascend-pd-runtime:e2e"


@dataclass
class Plane:
    """The control plane: ``run`` is the ``kubectl(*args, input=, check=)`` the shared
    helpers take; ``namespace`` is the one the operator watches."""

    layout: dev_cluster.Layout
    namespace: str

    def progress(self, message: str) -> None:
        print(f"{self.namespace} cluster: {message}", flush=True)

    def run(self, *args: str, input: str | None = None, check: bool = True) -> Any:
        done = subprocess.run(
            [str(kubectl_path()), "--kubeconfig", str(self.layout.kubeconfig), *args],
            input=input, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run("get", *args, "-o", "json").stdout)

    def named(self, kind: str, *selector: str) -> dict[str, Any]:
        """name -> object, of the ``kind`` in the namespace (``selector``: kubectl's)."""
        found = self.json(kind, "-n", self.namespace, *selector)
        return {o["metadata"]["name"]: o for o in found["items"]}

    def domains(self) -> dict[str, str]:
        """node -> its domain, from the nodes' own labels."""
        nodes = self.json("nodes")["items"]
        return {n["metadata"]["name"]: n["metadata"]["labels"].get(DOMAIN_LABEL, "")
                for n in nodes}  # fmt: skip

    def grow(self, nodes: int) -> None:
        """Up to ``nodes`` nodes in all, the new ones spread over the domains as before."""
        dev_cluster.up(self.layout, nodes, NPUS, self.progress, domains=DOMAINS)


@contextlib.contextmanager
def own_plane(
    name: str,
    nodes: int,
    log_dir: Path,
    *operator_args: str,
    prepare: Callable[[Plane], None] | None = None,
) -> Iterator[Plane]:
    """A fresh control plane (state ``<$ASCEND_PD_TEST_CLUSTER or e2e>-<name>``) with
    ``nodes`` nodes, the project's CRD and a namespace ``name``; ``prepare`` runs before
    the operator starts (watching ``name``, its log in ``log_dir``); purged afterwards."""
    state = f"{os.environ.get(paths.TEST_CLUSTER_ENV) or 'e2e'}-{name}"
    plane = Plane(dev_cluster.Layout(paths.scratch_state_dir(state)), name)
    dev_cluster.fresh(plane.layout, nodes, NPUS, plane.progress, domains=DOMAINS)
    try:
        install_crd(plane.layout.kubeconfig, field_manager=f"e2e-{name}")
        plane.run("create", "namespace", name)
        if prepare is not None:
            prepare(plane)
        log = log_dir / "operator.log"
        operator = Operator(plane.layout.kubeconfig, name, log, *operator_args)
        try:
            yield plane
        finally:
            operator.stop()
    finally:
        dev_cluster.down(plane.layout, plane.progress, purge=True)


def small_spec(
    name: str, namespace: str, prefill: dict[str, Any], decode: dict[str, Any], **spec: Any
) -> dict[str, Any]:
    """An AscendPDDeployment of ``CONFIG``'s model (a hostPath volume), the e2e runtime
    image and no router; ``prefill``, ``decode`` and the rest of ``spec`` as given."""
    return document(name, namespace, {
        "model": {"name": name, "path": "/models/m", "config": dict(CONFIG),
                  "volume": {"hostPath": {"path": "/data/models/m"}}},
        "runtime": {"image": IMAGE},
        "prefill": prefill,
        "decode": decode,
        "router": {"enabled": False},
        **spec,
    })  # fmt: skip
