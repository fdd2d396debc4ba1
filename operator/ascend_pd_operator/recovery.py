"""Group recovery: an instance whose pod failed is restarted whole, with backoff. Pure.

A multi-node SGLang group cannot take a rank back: when one pod's container restarts, the
pod fails, or it is deleted (by a user, an eviction, a node drain), the other ranks hang in
their collectives. So the whole instance is restarted (all its pods deleted together, the
StatefulSet recreates them) and no other instance is touched.

What counts as a failure of instance X, judged from the API server's own records:

- a container of one of its pods restarted (``restartCount`` > 0; a restarted group starts
  at 0), or a pod's phase is Failed;
- the node of one of its pods is not Ready (the node's own Ready condition, from the node
  watch): the rank on it is lost, and the replacement lands elsewhere (a NotReady node is
  tainted NoSchedule);
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
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .rollout import Instance

Json = dict[str, Any]


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


def failure(
    inst: Instance,
    gone: Iterable[Json],
    ours: frozenset[str],
    unready_nodes: Mapping[str, Json] | None = None,
) -> Json | None:
    """The first failure of ``inst`` (a record for the status), or None: it is healthy.
    ``gone``: its pods deleted or being deleted; ``ours``: uids the operator deleted;
    ``unready_nodes``: node -> its Ready condition, for nodes that are not Ready."""
    live = inst.live_pods
    for pod in sorted(live, key=lambda p: p["metadata"]["name"]):
        node = (pod.get("spec") or {}).get("nodeName", "")
        ready = (unready_nodes or {}).get(node)
        if ready is not None:
            why = ": ".join(str(ready[k]) for k in ("reason", "message") if ready.get(k))
            return {"pod": pod["metadata"]["name"], "container": "", "exitCode": None,
                    "reason": "NodeNotReady",
                    "message": f"node {node} is Ready={ready.get('status', 'Unknown')}"
                    + (f" ({why})" if why else "")}  # fmt: skip
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
    #: Seconds until a deferred restart is due (None: none waiting).
    requeue_after: float | None = None


def recover(
    by_role: Mapping[str, list[Instance]],
    gone: Iterable[Json],
    ours: frozenset[str],
    previous: Iterable[Json],
    now: dt.datetime,
    policy: RecoveryPolicy = DEFAULT_POLICY,
    unready_nodes: Mapping[str, Json] | None = None,
) -> Recovery:
    """Which failed instances to restart now, and the records and events that go with it."""
    known = {r["instance"]: dict(r) for r in previous if r.get("instance")}
    gone_of: dict[str, list[Json]] = {}
    all_instances = {i.name: i for role in by_role.values() for i in role}
    for pod in gone:
        name = pod["metadata"]["name"].rsplit("-", 1)[0]  # <instance>-<ordinal>
        gone_of.setdefault(name, []).append(pod)
    restarts, events, looping = [], [], []
    waits: list[float] = []
    for name, inst in sorted(all_instances.items()):
        record = known.get(name)
        found = failure(inst, gone_of.get(name, []), ours, unready_nodes)
        if found is None:
            continue
        record = record or {"instance": name, "restarts": 0}
        last = parse_time(record.get("lastRestartTime"))
        # Status times have whole seconds: one more keeps the wait at least the backoff.
        wait = policy.backoff(int(record["restarts"])) + TIME_RESOLUTION_SECONDS
        due = last + dt.timedelta(seconds=wait) if last else now
        if due > now:
            waits.append((due - now).total_seconds())
            continue
        window_start = parse_time(record.get("windowStart"))
        if window_start is None or (now - window_start).total_seconds() > policy.window_seconds:
            record.update(windowStart=_stamp(now), windowRestarts=0, firstFailure=found)
        record["restarts"] = int(record["restarts"]) + 1
        record["windowRestarts"] = int(record.get("windowRestarts", 0)) + 1
        record["lastRestartTime"] = _stamp(now)
        record["lastFailure"] = found
        known[name] = record
        pods = inst.members
        if pods:
            restarts.append((name, pods))
        events.append((name, f"restarting instance {name} (restart {record['restarts']}): "
                             f"{describe(found)}"))  # fmt: skip
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
    )
