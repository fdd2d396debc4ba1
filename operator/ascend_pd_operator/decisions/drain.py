"""Scale-down that cuts no request: which instances a role keeps (its roster), which one
drains next, and each drain's next step. Pure: the planner turns the steps into writes.

A role runs ``effective`` instances. With fewer, the missing ones are added at the lowest
free indices at once (a scale-up never waits for a drain). With more, one at a time drains,
the first of: a failed or NotReady instance, then the highest index (prefill instance 0
never, while prefill runs: its leader holds the memfabric store every instance uses). The
role chooses no next one while one of its instances drains.

A drain, a step per reconcile; the labels and the pods are its state, so an operator that
restarts mid-drain carries on where it stopped:

1. **mark**: ``ascendpd.io/draining=true`` on the StatefulSet and every pod. The instance
   leaves its scaler's selector and ``status.replicas`` at once; the router still routes to
   it, and rollouts and group recovery no longer touch it;
2. **release**: the StatefulSet is deleted with its pods orphaned, so that no controller
   recreates a pod the drain deletes;
3. **leader**: the leader's pod is deleted with a grace period of ``drainTimeoutSeconds``.
   sglang-router 0.3 drops a worker as soon as its pod has a deletionTimestamp; SGLang, on
   the SIGTERM that follows, finishes the requests it holds and exits (every supported
   release drains ``rid_to_state`` first);
4. **workers**: once the leader is gone, the other pods (the leader's requests needed their
   ranks until it ended), with the same grace period;
5. **gone**: no pod is left. An ``InstanceDrained`` Event says how long it took: Normal, or
   Warning when it took longer than its grace period (forced: the kubelet ended it).
   ``ascend_pd_drains_total`` counts both outcomes, per role.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import LABEL_DRAINING, LABEL_SURGE
from ascend_pd_operator.decisions.rollout import Instance, draining


def _labels(obj: Json) -> Mapping[str, str]:
    labels: Mapping[str, str] = obj["metadata"].get("labels") or {}
    return labels


def _gone_or_going(obj: Json) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


@dataclass(frozen=True)
class Step:
    """One drain's next writes: labels to set (mark), the StatefulSet to release, pods to
    delete (name, uid) with the drain's grace period."""

    instance: str
    mark: tuple[tuple[str, str], ...] = ()
    release: str = ""
    delete_pods: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Roster:
    """One role's instances: the indices it keeps (those to create among them), the one to
    drain now, and the drains under way."""

    own: tuple[int, ...]
    victim: Instance | None
    drains: tuple[Instance, ...]

    @property
    def draining_names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.drains) + ((self.victim.name,) if self.victim else ())


def _is_surge(inst: Instance) -> bool:
    return bool(inst.statefulset and _labels(inst.statefulset).get(LABEL_SURGE) == "true")


def roster(role: str, seen: Iterable[Instance], effective: int) -> Roster:
    """The roster of ``role`` for ``effective`` instances, from every instance that exists
    (``rollout.observed_instances``)."""
    seen = list(seen)
    drains = tuple(i for i in seen if draining(i))
    # the role's own: a StatefulSet that stays, or running pods whose StatefulSet someone
    # deleted (it is applied again under the same index, never a new one)
    kept = [
        i for i in seen
        if not draining(i) and not _is_surge(i)
        and (i.live_pods if i.statefulset is None else not _gone_or_going(i.statefulset))
    ]  # fmt: skip
    own = [i.index for i in kept]
    victim = None
    if len(kept) > effective and not drains:
        candidates = [i for i in kept if not (role == "prefill" and i.index == 0 and effective)]
        # failed or NotReady first, then the highest index
        victim = min(candidates, key=lambda i: (i.ready, -i.index), default=None)
        if victim is not None:
            own.remove(victim.index)
    # an index is free again once only terminating pods of an instance no drain holds are
    # left: a StatefulSet of that name adopts nothing and waits for them, as after any drift
    taken = {i.index for i in seen if i.statefulset or i.live_pods or draining(i)}
    free = (n for n in range(len(taken) + effective + 1) if n not in taken)
    while len(own) < effective:
        own.append(next(free))
    return Roster(tuple(sorted(own)), victim, drains)


def surge_indices(seen: Iterable[Instance], own: Iterable[int], count: int) -> tuple[int, ...]:
    """``count`` surge instances: those that exist first, then new ones numbered after the
    role's own and every other existing instance."""
    seen = list(seen)
    existing = [i.index for i in seen if _is_surge(i) and not draining(i)]
    # an index is free again once only terminating pods of an instance no drain holds are
    # left: a StatefulSet of that name adopts nothing and waits for them, as after any drift
    taken = {i.index for i in seen if i.statefulset or i.live_pods or draining(i)} | set(own)
    out = existing[:count]
    n = max(taken, default=-1) + 1
    while len(out) < count:
        if n not in taken:
            out.append(n)
        n += 1
    return tuple(sorted(out))


def step(inst: Instance, marking: bool = False) -> Step:
    """The next writes of a drain (``marking``: the instance was chosen now)."""
    objs = [inst.statefulset] if inst.statefulset else []
    unmarked = [o for o in objs + list(inst.pods) if _labels(o).get(LABEL_DRAINING) != "true"]
    if marking or unmarked:
        sts = [("StatefulSet", o["metadata"]["name"]) for o in objs if o in unmarked]
        pods = [("Pod", o["metadata"]["name"]) for o in inst.pods if o in unmarked]
        return Step(inst.name, mark=tuple(sts + pods))
    if inst.statefulset is not None:
        if _gone_or_going(inst.statefulset):
            return Step(inst.name)  # the garbage collector orphans the pods, then removes it
        return Step(inst.name, release=inst.statefulset["metadata"]["name"])
    leader = next((p for p in inst.pods if p["metadata"]["name"] == f"{inst.name}-0"), None)
    if leader is not None:
        if _gone_or_going(leader):
            return Step(inst.name)
        return Step(inst.name, delete_pods=((leader["metadata"]["name"],
                                             leader["metadata"].get("uid", "")),))  # fmt: skip
    workers = tuple(
        (p["metadata"]["name"], p["metadata"].get("uid", ""))
        for p in inst.pods
        if not _gone_or_going(p)
    )
    return Step(inst.name, delete_pods=workers)
