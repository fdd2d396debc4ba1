"""Node loss: a node carrying an instance's pods becomes unreachable (issue 20).

Two PDDeployments, each one two-node prefill instance and one decode instance with one pod
per node (8 NPUs), on the scenario cluster's 8 nodes: ``forced`` sets
``spec.recovery.forceDeleteAfterSeconds``, ``kept`` does not. kubelet-sim makes a node
unreachable at once (Ready=Unknown, the unreachable NoSchedule taint; the dev cluster runs
no node lifecycle controller, so there is no 40 s grace period and no eviction).

1. A node of each one's prefill instance (never one running a router) turns unreachable.
   Group recovery restarts both instances; their pods on the lost nodes stay Terminating.
   ``forced``: its pod there is force-deleted once the timer has expired, never sooner
   (counted from the node's Ready ``lastTransitionTime``), and the instance is Ready again
   on other nodes; a ``PodsForceDeleted`` Event and ``status.recovery`` name the node and
   how long it was gone. ``kept``: nothing is force-deleted; its pod stays Terminating and
   its instance down until well past the timer (``forced`` was acted on meanwhile).
2. Both nodes come back: the kubelet ends the Terminating pod and ``kept`` is Ready again.
3. A node of ``kept`` turns unreachable and an admin taints it
   ``node.kubernetes.io/out-of-service``: its pod is force-deleted at once, without the field.
4. The taint goes, the node comes back; the audit finds nothing lost or duplicated.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ascend_pd_dev.kubelet_sim.nodes import NODE_TAINTS
from ascend_pd_dev.kubelet_sim.testing import set_node_ready
from ascend_pd_operator.api.access import resource_for
from ascend_pd_operator.api.vocabulary import (
    COMPONENT_ROUTER,
    LABEL_COMPONENT,
    LABEL_DEPLOYMENT,
    LABEL_INSTANCE,
    LABEL_ROLE,
    REASON_NODE_OUT_OF_SERVICE,
    REASON_NODE_UNREACHABLE,
    REASON_PODS_FORCE_DELETED,
    TAINT_OUT_OF_SERVICE,
    role_status,
)
from ascend_pd_operator.decisions.recovery import parse_time, ready_condition
from ascend_pd_operator.kubeio.kube import KubeError, path

from .audit import wait_converged
from .env import Env, Release, ScenarioError, wait_for
from .result import ScenarioResult
from .specs import pdd

Json = dict[str, Any]
#: ``make reliability``'s timer; the CI test's is shorter but still expires.
FORCE_DELETE_AFTER_SECONDS = 60
CI_FORCE_DELETE_AFTER_SECONDS = 20
RESYNC_SECONDS = 5.0
#: ``kept`` is watched this long past the timer: two resync intervals, by which a
#: force-deletion would long have happened (``forced``'s comes within a second or so).
HOLD_SECONDS = 2 * RESYNC_SECONDS
#: Time for anything to converge on a busy 2-core machine.
BOUND_SECONDS = 240.0


def _doc(name: str, namespace: str, force_after: int | None) -> Json:
    doc = pdd(name, namespace, prefill=1, decode=1)
    spec = doc["spec"]
    # one pod per node: 8 NPUs each, prefill TP 8 × PP 2 on two nodes, decode TP 8 on one
    spec["prefill"].update(parallelism={"tensor": 8, "pipeline": 2}, devicesPerNode=8)
    spec["decode"].update(parallelism={"tensor": 8}, devicesPerNode=8)
    # one router each (the default runs two, spread over nodes): step 1 needs a prefill
    # node that runs none, which four routers on eight nodes would not always leave
    spec["router"] = {**spec.get("router", {}), "replicas": 1}
    if force_after is not None:
        spec["recovery"] = {"forceDeleteAfterSeconds": force_after}
    return doc


def _labels(pod: Json) -> dict[str, str]:
    return dict(pod["metadata"].get("labels") or {})


def _node(pod: Json) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _ready(pod: Json) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _prefill_pods(env: Env, namespace: str, name: str) -> list[Json]:
    """The pods of ``name``'s prefill instance, Terminating ones too."""
    pods = env.kube.list("Pod", namespace, f"{LABEL_DEPLOYMENT}={name}")
    return [p for p in pods if _labels(p).get(LABEL_ROLE) == "prefill"
            and _labels(p).get(LABEL_INSTANCE) == "0"]  # fmt: skip


def _pod_by_uid(env: Env, namespace: str, uid: str) -> Json | None:
    pods = env.kube.list("Pod", namespace, LABEL_DEPLOYMENT)
    return next((p for p in pods if p["metadata"]["uid"] == uid), None)


def _terminating(pod: Json | None) -> bool:
    return pod is not None and bool(pod["metadata"].get("deletionTimestamp"))


def _resource(env: Env, namespace: str, name: str) -> Json:
    return env.get_json("pdd", name, "-n", namespace) or {}


def _deployment_ready(env: Env, namespace: str, name: str) -> bool:
    cr = _resource(env, namespace, name)
    st = cr.get("status") or {}
    generation = cr.get("metadata", {}).get("generation")
    return bool(st.get("phase") == "Ready" and st.get("observedGeneration") == generation)


def _prefill_ready(env: Env, namespace: str, name: str) -> int:
    status = _resource(env, namespace, name).get("status") or {}
    return int(role_status(status, "prefill").get("readyReplicas") or 0)


def _back(env: Env, namespace: str, name: str, lost: str, old_uid: str) -> bool:
    """``name``'s prefill instance is whole and Ready again, the pod ``old_uid`` replaced
    and none of its pods on the node ``lost``, and the deployment says Ready."""
    pods = [p for p in _prefill_pods(env, namespace, name) if not _terminating(p)]
    return (
        len(pods) == 2
        and all(_ready(p) and _node(p) not in ("", lost) for p in pods)
        and old_uid not in {p["metadata"]["uid"] for p in pods}
        and _deployment_ready(env, namespace, name)
    )


def _routers(env: Env, namespace: str) -> list[Json]:
    pods = env.kube.list("Pod", namespace, LABEL_DEPLOYMENT)
    routers = [p for p in pods if _labels(p).get(LABEL_COMPONENT) == COMPONENT_ROUTER]
    return [p for p in routers if not _terminating(p)]


def _routers_off_prefill_nodes(env: Env, namespace: str) -> None:
    """Set-up: no router on a node of either prefill instance, which step 1 needs (a lost
    router would hold its deployment's Ready down on its own). The scheduler may put both
    routers there (a CI run had it): those nodes are cordoned, the routers there deleted and
    started again elsewhere by their ReplicaSets, and the nodes uncordoned."""
    prefill = {_node(p) for n in ("forced", "kept") for p in _prefill_pods(env, namespace, n)}
    moved = [p for p in _routers(env, namespace) if _node(p) in prefill]
    if not moved:
        return
    cordoned = sorted(prefill - {""})
    for node in cordoned:
        env.kube.patch("Node", "", node, {"spec": {"unschedulable": True}})
    try:
        for pod in moved:
            env.kube.delete("Pod", namespace, pod["metadata"]["name"])
        settled = wait_for(
            lambda: not any(_node(p) in prefill for p in _routers(env, namespace))
            and all(_ready_check(env, namespace, n)() for n in ("forced", "kept")),
            BOUND_SECONDS, 0.5,
        )[0]  # fmt: skip
        if not settled:
            raise ScenarioError("the routers did not start again off the prefill nodes")
    finally:
        for node in cordoned:
            env.kube.patch("Node", "", node, {"spec": {"unschedulable": None}})


def _pick_node(env: Env, namespace: str, name: str) -> tuple[str, Json]:
    """A node running a prefill pod of ``name`` and no router: (node, that pod)."""
    routers = {_node(p) for p in env.kube.list("Pod", namespace, LABEL_DEPLOYMENT)
               if _labels(p).get(LABEL_COMPONENT) == COMPONENT_ROUTER}  # fmt: skip
    for pod in sorted(_prefill_pods(env, namespace, name), key=lambda p: p["metadata"]["name"]):
        if _node(pod) and _node(pod) not in routers and not _terminating(pod):
            return _node(pod), pod
    raise ScenarioError(f"every node of {name}'s prefill instance runs a router")


def _unreachable_since(env: Env, node: str) -> float | None:
    """When ``node``'s Ready condition turned Unknown (epoch seconds), once it has and the
    unreachable taint is on it (kubelet-sim writes no taints after that)."""
    obj = env.kube.get("Node", "", node) or {}
    ready = ready_condition(obj)
    taints = {t.get("key") for t in (obj.get("spec") or {}).get("taints") or []}
    when = parse_time(ready.get("lastTransitionTime"))
    if ready.get("status") != "Unknown" or NODE_TAINTS["Unknown"] not in taints:
        return None
    return when.timestamp() if when else None


def _lose(env: Env, namespace: str, node: str, pod: Json, bound_seconds: float) -> float:
    """Make ``node`` unreachable; once group recovery restarted the instance of ``pod`` (on
    it: it is Terminating), return when the node turned unreachable (epoch seconds)."""
    set_node_ready(env.kubeconfig, node, False, unreachable=True)
    since, _ = wait_for(lambda: _unreachable_since(env, node), 60.0)
    if since is None:
        raise ScenarioError(f"kubelet-sim did not make {node} unreachable")
    uid = pod["metadata"]["uid"]
    restarted, _ = wait_for(lambda: _terminating(_pod_by_uid(env, namespace, uid)),
                            bound_seconds, 0.5)  # fmt: skip
    if not restarted:
        raise ScenarioError(f"{pod['metadata']['name']} on {node} was never deleted")
    return float(since)


def _set_taints(env: Env, node: str, change: Callable[[list[Json]], list[Json]]) -> None:
    """Replace ``node``'s taints by ``change(taints)`` as of the version read; a 409
    (kubelet-sim wrote meanwhile): read again and retry."""
    for _ in range(10):
        obj = env.kube.get("Node", "", node) or {}
        taints = change(list((obj.get("spec") or {}).get("taints") or []))
        patch = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                 "spec": {"taints": taints or None}}  # fmt: skip
        try:
            env.kube.request("PATCH", path(resource_for("Node"), None, node), body=patch,
                             content_type="application/merge-patch+json")  # fmt: skip
            return
        except KubeError as exc:
            if exc.status != 409:
                raise
    raise ScenarioError(f"could not change the taints of {node}")


def _without_out_of_service(taints: list[Json]) -> list[Json]:
    return [t for t in taints if t.get("key") != TAINT_OUT_OF_SERVICE]


def _told(env: Env, namespace: str, name: str) -> list[str]:
    """The messages of ``name``'s PodsForceDeleted Events."""
    items = (env.get_json("events", "-n", namespace) or {}).get("items") or []
    return [str(e.get("message", "")) for e in items
            if e.get("reason") == REASON_PODS_FORCE_DELETED
            and (e.get("involvedObject") or {}).get("name") == name]  # fmt: skip


def _force_deletion(env: Env, namespace: str, name: str) -> Json:
    """``status.recovery``'s lastForceDeletion of ``name``'s prefill instance ({}: none)."""
    records = (_resource(env, namespace, name).get("status") or {}).get("recovery") or []
    found: Json = next((r for r in records if r.get("instance") == f"{name}-prefill-0"), {})
    return dict(found.get("lastForceDeletion") or {})


def run(
    env: Env, release: Release, namespace: str, force_after: int = FORCE_DELETE_AFTER_SECONDS
) -> ScenarioResult:
    result = ScenarioResult("node-loss")
    operator = release.operator([namespace], "node-loss-operator", resync_seconds=RESYNC_SECONDS)
    unreachable: set[str] = set()
    tainted: set[str] = set()
    result.details["force_delete_after_seconds"] = force_after
    try:
        operator.start()
        for name, after in (("forced", force_after), ("kept", None)):
            env.apply([_doc(name, namespace, after)])
            if not wait_for(_ready_check(env, namespace, name), BOUND_SECONDS, 0.5)[0]:
                raise ScenarioError(f"{name} was not Ready before the node loss")
        _routers_off_prefill_nodes(env, namespace)
        lost = {name: _pick_node(env, namespace, name) for name in ("forced", "kept")}
        unreachable |= {node for node, _ in lost.values()}
        since = {name: _lose(env, namespace, node, pod, BOUND_SECONDS)
                 for name, (node, pod) in lost.items()}  # fmt: skip
        _both_lost(env, namespace, result, force_after, BOUND_SECONDS, lost, since)

        # 2. both nodes come back: the kubelet ends kept's pod; kept is Ready again
        started = time.monotonic()
        for node, _ in lost.values():
            set_node_ready(env.kubeconfig, node, True)
            unreachable.discard(node)
        kept_uid = lost["kept"][1]["metadata"]["uid"]
        ok, _ = wait_for(lambda: _back(env, namespace, "kept", "", kept_uid), BOUND_SECONDS, 0.5)
        seconds = time.monotonic() - started
        result.record(bool(ok), seconds, "kept was not Ready again once its node came back")
        result.details["kept_ready_after_node_returned_seconds"] = round(seconds, 1)

        # 3. a node of kept's is lost and an admin takes it out of service: its pod goes at once
        z, z_pod = _pick_node(env, namespace, "kept")
        unreachable.add(z)
        _lose(env, namespace, z, z_pod, BOUND_SECONDS)
        started = time.monotonic()
        taint = {"key": TAINT_OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"}
        tainted.add(z)
        _set_taints(env, z, lambda taints: [*taints, taint])
        z_uid = z_pod["metadata"]["uid"]
        _, freed = wait_for(lambda: _pod_by_uid(env, namespace, z_uid) is None, BOUND_SECONDS)
        ok, _ = wait_for(lambda: _back(env, namespace, "kept", z, z_uid), BOUND_SECONDS, 0.5)
        seconds = time.monotonic() - started
        record, told = _force_deletion(env, namespace, "kept"), _told(env, namespace, "kept")
        named = record.get("node") == z and record.get("reason") == REASON_NODE_OUT_OF_SERVICE
        problem = f"out-of-service {z}: back {bool(ok)}, record {record}, events {told}"
        result.record(bool(ok) and named and any(z in m for m in told), seconds, problem)
        result.details.update(out_of_service_node=z, out_of_service_record=record,
                              out_of_service_force_deleted_seconds=round(freed, 1),
                              out_of_service_back_seconds=round(seconds, 1),
                              out_of_service_events=told)  # fmt: skip

        # 4. the admin removes the taint, the node returns: everything converges
        _set_taints(env, z, _without_out_of_service)
        tainted.discard(z)
        set_node_ready(env.kubeconfig, z, True)
        unreachable.discard(z)
        found, seconds = wait_converged(env.kube, namespace, BOUND_SECONDS, 0.5)
        result.details["converged_after_last_node_returned_seconds"] = round(seconds, 1)
        result.final_audit(found)
        result.details["tracebacks_in_log"] = operator.log_text().count("Traceback")
    finally:
        for node in tainted:  # the cluster is whole again for the next scenario
            _set_taints(env, node, _without_out_of_service)
        for node in unreachable:
            set_node_ready(env.kubeconfig, node, True)
        result.judge_process(operator.log_text(), operator.alive())
        operator.kill()
    return result


def _ready_check(env: Env, namespace: str, name: str) -> Callable[[], bool]:
    return lambda: _deployment_ready(env, namespace, name)


def _both_lost(
    env: Env,
    namespace: str,
    result: ScenarioResult,
    force_after: int,
    bound_seconds: float,
    lost: dict[str, tuple[str, Json]],
    since: dict[str, float],
) -> None:
    """Step 1, both nodes unreachable and both instances restarted (their pods there
    Terminating): ``forced`` comes back once its timer expired, never sooner; ``kept``
    stays down until well past it."""
    (x, x_pod), (y, y_pod) = lost["forced"], lost["kept"]
    x_uid, y_uid = x_pod["metadata"]["uid"], y_pod["metadata"]["uid"]
    early: list[str] = []  # forced's pod seen gone before its timer expired
    kept_up: list[str] = []  # kept's pod gone, or its instance Ready, while its node is lost
    back_at: list[float] = []

    def watch() -> bool:
        if not back_at:
            gone = _pod_by_uid(env, namespace, x_uid) is None
            now = time.time()  # after the read: the pod went no later than this
            if gone and now < since["forced"] + force_after:
                early.append(f"gone {now - since['forced']:.1f} s after {x} turned unreachable")
            if _back(env, namespace, "forced", x, x_uid):
                back_at.append(time.time())
        terminating = _terminating(_pod_by_uid(env, namespace, y_uid))
        ready = _prefill_ready(env, namespace, "kept")
        now = time.time()
        if not terminating or ready:
            kept_up.append(f"at {now - since['kept']:.1f} s: pod Terminating {terminating}, "
                           f"{ready} prefill instances Ready")  # fmt: skip
        # kept is watched until its node has been lost for the timer and then some
        return bool(back_at) and now >= since["kept"] + force_after + HOLD_SECONDS

    # kept's status may say Ready a moment after its restart: wait until it no longer does
    wait_for(lambda: _prefill_ready(env, namespace, "kept") == 0, bound_seconds, 0.5)
    ok, _ = wait_for(lambda: watch() or bool(kept_up), force_after + bound_seconds, 0.5)
    back = back_at[0] - since["forced"] if back_at else float("inf")
    record, told = _force_deletion(env, namespace, "forced"), _told(env, namespace, "forced")
    gone = int(record.get("goneSeconds", -1))
    named = (record.get("node") == x and record.get("reason") == REASON_NODE_UNREACHABLE
             and gone >= force_after
             and any(x in m and f"for {gone} s" in m for m in told))  # fmt: skip
    result.record(bool(back_at) and not early and named, back,
                  f"forced: back {back:.1f} s after {x} was lost; early {early}; "
                  f"record {record}; events {told}")  # fmt: skip
    held = time.time() - since["kept"]
    quiet = not _told(env, namespace, "kept") and not _force_deletion(env, namespace, "kept")
    # not a convergence time: kept is meant to stay down
    result.record(bool(ok) and not kept_up and quiet, 0.0,
                  f"kept: {kept_up[:3]}, force-deletion told {not quiet}")  # fmt: skip
    result.details.update(forced_node=x, kept_node=y, forced_back_after_loss_seconds=round(back, 1),
                          forced_record=record, forced_events=told,
                          kept_down_while_lost_seconds=round(held, 1))  # fmt: skip
