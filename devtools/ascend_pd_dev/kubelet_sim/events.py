"""The Events kubelet-sim records, as a scheduler or a kubelet would (``kubectl describe pod``)."""

from __future__ import annotations

from typing import Any

from ascend_pd_dev.kubelet_sim.objects import Obj, log


def record_event(api: Any, pod: Obj, kind: str, reason: str, message: str, timestamp: str) -> None:
    """Record one Event on ``pod``; best effort (a failure is logged, never raised)."""
    from kubernetes.client.exceptions import ApiException

    meta = pod["metadata"]
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                           "namespace": meta["namespace"], "uid": meta.get("uid")},
        "type": kind,
        "reason": reason,
        "message": message,
        "source": {"component": "kubelet-sim"},
        "firstTimestamp": timestamp,
        "lastTimestamp": timestamp,
        "count": 1,
    }  # fmt: skip
    try:
        api.create_namespaced_event(meta["namespace"], event, _preload_content=False)
    except ApiException as err:
        log.warning("event %s for %s/%s not recorded: %s", reason, meta["namespace"],
                    meta["name"], err.reason)  # fmt: skip
