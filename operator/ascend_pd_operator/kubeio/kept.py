"""What the operator keeps of each object it watches: the one place that decides it.

The cache (``live_cache``) holds every child of every deployment, every runtime pod, the
nodes they run on and the FailedCreate Events of our StatefulSets. Kept whole, they were
most of the operator's memory; each is kept here as what the planner, the status and
rollouts read, and no more. A field a decision starts reading must be kept here first.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import (
    COMPONENT_FACTS,
    LABEL_COMPONENT,
    LABEL_DEPLOYMENT,
    ROLES,
)
from ascend_pd_operator.decisions.recovery import slim_node

#: What recovery and rollouts read of a pod's metadata (deletionGracePeriodSeconds dates a
#: deletion request: ``recovery.deletion_requested``).
POD_METADATA = (
    "name", "namespace", "uid", "resourceVersion", "labels", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds",
)  # fmt: skip


#: What the status reads of a container's status: readiness and restarts, and what it
#: waits for (``state``'s waiting reason, the last termination's exit code and message);
#: ``waits.pod_wait`` tells it. Not ``started``: no pod the operator makes has a startup
#: probe, so a running container has always started.
CONTAINER_STATUS = ("name", "ready", "restartCount", "state", "lastState")


def _kept_condition(cond: Json) -> bool:
    return cond.get("type") == "Ready" or (
        cond.get("type") == "PodScheduled" and cond.get("status") != "True"
    )


def slim_pod(pod: Json) -> Json:
    """What the controller reads of a pod, and no more: a full pod is ~10 KiB of spec and
    managed fields the operator never looks at. Of its conditions: Ready, and PodScheduled
    while it is not True (the scheduler's reason, ``waits.pod_wait``); its podIP is where
    the PD planner scrapes a leader's metrics."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    return {
        "metadata": {k: meta[k] for k in POD_METADATA if k in meta},
        "spec": {"nodeName": (pod.get("spec") or {}).get("nodeName", "")},
        "status": {
            **{k: status[k] for k in ("phase", "reason", "message", "podIP") if k in status},
            "conditions": [c for c in status.get("conditions") or [] if _kept_condition(c)],
            "containerStatuses": [
                {k: c[k] for k in CONTAINER_STATUS if k in c}
                for c in status.get("containerStatuses") or []
            ],
        },
    }


#: ``<deployment>-<role>-<index>``: the instance StatefulSet an Event names (``vocabulary``).
_INSTANCE = re.compile(rf"^(?P<owner>.+)-(?:{'|'.join(ROLES)})-\d+$")


def event_owner(event: Json) -> str:
    """The PDDeployment whose instance StatefulSet ``event`` is about ("" if none could be):
    Events carry no labels, so the name tells. A foreign StatefulSet named like ours costs
    one reconcile of a PDDeployment that is not there; the status compares uids."""
    involved = event.get("involvedObject") or {}
    if involved.get("kind") != "StatefulSet":
        return ""
    found = _INSTANCE.match(str(involved.get("name", "")))
    return found.group("owner") if found else ""


def slim_event(event: Json) -> Json:
    """What the status reads of a FailedCreate Event; the owner it names as our deployment
    label, so the cache lists it with the deployment's other children."""
    meta = event.get("metadata") or {}
    involved = event.get("involvedObject") or {}
    return {
        "metadata": {
            **{k: meta[k] for k in ("name", "namespace", "resourceVersion") if k in meta},
            "labels": {LABEL_DEPLOYMENT: event_owner(event)},
        },
        "involvedObject": {k: involved[k] for k in ("kind", "name", "uid") if k in involved},
        **{k: event[k] for k in ("type", "reason", "message", "count", "lastTimestamp")
           if k in event},
    }  # fmt: skip


#: kind -> what of an object of that kind is kept (default: ``kept``'s generic trim)
SLIM: dict[str, Callable[[Json], Json]] = {
    "Pod": slim_pod,
    "Node": slim_node,
    "Event": slim_event,
}

#: Of these kinds the cache keeps only these spec fields (replicas for readiness, the
#: selector for the immutable-selector check): a workload's pod template is most of it.
SPEC_KEPT: dict[str, tuple[str, ...]] = {
    "StatefulSet": ("replicas", "selector"),
    "Deployment": ("replicas", "selector"),
}
#: Top-level fields the cache drops (the layout ConfigMaps' documents: nothing reads them
#: back), except of the objects ``keeps_data`` names.
DROPPED: dict[str, tuple[str, ...]] = {"ConfigMap": ("data", "binaryData")}


def keeps_data(obj: Json) -> bool:
    """Is ``obj`` kept whole: a model-facts ConfigMap, which the reconcile reads from the
    cache (``cached_reads``). Its data is the model's config.json (a few KiB)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return obj.get("kind") == "ConfigMap" and labels.get(LABEL_COMPONENT) == COMPONENT_FACTS


def kept(obj: Json) -> Json:
    """What the cache keeps of ``obj`` (its ``kind`` set): what the controller reads of it
    (the planner, the status, rollouts) and no more. With 100 deployments the whole
    objects, managed fields included, were most of the operator's memory
    (bench/operator.md). Keeping is idempotent: a kept object is kept as it is."""
    kind = obj.get("kind", "")
    slim = SLIM.get(kind)
    if slim is not None:
        return {**slim(obj), "kind": kind}
    dropped = () if keeps_data(obj) else DROPPED.get(kind, ())
    out = {k: v for k, v in obj.items() if k not in dropped}
    out["metadata"] = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    spec_kept = SPEC_KEPT.get(kind)
    if spec_kept is not None and "spec" in obj:
        out["spec"] = {k: obj["spec"][k] for k in spec_kept if k in obj["spec"]}
    return out
