"""kubelet-sim's scheduler: binds each pending pod of the default scheduler to the first node
where it fits (``placement``), with the ``Scheduled`` and ``FailedScheduling`` events a
scheduler records; a pod that fits nowhere stays Pending with ``PodScheduled=False, reason
Unschedulable`` saying why (written once per distinct reason). The claims of a pod that asks
(``knobs.CHECK_CLAIMS``) are checked first (``placement.claim_problem``); they are listed only
while such a pod waits, so a cluster without one pays nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ascend_pd_dev.kubelet_sim import knobs
from ascend_pd_dev.kubelet_sim.events import record_event
from ascend_pd_dev.kubelet_sim.objects import Obj, list_items, log, unless_gone
from ascend_pd_dev.kubelet_sim.placement import choose_node, claim_names, claim_problem

SCHEDULER_NAME = "default-scheduler"


def _key(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def pending(pods: list[Obj]) -> list[Obj]:
    """Our scheduler's unbound, undeleted pods, oldest first."""
    return sorted(
        (p for p in pods if not p.get("spec", {}).get("nodeName")
         and not p["metadata"].get("deletionTimestamp")
         and (p.get("spec", {}).get("schedulerName") or SCHEDULER_NAME) == SCHEDULER_NAME),
        key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]),
    )  # fmt: skip


@dataclass
class Scheduler:
    api: Any  # kubernetes.client.CoreV1Api
    #: the timestamp to write now
    now: Callable[[], str]
    #: pod key -> why it fits nowhere, as last reported
    unschedulable: dict[str, str] = field(default_factory=dict)

    def schedule_pending(
        self, nodes: list[Obj], pods: list[Obj], namespaces: dict[str, dict[str, str]]
    ) -> None:
        """Bind every pending pod that fits; later pods see the capacity earlier ones took
        (``namespaces``: each namespace's annotations)."""
        waiting = pending(pods)
        keys = {_key(p) for p in waiting}
        for key in set(self.unschedulable) - keys:
            del self.unschedulable[key]
        checked, claims = self._claims_checked(waiting, namespaces)
        for pod in waiting:
            asked = str(pod["metadata"].get("uid")) in checked
            # a claim problem stops the pod before any node is tried
            blocked = claim_problem(pod, claims) if asked else ""
            chosen, message = (None, blocked) if blocked else choose_node(pod, nodes, pods)
            if chosen is None:
                self._unschedulable(pod, message)
            else:
                self.unschedulable.pop(_key(pod), None)
                self._bind(pod, chosen)

    def _claims_checked(
        self, waiting: list[Obj], namespaces: dict[str, dict[str, str]]
    ) -> tuple[set[str], dict[tuple[str, str], Obj]]:
        """(uids of the pending pods whose claims are checked, the claims by (namespace,
        name)); listed only while such a pod waits, so a cluster without one pays nothing."""
        with_claims = [p for p in waiting if claim_names(p)]
        if not with_claims:
            return set(), {}
        asked = {
            str(p["metadata"].get("uid"))
            for p in with_claims
            if knobs.checks_claims(p, namespaces.get(p["metadata"]["namespace"], {}))
        }
        if not asked:
            return set(), {}
        claims = {
            (c["metadata"]["namespace"], c["metadata"]["name"]): c
            for c in list_items(self.api.list_persistent_volume_claim_for_all_namespaces)
        }
        return asked, claims

    def _unschedulable(self, pod: Obj, message: str) -> None:
        key, meta = _key(pod), pod["metadata"]
        if self.unschedulable.get(key) == message:
            return
        self.unschedulable[key] = message
        log.info("cannot place %s: %s", key, message)
        record_event(self.api, pod, "Warning", "FailedScheduling", message, self.now())
        body = {"status": {"conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": message, "lastProbeTime": None, "lastTransitionTime": self.now(),
        }]}}  # fmt: skip
        unless_gone(self.api.patch_namespaced_pod_status, meta["name"], meta["namespace"], body,
                    _preload_content=False)  # fmt: skip

    def _bind(self, pod: Obj, chosen: str) -> None:
        key, meta = _key(pod), pod["metadata"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                         "uid": meta.get("uid")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": chosen},
        }  # fmt: skip
        if not unless_gone(self.api.create_namespaced_pod_binding, meta["name"],
                           meta["namespace"], binding, _preload_content=False):  # fmt: skip
            return  # deleted or already bound meanwhile
        log.info("bound %s to %s", key, chosen)
        record_event(self.api, pod, "Normal", "Scheduled",
                     f"Successfully assigned {key} to {chosen}", self.now())  # fmt: skip
        # later pods of this cycle must see the capacity this one takes
        pod.setdefault("spec", {})["nodeName"] = chosen
