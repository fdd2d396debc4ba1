"""The helpers tests (and ``ascend-pd-dev cluster node``) steer kubelet-sim with: each sets one
annotation of ``knobs`` on a live pod or a simulated node, refusing here what kubelet-sim would
refuse. ``kube``: a kubeconfig path, a ``kubernetes.client.ApiClient`` or a ``CoreV1Api``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from ascend_pd_dev.kubelet_sim import knobs
from ascend_pd_dev.kubelet_sim.client import core_api
from ascend_pd_dev.kubelet_sim.objects import Obj


def _ask(kube: Any, namespace: str, pod: str, annotation: str, body: Obj,
         parse: Callable[[str], object]) -> None:  # fmt: skip
    text = json.dumps(body)
    parse(text)  # refuse here what kubelet-sim would refuse
    patch = {"metadata": {"annotations": {annotation: text}}}
    core_api(kube).patch_namespaced_pod(pod, namespace, patch, _preload_content=False)


def _with(body: Obj, **optional: object) -> Obj:
    """``body`` plus each optional field that is not None."""
    return {**body, **{key: value for key, value in optional.items() if value is not None}}


def crash_pod(
    kube: Any,
    namespace: str,
    pod: str,
    exit_code: int = 137,
    reason: str = "Error",
    message: str = "",
    *,
    container: str | None = None,
    restart_after_seconds: float | None = None,
) -> str:
    """Ask kubelet-sim to crash one container of a live pod (the first unless ``container``);
    returns the request's id. Each call is a new crash: restartCount goes up once per call.
    ``restart_after_seconds`` (None: the kubelet's back-off) is how long it stays down."""
    crash_id = uuid.uuid4().hex[:12]
    body = {"id": crash_id, "exitCode": exit_code, "reason": reason, "message": message}
    body = _with(body, container=container, restartAfterSeconds=restart_after_seconds)
    _ask(kube, namespace, pod, knobs.CRASH, body, knobs.parse_crash)
    return crash_id


def fail_pod(
    kube: Any,
    namespace: str,
    pod: str,
    exit_code: int = 1,
    reason: str = "Error",
    message: str = "",
    *,
    pod_reason: str | None = None,
    pod_message: str | None = None,
) -> None:
    """Ask kubelet-sim to end a live pod for good: phase Failed, every container terminated
    with ``exit_code``/``reason``/``message``. Under restart policy Never that is all a kubelet
    shows; under Always/OnFailure a kubelet fails a pod only by evicting it, so its reason is
    ``Evicted`` unless ``pod_reason`` says otherwise (``pod_message``: the pod's message)."""
    body = {"exitCode": exit_code, "reason": reason, "message": message}
    body = _with(body, podReason=pod_reason, podMessage=pod_message)
    _ask(kube, namespace, pod, knobs.FAIL, body, knobs.parse_failure)


def set_node_ready(kube: Any, node: str, ready: bool = True, *, unreachable: bool = False) -> None:
    """Make a simulated node Ready again, NotReady (``ready=False``: its kubelet reports
    Ready=False) or unreachable (``unreachable=True``: Ready=Unknown, heartbeat stopped).
    Either way its pods turn NotReady; they turn Ready again with the node."""
    value = None if ready and not unreachable else ("unknown" if unreachable else "true")
    patch = {"metadata": {"annotations": {knobs.NOT_READY: value}}}
    core_api(kube).patch_node(node, patch, _preload_content=False)
