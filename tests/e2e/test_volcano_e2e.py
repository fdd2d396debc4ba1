"""Volcano's PodGroup CRD on the real API server: the operator reads what it holds, and the
server stores the PodGroups the operator makes under it as they were sent.

A control plane of this module's own (it installs Volcano's CRD, which no other test may
see): kubelet-sim spreads 4 nodes of 8 NPUs over 2 domains. No Volcano scheduler runs, so
the runtime pods (``schedulerName: volcano``) stay Pending: what is checked is the API's
side, with Volcano's published CRDs (``tests/unit/operator/fixtures/volcano``):

1. v1.15.1 (``subGroupPolicy``): a deployment with placement scope Deployment gets one
   PodGroup ``<name>-gang`` with a subgroup per instance and the networkTopology of its
   placement; its pods name it; ``status.placement.gang`` says so.
2. v1.13.3 (no ``subGroupPolicy``), installed in its place: a new deployment gets a PodGroup
   per instance, each with the networkTopology, and ``status.placement.gang`` says why.

The 1.20 API server prunes a field the CRD does not know instead of refusing it: each stored
PodGroup spec is compared whole with what the operator sends (plus the CRD's defaults), so a
misspelled or unknown field would show as missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pdd_e2e import Operator, apply, status

from ascend_pd_dev.controlplane import cluster as dev_cluster
from ascend_pd_dev.controlplane import paths
from ascend_pd_dev.kubelet_sim.nodes import DOMAIN_LABEL
from ascend_pd_dev.testtools.kubectl import install_crd, kubectl_path
from reliability.specs import document

pytestmark = [pytest.mark.local, pytest.mark.timeout(600)]

NODES, NPUS, DOMAINS = 4, 8, 2
NAMESPACE = "volcano"
CRDS = Path(__file__).resolve().parents[1] / "unit" / "operator" / "fixtures" / "volcano"
PODGROUP_CRD = "podgroups.scheduling.volcano.sh"
CONFIG = {
    "architecture": "DeepseekV2ForCausalLM", "numHiddenLayers": 27, "numNextnPredictLayers": 0,
    "kvLoraRank": 512, "qkRopeHeadDim": 64, "indexHeadDim": 0,
}  # fmt: skip


def _progress(message: str) -> None:
    print(f"volcano cluster: {message}", flush=True)


class Cluster:
    def __init__(self, layout: dev_cluster.Layout) -> None:
        self.layout = layout

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

    def podgroups(self) -> dict[str, Any]:
        found = self.json("podgroups.scheduling.volcano.sh", "-n", NAMESPACE)
        return {g["metadata"]["name"]: g for g in found["items"]}

    def install_volcano_crd(self, fixture: str) -> None:
        """Replace the PodGroup CRD with ``fixture``'s and wait until it is Established."""
        self.run("delete", "crd", PODGROUP_CRD, "--ignore-not-found", "--wait=true")
        self.run("create", "-f", str(CRDS / fixture))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            crd = self.json("crd", PODGROUP_CRD)
            conditions = {
                c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])
            }
            if conditions.get("Established") == "True":
                return
            time.sleep(0.5)
        raise AssertionError(f"{fixture}: the CRD is not Established")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    state = f"{os.environ.get(paths.TEST_CLUSTER_ENV) or 'e2e'}-volcano"
    layout = dev_cluster.Layout(paths.scratch_state_dir(state))
    dev_cluster.fresh(layout, NODES, NPUS, _progress, domains=DOMAINS)
    try:
        install_crd(layout.kubeconfig, with_cel=False, field_manager="e2e-volcano")
        c = Cluster(layout)
        c.run("create", "namespace", NAMESPACE)
        c.install_volcano_crd("podgroups-v1.15.1.yaml")
        log = tmp_path_factory.mktemp("volcano") / "operator.log"
        operator = Operator(layout.kubeconfig, NAMESPACE, log)
        try:
            yield c
        finally:
            operator.stop()
    finally:
        dev_cluster.down(layout, _progress, purge=True)


def deployment(name: str, tier: int) -> dict[str, Any]:
    """One 1-node prefill and one 1-node decode instance, ganged by Volcano, in one domain."""
    role = {"replicas": 1, "parallelism": {"tensor": NPUS}, "devicesPerNode": NPUS}
    return document(name, NAMESPACE, {
        "model": {"name": name, "path": "/models/m", "config": dict(CONFIG),
                  "volume": {"hostPath": {"path": "/data/models/m"}}},
        "runtime": {"image": "registry.example.com/ascend-pd-runtime:e2e"},
        "prefill": dict(role),
        "decode": dict(role),
        "router": {"enabled": False},
        "scheduling": {"gang": "volcano"},
        "placement": {"topologyKey": DOMAIN_LABEL, "scope": "Deployment",
                      "highestTierAllowed": tier},
    })  # fmt: skip


def test_podgroups_under_volcanos_crds(plane: Cluster, wait_until: Any) -> None:
    k = plane.run

    def gang_note(name: str) -> str:
        return str((status(k, NAMESPACE, name).get("placement") or {}).get("gang", ""))

    # 1. Volcano 1.15: one gang of the deployment, a subgroup per instance
    apply(k, [deployment("g", 2)])
    wait_until(lambda: "g-gang" in plane.podgroups(), "PodGroup g-gang", timeout=120)
    groups = plane.podgroups()
    assert sorted(groups) == ["g-gang"], sorted(groups)
    policy = [
        {"name": role, "labelSelector": {"matchLabels": {"ascendpd.io/deployment": "g",
                                                         "ascendpd.io/role": role}},
         "matchLabelKeys": ["ascendpd.io/instance"], "subGroupSize": 1, "minSubGroups": 1}
        for role in ("prefill", "decode")
    ]  # fmt: skip
    assert groups["g-gang"]["spec"] == {
        "minMember": 2,
        "minResources": {"huawei.com/Ascend910": "16"},
        "networkTopology": {"mode": "hard", "highestTierAllowed": 2},
        "subGroupPolicy": policy,
        "queue": "default",  # the CRD's default: nothing of ours pruned, nothing added
    }
    assert wait_until(lambda: gang_note("g"), "status.placement.gang of g").startswith(
        "new instances join PodGroup g-gang"
    )
    sts = plane.json("statefulsets", "-n", NAMESPACE, "-l", "ascendpd.io/deployment=g")
    names = {s["spec"]["template"]["metadata"]["annotations"]["scheduling.k8s.io/group-name"]
             for s in sts["items"]}  # fmt: skip
    assert names == {"g-gang"}, names
    k("delete", "pdd", "g", "-n", NAMESPACE, "--wait=true", "--timeout=120s")

    # 2. Volcano 1.13: no subgroups, so a PodGroup per instance, and the status says why
    plane.install_volcano_crd("podgroups-v1.13.3.yaml")
    apply(k, [deployment("h", 1)])
    wanted = ["h-decode-0", "h-prefill-0"]
    wait_until(lambda: sorted(plane.podgroups()) == wanted, "h's PodGroups", timeout=120)
    for name, group in plane.podgroups().items():
        assert group["spec"] == {
            "minMember": 1,
            "minResources": {"huawei.com/Ascend910": "8"},
            "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
            "queue": "default",
        }, name
    note = wait_until(lambda: gang_note("h"), "status.placement.gang of h")
    assert "has no spec.subGroupPolicy (Volcano before 1.14)" in note, note
