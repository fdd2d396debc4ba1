"""Lease-based leader election: exactly one active operator replica.

The rule is ``decisions.lease``'s: a standby takes over only once the lease expired, a
leader stops acting strictly earlier. Here is the I/O around it: ``Leases`` reads and
writes the one Lease, ``LeaderElector`` campaigns for it and renews it every
``renew_seconds``. A leader that cannot renew before its own lease expires stops acting
before anyone else may take over (the standby waits the full lease duration, the leader
gives up strictly earlier). It then stands by and campaigns again: the process lives on.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Literal

from ascend_pd_operator.decisions.lease import LeaseView, acting, decide, lease_body
from ascend_pd_operator.kubeio.errors import KubeError

if TYPE_CHECKING:
    from ascend_pd_operator.kubeio.supervisor import Unit

log = logging.getLogger(__name__)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Leases:
    """The Lease ``namespace``/``name`` through ``kube`` (``get``, ``create``, ``replace``):
    read it, write it. Its own ``Kube``, not the fenced one: a standby writes the Lease."""

    def __init__(self, kube: Any, namespace: str, name: str, default_seconds: int) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        #: The duration of a Lease that does not say.
        self.default_seconds = default_seconds

    def read(self) -> LeaseView | None:
        lease = self.kube.get("Lease", self.namespace, self.name)
        if lease is None:
            return None
        spec = lease.get("spec") or {}
        renewed = spec.get("renewTime")
        return LeaseView(
            holder=spec.get("holderIdentity") or "",
            renew_time=dt.datetime.fromisoformat(renewed) if renewed else None,
            duration_seconds=spec.get("leaseDurationSeconds") or self.default_seconds,
            resource_version=str(lease["metadata"].get("resourceVersion", "")),
            transitions=spec.get("leaseTransitions") or 0,
        )

    def write(self, create: bool, body: dict[str, Any]) -> bool:
        """Create or replace the Lease; False when another replica wrote first."""
        try:
            if create:
                self.kube.create("Lease", self.namespace, body)
            else:
                self.kube.replace("Lease", self.namespace, self.name, body)
        except KubeError as exc:
            if exc.status in (409, 422):  # another replica wrote first: re-read next round
                return False
            raise
        return True

    def holder(self) -> str | None:
        """The current holder ("" for none), or None when the API cannot tell us right now."""
        try:
            lease = self.read()
        except Exception:
            return None
        return lease.holder if lease else ""


class LeaderElector:
    """``run()`` (a supervised unit) acquires the lease, then renews it; ``holds`` says
    whether this replica may write now."""

    def __init__(
        self,
        kube: Any,
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
        self.leases = Leases(kube, namespace, name, lease_seconds)
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.is_leader = threading.Event()
        self._last_renewed = 0.0  # monotonic

    def try_once(self) -> bool:
        """One round of the protocol; True when this replica holds the lease afterwards."""
        started = time.monotonic()
        now = _now()
        lease = self.leases.read()
        action = decide(lease, self.identity, now)
        if action == "wait":
            return False
        leases = self.leases
        body = lease_body(leases.name, leases.namespace, self.identity, self.lease_seconds,
                          lease, now, take_over=action == "acquire")  # fmt: skip
        if not leases.write(action == "create", body):
            return False
        # Count the lease from when we sent the write, not when it returned.
        self._last_renewed = started
        if action != "renew":
            log.info("leader election: %s now holds lease %s/%s",
                     self.identity, self.leases.namespace, self.leases.name)  # fmt: skip
        return True

    def holds(self) -> bool:
        """May this replica write now? Leader, and renewed within ``ACTING_SHARE`` of the lease.

        Checked before every write: a leader that was paused or cut off (its renew thread
        stalled with the rest of it) must not write on waking, before the renew thread
        has even noticed that a standby took over.
        """
        return self.is_leader.is_set() and self._acting()

    def _acting(self) -> bool:
        return acting(time.monotonic() - self._last_renewed, self.lease_seconds)

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
        try:
            if self.try_once():
                return "renewed"
            reason = "the lease changed hands or a renewal conflicted"
        except Exception as exc:
            reason = f"renewal failed: {exc.__class__.__name__}"
        if self.leases.holder() in (self.identity, None) and self._acting():
            log.warning("leader election: %s; retrying", reason)
            return "retrying"
        log.error("leader election: lost lease %s/%s (%s); standing by",
                  self.leases.namespace, self.leases.name, reason)  # fmt: skip
        self.is_leader.clear()
        return "lost"
