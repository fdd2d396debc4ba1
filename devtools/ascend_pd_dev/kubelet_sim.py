"""kubelet-sim: simulated Ascend nodes for the dev cluster. It never runs a container.

The dev cluster has no container runtime and no NPUs, yet the operator's StatefulSets, readiness
and status aggregation deserve a real API server and real controllers. kubelet-sim stands in
for the scheduler and the kubelets of N Ascend nodes, and does only what those do to API objects:

- registers Node objects ``sim-ascend-<i>`` with ``huawei.com/Ascend910`` capacity (8 by
  default), labelled ``ascend-pd.dev/simulated=true``, kubelet version ``v1.20.2-sim``;
- binds each pending pod (default scheduler) to the first node where it fits (recording the
  ``Scheduled``/``FailedScheduling`` events a scheduler would): its requests
  (cpu, memory, pods, ``huawei.com/Ascend910``, any resource) against what the node has left,
  its ``nodeSelector``, required node affinity and required pod anti-affinity on
  ``kubernetes.io/hostname``; a pod that fits nowhere stays Pending with condition
  ``PodScheduled=False, reason=Unschedulable`` saying why;
- reports every bound pod Running and Ready with a loopback pod IP (127.1.0.1 and up; a
  ``hostNetwork`` pod gets its node's 127.0.1.x; no traffic is ever sent to any of them), and
  removes pods being deleted (grace period 0).

A pod (or its template) chooses what the simulated containers do with the annotation
``kubelet-sim.ascend-pd.dev/outcome`` (read every cycle, so tests may change it on a live pod):

- ``ready`` (default): Running, every container running and ready;
- ``unready``: Running, containers running but not ready (a failing readiness probe);
- ``crash``: Running, containers waiting in ``CrashLoopBackOff``, not ready;
- ``succeed``: Succeeded, containers terminated with exit code 0;
- ``fail``: Failed, containers terminated with exit code 1.

A pod that would run to completion (a Job's, a helm test hook) also stays Running until its
annotation says ``succeed`` or ``fail``: kubelet-sim cannot know how a container would end, so
it never invents a success; a test runs the real work itself and then reports the outcome.

One real step, for pods that ask (``kubelet-sim.ascend-pd.dev/run-launch-check: "true"`` on
the pod or its namespace): a container whose command is ``ascend-pd-runtime launch`` gets the
launcher's pre-exec check run on this machine in a local runtime registered for its image
(``--local-runtimes``), and its exit is reported as a kubelet would (``launch_check``,
``launch_check_runs``). Nothing else of it runs: exit 0 leaves the container "running".

Succeeded and Failed are final, as with a real kubelet. ``kubectl logs``/``exec`` cannot work:
there is no container. Run it as ``python -m ascend_pd_dev.kubelet_sim --kubeconfig
PATH`` (``ascend-pd-dev cluster up`` does), or drive ``Simulator.step()`` from Python.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from ascend_pd_dev import launch_check, launch_check_runs

SIM_LABEL = "ascend-pd.dev/simulated"
OUTCOME_ANNOTATION = "kubelet-sim.ascend-pd.dev/outcome"
OWNER_ANNOTATION = "kubelet-sim.ascend-pd.dev/pid"
OUTCOMES = ("ready", "unready", "crash", "succeed", "fail")
ASCEND_RESOURCE = "huawei.com/Ascend910"
NODE_PREFIX = "sim-ascend-"
SCHEDULER_NAME = "default-scheduler"
KUBELET_VERSION = "v1.20.2-sim"
HOSTNAME_KEY = "kubernetes.io/hostname"
#: pod IPs come from here; node IPs from 127.0.1.0/24
POD_IP_FIRST = ipaddress.IPv4Address("127.1.0.1")
POD_IP_LAST = ipaddress.IPv4Address("127.254.255.254")

NODE_CAPACITY = {
    "cpu": "192",
    "memory": "1536Gi",
    "pods": "110",
    "ephemeral-storage": "2Ti",
}

Obj = dict[str, Any]
log = logging.getLogger("kubelet-sim")


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- nodes


def node_name(index: int) -> str:
    return f"{NODE_PREFIX}{index}"


def node_ip(index: int) -> str:
    return f"127.0.1.{index + 1}"


def node_manifest(index: int, ascend_per_node: int, timestamp: str, owner: str = "") -> Obj:
    """The Node object of simulated node ``index``, status included."""
    name = node_name(index)
    capacity = {**NODE_CAPACITY, ASCEND_RESOURCE: str(ascend_per_node)}
    note = "ascend-pd kubelet-sim: binds and reports pods, never runs a container"
    conditions = [
        {"type": t, "status": "False", "reason": r, "message": note,
         "lastHeartbeatTime": timestamp, "lastTransitionTime": timestamp}
        for t, r in (("MemoryPressure", "KubeletHasSufficientMemory"),
                     ("DiskPressure", "KubeletHasNoDiskPressure"),
                     ("PIDPressure", "KubeletHasSufficientPID"))
    ]  # fmt: skip
    conditions.append({
        "type": "Ready", "status": "True", "reason": "KubeletReady", "message": note,
        "lastHeartbeatTime": timestamp, "lastTransitionTime": timestamp,
    })  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                SIM_LABEL: "true",
                HOSTNAME_KEY: name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "accelerator": "huawei-Ascend910",
            },
            # which kubelet-sim process serves the node (its pid), so starters can wait for it
            "annotations": {"ascend-pd.dev/note": note, OWNER_ANNOTATION: owner},
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": node_ip(index)},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "containerRuntimeVersion": "none://kubelet-sim-runs-no-containers",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "osImage": "ascend-pd kubelet-sim (simulated node, no containers)",
                "kernelVersion": "simulated",
                "machineID": name,
                "systemUUID": name,
                "bootID": name,
            },
        },
    }


# --------------------------------------------------------------------------- resources


def parse_quantity(value: str | int | float) -> Decimal:
    """A Kubernetes quantity (``"500m"``, ``"2Gi"``, ``8``) as a Decimal of base units."""
    from kubernetes import utils

    parsed: Decimal = utils.parse_quantity(value)  # type: ignore[no-untyped-call]
    return Decimal(parsed)


def _add(total: dict[str, Decimal], resources: Mapping[str, Any]) -> None:
    for name, value in resources.items():
        total[name] = total.get(name, Decimal(0)) + parse_quantity(value)


def pod_requests(pod: Obj) -> dict[str, Decimal]:
    """Effective requests: sum over containers (a missing request defaults to the limit, as the
    API server does for extended resources), at least each init container's, plus one pod."""
    spec = pod.get("spec", {})

    def container_requests(container: Obj) -> dict[str, Decimal]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        out: dict[str, Decimal] = {}
        _add(out, merged)
        return out

    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for name, value in container_requests(container).items():
            total[name] = total.get(name, Decimal(0)) + value
    for container in spec.get("initContainers") or []:
        for name, value in container_requests(container).items():
            total[name] = max(total.get(name, Decimal(0)), value)
    total["pods"] = total.get("pods", Decimal(0)) + 1
    return total


def is_terminal(pod: Obj) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def node_used(pods: Iterable[Obj], name: str) -> dict[str, Decimal]:
    used: dict[str, Decimal] = {}
    for pod in pods:
        if pod.get("spec", {}).get("nodeName") == name and not is_terminal(pod):
            for resource, value in pod_requests(pod).items():
                used[resource] = used.get(resource, Decimal(0)) + value
    return used


# --------------------------------------------------------------------------- placement


def _match_expression(labels: Mapping[str, str], expr: Obj) -> bool:
    key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        try:
            have, want = int(labels[key]), int(values[0])
        except (KeyError, IndexError, ValueError):
            return False
        return have > want if op == "Gt" else have < want
    return False


def label_selector_matches(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector; an empty selector matches everything, a missing one nothing."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(_match_expression(labels, e) for e in selector.get("matchExpressions") or [])


def node_selection_ok(pod: Obj, node: Obj) -> bool:
    """nodeSelector and required node affinity."""
    labels = node.get("metadata", {}).get("labels") or {}
    spec = pod.get("spec", {})
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    # terms are ORed, expressions within a term ANDed
    return any(
        all(_match_expression(labels, e) for e in term.get("matchExpressions") or [])
        for term in terms
    )


def anti_affinity_ok(pod: Obj, node: Obj, pods: Iterable[Obj]) -> bool:
    """Required pod anti-affinity with topology key ``kubernetes.io/hostname``."""
    terms = ((pod.get("spec", {}).get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or []
    name = node["metadata"]["name"]
    namespace = pod["metadata"].get("namespace", "default")
    for term in terms:
        if term.get("topologyKey") != HOSTNAME_KEY:
            continue
        namespaces = term.get("namespaces") or [namespace]
        for other in pods:
            meta = other.get("metadata", {})
            if (
                other.get("spec", {}).get("nodeName") == name
                and not is_terminal(other)
                and meta.get("uid") != pod["metadata"].get("uid")
                and meta.get("namespace") in namespaces
                and label_selector_matches(term.get("labelSelector"), meta.get("labels") or {})
            ):
                return False
    return True


def unfit_reasons(pod: Obj, node: Obj, pods: list[Obj]) -> list[str]:
    """Why ``pod`` cannot go to ``node`` (empty when it fits)."""
    if node.get("spec", {}).get("unschedulable"):
        return ["node is cordoned"]
    if not node_selection_ok(pod, node):
        return ["node(s) didn't match node selector/affinity"]
    if not anti_affinity_ok(pod, node, pods):
        return ["node(s) didn't match pod anti-affinity rules"]
    allocatable = {
        k: parse_quantity(v) for k, v in (node.get("status", {}).get("allocatable") or {}).items()
    }
    used = node_used(pods, node["metadata"]["name"])
    reasons = []
    for resource, wanted in sorted(pod_requests(pod).items()):
        if wanted <= 0:
            continue
        if used.get(resource, Decimal(0)) + wanted > allocatable.get(resource, Decimal(0)):
            reasons.append(f"Insufficient {resource}")
    return reasons


def choose_node(pod: Obj, nodes: list[Obj], pods: list[Obj]) -> tuple[str | None, str]:
    """The first node (by name order) where ``pod`` fits, or None and a scheduler-style message."""
    counts: dict[str, int] = {}
    for node in sorted(nodes, key=lambda n: _node_order(n["metadata"]["name"])):
        reasons = unfit_reasons(pod, node, pods)
        if not reasons:
            return node["metadata"]["name"], ""
        for reason in reasons:
            counts[reason] = counts.get(reason, 0) + 1
    details = ", ".join(f"{n} {r}" for r, n in sorted(counts.items()))
    return None, f"0/{len(nodes)} nodes are available: {details}."


def _node_order(name: str) -> tuple[int, str]:
    suffix = name.removeprefix(NODE_PREFIX)
    return (int(suffix), name) if suffix.isdigit() else (1 << 30, name)


# --------------------------------------------------------------------------- pod status


def outcome_of(pod: Obj) -> str:
    annotations = pod.get("metadata", {}).get("annotations") or {}
    return str(annotations.get(OUTCOME_ANNOTATION, "ready"))


def _condition(
    kind: str, status: bool, timestamp: str, reason: str | None = None, message: str | None = None
) -> Obj:
    cond: Obj = {"type": kind, "status": "True" if status else "False",
                 "lastProbeTime": None, "lastTransitionTime": timestamp}  # fmt: skip
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def desired_status(
    pod: Obj,
    host_ip: str,
    pod_ip: str,
    timestamp: str,
    checked: Mapping[str, launch_check_runs.View] | None = None,
) -> Obj:
    """The status a kubelet would report for ``pod`` under its outcome annotation.

    ``checked``: the containers whose launcher check kubelet-sim runs (``launch_check_runs``),
    by name; their state comes from the check while the pod would be Running.
    Times already in the pod's status are kept, so an unchanged pod yields an unchanged status.
    """
    checked = checked or {}
    current = pod.get("status") or {}
    start = current.get("startTime") or timestamp
    outcome = outcome_of(pod)
    containers = pod.get("spec", {}).get("containers") or []
    init_containers = pod.get("spec", {}).get("initContainers") or []
    previous = {c.get("name"): c for c in current.get("containerStatuses") or []}

    def started_at(name: str) -> str:
        state = (previous.get(name) or {}).get("state") or {}
        for value in state.values():
            if isinstance(value, dict) and value.get("startedAt"):
                return str(value["startedAt"])
        return start

    phase, ready, reason, message = "Running", True, None, None
    if outcome == "unready":
        ready, reason = False, "ContainersNotReady"
        message = "kubelet-sim: outcome 'unready' (a failing readiness probe)"
    elif outcome == "crash":
        ready, reason = False, "ContainersNotReady"
        message = "kubelet-sim: outcome 'crash' (containers in CrashLoopBackOff)"
    elif outcome == "succeed":
        phase, ready, reason = "Succeeded", False, "PodCompleted"
    elif outcome == "fail":
        phase, ready, reason = "Failed", False, "PodFailed"
    elif outcome != "ready":
        phase, ready, reason = "Failed", False, "InvalidSimulatedOutcome"
        message = (
            f"kubelet-sim: annotation {OUTCOME_ANNOTATION}={outcome!r} is not one of "
            f"{', '.join(OUTCOMES)}"
        )

    def container_status(container: Obj) -> Obj:
        name = container.get("name", "")
        view = checked.get(name) if runs_checks else None
        if view is not None:
            entry = {
                "name": name,
                "image": container.get("image", ""),
                "imageID": f"kubelet-sim://{container.get('image', '')}",
                "containerID": f"kubelet-sim://{pod['metadata'].get('uid', '')}/{name}",
                "ready": view.ready and outcome_ready,
                "started": view.started,
                "restartCount": view.restart_count,
                "state": view.state,
            }
            if view.last_state:
                entry["lastState"] = view.last_state
            return entry
        state: Obj
        if phase == "Succeeded":
            state = {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": started_at(name),
                    "finishedAt": timestamp,
                }
            }
        elif phase == "Failed":
            state = {
                "terminated": {
                    "exitCode": 1,
                    "reason": "Error",
                    "startedAt": started_at(name),
                    "finishedAt": timestamp,
                }
            }
        elif outcome == "crash":
            state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": "kubelet-sim: simulated crash loop",
                }
            }
        else:
            state = {"running": {"startedAt": started_at(name)}}
        restarts = int((previous.get(name) or {}).get("restartCount", 0))
        if outcome == "crash":
            restarts = max(restarts, 1)
        return {
            "name": name,
            "image": container.get("image", ""),
            "imageID": f"kubelet-sim://{container.get('image', '')}",
            "containerID": f"kubelet-sim://{pod['metadata'].get('uid', '')}/{name}",
            "ready": ready and phase == "Running",
            "started": phase == "Running" and outcome != "crash",
            "restartCount": restarts,
            "state": state,
        }

    # the checked containers' state counts while the outcome says the pod runs
    runs_checks, outcome_ready = phase == "Running", ready
    pod_message = message
    views = [checked[c.get("name", "")] for c in containers if c.get("name", "") in checked]
    if runs_checks and views and len(views) == len(containers) and all(v.final for v in views):
        # every container ended for good (restart policy Never): so does the pod
        phase, ready, reason, message = "Failed", False, "PodFailed", None
        pod_message = "kubelet-sim: the launcher check failed (restart policy Never)"
    elif runs_checks and ready and not all(v.ready for v in views):
        waiting = [n for c in containers
                   if (n := c.get("name", "")) in checked and not checked[n].ready]  # fmt: skip
        ready, reason = False, "ContainersNotReady"
        message = f"containers with unready status: [{' '.join(waiting)}]"

    status: Obj = {
        "phase": phase,
        "hostIP": host_ip,
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": start,
        "qosClass": current.get("qosClass", "BestEffort"),
        "conditions": [
            _condition("Initialized", True, start),
            _condition("Ready", ready, timestamp, None if ready else reason, message),
            _condition("ContainersReady", ready, timestamp, None if ready else reason, message),
            _condition("PodScheduled", True, start),
        ],
        "containerStatuses": [container_status(c) for c in containers],
    }
    if init_containers:
        status["initContainerStatuses"] = [
            {
                "name": c.get("name", ""),
                "image": c.get("image", ""),
                "imageID": f"kubelet-sim://{c.get('image', '')}",
                "containerID": f"kubelet-sim://{pod['metadata'].get('uid', '')}/{c.get('name')}",
                "ready": True,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                         "startedAt": start, "finishedAt": start}},
            }
            for c in init_containers
        ]  # fmt: skip
    if phase != "Running" or pod_message:
        status["reason"] = reason
        status["message"] = pod_message or f"kubelet-sim: outcome {outcome!r}"
    return status


def status_signature(status: Obj) -> tuple[Any, ...]:
    """What decides whether a pod's status must be written (timestamps excluded)."""
    conditions = tuple(sorted(
        (c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or []
    ))  # fmt: skip

    def state_key(state: Obj | None) -> tuple[Any, ...]:
        return tuple(sorted((kind, (body or {}).get("reason"), (body or {}).get("exitCode"))
                            for kind, body in (state or {}).items()))  # fmt: skip

    containers = tuple(
        (c.get("name"), c.get("ready"), state_key(c.get("state")), state_key(c.get("lastState")),
         c.get("restartCount"), c.get("image"))
        for c in status.get("containerStatuses") or []
    )  # fmt: skip
    return (status.get("phase"), status.get("podIP"), status.get("hostIP"), conditions,
            containers, status.get("message"))  # fmt: skip


class IpPool:
    """Unique loopback pod IPs; addresses of live pods are recovered after a restart."""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.next = POD_IP_FIRST

    def reserve(self, ip: str) -> None:
        self.used.add(ip)

    def release(self, ip: str) -> None:
        self.used.discard(ip)

    def allocate(self) -> str:
        span = int(POD_IP_LAST) - int(POD_IP_FIRST) + 1
        for _ in range(span):
            candidate = str(self.next)
            self.next = self.next + 1 if self.next < POD_IP_LAST else POD_IP_FIRST
            if candidate not in self.used and not candidate.endswith((".0", ".255")):
                self.used.add(candidate)
                return candidate
        raise RuntimeError("kubelet-sim: pod IP range exhausted")


# --------------------------------------------------------------------------- the loop


@dataclass
class Simulator:
    """One simulated scheduler plus ``nodes`` simulated kubelets against one API server."""

    api: Any  # kubernetes.client.CoreV1Api
    nodes: int = 8
    ascend_per_node: int = 8
    owner: str = field(default_factory=lambda: str(os.getpid()))
    ips: IpPool = field(default_factory=IpPool)
    #: where local runtimes are registered (``launch_check``); None: no image is local
    runtimes_dir: Path | None = None
    _unschedulable: dict[str, str] = field(default_factory=dict)
    _checks: launch_check_runs.LaunchChecks | None = None

    @property
    def checks(self) -> launch_check_runs.LaunchChecks:
        if self._checks is None:
            self._checks = launch_check_runs.LaunchChecks(self.runtimes_dir)
        return self._checks

    def close(self) -> None:
        if self._checks is not None:
            self._checks.shutdown()

    def _list(self, call: Any, **kwargs: Any) -> list[Obj]:
        response = call(_preload_content=False, **kwargs)
        items: list[Obj] = json.loads(response.data).get("items", [])
        return items

    def ensure_nodes(self) -> list[Obj]:
        """Create or update nodes 0..N-1, delete surplus simulated nodes; return our nodes."""
        from kubernetes.client.exceptions import ApiException

        existing = {
            n["metadata"]["name"]: n
            for n in self._list(self.api.list_node, label_selector=f"{SIM_LABEL}=true")
        }
        wanted = {node_name(i): i for i in range(self.nodes)}
        for name in existing:
            if name not in wanted:
                log.info("deleting surplus simulated node %s", name)
                self.api.delete_node(name)
        result = []
        for name, index in wanted.items():
            manifest = node_manifest(index, self.ascend_per_node, now_iso(), self.owner)
            found = existing.get(name)
            if found is None:
                try:
                    self.api.create_node(manifest, _preload_content=False)
                except ApiException as err:
                    if err.status != 409:
                        raise
                log.info("registered simulated node %s", name)
                self.api.patch_node_status(
                    name, {"status": manifest["status"]}, _preload_content=False
                )
                result.append(manifest)
                continue
            annotations = found["metadata"].get("annotations") or {}
            if annotations.get(OWNER_ANNOTATION) != self.owner:
                patch = {"metadata": {"annotations": {OWNER_ANNOTATION: self.owner}}}
                self.api.patch_node(name, patch, _preload_content=False)
            status = found.get("status") or {}
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in status.get("conditions") or [])  # fmt: skip
            if status.get("allocatable") != manifest["status"]["allocatable"] or not ready:
                self.api.patch_node_status(
                    name, {"status": manifest["status"]}, _preload_content=False
                )
                found = {**found, "status": manifest["status"]}
            result.append(found)
        return result

    def step(self) -> None:
        """One reconcile cycle over all nodes and pods."""
        nodes = self.ensure_nodes()
        names = {n["metadata"]["name"] for n in nodes}
        pods = self._list(self.api.list_pod_for_all_namespaces)
        node_ips = {n["metadata"]["name"]: _internal_ip(n) for n in nodes}
        # the addresses in use are those of live pods: a restarted simulator recovers them
        self.ips.used = {
            ip
            for pod in pods
            if (ip := (pod.get("status") or {}).get("podIP"))
            and pod.get("spec", {}).get("nodeName") in names
            and not is_terminal(pod)
            and not pod.get("spec", {}).get("hostNetwork")
        }
        pending = sorted(
            (p for p in pods if not p.get("spec", {}).get("nodeName")
             and not p["metadata"].get("deletionTimestamp")
             and (p.get("spec", {}).get("schedulerName") or SCHEDULER_NAME) == SCHEDULER_NAME),
            key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]),
        )  # fmt: skip
        pending_keys = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pending}
        for key in set(self._unschedulable) - pending_keys:
            del self._unschedulable[key]
        for pod in pending:
            self._schedule(pod, nodes, pods)
        asking = self._pods_asking_for_checks(pods, names)
        cluster = self._cluster_view(pods)
        for pod in pods:
            node = pod.get("spec", {}).get("nodeName")
            if node in names:
                asked = pod["metadata"].get("uid") in asking
                self._sync_pod(pod, node_ips[node], cluster if asked else None)
            elif node and node.startswith(NODE_PREFIX) and node not in names:
                # bound to a simulated node that no longer exists: nothing will run it
                self._delete_pod(pod)
        if self._checks is not None:
            self._checks.forget(asking)
            events, self._checks.events = self._checks.events, []
            for pod, kind, reason, message in events:
                self._event(pod, kind, reason, message)

    def _pods_asking_for_checks(self, pods: list[Obj], names: set[str]) -> set[str]:
        """Uids of our live pods with a launcher container that ask for its check."""
        candidates = [
            p for p in pods
            if p.get("spec", {}).get("nodeName") in names and not is_terminal(p)
            and not p["metadata"].get("deletionTimestamp")
            and any(launch_check.is_launcher(c) for c in p.get("spec", {}).get("containers") or [])
        ]  # fmt: skip
        if not candidates:
            return set()
        namespaces = {
            n["metadata"]["name"]: n["metadata"].get("annotations") or {}
            for n in self._list(self.api.list_namespace)
        }
        return {
            str(p["metadata"].get("uid"))
            for p in candidates
            if launch_check.asks_for_check(p, namespaces.get(p["metadata"]["namespace"], {}))
        }

    def _cluster_view(self, pods: list[Obj]) -> launch_check.Cluster:
        """Reads the launcher check needs: ConfigMaps, Secrets, Services (404: None)."""
        from kubernetes.client.exceptions import ApiException

        def reader(call: Any) -> Any:
            def read(namespace: str, name: str) -> Obj | None:
                try:
                    response = call(name, namespace, _preload_content=False)
                except ApiException as err:
                    if err.status == 404:
                        return None
                    raise
                found: Obj = json.loads(response.data)
                return found

            return read

        return launch_check.Cluster(
            config_map=reader(self.api.read_namespaced_config_map),
            secret=reader(self.api.read_namespaced_secret),
            service=reader(self.api.read_namespaced_service),
            pods=pods,
        )

    def _schedule(self, pod: Obj, nodes: list[Obj], pods: list[Obj]) -> None:
        from kubernetes.client.exceptions import ApiException

        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        chosen, message = choose_node(pod, nodes, pods)
        if chosen is None:
            if self._unschedulable.get(key) != message:
                self._unschedulable[key] = message
                log.info("cannot place %s: %s", key, message)
                self._event(pod, "Warning", "FailedScheduling", message)
                body = {"status": {"conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": message, "lastProbeTime": None,
                    "lastTransitionTime": now_iso(),
                }]}}  # fmt: skip
                try:
                    self.api.patch_namespaced_pod_status(
                        meta["name"], meta["namespace"], body, _preload_content=False
                    )
                except ApiException as err:
                    if err.status not in (404, 409):
                        raise
            return
        self._unschedulable.pop(key, None)
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                         "uid": meta.get("uid")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": chosen},
        }  # fmt: skip
        try:
            self.api.create_namespaced_pod_binding(
                meta["name"], meta["namespace"], binding, _preload_content=False
            )
        except ApiException as err:
            if err.status in (404, 409):  # deleted or already bound meanwhile
                return
            raise
        log.info("bound %s to %s", key, chosen)
        self._event(pod, "Normal", "Scheduled", f"Successfully assigned {key} to {chosen}")
        # later pods of this cycle must see the capacity this one takes
        pod.setdefault("spec", {})["nodeName"] = chosen

    def _event(self, pod: Obj, kind: str, reason: str, message: str) -> None:
        """Record what a scheduler would (``kubectl describe pod`` shows it); best effort."""
        from kubernetes.client.exceptions import ApiException

        meta = pod["metadata"]
        timestamp = now_iso()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta.get("uid")},
            "type": kind,
            "reason": reason,
            "message": message,
            "source": {"component": "kubelet-sim"},
            "firstTimestamp": timestamp,
            "lastTimestamp": timestamp,
            "count": 1,
        }  # fmt: skip
        try:
            self.api.create_namespaced_event(meta["namespace"], event, _preload_content=False)
        except ApiException as err:
            log.warning("event %s for %s/%s not recorded: %s", reason, meta["namespace"],
                        meta["name"], err.reason)  # fmt: skip

    def _sync_pod(
        self, pod: Obj, host_ip: str, cluster: launch_check.Cluster | None = None
    ) -> None:
        """Report ``pod``'s status; with ``cluster``, run its launcher check (it asked)."""
        from kubernetes.client.exceptions import ApiException

        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            self._delete_pod(pod)
            return
        if is_terminal(pod):
            return
        current = pod.get("status") or {}
        if pod.get("spec", {}).get("hostNetwork"):
            pod_ip = host_ip  # host-network pods share their node's address
        else:
            pod_ip = current.get("podIP") or self.ips.allocate()
        views = {}
        if cluster is not None and outcome_of(pod) in ("ready", "unready"):
            views = self.checks.views(pod, pod_ip, host_ip, cluster, asked=True)
        wanted = desired_status(pod, host_ip, pod_ip, now_iso(), views)
        if status_signature(wanted) == status_signature(current):
            return
        try:
            self.api.patch_namespaced_pod_status(
                meta["name"], meta["namespace"], {"status": wanted}, _preload_content=False
            )
        except ApiException as err:
            if err.status not in (404, 409):
                raise
            return
        log.info(
            "%s/%s -> %s ready=%s ip=%s",
            meta["namespace"],
            meta["name"],
            wanted["phase"],
            wanted["conditions"][1]["status"],
            pod_ip,
        )

    def _delete_pod(self, pod: Obj) -> None:
        from kubernetes.client.exceptions import ApiException

        meta = pod["metadata"]
        ip = (pod.get("status") or {}).get("podIP")
        try:
            self.api.delete_namespaced_pod(
                meta["name"], meta["namespace"], grace_period_seconds=0,
                body={"preconditions": {"uid": meta.get("uid")}, "gracePeriodSeconds": 0},
                _preload_content=False,
            )  # fmt: skip
        except ApiException as err:
            if err.status not in (404, 409):
                raise
        if ip:
            self.ips.release(ip)
        log.info("removed %s/%s", meta["namespace"], meta["name"])


def _internal_ip(node: Obj) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address"))
    return "127.0.1.254"


def make_api(kubeconfig: str) -> Any:
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    return client.CoreV1Api(api_client)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kubelet-sim",
        description="Simulated Ascend nodes for the ascend-pd-dev cluster cluster "
        "(binds and reports pods; never runs a container).",
    )
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--ascend-per-node", type=int, default=8)
    parser.add_argument("--interval", type=float, default=0.3, help="seconds between cycles")
    parser.add_argument(
        "--local-runtimes",
        type=Path,
        default=None,
        help="directory of local runtimes (image -> python) for launcher checks: pods "
        f"annotated {launch_check.RUN_CHECK_ANNOTATION}=true (or in a namespace so annotated) "
        "get `ascend-pd-runtime launch --check` run here",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s kubelet-sim %(message)s")
    import urllib3
    from kubernetes.client.exceptions import ApiException

    sim = Simulator(
        make_api(args.kubeconfig), args.nodes, args.ascend_per_node,
        runtimes_dir=args.local_runtimes,
    )  # fmt: skip
    stopping = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    log.info(
        "simulating %d Ascend nodes with %d %s each (no containers are run)",
        args.nodes,
        args.ascend_per_node,
        ASCEND_RESOURCE,
    )
    while not stopping:
        try:
            sim.step()
        except (ApiException, OSError, urllib3.exceptions.HTTPError) as err:
            # the API server may restart under us; keep going
            log.warning("cycle failed: %s", str(err).splitlines()[0] if str(err) else err)
        except Exception:
            log.exception("cycle failed")
        time.sleep(args.interval)
    sim.close()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
