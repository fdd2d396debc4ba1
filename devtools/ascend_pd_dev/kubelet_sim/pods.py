"""Pod lifecycle on the API server: what the kubelets of the simulated nodes write.

``Kubelets.sync`` reports a bound pod's status (``pod_status.desired_status``) when it
changed, runs its launcher check when it asked (``check_runs``), applies a crash request once
(recorded in ``knobs.CRASH_HANDLED`` so a restarted kubelet-sim never repeats it) and removes
a pod being deleted (grace period 0). A pod of an unreachable node is only marked NotReady
(``mark_unreachable``). Pod IPs come from a loopback pool (``IpPool``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascend_pd_dev.kubelet_sim import check_runs, knobs, launch_check
from ascend_pd_dev.kubelet_sim.events import record_event
from ascend_pd_dev.kubelet_sim.knobs import Crash
from ascend_pd_dev.kubelet_sim.objects import Obj, is_terminal, log, parse_iso, unless_gone
from ascend_pd_dev.kubelet_sim.pod_status import desired_status, mark_not_ready, status_signature

#: pod IPs come from here; node IPs from 127.0.1.0/24
POD_IP_FIRST = ipaddress.IPv4Address("127.1.0.1")
POD_IP_LAST = ipaddress.IPv4Address("127.254.255.254")


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


def live_pod_ips(pods: Iterable[Obj], nodes: set[str]) -> set[str]:
    """The addresses of the live pods on ``nodes``: a restarted simulator recovers them."""
    return {
        ip
        for pod in pods
        if (ip := (pod.get("status") or {}).get("podIP"))
        and pod.get("spec", {}).get("nodeName") in nodes
        and not is_terminal(pod)
        and not pod.get("spec", {}).get("hostNetwork")
    }


def _where(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


@dataclass
class Kubelets:
    """The kubelets of every simulated node, against one API server."""

    api: Any  # kubernetes.client.CoreV1Api
    ips: IpPool
    #: the timestamp to write now
    now: Callable[[], str]
    #: seconds from a container's start to its readiness (``knobs.READY_AFTER`` overrides)
    ready_after: float = 0.0
    #: where local runtimes are registered (``launch_check``); None: no image is local
    runtimes_dir: Path | None = None
    #: pod uid -> id of the crash request applied, until its CRASH_HANDLED annotation is seen
    crashes: dict[str, str] = field(default_factory=dict)
    _checks: check_runs.LaunchChecks | None = None

    @property
    def checks(self) -> check_runs.LaunchChecks:
        if self._checks is None:
            self._checks = check_runs.LaunchChecks(self.runtimes_dir)
        return self._checks

    def close(self) -> None:
        if self._checks is not None:
            self._checks.shutdown()

    def sync(
        self,
        pod: Obj,
        host_ip: str,
        cluster: launch_check.Cluster | None = None,
        node_ready: str = "True",
        namespace_annotations: Mapping[str, str] | None = None,
    ) -> None:
        """Report ``pod``'s status; with ``cluster``, run its launcher check (it asked);
        ``namespace_annotations``: its namespace's (knobs a namespace may carry)."""
        if pod["metadata"].get("deletionTimestamp"):
            if terminated(pod, parse_iso(self.now()) or 0.0):
                self.delete(pod)
            return
        if is_terminal(pod):
            return
        pod = self._with_crash_recorded(pod)
        current = pod.get("status") or {}
        if pod.get("spec", {}).get("hostNetwork"):
            pod_ip = host_ip  # host-network pods share their node's address
        else:
            pod_ip = current.get("podIP") or self.ips.allocate()
        views = {}
        if cluster is not None and knobs.outcome_of(pod) in ("ready", "unready"):
            views = self.checks.views(pod, pod_ip, host_ip, cluster, asked=True)
        try:
            crash, _ = knobs.crash_requests(pod)
        except ValueError:
            crash = None  # desired_status reports it
        wanted = desired_status(pod, host_ip, pod_ip, self.now(), views, self.ready_after,
                                node_ready, namespace_annotations)  # fmt: skip
        if status_signature(wanted) != status_signature(current):
            if not self._write_status(pod, {"status": wanted}):
                return
            log.info("%s -> %s ready=%s ip=%s", _where(pod), wanted["phase"],
                     wanted["conditions"][1]["status"], pod_ip)  # fmt: skip
        if crash is not None:
            self._applied(pod, crash, wanted["phase"])

    def _with_crash_recorded(self, pod: Obj) -> Obj:
        """``pod``, its crash record written if a crash was applied but the record of it was
        not: a crash is never applied twice."""
        meta = pod["metadata"]
        notes = meta.get("annotations") or {}
        applied = self.crashes.get(str(meta.get("uid")))
        if (applied is not None and notes.get(knobs.CRASH_HANDLED) != applied
                and self.record_crash(pod, applied)):  # fmt: skip
            notes = {**notes, knobs.CRASH_HANDLED: applied}
            return {**pod, "metadata": {**meta, "annotations": notes}}
        return pod

    def _applied(self, pod: Obj, crash: Crash, phase: str) -> None:
        self.crashes[str(pod["metadata"].get("uid"))] = crash.id
        log.info("%s: applied crash %s", _where(pod), crash.id)
        text = (f"kubelet-sim: container crashed as asked ({knobs.CRASH} {crash.id}): "
                f"exit {crash.ended.code} {crash.ended.message}").rstrip()  # fmt: skip
        reason = "BackOff" if phase == "Running" else "Failed"
        record_event(self.api, pod, "Warning", reason, text, self.now())
        self.record_crash(pod, crash.id)

    def _write_status(self, pod: Obj, body: Obj) -> bool:
        meta = pod["metadata"]
        return unless_gone(self.api.patch_namespaced_pod_status, meta["name"], meta["namespace"],
                           body, _preload_content=False)  # fmt: skip

    def record_crash(self, pod: Obj, crash_id: str) -> bool:
        """Write the CRASH_HANDLED annotation, so a restarted kubelet-sim does not repeat it."""
        meta = pod["metadata"]
        patch = {"metadata": {"annotations": {knobs.CRASH_HANDLED: crash_id}}}
        return unless_gone(self.api.patch_namespaced_pod, meta["name"], meta["namespace"], patch,
                           _preload_content=False)  # fmt: skip

    def mark_unreachable(self, pod: Obj, node: str) -> None:
        """A pod of an unreachable node: Ready=False, as the node lifecycle controller marks it;
        nothing else changes, and a deleted one stays Terminating (no kubelet confirms it)."""
        if is_terminal(pod):
            return
        patch = mark_not_ready(pod.get("status") or {}, node, "Unknown", self.now())
        if patch is None or not self._write_status(pod, {"status": patch}):
            return
        log.info("%s -> NotReady (node %s unreachable)", _where(pod), node)

    def delete(self, pod: Obj) -> None:
        meta = pod["metadata"]
        ip = (pod.get("status") or {}).get("podIP")
        unless_gone(
            self.api.delete_namespaced_pod, meta["name"], meta["namespace"],
            grace_period_seconds=0,
            body={"preconditions": {"uid": meta.get("uid")}, "gracePeriodSeconds": 0},
            _preload_content=False,
        )  # fmt: skip
        if ip:
            self.ips.release(ip)
        log.info("removed %s", _where(pod))

    def forget(self, pods: list[Obj], kept_checks: set[str]) -> None:
        """Drop what was kept for pods that are gone: applied crashes, and the launcher checks
        of pods not in ``kept_checks``; record the checks' events."""
        live = {str(p["metadata"].get("uid")) for p in pods}
        self.crashes = {uid: done for uid, done in self.crashes.items() if uid in live}
        if self._checks is None:
            return
        self._checks.forget(kept_checks)
        events, self._checks.events = self._checks.events, []
        for pod, kind, reason, message in events:
            record_event(self.api, pod, kind, reason, message, self.now())


def terminated(pod: Obj, now: float) -> bool:
    """Whether a pod being deleted is done at ``now``: at once, or ``TERMINATE_AFTER`` seconds
    after its deletion but never past its grace period (then the kubelet kills it)."""
    meta = pod["metadata"]
    try:
        after = knobs.terminate_after_of(pod)
    except ValueError:
        after = 0.0
    ends = parse_iso(meta.get("deletionTimestamp"))
    if not after or ends is None:
        return True
    grace = float(meta.get("deletionGracePeriodSeconds") or 0)
    return now >= ends - grace + min(after, grace)
