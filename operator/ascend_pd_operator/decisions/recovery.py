"""Group recovery: an instance whose pod failed is restarted whole, with backoff. Pure.

A multi-node SGLang group cannot take a rank back: when one pod's container restarts, the
pod fails, or it is deleted (by a user, an eviction, a node drain), the other ranks hang in
their collectives. So the whole instance is restarted (all its pods deleted together, the
StatefulSet recreates them) and no other instance is touched.

What counts as a failure of instance X, judged from the API server's own records:

- a container of one of its pods restarted (``restartCount`` > 0; a restarted group starts
  at 0), or a pod's phase is Failed;
- the node of one of its pods is not Ready (the node's own Ready condition, from the node
  watch) or an admin tainted it ``node.kubernetes.io/out-of-service``: the rank on it is
  lost, and the replacement lands elsewhere (a NotReady node is tainted NoSchedule);
- one of its pods was deleted by someone else than the operator while another pod of X that
  existed before that deletion still runs (the deletion request time is the pod's
  ``deletionTimestamp - deletionGracePeriodSeconds``, both server time, so clocks never
  have to agree); the replacement the StatefulSet makes is created after it and is no
  survivor.

Each restart of an instance waits ``backoff_seconds * 2**(n-1)`` (capped at
``max_backoff_seconds``) after the previous one. The record lives in ``status.recovery`` so
that an operator restart keeps it. After ``failure_limit`` restarts within
``window_seconds`` the PDDeployment gets the condition ``InstancesHealthy=False`` (reason
``RestartLoop``) naming the instance and its first failure: the pod, container, reason,
exit code and termination message. The numbers are the operator's flags
(``RecoveryPolicy``; defaults 10 s, 300 s, 5 restarts, 600 s).

**Lost nodes.** A pod being deleted stays Terminating until its kubelet says it ended, and
a StatefulSet recreates a pod only once its name is free: on a node whose kubelet cannot
answer (Ready=Unknown: unreachable) the restarted instance stays down until the node
returns, possibly for hours. Only a force-delete (grace period 0) frees the name, and
inference pods hold no data: a second copy of a server on a partitioned node costs NPUs for
a while, never correctness. So a node is *lost*, and the pods of restarted instances on it
are force-deleted:

- at once when an admin tainted it ``node.kubernetes.io/out-of-service`` (any effect),
  whatever the deployment says: the taint is Kubernetes' own statement that the node is
  down and its pods may go (from 1.26 the control plane force-deletes such pods itself);
- once it has been unreachable for ``spec.recovery.forceDeleteAfterSeconds`` (0: never),
  counted from its Ready condition's ``lastTransitionTime``. A Ready=False node is never
  lost: its kubelet runs and ends its pods itself.

Only pods already being deleted, or deleted by a restart now, are force-deleted: the
operator shortens the grace of a whole-instance restart and never splits a group. How long
a node was gone: since its Ready condition left True, or on a node still Ready (tainted
before it was shut down) since the taint's ``timeAdded``. Those are the control plane's
times and ``now`` is the operator's, so clock skew moves the timer by as much; a node that
gives no such time is never timed (the taint still counts).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import (
    REASON_NODE_NOT_READY,
    REASON_NODE_OUT_OF_SERVICE,
    REASON_NODE_UNREACHABLE,
    TAINT_OUT_OF_SERVICE,
)
from ascend_pd_operator.decisions.rollout import Instance


@dataclass(frozen=True)
class RecoveryPolicy:
    """How group recovery waits and when it calls a restart loop (``ascend-pd run`` flags)."""

    backoff_seconds: float = 10.0
    max_backoff_seconds: float = 300.0
    failure_limit: int = 5
    window_seconds: float = 600.0

    def backoff(self, restarts: int) -> float:
        """The wait after the ``restarts``-th restart before the next one."""
        return min(self.max_backoff_seconds, self.backoff_seconds * 2.0 ** max(restarts - 1, 0))


#: Status timestamps (and the reconciler's clock) have whole seconds.
TIME_RESOLUTION_SECONDS = 1.0

#: The defaults, as ``ascend-pd run`` documents them.
DEFAULT_POLICY = RecoveryPolicy()


def parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _stamp(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def deletion_requested(pod: Json) -> dt.datetime | None:
    """When the deletion of ``pod`` was asked for (server time), if it was."""
    meta = pod["metadata"]
    at = parse_time(meta.get("deletionTimestamp"))
    if at is None:
        return None
    return at - dt.timedelta(seconds=float(meta.get("deletionGracePeriodSeconds") or 0))


def ready_condition(node: Json) -> Json:
    """A node's Ready condition as the operator keeps it ({} when it reports none)."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return {k: cond[k] for k in ("status", "reason", "message", "lastTransitionTime")
                    if k in cond}  # fmt: skip
    return {}


def out_of_service(node: Json) -> Json | None:
    """The node's ``node.kubernetes.io/out-of-service`` taint, if an admin set one."""
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("key") == TAINT_OUT_OF_SERVICE:
            return {k: taint[k] for k in ("key", "value", "effect", "timeAdded") if k in taint}
    return None


#: Taint effects that keep new pods off a node: placement reads them (and group recovery
#: the out-of-service taint, NoExecute).
KEPT_TAINT_EFFECTS = ("NoSchedule", "NoExecute")


def _extended(resources: Json | None) -> Json:
    """The extended resources (``<domain>/<name>``: the NPUs) of a node's capacity or
    allocatable: cpu, memory and the like are the scheduler's."""
    return {k: v for k, v in (resources or {}).items() if "/" in k}


def slim_node(node: Json) -> Json:
    """What the node watch keeps of a node: its readiness and the out-of-service taint
    (group recovery), and for ``placement`` its labels (the topology label is any of them),
    whether it is cordoned, its NoSchedule and NoExecute taints and its extended resources'
    capacity and allocatable (the device plugin lowers allocatable for unhealthy NPUs)."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    taints = [
        {k: t[k] for k in ("key", "value", "effect", "timeAdded") if k in t}
        for t in spec.get("taints") or []
        if t.get("effect") in KEPT_TAINT_EFFECTS
    ]
    slim_spec: Json = {"taints": taints}
    if spec.get("unschedulable"):
        slim_spec["unschedulable"] = True
    slim_status: Json = {"conditions": [{"type": "Ready", **ready_condition(node)}]}
    for key in ("capacity", "allocatable"):
        if found := _extended(status.get(key)):
            slim_status[key] = found
    return {
        "metadata": {"name": meta.get("name", ""), "namespace": "",
                     "resourceVersion": meta.get("resourceVersion", ""),
                     "labels": dict(meta.get("labels") or {})},
        "spec": slim_spec,
        "status": slim_status,
    }  # fmt: skip


def _node_failure(name: str, node: Json) -> tuple[str, str] | None:
    """(reason, message) when the rank on ``node`` is lost: the node is not Ready or is out
    of service; None when it is healthy or reports nothing."""
    ready = ready_condition(node)
    why = ": ".join(str(ready[k]) for k in ("reason", "message") if ready.get(k))
    said = f"Ready={ready.get('status', 'Unknown')}" + (f" ({why})" if why else "")
    if out_of_service(node) is not None:
        return REASON_NODE_OUT_OF_SERVICE, f"node {name} is tainted {TAINT_OUT_OF_SERVICE}" + (
            f", {said}" if ready else "")  # fmt: skip
    if ready and ready.get("status") != "True":
        return REASON_NODE_NOT_READY, f"node {name} is {said}"
    return None


@dataclass(frozen=True)
class Loss:
    """A lost node: why, how long it has been gone, and when its pods may go."""

    node: str
    #: ``REASON_NODE_OUT_OF_SERVICE`` or ``REASON_NODE_UNREACHABLE``.
    reason: str
    gone_seconds: int
    #: Seconds until its pods may be force-deleted (0 or less: now).
    due_in: float
    #: Why, for the Event: the node and how long it was gone.
    message: str


def node_loss(name: str, node: Json, now: dt.datetime, after_seconds: int) -> Loss | None:
    """``node`` as lost, or None (``after_seconds``: ``forceDeleteAfterSeconds``, 0: off)."""
    ready = ready_condition(node)
    left = parse_time(ready.get("lastTransitionTime")) if ready.get("status") != "True" else None
    taint = out_of_service(node)
    if taint is not None:
        gone = _whole_seconds(now, left or parse_time(taint.get("timeAdded")))
        message = f"node {name} is tainted {TAINT_OUT_OF_SERVICE}, gone for {gone} s"
        return Loss(name, REASON_NODE_OUT_OF_SERVICE, gone, 0.0, message)
    if ready.get("status") != "Unknown" or after_seconds <= 0 or left is None:
        return None
    gone = _whole_seconds(now, left)
    due_in = after_seconds - (now - left).total_seconds()
    return Loss(name, REASON_NODE_UNREACHABLE, gone, due_in,
                f"node {name} unreachable (Ready=Unknown) for {gone} s, past "
                f"spec.recovery.forceDeleteAfterSeconds ({after_seconds})")  # fmt: skip


def _whole_seconds(now: dt.datetime, since: dt.datetime | None) -> int:
    return max(0, int((now - since).total_seconds())) if since is not None else 0


def _container_failure(pod: Json) -> Json | None:
    status = pod.get("status") or {}
    for c in status.get("containerStatuses") or []:
        ended = (c.get("lastState") or {}).get("terminated") or (c.get("state") or {}).get(
            "terminated"
        )
        if int(c.get("restartCount") or 0) > 0 or (status.get("phase") == "Failed" and ended):
            ended = ended or {}
            return {
                "pod": pod["metadata"]["name"],
                "container": c.get("name", ""),
                "reason": str(ended.get("reason") or "Restarted"),
                "exitCode": ended.get("exitCode"),
                "message": str(ended.get("message") or "").strip(),
            }
    if status.get("phase") == "Failed":
        return {"pod": pod["metadata"]["name"], "container": "", "exitCode": None,
                "reason": str(status.get("reason") or "Failed"),
                "message": str(status.get("message") or "").strip()}  # fmt: skip
    return None


def _node_of(pod: Json) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def failure(
    inst: Instance,
    gone: Iterable[Json],
    ours: frozenset[str],
    nodes: Mapping[str, Json] | None = None,
) -> Json | None:
    """The first failure of ``inst`` (a record for the status), or None: it is healthy.
    ``gone``: its pods deleted or being deleted; ``ours``: uids the operator deleted;
    ``nodes``: the nodes of its pods as the node watch keeps them (``slim_node``)."""
    live = inst.live_pods
    for pod in sorted(live, key=lambda p: p["metadata"]["name"]):
        node = _node_of(pod)
        lost = _node_failure(node, (nodes or {})[node]) if node in (nodes or {}) else None
        if lost is not None:
            return {"pod": pod["metadata"]["name"], "container": "", "exitCode": None,
                    "reason": lost[0], "message": lost[1]}  # fmt: skip
    for pod in gone:
        if str(pod["metadata"].get("uid", "")) in ours:
            continue
        asked = deletion_requested(pod)
        survivors = [
            p for p in live
            if asked is not None and (created := parse_time(p["metadata"].get("creationTimestamp")))
            and created < asked
        ]  # fmt: skip
        if survivors:
            kept = ", ".join(p["metadata"]["name"] for p in survivors)
            return {"pod": pod["metadata"]["name"], "container": "", "exitCode": None,
                    "reason": "Deleted",
                    "message": f"the pod was deleted while {kept} kept running"}  # fmt: skip
    for pod in sorted(live, key=lambda p: p["metadata"]["name"]):
        found = _container_failure(pod)
        if found is not None:
            return found
    return None


def describe(record: Json) -> str:
    where = f"pod {record['pod']}" + (f" container {record['container']}" if record.get(
        "container") else "")  # fmt: skip
    code = f" exit code {record['exitCode']}" if record.get("exitCode") is not None else ""
    message = f": {record['message']}" if record.get("message") else ""
    return f"{where}: {record['reason']}{code}{message}"


@dataclass(frozen=True)
class Recovery:
    #: (instance, ((pod, uid), ...)): instances restarted now.
    restarts: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    #: ``status.recovery``: one record per instance that ever restarted.
    records: tuple[Json, ...] = ()
    #: (instance, message) of each restart now, for an Event.
    events: tuple[tuple[str, str], ...] = ()
    #: Instances in a restart loop: (instance, message for the condition).
    looping: tuple[tuple[str, str], ...] = ()
    #: Seconds until a deferred restart or force-deletion is due (None: none waiting).
    requeue_after: float | None = None
    #: (pod, uid) of the pods on lost nodes to delete with grace period 0 now.
    force_deletes: tuple[tuple[str, str], ...] = ()
    #: (instance, message) of each force-deletion now, for an Event.
    force_events: tuple[tuple[str, str], ...] = ()


def _restart(record: Json, found: Json, now: dt.datetime, window_seconds: float) -> None:
    """Count a restart of ``found``'s instance now in its ``record``."""
    window_start = parse_time(record.get("windowStart"))
    if window_start is None or (now - window_start).total_seconds() > window_seconds:
        record.update(windowStart=_stamp(now), windowRestarts=0, firstFailure=found)
    record["restarts"] = int(record["restarts"]) + 1
    record["windowRestarts"] = int(record.get("windowRestarts", 0)) + 1
    record["lastRestartTime"] = _stamp(now)
    record["lastFailure"] = found


def _on_lost_nodes(
    inst: Instance, lost: Mapping[str, Loss], restarting: bool
) -> tuple[dict[str, list[tuple[str, str]]], list[float]]:
    """Pods of ``inst`` to force-delete now, per lost node, and the seconds until those
    not yet due are. Only pods already being deleted, or deleted by its restart now: a
    live pod of an instance waiting for its backoff goes with that restart."""
    due: dict[str, list[tuple[str, str]]] = {}
    waits: list[float] = []
    for pod in sorted(inst.pods, key=lambda p: p["metadata"]["name"]):
        loss = lost.get(_node_of(pod))
        if loss is None:
            continue
        if loss.due_in > 0:
            waits.append(loss.due_in)
        elif restarting or pod["metadata"].get("deletionTimestamp"):
            meta = pod["metadata"]
            due.setdefault(loss.node, []).append((meta["name"], str(meta.get("uid", ""))))
    return due, waits


def recover(
    by_role: Mapping[str, list[Instance]],
    gone: Iterable[Json],
    ours: frozenset[str],
    previous: Iterable[Json],
    now: dt.datetime,
    policy: RecoveryPolicy = DEFAULT_POLICY,
    nodes: Mapping[str, Json] | None = None,
    force_delete_after_seconds: int = 0,
) -> Recovery:
    """Which failed instances to restart now, which pods on lost nodes to force-delete, and
    the records and events that go with it. ``nodes``: the nodes of the pods, as the node
    watch keeps them; ``force_delete_after_seconds``: the deployment's (0: off)."""
    known = {r["instance"]: dict(r) for r in previous if r.get("instance")}
    gone_of: dict[str, list[Json]] = {}
    all_instances = {i.name: i for role in by_role.values() for i in role}
    for pod in gone:
        name = pod["metadata"]["name"].rsplit("-", 1)[0]  # <instance>-<ordinal>
        gone_of.setdefault(name, []).append(pod)
    lost = {
        name: loss for name, node in (nodes or {}).items()
        if (loss := node_loss(name, node, now, force_delete_after_seconds)) is not None
    }  # fmt: skip
    restarts, events, looping, forced, force_events = [], [], [], [], []
    waits: list[float] = []
    for name, inst in sorted(all_instances.items()):
        found = failure(inst, gone_of.get(name, []), ours, nodes)
        restarting = False
        if found is not None:
            record = known.get(name) or {"instance": name, "restarts": 0}
            last = parse_time(record.get("lastRestartTime"))
            # Status times have whole seconds: one more keeps the wait at least the backoff.
            wait = policy.backoff(int(record["restarts"])) + TIME_RESOLUTION_SECONDS
            due = last + dt.timedelta(seconds=wait) if last else now
            if due > now:
                waits.append((due - now).total_seconds())
            else:
                restarting = True
                _restart(record, found, now, policy.window_seconds)
                known[name] = record
                if inst.members:
                    restarts.append((name, inst.members))
                events.append((name, f"restarting instance {name} (restart "
                                     f"{record['restarts']}): {describe(found)}"))  # fmt: skip
        due_now, not_yet = _on_lost_nodes(inst, lost, restarting)
        waits += not_yet
        for node, pods in sorted(due_now.items()):
            loss = lost[node]
            record = known.get(name) or {"instance": name, "restarts": 0}
            record["forceDeletions"] = int(record.get("forceDeletions", 0)) + 1
            record["lastForceDeletion"] = {
                "time": _stamp(now), "node": node, "reason": loss.reason,
                "goneSeconds": loss.gone_seconds, "pods": [pod for pod, _ in pods],
            }  # fmt: skip
            known[name] = record
            forced += pods
            names = ", ".join(pod for pod, _ in pods)
            force_events.append((name, f"force-deleting pod{'s' if len(pods) > 1 else ''} "
                                       f"{names} of instance {name}: {loss.message}"))  # fmt: skip
    for name, record in sorted(known.items()):
        if int(record.get("windowRestarts", 0)) >= policy.failure_limit:
            window_start = parse_time(record.get("windowStart"))
            if window_start and (now - window_start).total_seconds() <= policy.window_seconds:
                first = record.get("firstFailure") or {}
                text = describe(first) if first else "unknown"
                looping.append((name, f"instance {name} restarted {record['windowRestarts']} "
                                      f"times within {policy.window_seconds:.0f} s; first "
                                      f"failure: {text}"))  # fmt: skip
    return Recovery(
        restarts=tuple(restarts),
        # an instance scaled away takes its record with it
        records=tuple(r for n, r in sorted(known.items()) if n in all_instances),
        events=tuple(events),
        looping=tuple(looping),
        requeue_after=min(waits) if waits else None,
        force_deletes=tuple(forced),
        force_events=tuple(force_events),
    )
