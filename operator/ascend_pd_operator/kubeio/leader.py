"""Lease-based leader election: exactly one active operator replica.

Replicas race for a ``coordination.k8s.io/v1`` Lease with optimistic
concurrency (a write carries the resourceVersion it read; the API server's 409
picks one winner). The leader renews every ``renew_seconds``; a replica takes
over only once ``renewTime + leaseDurationSeconds`` has passed. A leader that
cannot renew before its own lease expires stops acting before
anyone else may take over, which is what rules out two writers: the standby
waits the full lease duration, the leader gives up strictly earlier. It then
stands by and campaigns again: the process lives on.

``decide`` is the pure rule; ``LeaderElector`` does the I/O around it.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ascend_pd_operator.kubeio.supervisor import Unit

log = logging.getLogger(__name__)

Action = Literal["create", "acquire", "renew", "wait"]
#: A leader stops acting once this share of the lease duration passed since its last
#: renewal, strictly before any standby may take over.
ACTING_SHARE = 0.8


@dataclass(frozen=True)
class LeaseView:
    """The fields of a Lease the decision needs (None: no Lease yet)."""

    holder: str
    renew_time: dt.datetime | None
    duration_seconds: int
    resource_version: str
    transitions: int = 0


def decide(lease: LeaseView | None, me: str, now: dt.datetime) -> Action:
    """What a replica named ``me`` should do about ``lease`` at ``now``."""
    if lease is None:
        return "create"
    if lease.holder == me:
        return "renew"
    if not lease.holder or lease.renew_time is None:
        return "acquire"
    expires = lease.renew_time + dt.timedelta(seconds=lease.duration_seconds)
    return "acquire" if now >= expires else "wait"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _micro(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """``run()`` (a supervised unit) acquires the lease, then renews it."""

    def __init__(
        self,
        coordination_api: Any,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: int = 15,
        renew_seconds: float = 5.0,
    ) -> None:
        if renew_seconds * 2 > lease_seconds:
            raise ValueError(
                f"renew interval {renew_seconds}s must be at most half the lease "
                f"duration {lease_seconds}s, or a healthy leader could lose its lease"
            )
        self.api = coordination_api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.is_leader = threading.Event()
        self._last_renewed = 0.0  # monotonic

    def _read(self) -> LeaseView | None:
        from kubernetes.client.exceptions import ApiException

        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        spec = lease.spec
        return LeaseView(
            holder=spec.holder_identity or "",
            renew_time=spec.renew_time,
            duration_seconds=spec.lease_duration_seconds or self.lease_seconds,
            resource_version=lease.metadata.resource_version,
            transitions=spec.lease_transitions or 0,
        )

    def _body(self, lease: LeaseView | None, now: dt.datetime, take_over: bool) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_seconds,
            "renewTime": _micro(now),
        }
        if lease is None or take_over:
            spec["acquireTime"] = _micro(now)
            spec["leaseTransitions"] = (lease.transitions + 1) if lease else 0
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if lease is not None:
            metadata["resourceVersion"] = lease.resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    def try_once(self) -> bool:
        """One round of the protocol; True when this replica holds the lease afterwards."""
        from kubernetes.client.exceptions import ApiException

        started = time.monotonic()
        now = _now()
        lease = self._read()
        action = decide(lease, self.identity, now)
        if action == "wait":
            return False
        body = self._body(lease, now, take_over=action == "acquire")
        try:
            if action == "create":
                self.api.create_namespaced_lease(self.namespace, body)
            else:
                self.api.replace_namespaced_lease(self.name, self.namespace, body)
        except ApiException as exc:
            if exc.status in (409, 422):  # another replica wrote first: re-read next round
                return False
            raise
        # Count the lease from when we sent the write, not when it returned.
        self._last_renewed = started
        if action != "renew":
            log.info(
                "leader election: %s now holds lease %s/%s",
                self.identity,
                self.namespace,
                self.name,
            )
        return True

    def holds(self) -> bool:
        """May this replica write now? Leader, and renewed within ``ACTING_SHARE`` of the lease.

        Checked before every write: a leader that was paused or cut off (its renew thread
        stalled with the rest of it) must not write on waking, before the renew thread
        has even noticed that a standby took over.
        """
        return self.is_leader.is_set() and (
            time.monotonic() - self._last_renewed < self.lease_seconds * ACTING_SHARE
        )

    def _safe_holder(self) -> str | None:
        """The current holder, or None when the API cannot tell us right now."""
        try:
            lease = self._read()
        except Exception:
            return None
        return lease.holder if lease else ""

    def run(self, unit: Unit, stop: threading.Event) -> None:
        """Acquire the lease, renew it until it is lost, stand by and campaign again, until
        ``stop``. Losing the lease (an API outage longer than it, a pause) never ends the
        process: writes are fenced by ``holds`` the moment renewal is overdue, and the
        workers wait while ``is_leader`` is clear.

        Any exception ends this call and the supervisor calls it again, which resumes where it was
        (still waiting, or leading and renewing: ``is_leader`` and the last renewal
        survive the restart). The unit beats after every round that reached the API.
        """
        while not stop.is_set():
            while not self.is_leader.is_set():
                if self.try_once():
                    self.is_leader.set()
                unit.beat()
                if not self.is_leader.is_set() and stop.wait(self.renew_seconds):
                    return
            if stop.wait(self.renew_seconds):
                return
            while (outcome := self._renew_once()) != "lost":
                if outcome == "renewed":
                    unit.beat()
                if stop.wait(self.renew_seconds):
                    return
            # lost: a standby now, campaigning like any other (is_leader is clear)

    def _renew_once(self) -> Literal["renewed", "retrying", "lost"]:
        """One renewal; "lost" once the lease is lost (``is_leader`` is clear then)."""
        deadline = self.lease_seconds * ACTING_SHARE
        try:
            if self.try_once():
                return "renewed"
            reason = "the lease changed hands or a renewal conflicted"
        except Exception as exc:
            reason = f"renewal failed: {exc.__class__.__name__}"
        current = self._safe_holder()
        if current in (self.identity, None) and (time.monotonic() - self._last_renewed < deadline):
            log.warning("leader election: %s; retrying", reason)
            return "retrying"
        log.error(
            "leader election: lost lease %s/%s (%s); standing by",
            self.namespace,
            self.name,
            reason,
        )
        self.is_leader.clear()
        return "lost"
