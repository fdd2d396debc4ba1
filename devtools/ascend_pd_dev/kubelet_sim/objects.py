"""API objects as kubelet-sim reads and writes them: plain dicts, whole-second timestamps,
conditions, and a LIST through the raw client (no model classes in between)."""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]
log = logging.getLogger("kubelet-sim")


def iso(seconds: float) -> str:
    """A Kubernetes timestamp (whole seconds, as the API server stores them)."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None


def condition(
    kind: str, status: bool, timestamp: str, reason: str | None = None, message: str | None = None
) -> Obj:
    """A pod condition; reason and message are always present: a strategic merge (conditions
    merge by type) deletes them with null, so a Ready condition never keeps a stale reason."""
    return {"type": kind, "status": "True" if status else "False", "lastProbeTime": None,
            "lastTransitionTime": timestamp, "reason": reason, "message": message}  # fmt: skip


def is_terminal(pod: Obj) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def list_items(call: Any, **kwargs: Any) -> list[Obj]:
    """The items of a CoreV1Api LIST call, as dicts.

    From the API server's watch cache (``resourceVersion=0``), as a kubelet's informers
    read: a cycle every fraction of a second would otherwise be a quorum read of etcd for
    each list, the dev clusters' largest cost. What the cache lags behind by (milliseconds)
    the next cycle sees; every write here is a patch that holds at any version.
    """
    response = call(_preload_content=False, resource_version="0", **kwargs)
    items: list[Obj] = json.loads(response.data).get("items", [])
    return items


def unless_gone(call: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
    """``call(*args, **kwargs)``; False when the API server answers 404 or 409 (the object is
    gone or changed meanwhile: the next cycle sees it anew)."""
    from kubernetes.client.exceptions import ApiException

    try:
        call(*args, **kwargs)
    except ApiException as err:
        if err.status not in (404, 409):
            raise
        return False
    return True
