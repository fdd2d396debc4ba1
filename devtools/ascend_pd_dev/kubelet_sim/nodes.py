"""Node registration: the simulated Ascend nodes' Node objects, their readiness and heartbeat,
and the NoSchedule taint the node lifecycle controller would give a NotReady one.

``register_nodes`` creates nodes ``sim-ascend-0..N-1`` (deleting surplus simulated ones) and
keeps each one's labels and status. The labels are those a node of an Ascend cluster carries:
the MindCluster device plugin's chip labels and, with ``domains`` D > 0, a topology domain
(``DOMAIN_LABEL``: ``sp-<i mod D>``, so adding nodes never moves a node to another domain),
as a super-pod id label would place it. Status: a Ready node's heartbeat is refreshed every
``NODE_STATUS_REPORT_SECONDS``; the ``knobs.NOT_READY`` annotation (``testing.set_node_ready``)
makes it NotReady ("true") or unreachable ("unknown": conditions Unknown, heartbeat stopped).
"""

from __future__ import annotations

from typing import Any

from ascend_pd_dev.kubelet_sim import knobs
from ascend_pd_dev.kubelet_sim.objects import Obj, iso, list_items, log, parse_iso

SIM_LABEL = "ascend-pd.dev/simulated"
ASCEND_RESOURCE = "huawei.com/Ascend910"
NODE_PREFIX = "sim-ascend-"
#: the kubelet version a node reports when the API server's is not known (kubelet-sim
#: reports the API server's own, ``kubelet_version``)
KUBELET_VERSION = "v0.0.0-sim"
HOSTNAME_KEY = "kubernetes.io/hostname"
#: the simulated topology domain of a node (a super-pod), when kubelet-sim is given domains
DOMAIN_LABEL = "kubelet-sim.ascend-pd.dev/super-pod"

NODE_CAPACITY = {
    "cpu": "192",
    "memory": "1536Gi",
    "pods": "110",
    "ephemeral-storage": "2Ti",
}
#: how often a Ready (or NotReady but reachable) simulated node's heartbeat is refreshed
NODE_STATUS_REPORT_SECONDS = 60.0
#: what the node lifecycle controller writes when a kubelet stops posting status
UNREACHABLE_MESSAGE = "Kubelet stopped posting node status."
#: the NoSchedule taints of TaintNodesByCondition, by node readiness
NODE_TAINTS = {"False": "node.kubernetes.io/not-ready", "Unknown": "node.kubernetes.io/unreachable"}
NOTE = "ascend-pd kubelet-sim: binds and reports pods, never runs a container"


def node_name(index: int) -> str:
    return f"{NODE_PREFIX}{index}"


def node_ip(index: int) -> str:
    return f"127.0.1.{index + 1}"


def node_order(name: str) -> tuple[int, str]:
    """Sort key: simulated nodes by their number, any other node after them."""
    suffix = name.removeprefix(NODE_PREFIX)
    return (int(suffix), name) if suffix.isdigit() else (1 << 30, name)


def internal_ip(node: Obj) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address"))
    return "127.0.1.254"


def _healthy_conditions(timestamp: str) -> list[Obj]:
    conditions = [
        {"type": t, "status": "False", "reason": r, "message": NOTE,
         "lastHeartbeatTime": timestamp, "lastTransitionTime": timestamp}
        for t, r in (("MemoryPressure", "KubeletHasSufficientMemory"),
                     ("DiskPressure", "KubeletHasNoDiskPressure"),
                     ("PIDPressure", "KubeletHasSufficientPID"))
    ]  # fmt: skip
    conditions.append({
        "type": "Ready", "status": "True", "reason": "KubeletReady", "message": NOTE,
        "lastHeartbeatTime": timestamp, "lastTransitionTime": timestamp,
    })  # fmt: skip
    return conditions


def kubelet_version(server_git_version: str) -> str:
    """What a simulated node reports as its kubelet's version: the API server's release
    (``v1.36.3`` -> ``v1.36.3-sim``), as a cluster's kubelets of the same release would."""
    return f"{server_git_version}-sim" if server_git_version else KUBELET_VERSION


def _node_info(name: str, version: str) -> Obj:
    return {
        "kubeletVersion": version,
        "kubeProxyVersion": version,
        "containerRuntimeVersion": "none://kubelet-sim-runs-no-containers",
        "operatingSystem": "linux",
        "architecture": "amd64",
        "osImage": "ascend-pd kubelet-sim (simulated node, no containers)",
        "kernelVersion": "simulated",
        "machineID": name,
        "systemUUID": name,
        "bootID": name,
    }


def node_labels(index: int, ascend_per_node: int, domains: int = 0) -> dict[str, str]:
    """What simulated node ``index`` is labelled: the kubelet's, the MindCluster device
    plugin's (``accelerator``, ``accelerator-type``, ``node.kubernetes.io/npu.chip.name``,
    in their documented forms) and, with ``domains``, its domain."""
    name = node_name(index)
    labels = {
        SIM_LABEL: "true",
        HOSTNAME_KEY: name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "accelerator": "huawei-Ascend910",
        "accelerator-type": f"module-910b-{ascend_per_node}",
        "node.kubernetes.io/npu.chip.name": "910B3",
    }
    if domains > 0:
        labels[DOMAIN_LABEL] = f"sp-{index % domains}"
    return labels


def node_manifest(
    index: int,
    ascend_per_node: int,
    timestamp: str,
    owner: str = "",
    domains: int = 0,
    version: str = KUBELET_VERSION,
) -> Obj:
    """The Node object of simulated node ``index``, status included."""
    name = node_name(index)
    capacity = {**NODE_CAPACITY, ASCEND_RESOURCE: str(ascend_per_node)}
    labels = node_labels(index, ascend_per_node, domains)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        # which kubelet-sim process serves the node (its pid), so starters can wait for it
        "metadata": {"name": name, "labels": labels,
                     "annotations": {"ascend-pd.dev/note": NOTE, knobs.OWNER: owner}},
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": _healthy_conditions(timestamp),
            "addresses": [
                {"type": "InternalIP", "address": node_ip(index)},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": _node_info(name, version),
        },
    }  # fmt: skip


def node_readiness(node: Obj) -> str:
    """What the node's Ready condition should say: "True", "False" or "Unknown", from its
    ``knobs.NOT_READY`` annotation ("true": the kubelet reports NotReady; "unknown":
    unreachable)."""
    value = str((node.get("metadata", {}).get("annotations") or {}).get(knobs.NOT_READY, ""))
    value = value.strip().lower()
    if value in ("", "false"):
        return "True"
    return "Unknown" if value == "unknown" else "False"


def _condition_now(cond: Obj, old: Obj, readiness: str, timestamp: str) -> Obj:
    """One node condition as its kubelet (or, unreachable, the lifecycle controller) says it."""
    new = dict(cond)
    if readiness == "Unknown":
        new.update(status="Unknown", reason="NodeStatusUnknown", message=UNREACHABLE_MESSAGE,
                   lastHeartbeatTime=old.get("lastHeartbeatTime", timestamp))  # fmt: skip
    elif cond["type"] == "Ready" and readiness == "False":
        why = f"kubelet-sim: node made NotReady ({knobs.NOT_READY})"
        new.update(status="False", reason="KubeletNotReady", message=why)
    else:
        new["lastHeartbeatTime"] = timestamp
    same = old.get("status") == new["status"]
    new["lastTransitionTime"] = old.get("lastTransitionTime", timestamp) if same else timestamp
    return new


def _status_key(status: Obj) -> tuple[Any, ...]:
    conds = sorted((c.get("type"), c.get("status"), c.get("reason"))
                   for c in status.get("conditions") or [])  # fmt: skip
    return (status.get("allocatable"), tuple(conds))


def node_status(manifest_status: Obj, current: Obj, readiness: str, now: float) -> Obj | None:
    """The node status to write, or None when ``current`` needs no write.

    Ready and NotReady nodes have a live kubelet: its heartbeat (``lastHeartbeatTime``) is
    refreshed every ``NODE_STATUS_REPORT_SECONDS``. An unreachable node's conditions turn
    Unknown as the node lifecycle controller would write them (that controller is not run in
    the dev cluster) and its heartbeat stops.
    """
    timestamp = iso(now)
    previous = {c.get("type"): c for c in current.get("conditions") or []}
    conditions = [
        _condition_now(cond, previous.get(cond["type"]) or {}, readiness, timestamp)
        for cond in manifest_status["conditions"]
    ]
    wanted = {**manifest_status, "conditions": conditions}
    if _status_key(wanted) != _status_key(current):
        return wanted
    beat = parse_iso((previous.get("Ready") or {}).get("lastHeartbeatTime"))
    if readiness != "Unknown" and (beat is None or now - beat >= NODE_STATUS_REPORT_SECONDS):
        return wanted
    return None


def node_taints(current: list[Obj], readiness: str, timestamp: str) -> list[Obj]:
    """``current`` with the NoSchedule taint of the node's readiness, as the node lifecycle
    controller keeps them (the NoExecute ones, which evict, are not simulated)."""
    ours = set(NODE_TAINTS.values())
    kept = [t for t in current if t.get("key") not in ours]
    key = NODE_TAINTS.get(readiness)
    if key is None:
        return kept
    existing = [t for t in current if t.get("key") == key and t.get("effect") == "NoSchedule"]
    return [*kept, existing[0] if existing
            else {"key": key, "effect": "NoSchedule", "timeAdded": timestamp}]  # fmt: skip


def register_nodes(
    api: Any,
    count: int,
    ascend_per_node: int,
    owner: str,
    now: float,
    domains: int = 0,
    version: str = KUBELET_VERSION,
) -> list[Obj]:
    """Create or update nodes 0..count-1, delete surplus simulated nodes; return our nodes.

    A node's readiness follows its ``knobs.NOT_READY`` annotation, with the taint the node
    lifecycle controller would add; a Ready node's heartbeat is refreshed.
    """
    existing = {
        n["metadata"]["name"]: n
        for n in list_items(api.list_node, label_selector=f"{SIM_LABEL}=true")
    }
    wanted = {node_name(i): i for i in range(count)}
    for name in existing:
        if name not in wanted:
            log.info("deleting surplus simulated node %s", name)
            api.delete_node(name)
    result = []
    for name, index in wanted.items():
        manifest = node_manifest(index, ascend_per_node, iso(now), owner, domains, version)
        found = existing.get(name)
        if found is None:
            result.append(_create(api, manifest))
        else:
            result.append(_update(api, found, manifest, owner, now))
    return result


def _create(api: Any, manifest: Obj) -> Obj:
    from kubernetes.client.exceptions import ApiException

    name = manifest["metadata"]["name"]
    try:
        api.create_node(manifest, _preload_content=False)
    except ApiException as err:
        if err.status != 409:
            raise
    log.info("registered simulated node %s", name)
    api.patch_node_status(name, {"status": manifest["status"]}, _preload_content=False)
    return manifest


def _update(api: Any, found: Obj, manifest: Obj, owner: str, now: float) -> Obj:
    """Write what differs of an existing node: its owner, our labels, status and taints (a
    label someone else set, as an administrator would, is left alone)."""
    name = manifest["metadata"]["name"]
    meta: Obj = {}
    if (found["metadata"].get("annotations") or {}).get(knobs.OWNER) != owner:
        meta["annotations"] = {knobs.OWNER: owner}
    have = found["metadata"].get("labels") or {}
    ours = manifest["metadata"]["labels"]
    labels: dict[str, str | None] = {k: v for k, v in ours.items() if have.get(k) != v}
    if DOMAIN_LABEL in have and DOMAIN_LABEL not in ours:
        labels[DOMAIN_LABEL] = None
    if labels:
        meta["labels"] = labels
    if meta:
        api.patch_node(name, {"metadata": meta}, _preload_content=False)
        found = {**found, "metadata": {**found["metadata"], "labels": {
            k: v for k, v in {**have, **labels}.items() if v is not None}}}  # fmt: skip
    readiness = node_readiness(found)
    status = node_status(manifest["status"], found.get("status") or {}, readiness, now)
    if status is not None:
        old = next((c.get("status") for c in (found.get("status") or {}).get(
            "conditions") or [] if c.get("type") == "Ready"), None)  # fmt: skip
        if old != {"True": "True", "False": "False"}.get(readiness, "Unknown"):
            log.info("node %s: Ready=%s", name, readiness)
        api.patch_node_status(name, {"status": status}, _preload_content=False)
        found = {**found, "status": status}
    taints = found.get("spec", {}).get("taints") or []
    wanted_taints = node_taints(taints, readiness, iso(now))
    if wanted_taints != taints:
        # Node.spec.taints has no merge key: the list is replaced whole
        api.patch_node(name, {"spec": {"taints": wanted_taints or None}},
                       _preload_content=False)  # fmt: skip
        found = {**found, "spec": {**found.get("spec", {}), "taints": wanted_taints}}
    return found
