"""What the reconciles and the watches last reported of each PDDeployment, for its metrics.

The worker reports the status each reconcile computed and the drains it saw end (from its
Events), kopf's PDDeployment watch the spec (its SGLang version), the child watches each
instance StatefulSet (ready, updated) and each runtime pod (its restarts).
``DeploymentReports`` keeps the latest of these and forgets a PDDeployment, an instance or
a pod as soon as it is reported gone, so what it holds is bounded by what exists now;
``metrics.DeploymentCollector`` turns a snapshot into series.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Protocol

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import (
    LABEL_DEPLOYMENT,
    LABEL_INSTANCE,
    LABEL_ROLE,
    REASON_INSTANCE_DRAINED,
    ROLES,
)

Key = tuple[str, str]  # (namespace, name)


class PostedEvent(Protocol):
    """An Event a reconcile posted, as the reports read it (``decisions.events.Event``)."""

    @property
    def type(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def role(self) -> str: ...


#: A drain's outcome, by the type of the ``InstanceDrained`` Event that ended it.
DRAIN_OUTCOMES = {"Normal": "clean", "Warning": "forced"}


@dataclass
class Instance:
    """One instance's StatefulSet as the watch last reported it, and its pods' restarts."""

    deployment: str
    role: str
    ready: bool = False
    updated: bool = True
    pod_restarts: dict[str, int] = field(default_factory=dict)


@dataclass
class Deployment:
    """What the last reconcile of one PDDeployment computed, and its spec's SGLang."""

    status: Json = field(default_factory=dict)
    sglang_version: str = ""
    #: (role, outcome) -> drains ended since this operator started; every pair from the
    #: start, so that the first forced drain is an increase of a series that existed
    drains: dict[tuple[str, str], int] = field(
        default_factory=lambda: {(r, o): 0 for r in ROLES for o in DRAIN_OUTCOMES.values()}
    )


def statefulset_updated(sts: Json) -> bool:
    """Every pod of the StatefulSet runs its current template (no rollout under way)."""
    spec, status = sts.get("spec") or {}, sts.get("status") or {}
    meta = sts.get("metadata") or {}
    want = int(spec.get("replicas", 1) or 0)
    if int(status.get("observedGeneration", 0) or 0) < int(meta.get("generation", 0) or 0):
        return False
    update = status.get("updateRevision")
    if update and status.get("currentRevision") != update:
        return False
    return int(status.get("updatedReplicas", want) or 0) >= want


def pod_restarts(pod: Json) -> int:
    containers = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(c.get("restartCount", 0) or 0) for c in containers)


class DeploymentReports:
    """The latest report of every PDDeployment, instance and pod; safe from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._deployments: dict[Key, Deployment] = {}
        #: (namespace, instance StatefulSet name) -> Instance
        self._instances: dict[Key, Instance] = {}
        #: (namespace, pod name) -> instance key, to forget a deleted pod
        self._pods: dict[Key, Key] = {}

    # --- fed by the worker, the PDDeployment watch and the child watches ----------------
    def deployment_status(
        self, namespace: str, name: str, status: Json | None, events: Iterable[PostedEvent] = ()
    ) -> None:
        """The status a reconcile computed and the Events it posted (``reason``, ``role``);
        None: the PDDeployment is gone."""
        with self._lock:
            if status is None:
                self._forget_locked(namespace, name)
                return
            dep = self._deployments.setdefault((namespace, name), Deployment())
            dep.status = status
            for event in events:
                outcome = DRAIN_OUTCOMES.get(event.type)
                if event.reason == REASON_INSTANCE_DRAINED and outcome and event.role in ROLES:
                    dep.drains[(event.role, outcome)] += 1

    def deployment_spec(self, namespace: str, name: str, spec: Json | None) -> None:
        """The spec kopf's watch reported; None: the PDDeployment was deleted."""
        with self._lock:
            if spec is None:
                self._forget_locked(namespace, name)
                return
            version = str(((spec.get("runtime") or {}).get("sglangVersion")) or "")
            self._deployments.setdefault((namespace, name), Deployment()).sglang_version = version

    def child_seen(self, kind: str, obj: Json) -> None:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        role = labels.get(LABEL_ROLE)
        if role not in ROLES or LABEL_DEPLOYMENT not in labels:
            return
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        if kind == "StatefulSet":
            with self._lock:
                inst = self._instances.setdefault(
                    (namespace, name), Instance(labels[LABEL_DEPLOYMENT], role)
                )
                inst.ready = _instance_ready(obj)
                inst.updated = statefulset_updated(obj)
        elif kind == "Pod" and LABEL_INSTANCE in labels:
            sts = f"{labels[LABEL_DEPLOYMENT]}-{role}-{labels[LABEL_INSTANCE]}"
            with self._lock:
                inst = self._instances.setdefault(
                    (namespace, sts), Instance(labels[LABEL_DEPLOYMENT], role)
                )
                inst.pod_restarts[name] = pod_restarts(obj)
                self._pods[(namespace, name)] = (namespace, sts)

    def child_gone(self, kind: str, namespace: str, name: str) -> None:
        with self._lock:
            if kind == "StatefulSet":
                self._instances.pop((namespace, name), None)
                self._pods = {p: i for p, i in self._pods.items() if i != (namespace, name)}
            elif kind == "Pod":
                key = self._pods.pop((namespace, name), None)
                inst = self._instances.get(key) if key else None
                if inst is not None:
                    inst.pod_restarts.pop(name, None)

    def _forget_locked(self, namespace: str, name: str) -> None:
        self._deployments.pop((namespace, name), None)
        mine = [k for k, i in self._instances.items() if k[0] == namespace and i.deployment == name]
        for key in mine:
            self._instances.pop(key, None)
        self._pods = {p: i for p, i in self._pods.items() if i not in mine}

    def forget_all(self) -> None:
        with self._lock:
            self._deployments.clear()
            self._instances.clear()
            self._pods.clear()

    # --- read at every scrape -------------------------------------------------------------
    def snapshot(self) -> tuple[dict[Key, Deployment], dict[Key, Instance]]:
        """Copies of every PDDeployment's and every instance's latest report."""
        with self._lock:
            deployments = {k: replace(v, status=dict(v.status), drains=dict(v.drains))
                           for k, v in self._deployments.items()}  # fmt: skip
            instances = {k: replace(v, pod_restarts=dict(v.pod_restarts))
                         for k, v in self._instances.items()}  # fmt: skip
        return deployments, instances


def _instance_ready(sts: Json) -> bool:
    from ascend_pd_operator.decisions.waits import instance_ready

    return instance_ready(sts)
