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
- reports every bound pod Running and Ready (after the readiness delay below) with a loopback
  pod IP (127.1.0.1 and up; a ``hostNetwork`` pod gets its node's 127.0.1.x; no traffic is ever
  sent to any of them; the endpoints controller refuses loopback addresses, so a Service lists
  none of them), and removes pods being deleted (grace period 0).

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

Failures and time, so rollouts and group recovery can be watched (every annotation name is in
``sim_annotations``; the helpers below set them; all times come from one injectable clock):

- readiness delay: containers run at once and turn ready ``--ready-after`` seconds (default 0)
  after their ``startedAt``, or as many as the pod's ``ready-after-seconds`` annotation says;
- crash: a test sets ``kubelet-sim.ascend-pd.dev/crash`` on a live pod to a JSON object
  ``{"id": ..., "exitCode": 137, "reason": "Error", "message": "HCCL timeout on rank 1",
  "container": ..., "restartAfterSeconds": ...}`` (all optional; ``id`` defaults to the whole
  value, ``container`` to the first). Once per ``id`` (kubelet-sim records it in
  ``crash-handled``), like a kubelet: ``lastState.terminated`` (reason, exitCode, message,
  startedAt, finishedAt), ``restartCount`` + 1, state ``waiting`` ``CrashLoopBackOff``, pod
  NotReady; then running again after ``restartAfterSeconds`` (default the kubelet's back-off:
  at once for the first restart, then 10 s doubling to 5 min, counted from ``restartCount``),
  and ready after the readiness delay. Under restart policy Never (or OnFailure and exit 0)
  the container stays terminated and, once every container has, the pod Failed (Succeeded);
- pod failure: ``kubelet-sim.ascend-pd.dev/fail`` (``"true"`` or ``{"exitCode", "reason",
  "message", "podReason", "podMessage"}``) ends a running pod: phase Failed, every container
  terminated with that exit. Restart policy Never: nothing more, as a kubelet shows a pod whose
  containers failed. Always/OnFailure: a kubelet would restart the containers (that is a crash),
  and fails such a pod only by evicting it, so its reason is ``Evicted`` unless ``podReason``;
- node readiness: ``kubelet-sim.ascend-pd.dev/not-ready`` on a simulated Node, ``"true"``
  (the kubelet reports Ready=False, reason ``KubeletNotReady``) or ``"unknown"`` (unreachable:
  every condition Unknown, "Kubelet stopped posting node status.", heartbeat stopped, and its
  kubelet does nothing: no crash applied, a deleted pod stays Terminating). Either way the node
  gets the ``node.kubernetes.io/not-ready`` or ``unreachable`` NoSchedule taint (the simulated
  scheduler honours taints and tolerations) and its pods Ready=False, reason ``NodeNotReady``
  (phase, containers and ContainersReady untouched). That is the node lifecycle controller's
  job, which the dev cluster's kube-controller-manager does not run (``cluster.CONTROLLERS``),
  so kubelet-sim does it and nothing fights it; the controller's NoExecute taints and the
  evictions after 5 min are not simulated (delete the pod to move it). Removing the annotation
  makes the node and its pods Ready again. A Ready node's heartbeat (``lastHeartbeatTime``) is
  refreshed every ``NODE_STATUS_REPORT_SECONDS``.

A malformed request (annotation) fails the pod with reason ``InvalidSimulationRequest`` and a
message naming it. For tests: ``crash_pod``, ``fail_pod`` and ``set_node_ready`` take a kubeconfig
path, an ``ApiClient`` or a ``CoreV1Api``. Containers whose launcher check kubelet-sim runs
follow the check's own lifecycle (``launch_check_runs``); crash requests and the readiness
delay apply to the others.

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
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from ascend_pd_dev.kubelet_sim import annotations as sim_annotations
from ascend_pd_dev.kubelet_sim import check_runs as launch_check_runs
from ascend_pd_dev.kubelet_sim import launch_check

SIM_LABEL = "ascend-pd.dev/simulated"
OUTCOME_ANNOTATION = sim_annotations.OUTCOME
OWNER_ANNOTATION = sim_annotations.OWNER
READY_AFTER_ANNOTATION = sim_annotations.READY_AFTER
CRASH_ANNOTATION = sim_annotations.CRASH
CRASH_HANDLED_ANNOTATION = sim_annotations.CRASH_HANDLED
FAIL_ANNOTATION = sim_annotations.FAIL
NOT_READY_ANNOTATION = sim_annotations.NOT_READY
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


def iso(seconds: float) -> str:
    """A Kubernetes timestamp (whole seconds, as the API server stores them)."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None


def now_iso() -> str:
    return iso(time.time())


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


#: how often a Ready (or NotReady but reachable) simulated node's heartbeat is refreshed
NODE_STATUS_REPORT_SECONDS = 60.0
#: what the node lifecycle controller writes when a kubelet stops posting status
UNREACHABLE_MESSAGE = "Kubelet stopped posting node status."
#: the NoSchedule taints of TaintNodesByCondition, by node readiness
NODE_TAINTS = {"False": "node.kubernetes.io/not-ready", "Unknown": "node.kubernetes.io/unreachable"}


def node_readiness(node: Obj) -> str:
    """What the node's Ready condition should say: "True", "False" or "Unknown", from its
    ``NOT_READY_ANNOTATION`` ("true": the kubelet reports NotReady; "unknown": unreachable)."""
    value = str((node.get("metadata", {}).get("annotations") or {}).get(NOT_READY_ANNOTATION, ""))
    value = value.strip().lower()
    if value in ("", "false"):
        return "True"
    return "Unknown" if value == "unknown" else "False"


def node_status(manifest_status: Obj, current: Obj, readiness: str, now: float) -> Obj | None:
    """The node status to write, or None when ``current`` needs no write.

    Ready and NotReady nodes have a live kubelet: its heartbeat (``lastHeartbeatTime``) is
    refreshed every ``NODE_STATUS_REPORT_SECONDS``. An unreachable node's conditions turn
    Unknown as the node lifecycle controller would write them (that controller is not run in
    the dev cluster) and its heartbeat stops.
    """
    timestamp = iso(now)
    previous = {c.get("type"): c for c in current.get("conditions") or []}
    conditions = []
    for cond in manifest_status["conditions"]:
        kind = cond["type"]
        old = previous.get(kind) or {}
        new = dict(cond)
        if readiness == "Unknown":
            new.update(status="Unknown", reason="NodeStatusUnknown", message=UNREACHABLE_MESSAGE,
                       lastHeartbeatTime=old.get("lastHeartbeatTime", timestamp))  # fmt: skip
        elif kind == "Ready" and readiness == "False":
            why = f"kubelet-sim: node made NotReady ({NOT_READY_ANNOTATION})"
            new.update(status="False", reason="KubeletNotReady", message=why)
        else:
            new["lastHeartbeatTime"] = timestamp
        same = old.get("status") == new["status"]
        new["lastTransitionTime"] = old.get("lastTransitionTime", timestamp) if same else timestamp
        conditions.append(new)
    wanted = {**manifest_status, "conditions": conditions}

    def key(status: Obj) -> tuple[Any, ...]:
        conds = sorted((c.get("type"), c.get("status"), c.get("reason"))
                       for c in status.get("conditions") or [])  # fmt: skip
        return (status.get("allocatable"), tuple(conds))

    if key(wanted) != key(current):
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


def tolerated(pod: Obj, taint: Obj) -> bool:
    """Whether one of the pod's tolerations matches ``taint`` (key, value, effect)."""
    for tol in pod.get("spec", {}).get("tolerations") or []:
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists":
            if not tol.get("key") or tol.get("key") == taint.get("key"):
                return True
        elif tol.get("key") == taint.get("key") and (tol.get("value") or "") == (
            taint.get("value") or ""
        ):
            return True
    return False


def unfit_reasons(pod: Obj, node: Obj, pods: list[Obj]) -> list[str]:
    """Why ``pod`` cannot go to ``node`` (empty when it fits)."""
    if node.get("spec", {}).get("unschedulable"):
        return ["node is cordoned"]
    untolerated = [
        t for t in node.get("spec", {}).get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute") and not tolerated(pod, t)
    ]  # fmt: skip
    if untolerated:
        taint = untolerated[0]
        return [f"node(s) had taint {{{taint.get('key')}: {taint.get('value', '')}}}, "
                "that the pod didn't tolerate"]  # fmt: skip
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


@dataclass(frozen=True)
class Crash:
    """One container crash a test asked for (``CRASH_ANNOTATION``)."""

    id: str
    exit_code: int = 1
    reason: str = "Error"
    message: str = ""
    #: None: the pod's first container (``kubectl``'s default container)
    container: str | None = None
    #: None: the kubelet's back-off (restart at once the first time, then 10 s doubling)
    restart_after: float | None = None


@dataclass(frozen=True)
class Failure:
    """The pod's end a test asked for (``FAIL_ANNOTATION``)."""

    exit_code: int = 1
    reason: str = "Error"
    message: str = ""
    pod_reason: str | None = None
    pod_message: str | None = None


def _json_object(name: str, text: str, fields: set[str]) -> Obj:
    try:
        body = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"kubelet-sim: annotation {name} is not JSON: {err}") from None
    if not isinstance(body, dict):
        raise ValueError(f"kubelet-sim: annotation {name} is not a JSON object")
    unknown = sorted(set(body) - fields)
    if unknown:
        raise ValueError(f"kubelet-sim: annotation {name}: unknown fields {unknown}")
    code = body.get("exitCode", 1)
    if not isinstance(code, int) or isinstance(code, bool) or not 0 <= code <= 255:
        raise ValueError(f"kubelet-sim: annotation {name}: exitCode {code!r} is not 0..255")
    for key in fields - {"exitCode", "restartAfterSeconds"}:
        if key in body and not isinstance(body[key], str):
            raise ValueError(f"kubelet-sim: annotation {name}: {key} must be a string")
    return body


def parse_crash(text: str) -> Crash:
    """A crash request; its ``id`` defaults to the whole annotation value. ValueError if bad."""
    fields = {"id", "exitCode", "reason", "message", "container", "restartAfterSeconds"}
    body = _json_object(CRASH_ANNOTATION, text, fields)
    after = body.get("restartAfterSeconds")
    if after is not None and (isinstance(after, bool) or not isinstance(after, int | float)
                              or after < 0):  # fmt: skip
        raise ValueError(f"kubelet-sim: annotation {CRASH_ANNOTATION}: restartAfterSeconds "
                         f"{after!r} is not a number >= 0")  # fmt: skip
    return Crash(
        id=str(body.get("id") or text), exit_code=body.get("exitCode", 1),
        reason=body.get("reason") or ("Completed" if body.get("exitCode") == 0 else "Error"),
        message=body.get("message", ""), container=body.get("container"),
        restart_after=None if after is None else float(after),
    )  # fmt: skip


def parse_failure(text: str) -> Failure:
    """A failure request: "true" or a JSON object. ValueError if bad."""
    if text.strip().lower() in ("", "true"):
        return Failure()
    fields = {"exitCode", "reason", "message", "podReason", "podMessage"}
    body = _json_object(FAIL_ANNOTATION, text, fields)
    return Failure(
        exit_code=body.get("exitCode", 1), reason=body.get("reason") or "Error",
        message=body.get("message", ""), pod_reason=body.get("podReason"),
        pod_message=body.get("podMessage"),
    )  # fmt: skip


def ready_after_of(pod: Obj, default: float) -> float:
    """Seconds from a container's start to its readiness: the pod's annotation, else
    ``default``. ValueError if the annotation is not a number >= 0."""
    text = (pod.get("metadata", {}).get("annotations") or {}).get(READY_AFTER_ANNOTATION)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise ValueError(f"kubelet-sim: annotation {READY_AFTER_ANNOTATION}={text!r} is not a "
                         "number of seconds >= 0")  # fmt: skip
    return value


def crash_requests(pod: Obj) -> tuple[Crash | None, Crash | None]:
    """(the crash to apply now, the crash applied last) from the pod's annotations; either
    None. ValueError if the request is malformed."""
    meta = pod.get("metadata", {}).get("annotations") or {}
    text = meta.get(CRASH_ANNOTATION)
    if text is None:
        return None, None
    crash = parse_crash(str(text))
    if meta.get(CRASH_HANDLED_ANNOTATION) == crash.id:
        return None, crash
    return crash, None


def kubelet_backoff(restarts: int) -> float:
    """The kubelet's delay before restart number ``restarts`` of a crashed container: none for
    the first, then 10 s doubling to 5 min (the kubelet also forgets it after 10 min of no
    crash; kubelet-sim counts from ``restartCount`` alone)."""
    if restarts <= 1:
        return 0.0
    return launch_check_runs.backoff(restarts - 1)


def _condition(
    kind: str, status: bool, timestamp: str, reason: str | None = None, message: str | None = None
) -> Obj:
    # reason and message are always present: a strategic merge (conditions merge by type)
    # deletes them with null, so a Ready condition never keeps a stale NotReady reason
    return {"type": kind, "status": "True" if status else "False", "lastProbeTime": None,
            "lastTransitionTime": timestamp, "reason": reason, "message": message}  # fmt: skip


def _not_ready_node_message(node: str, readiness: str) -> str:
    what = "unreachable" if readiness == "Unknown" else "NotReady"
    return (f"kubelet-sim: node {node} is {what} (its pods are marked NotReady, as the node "
            "lifecycle controller would)")  # fmt: skip


def desired_status(
    pod: Obj,
    host_ip: str,
    pod_ip: str,
    timestamp: str,
    checked: Mapping[str, launch_check_runs.View] | None = None,
    ready_after: float = 0.0,
    node_readiness: str = "True",
) -> Obj:
    """The status a kubelet would report for ``pod`` at ``timestamp`` under its annotations.

    ``checked``: the containers whose launcher check kubelet-sim runs (``launch_check_runs``),
    by name; their state comes from the check while the pod would be Running.
    ``ready_after``: seconds from a container's start to its readiness, unless the pod's
    ``READY_AFTER_ANNOTATION`` says otherwise. ``node_readiness``: the node's Ready condition
    status; a NotReady node's pods report Ready=False.
    Times already in the pod's status are kept, so an unchanged pod yields an unchanged status;
    the whole state machine (crash, back-off, readiness) is read back from the status, so a
    restarted kubelet-sim carries on where it stopped.
    """
    checked = checked or {}
    now = parse_iso(timestamp) or 0.0
    meta = pod.get("metadata", {})
    current = pod.get("status") or {}
    start = current.get("startTime") or timestamp
    outcome = outcome_of(pod)
    spec = pod.get("spec", {})
    policy = spec.get("restartPolicy") or "Always"
    containers = spec.get("containers") or []
    init_containers = spec.get("initContainers") or []
    previous = {c.get("name"): c for c in current.get("containerStatuses") or []}
    annotations = meta.get("annotations") or {}

    phase, ready, reason, message = "Running", True, None, None
    pod_reason: str | None = None
    crash: Crash | None = None
    handled: Crash | None = None
    failure: Failure | None = None
    delay = ready_after
    try:
        delay = ready_after_of(pod, ready_after)
        crash, handled = crash_requests(pod)
        if (
            crash is not None
            and crash.container is not None
            and crash.container not in {c.get("name") for c in containers}
        ):
            raise ValueError(f"kubelet-sim: annotation {CRASH_ANNOTATION}: the pod has no "
                             f"container {crash.container!r}")  # fmt: skip
        if FAIL_ANNOTATION in annotations:
            failure = parse_failure(str(annotations[FAIL_ANNOTATION]))
        invalid = None
    except ValueError as err:
        invalid = str(err)
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
    if phase == "Running" and invalid:
        phase, ready, reason, message = "Failed", False, "InvalidSimulationRequest", invalid
        failure = None
    elif phase == "Running" and failure is not None:
        # restart policy Never: the containers' exit ended the pod, and a kubelet says no more;
        # any other policy would restart them, so a kubelet fails such a pod only by evicting it
        phase, ready, reason = "Failed", False, "PodFailed"
        if failure.pod_reason or policy != "Never":
            pod_reason = failure.pod_reason or "Evicted"
            message = failure.pod_message or (
                f"kubelet-sim: the pod was failed on request ({FAIL_ANNOTATION})"
            )
        else:
            message = failure.pod_message
    crash_target = (crash.container or (containers[0].get("name") if containers else None)
                    if crash is not None and phase == "Running" and outcome != "crash"
                    else None)  # fmt: skip
    cid_base = f"kubelet-sim://{meta.get('uid', '')}"

    def terminated(code: int, why: str, text: str, started: str) -> Obj:
        body = {"exitCode": code, "reason": why, "startedAt": started, "finishedAt": timestamp}
        if text:
            body["message"] = text
        return {"terminated": body}

    def container_status(container: Obj) -> tuple[Obj, bool]:
        """(its containerStatuses entry, ended for good)."""
        name = container.get("name", "")
        view = checked.get(name) if runs_checks else None
        prev = previous.get(name) or {}
        restarts = int(prev.get("restartCount", 0) or 0)
        entry = {
            "name": name,
            "image": container.get("image", ""),
            "imageID": f"kubelet-sim://{container.get('image', '')}",
            "containerID": f"{cid_base}/{name}",
        }
        if view is not None:
            entry.update(ready=view.ready and outcome_ready, started=view.started,
                         restartCount=view.restart_count, state=view.state)  # fmt: skip
            if view.last_state:
                entry["lastState"] = view.last_state
            return entry, view.final
        prev_state = prev.get("state") or {}
        last_state = prev.get("lastState") or {}
        running_since = (prev_state.get("running") or {}).get("startedAt")
        if running_since is None:
            for body in prev_state.values():
                running_since = (body or {}).get("startedAt") or running_since
        started_at = running_since or start
        ended = False
        state: Obj
        if phase == "Succeeded":
            state = terminated(0, "Completed", "", started_at)
        elif phase == "Failed":
            if failure is not None:
                state = terminated(failure.exit_code, failure.reason, failure.message, started_at)
            else:
                state = terminated(1, "Error", "", started_at)
        elif outcome == "crash":
            state = {"waiting": {"reason": "CrashLoopBackOff",
                                 "message": "kubelet-sim: simulated crash loop"}}  # fmt: skip
            restarts = max(restarts, 1)
        elif crash is not None and name == crash_target:
            died = terminated(crash.exit_code, crash.reason, crash.message, started_at)
            died["terminated"]["containerID"] = f"{cid_base}/{name}/{restarts}"
            if policy == "Never" or (policy == "OnFailure" and crash.exit_code == 0):
                state, ended = died, True
            else:
                last_state, restarts = died, restarts + 1
                wait = crash.restart_after
                wait = kubelet_backoff(restarts) if wait is None else wait
                state = {"waiting": {"reason": "CrashLoopBackOff", "message": (
                    f"back-off {wait:g}s restarting failed container={name} "
                    f"pod={meta.get('name')}_{meta.get('namespace')}({meta.get('uid')}) "
                    f"(kubelet-sim: crash {crash.id})")}}  # fmt: skip
        elif "terminated" in prev_state and (
            policy == "Never" or (policy == "OnFailure" and prev_state["terminated"].get(
                "exitCode") == 0)
        ):  # fmt: skip
            state, ended = prev_state, True
        elif (prev_state.get("waiting") or {}).get("reason") == "CrashLoopBackOff" and (
            "terminated" in last_state
        ):
            wait = handled.restart_after if handled and handled.restart_after is not None else (
                kubelet_backoff(restarts))  # fmt: skip
            finished = parse_iso(last_state["terminated"].get("finishedAt")) or 0.0
            # restarted once the back-off is over
            state = prev_state if now < finished + wait else {"running": {"startedAt": timestamp}}
        elif prev_state and "running" not in prev_state:
            state = {"running": {"startedAt": timestamp}}  # (re)started now
        else:
            state = {"running": {"startedAt": started_at}}
        up = (state.get("running") or {}).get("startedAt")
        warm = up is not None and now >= (parse_iso(up) or 0.0) + delay
        entry.update(ready=bool(ready and phase == "Running" and warm),
                     started=up is not None, restartCount=restarts, state=state)  # fmt: skip
        if last_state:
            entry["lastState"] = last_state
        return entry, ended

    # the checked containers' state counts while the outcome says the pod runs
    runs_checks, outcome_ready = phase == "Running", ready
    pod_message = message
    results = [container_status(c) for c in containers]
    statuses = [entry for entry, _ in results]
    views = [checked[c.get("name", "")] for c in containers if c.get("name", "") in checked]
    ended_for_good = phase == "Running" and bool(results) and all(e for _, e in results)
    if ended_for_good:
        # every container ended for good (restart policy Never): so does the pod
        codes = [int((e["state"].get("terminated") or {}).get("exitCode", 1)) for e in statuses]
        if any(codes):
            phase, ready, reason, message = "Failed", False, "PodFailed", None
        else:
            phase, ready, reason, message = "Succeeded", False, "PodCompleted", None
        pod_message = None
        if views and len(views) == len(containers):
            pod_message = "kubelet-sim: the launcher check failed (restart policy Never)"
    elif phase == "Running" and ready and not all(e["ready"] for e in statuses):
        waiting = [e["name"] for e in statuses if not e["ready"]]
        ready, reason = False, "ContainersNotReady"
        message = f"containers with unready status: [{' '.join(waiting)}]"
    containers_ready, cr_reason, cr_message = ready, reason, message
    if phase == "Running" and node_readiness != "True":
        # the node lifecycle controller flips only the pod's Ready condition
        ready, reason = False, "NodeNotReady"
        message = _not_ready_node_message(str(spec.get("nodeName", "")), node_readiness)

    old_conditions = {c.get("type"): c for c in current.get("conditions") or []}

    def condition(kind: str, status: bool, why: str | None = None, text: str | None = None) -> Obj:
        old = old_conditions.get(kind) or {}
        same = old.get("status") == ("True" if status else "False")
        since = old.get("lastTransitionTime") if same and old.get("lastTransitionTime") else None
        fallback = start if kind in ("Initialized", "PodScheduled") else timestamp
        return _condition(kind, status, since or fallback, why, text)

    status: Obj = {
        "phase": phase,
        "hostIP": host_ip,
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": start,
        "qosClass": current.get("qosClass", "BestEffort"),
        "conditions": [
            condition("Initialized", True),
            condition("Ready", ready, None if ready else reason, None if ready else message),
            condition(
                "ContainersReady",
                containers_ready,
                None if containers_ready else cr_reason,
                None if containers_ready else cr_message,
            ),
            condition("PodScheduled", True),
        ],
        "containerStatuses": statuses,
        "reason": None,
        "message": None,
    }
    if init_containers:
        status["initContainerStatuses"] = [
            {
                "name": c.get("name", ""),
                "image": c.get("image", ""),
                "imageID": f"kubelet-sim://{c.get('image', '')}",
                "containerID": f"{cid_base}/{c.get('name')}",
                "ready": True,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                         "startedAt": start, "finishedAt": start}},
            }
            for c in init_containers
        ]  # fmt: skip
    if failure is not None and phase == "Failed":
        status["reason"], status["message"] = pod_reason, message
    elif ended_for_good:
        # the containers ended on their own: a kubelet gives the pod no reason
        status["reason"] = reason if pod_message else None
        status["message"] = pod_message
    elif phase != "Running" or pod_message:
        status["reason"] = reason
        status["message"] = pod_message or f"kubelet-sim: outcome {outcome!r}"
    return status


def mark_not_ready(status: Obj, node: str, readiness: str, timestamp: str) -> Obj | None:
    """What the node lifecycle controller writes for a pod of an unreachable node: its Ready
    condition False, nothing else (None when it already is)."""
    conditions = status.get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") == "False":
        return None
    return {"conditions": [_condition("Ready", False, timestamp, "NodeNotReady",
                                      _not_ready_node_message(node, readiness))]}  # fmt: skip


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
    #: seconds from a container's start to its readiness (``READY_AFTER_ANNOTATION`` overrides)
    ready_after: float = 0.0
    #: wall-clock seconds; every timestamp written and every delay measured comes from it
    clock: Callable[[], float] = time.time
    _unschedulable: dict[str, str] = field(default_factory=dict)
    #: pod uid -> id of the crash request applied, until its CRASH_HANDLED annotation is seen
    _crashes: dict[str, str] = field(default_factory=dict)
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

    def now(self) -> str:
        return iso(self.clock())

    def ensure_nodes(self) -> list[Obj]:
        """Create or update nodes 0..N-1, delete surplus simulated nodes; return our nodes.

        A node's readiness follows its ``NOT_READY_ANNOTATION`` (``set_node_ready``), with the
        taint the node lifecycle controller would add; a Ready node's heartbeat is refreshed.
        """
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
        now = self.clock()
        for name, index in wanted.items():
            manifest = node_manifest(index, self.ascend_per_node, iso(now), self.owner)
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
            readiness = node_readiness(found)
            status = node_status(manifest["status"], found.get("status") or {}, readiness, now)
            if status is not None:
                old = next((c.get("status") for c in (found.get("status") or {}).get(
                    "conditions") or [] if c.get("type") == "Ready"), None)  # fmt: skip
                if old != {"True": "True", "False": "False"}.get(readiness, "Unknown"):
                    log.info("node %s: Ready=%s", name, readiness)
                self.api.patch_node_status(name, {"status": status}, _preload_content=False)
                found = {**found, "status": status}
            taints = found.get("spec", {}).get("taints") or []
            wanted_taints = node_taints(taints, readiness, iso(now))
            if wanted_taints != taints:
                # Node.spec.taints has no merge key: the list is replaced whole
                self.api.patch_node(name, {"spec": {"taints": wanted_taints or None}},
                                    _preload_content=False)  # fmt: skip
                found = {**found, "spec": {**found.get("spec", {}), "taints": wanted_taints}}
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
        readiness = {n["metadata"]["name"]: node_readiness(n) for n in nodes}
        # an unreachable node's kubelet does nothing: its pods are only marked NotReady
        reachable = {name for name, ready in readiness.items() if ready != "Unknown"}
        asking = self._pods_asking_for_checks(pods, reachable)
        cluster = self._cluster_view(pods)
        for pod in pods:
            node = pod.get("spec", {}).get("nodeName")
            if node in reachable:
                asked = pod["metadata"].get("uid") in asking
                self._sync_pod(pod, node_ips[node], cluster if asked else None, readiness[node])
            elif node in names:
                self._mark_unreachable(pod, node)
            elif node and node.startswith(NODE_PREFIX) and node not in names:
                # bound to a simulated node that no longer exists: nothing will run it
                self._delete_pod(pod)
        live = {str(p["metadata"].get("uid")) for p in pods}
        self._crashes = {uid: done for uid, done in self._crashes.items() if uid in live}
        if self._checks is not None:
            # a check of a pod on an unreachable node is kept for when the node returns
            self._checks.forget(
                asking
                | {
                    str(p["metadata"].get("uid"))
                    for p in pods
                    if p.get("spec", {}).get("nodeName") in names
                    and p.get("spec", {}).get("nodeName") not in reachable
                }
            )
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
                    "lastTransitionTime": self.now(),
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
        timestamp = self.now()
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

    def _mark_unreachable(self, pod: Obj, node: str) -> None:
        """A pod of an unreachable node: Ready=False, as the node lifecycle controller marks it;
        nothing else changes, and a deleted one stays Terminating (no kubelet confirms it)."""
        from kubernetes.client.exceptions import ApiException

        meta = pod["metadata"]
        if is_terminal(pod):
            return
        patch = mark_not_ready(pod.get("status") or {}, node, "Unknown", self.now())
        if patch is None:
            return
        try:
            self.api.patch_namespaced_pod_status(
                meta["name"], meta["namespace"], {"status": patch}, _preload_content=False
            )
        except ApiException as err:
            if err.status not in (404, 409):
                raise
            return
        log.info("%s/%s -> NotReady (node %s unreachable)", meta["namespace"], meta["name"], node)

    def _sync_pod(
        self,
        pod: Obj,
        host_ip: str,
        cluster: launch_check.Cluster | None = None,
        node_ready: str = "True",
    ) -> None:
        """Report ``pod``'s status; with ``cluster``, run its launcher check (it asked)."""
        from kubernetes.client.exceptions import ApiException

        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            self._delete_pod(pod)
            return
        if is_terminal(pod):
            return
        uid = str(meta.get("uid"))
        notes = meta.get("annotations") or {}
        applied = self._crashes.get(uid)
        # applied, but the record of it was not written: never apply it twice
        if (applied is not None and notes.get(CRASH_HANDLED_ANNOTATION) != applied
                and self._record_crash(pod, applied)):  # fmt: skip
            notes = {**notes, CRASH_HANDLED_ANNOTATION: applied}
            pod = {**pod, "metadata": {**meta, "annotations": notes}}
        current = pod.get("status") or {}
        if pod.get("spec", {}).get("hostNetwork"):
            pod_ip = host_ip  # host-network pods share their node's address
        else:
            pod_ip = current.get("podIP") or self.ips.allocate()
        views = {}
        if cluster is not None and outcome_of(pod) in ("ready", "unready"):
            views = self.checks.views(pod, pod_ip, host_ip, cluster, asked=True)
        try:
            crash, _ = crash_requests(pod)
        except ValueError:
            crash = None  # desired_status reports it
        wanted = desired_status(pod, host_ip, pod_ip, self.now(), views, self.ready_after,
                                node_ready)  # fmt: skip
        if status_signature(wanted) != status_signature(current):
            try:
                self.api.patch_namespaced_pod_status(
                    meta["name"], meta["namespace"], {"status": wanted}, _preload_content=False
                )
            except ApiException as err:
                if err.status not in (404, 409):
                    raise
                return
            self._log_status(pod, wanted, pod_ip)
        if crash is not None:
            self._crashes[uid] = crash.id
            log.info("%s/%s: applied crash %s", meta["namespace"], meta["name"], crash.id)
            text = (f"kubelet-sim: container crashed as asked ({CRASH_ANNOTATION} {crash.id}): "
                    f"exit {crash.exit_code} {crash.message}").rstrip()  # fmt: skip
            self._event(pod, "Warning", "BackOff" if wanted["phase"] == "Running" else "Failed",
                        text)  # fmt: skip
            self._record_crash(pod, crash.id)

    def _record_crash(self, pod: Obj, crash_id: str) -> bool:
        """Write the CRASH_HANDLED annotation, so a restarted kubelet-sim does not repeat it."""
        from kubernetes.client.exceptions import ApiException

        meta = pod["metadata"]
        patch = {"metadata": {"annotations": {CRASH_HANDLED_ANNOTATION: crash_id}}}
        try:
            self.api.patch_namespaced_pod(meta["name"], meta["namespace"], patch,
                                          _preload_content=False)  # fmt: skip
        except ApiException as err:
            if err.status not in (404, 409):
                raise
            return False
        return True

    def _log_status(self, pod: Obj, wanted: Obj, pod_ip: str) -> None:
        meta = pod["metadata"]
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


# --------------------------------------------------------------------------- for tests


def core_api(kube: Any) -> Any:
    """A CoreV1Api from a kubeconfig path, a ``kubernetes.client.ApiClient`` or a CoreV1Api."""
    if isinstance(kube, str | Path):
        return make_api(str(kube))
    from kubernetes import client

    if isinstance(kube, client.ApiClient):
        return client.CoreV1Api(kube)
    return kube


def crash_pod(
    kube: Any,
    namespace: str,
    pod: str,
    exit_code: int = 137,
    reason: str = "Error",
    message: str = "",
    *,
    container: str | None = None,
    restart_after_seconds: float | None = None,
) -> str:
    """Ask kubelet-sim to crash one container of a live pod (the first unless ``container``);
    returns the request's id. Each call is a new crash: restartCount goes up once per call.
    ``restart_after_seconds`` (None: the kubelet's back-off) is how long it stays down."""
    crash_id = uuid.uuid4().hex[:12]
    body: Obj = {"id": crash_id, "exitCode": exit_code, "reason": reason, "message": message}
    if container is not None:
        body["container"] = container
    if restart_after_seconds is not None:
        body["restartAfterSeconds"] = restart_after_seconds
    parse_crash(json.dumps(body))  # refuse here what kubelet-sim would refuse
    patch = {"metadata": {"annotations": {CRASH_ANNOTATION: json.dumps(body)}}}
    core_api(kube).patch_namespaced_pod(pod, namespace, patch, _preload_content=False)
    return crash_id


def fail_pod(
    kube: Any,
    namespace: str,
    pod: str,
    exit_code: int = 1,
    reason: str = "Error",
    message: str = "",
    *,
    pod_reason: str | None = None,
    pod_message: str | None = None,
) -> None:
    """Ask kubelet-sim to end a live pod for good: phase Failed, every container terminated
    with ``exit_code``/``reason``/``message``. Under restart policy Never that is all a kubelet
    shows; under Always/OnFailure a kubelet fails a pod only by evicting it, so its reason is
    ``Evicted`` unless ``pod_reason`` says otherwise (``pod_message``: the pod's message)."""
    body: Obj = {"exitCode": exit_code, "reason": reason, "message": message}
    if pod_reason is not None:
        body["podReason"] = pod_reason
    if pod_message is not None:
        body["podMessage"] = pod_message
    parse_failure(json.dumps(body))
    patch = {"metadata": {"annotations": {FAIL_ANNOTATION: json.dumps(body)}}}
    core_api(kube).patch_namespaced_pod(pod, namespace, patch, _preload_content=False)


def set_node_ready(kube: Any, node: str, ready: bool = True, *, unreachable: bool = False) -> None:
    """Make a simulated node Ready again, NotReady (``ready=False``: its kubelet reports
    Ready=False) or unreachable (``unreachable=True``: Ready=Unknown, heartbeat stopped).
    Either way its pods turn NotReady; they turn Ready again with the node."""
    value = None if ready and not unreachable else ("unknown" if unreachable else "true")
    patch = {"metadata": {"annotations": {NOT_READY_ANNOTATION: value}}}
    core_api(kube).patch_node(node, patch, _preload_content=False)


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
    parser.add_argument(
        "--ready-after",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="seconds from a container's start to its readiness (default 0); a pod's "
        f"{READY_AFTER_ANNOTATION} annotation overrides it",
    )
    args = parser.parse_args(argv)
    if not args.ready_after >= 0:
        parser.error("--ready-after must be a number of seconds >= 0")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s kubelet-sim %(message)s")
    import urllib3
    from kubernetes.client.exceptions import ApiException

    sim = Simulator(
        make_api(args.kubeconfig), args.nodes, args.ascend_per_node,
        runtimes_dir=args.local_runtimes, ready_after=args.ready_after,
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
