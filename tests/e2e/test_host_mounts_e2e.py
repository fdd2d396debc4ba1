"""spec.ascend.hostMounts on a real API server: a PDDeployment that asks for the node's
Ascend files gets runtime pods with those read-only hostPath mounts, and the router none;
dropping the entries rolls the instances back to pods without them."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pdd_e2e import Operator, get

from reliability.specs import pdd

pytestmark = [pytest.mark.simulated, pytest.mark.timeout(600)]

NAME = "hostfiles"
ENTRIES = [
    {"name": "firmware"},
    {"name": "hccnConf"},
    {"name": "npuSmi", "hostPath": "/usr/local/sbin/npu-smi"},
    {"name": "weak-dict", "hostPath": "/etc/hccn_weak_dict.conf", "type": "File"},
]
#: What the pods must carry, written out from the paths SGLang's recipe and the Ascend docs
#: give (not from the operator's table).
VOLUMES = [
    {"name": "ascend-firmware",
     "hostPath": {"path": "/usr/local/Ascend/firmware", "type": "Directory"}},
    {"name": "ascend-hccn-conf", "hostPath": {"path": "/etc/hccn.conf", "type": "File"}},
    {"name": "ascend-npu-smi", "hostPath": {"path": "/usr/local/sbin/npu-smi", "type": "File"}},
    {"name": "host-weak-dict", "hostPath": {"path": "/etc/hccn_weak_dict.conf", "type": "File"}},
]  # fmt: skip
MOUNTS = [
    {"name": "ascend-firmware", "mountPath": "/usr/local/Ascend/firmware", "readOnly": True},
    {"name": "ascend-hccn-conf", "mountPath": "/etc/hccn.conf", "readOnly": True},
    {"name": "ascend-npu-smi", "mountPath": "/usr/local/sbin/npu-smi", "readOnly": True},
    {"name": "host-weak-dict", "mountPath": "/etc/hccn_weak_dict.conf", "readOnly": True},
]


def _apply(kubectl: Any, doc: dict[str, Any]) -> None:
    kubectl("apply", "--validate=false", "-f", "-", input=yaml.safe_dump(doc))


def _ready_pods(kubectl: Any, namespace: str, want: int) -> list[dict[str, Any]] | None:
    """The runtime pods once the deployment is Ready at its generation with ``want`` of
    them, none being deleted."""
    cr = get(kubectl, namespace, "pdd", NAME) or {}
    st = cr.get("status") or {}
    if st.get("observedGeneration") != cr.get("metadata", {}).get("generation"):
        return None
    if st.get("phase") != "Ready":
        return None
    found = get(kubectl, namespace, "pods", "-l", f"ascendpd.io/deployment={NAME},ascendpd.io/role")
    pods = (found or {}).get("items", [])
    if len(pods) != want or any(p["metadata"].get("deletionTimestamp") for p in pods):
        return None
    return pods


def _host_files(pod: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """The pod's volumes and its container's mounts that are ascend-* or host-*, but the
    driver's."""

    def ours(name: str) -> bool:
        return name.startswith(("ascend-", "host-")) and name != "ascend-driver"

    spec = pod["spec"]
    volumes = [v for v in spec["volumes"] if ours(v["name"])]
    mounts = [m for m in spec["containers"][0]["volumeMounts"] if ours(m["name"])]
    return volumes, mounts


def test_the_entries_reach_every_runtime_pod_and_leave_with_them(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    doc = pdd(NAME, namespace, host_network=True)
    doc["spec"].setdefault("ascend", {})["hostMounts"] = ENTRIES
    _apply(kubectl, doc)
    pods = wait_until(lambda: _ready_pods(kubectl, namespace, 3), f"{NAME} Ready")
    uids = {p["metadata"]["uid"] for p in pods}
    for pod in pods:
        assert _host_files(pod) == (VOLUMES, MOUNTS), pod["metadata"]["name"]
        names = [v["name"] for v in pod["spec"]["volumes"]]
        # the operator's own are still there, before the entries
        assert names[:4] == ["model", "dshm", "ascend-driver", "kv-layout"], names
    routers = get(kubectl, namespace, "pods", "-l",
                  f"ascendpd.io/deployment={NAME},app.kubernetes.io/component=router")  # fmt: skip
    for router in (routers or {}).get("items", []):
        assert all("hostPath" not in v for v in router["spec"].get("volumes", [])), router

    doc["spec"]["ascend"]["hostMounts"] = []
    _apply(kubectl, doc)

    def rolled() -> list[dict[str, Any]] | None:
        pods = _ready_pods(kubectl, namespace, 3)
        if pods is None or {p["metadata"]["uid"] for p in pods} & uids:
            return None
        return pods

    for pod in wait_until(rolled, f"{NAME} rolled without the entries"):
        assert _host_files(pod) == ([], []), pod["metadata"]["name"]
