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

The API server prunes a field the CRD does not know instead of refusing it (the operator asks
for no strict field validation): each stored PodGroup spec is compared whole with what the
operator sends (plus the CRD's defaults), so a misspelled or unknown field would show as
missing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from own_plane import NPUS, Plane, own_plane, small_spec
from pdd_e2e import apply, status

from ascend_pd_dev.kubelet_sim.nodes import DOMAIN_LABEL

pytestmark = [pytest.mark.local, pytest.mark.timeout(600)]

NODES = 4
NAMESPACE = "volcano"
CRDS = Path(__file__).resolve().parents[1] / "unit" / "operator" / "fixtures" / "volcano"
PODGROUP_CRD = "podgroups.scheduling.volcano.sh"


def podgroups(plane: Plane) -> dict[str, Any]:
    return plane.named(PODGROUP_CRD)


def install_volcano_crd(plane: Plane, fixture: str) -> None:
    """Replace the PodGroup CRD with ``fixture``'s and wait until it is Established."""
    plane.run("delete", "crd", PODGROUP_CRD, "--ignore-not-found", "--wait=true")
    plane.run("create", "-f", str(CRDS / fixture))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        crd = plane.json("crd", PODGROUP_CRD)
        conditions = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
        if conditions.get("Established") == "True":
            return
        time.sleep(0.5)
    raise AssertionError(f"{fixture}: the CRD is not Established")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    def prepare(plane: Plane) -> None:
        install_volcano_crd(plane, "podgroups-v1.15.1.yaml")

    log_dir = tmp_path_factory.mktemp(NAMESPACE)
    with own_plane(NAMESPACE, NODES, log_dir, prepare=prepare) as plane:
        yield plane


def deployment(name: str, tier: int) -> dict[str, Any]:
    """One 1-node prefill and one 1-node decode instance, ganged by Volcano, in one domain."""
    role = {"replicas": 1, "parallelism": {"tensor": NPUS}, "devicesPerNode": NPUS}
    return small_spec(
        name, NAMESPACE, dict(role), dict(role),
        scheduling={"gang": "volcano"},
        placement={"topologyKey": DOMAIN_LABEL, "scope": "Deployment",
                   "highestTierAllowed": tier},
    )  # fmt: skip


def test_podgroups_under_volcanos_crds(plane: Plane, wait_until: Any) -> None:
    k = plane.run

    def gang_note(name: str) -> str:
        return str((status(k, NAMESPACE, name).get("placement") or {}).get("gang", ""))

    # 1. Volcano 1.15: one gang of the deployment, a subgroup per instance
    apply(k, [deployment("g", 2)])
    wait_until(lambda: "g-gang" in podgroups(plane), "PodGroup g-gang", timeout=120)
    groups = podgroups(plane)
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
    install_volcano_crd(plane, "podgroups-v1.13.3.yaml")
    apply(k, [deployment("h", 1)])
    wanted = ["h-decode-0", "h-prefill-0"]
    wait_until(lambda: sorted(podgroups(plane)) == wanted, "h's PodGroups", timeout=120)
    for name, group in podgroups(plane).items():
        assert group["spec"] == {
            "minMember": 1,
            "minResources": {"huawei.com/Ascend910": "8"},
            "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
            "queue": "default",
        }, name
    note = wait_until(lambda: gang_note("h"), "status.placement.gang of h")
    assert "has no spec.subGroupPolicy (Volcano before 1.14)" in note, note
