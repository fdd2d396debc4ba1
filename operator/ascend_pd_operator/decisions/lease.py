"""The rule of leader election among the operator's replicas, on a Lease as read.

Replicas race for a ``coordination.k8s.io/v1`` Lease with optimistic concurrency (a write
carries the resourceVersion it read; the API server's 409 picks one winner). ``decide``
says what a replica does about the Lease it read: create it, take it over once
``renewTime + leaseDurationSeconds`` has passed, renew its own, or wait. ``acting`` says
whether a leader may still act: only within ``ACTING_SHARE`` of the lease since its last
renewal, strictly before any standby may take over, which is what rules out two writers.
``lease_body`` is the Lease a replica writes. No I/O (``kubeio.leader`` does it) and no
clock: time is an input.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Literal

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


def acting(since_renewal: float, lease_seconds: int) -> bool:
    """May a leader whose last renewal was ``since_renewal`` seconds ago still act?"""
    return since_renewal < lease_seconds * ACTING_SHARE


def lease_body(
    name: str,
    namespace: str,
    identity: str,
    lease_seconds: int,
    lease: LeaseView | None,
    now: dt.datetime,
    take_over: bool,
) -> dict[str, Any]:
    """The Lease ``identity`` writes at ``now`` over ``lease`` (None: it creates it);
    ``take_over``: it acquires a lease another held or released."""
    spec: dict[str, Any] = {
        "holderIdentity": identity,
        "leaseDurationSeconds": lease_seconds,
        "renewTime": _micro(now),
    }
    if lease is None or take_over:
        spec["acquireTime"] = _micro(now)
        spec["leaseTransitions"] = (lease.transitions + 1) if lease else 0
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if lease is not None:
        metadata["resourceVersion"] = lease.resource_version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": spec,
    }


def _micro(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
