"""Two routers, one view of the workers, and a drain the endpoint does not notice (issue 36).

Each sglang-router replica discovers its workers on its own: from its own arguments (the
``--prefill-selector`` and ``--decode-selector`` the operator gave it) through a pod watch
with its own account's token. Both replicas must route to the same workers: the view of each
router pod is taken as sglang-router takes it (``recording_router.Requests``, the rule of
its ``service_discovery``), from that pod's own arguments, and its account must be allowed
the watch (the API server's SubjectAccessReview, ``kubectl auth can-i --as``).

The drain is ``kubectl drain`` of the node of one router pod, limited to the router's pods
(``--pod-selector``: the runtime pods on that node are another story, ``docs/operator.md``
drains): it cordons the node and evicts through the Eviction API, so the router's
PodDisruptionBudget is the one judge. Meanwhile a request stream goes to the router
Service's endpoints as kube-proxy picks them (the router pods Running, Ready and not being
deleted), one request of a second every tenth of a second: none may find no endpoint, and
none may be cut by its router pod going away, while the evicted pod is replaced.

sglang-router ends gracefully on SIGTERM: it stops accepting and waits for the connections
it has (0.3.2's wheel: "Received terminate signal, starting graceful shutdown", axum-server's
``wait_graceful_shutdown``). kubelet-sim ends a pod at once unless told how long its
containers take (``knobs.TERMINATE_AFTER``): the router pods are told 3 seconds, longer than
a request, well within their 30-second grace period.
"""

from __future__ import annotations

from typing import Any

import pytest
from pdd_e2e import Operator, apply, example, get, status

from ascend_pd_dev.kubelet_sim.knobs import TERMINATE_AFTER
from ascend_pd_dev.testtools.recording_router import (
    RecordingRouter,
    Request,
    Requests,
    selector_of,
)

pytestmark = [pytest.mark.simulated, pytest.mark.timeout(900)]

NAME = "dsv2-lite"
ROUTER_LABELS = {"ascendpd.io/deployment": NAME, "app.kubernetes.io/component": "router"}
ROUTER = ",".join(f"{k}={v}" for k, v in ROUTER_LABELS.items())
#: The example's instances (1 prefill, 2 decode, one pod each), by hand from its YAML.
WORKERS = {
    "prefill": {f"{NAME}-prefill-0"},
    "decode": {f"{NAME}-decode-0", f"{NAME}-decode-1"},
}
#: A busy 2-core machine: the controllers and kubelet-sim take their time.
SLOW = 420.0


class EndpointRequests(Requests):
    """``Requests`` that also counts the moments with no endpoint to send to."""

    unanswered: int = 0

    def send(self, now: float) -> Request | None:
        request = super().send(now)
        if request is None:
            self.unanswered += 1
        return request


def _pods(kubectl: Any, namespace: str, selector: str = "") -> list[dict[str, Any]]:
    args = ("-l", selector) if selector else ()
    return list((get(kubectl, namespace, "pods", *args) or {}).get("items", []))


def _routers(kubectl: Any, namespace: str) -> list[dict[str, Any]]:
    pods = _pods(kubectl, namespace, ROUTER)
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _uids(kubectl: Any, namespace: str) -> set[str]:
    """The runtime pods (of both roles), by uid."""
    pods = _pods(kubectl, namespace, f"ascendpd.io/deployment={NAME},ascendpd.io/role")
    return {p["metadata"]["uid"] for p in pods}


def _view(router: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """The workers ``router`` routes each role to: uid -> instance, by its own arguments."""
    args = router["spec"]["containers"][0]["args"]
    view = {}
    for role in WORKERS:
        requests = Requests(selector_of(args, role), duration=1.0, pods_per_instance=1)
        requests.observe(pods, 0.0)
        view[role] = dict(requests.workers)
    return view


def test_both_routers_see_the_same_workers_and_a_drain_keeps_the_endpoint_answering(
    kubectl: Any, api_client: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    apply(kubectl, example("deepseek-v2-lite.yaml", namespace))
    wait_until(
        lambda: (
            (s := status(kubectl, namespace, NAME)).get("phase") == "Ready"
            and (s.get("router") or {}).get("ready") == "2/2"
        ),
        f"{NAME} Ready with 2/2 routers",
        timeout=SLOW,
    )

    # Each router pod's own view: the same workers, the example's instances.
    routers = wait_until(
        lambda: len(r := [p for p in _routers(kubectl, namespace) if _ready(p)]) == 2 and r,
        "two Ready router pods",
        timeout=SLOW,
    )
    pods = _pods(kubectl, namespace)
    views = {r["metadata"]["name"]: _view(r, pods) for r in routers}
    first, second = sorted(views)
    assert views[first] == views[second], views
    for role, instances in WORKERS.items():
        assert set(views[first][role].values()) == instances, (role, views[first])
    for router in routers:
        account = router["spec"]["serviceAccountName"]
        for verb in ("list", "watch"):
            allowed = kubectl("auth", "can-i", verb, "pods", "-n", namespace,
                              f"--as=system:serviceaccount:{namespace}:{account}",
                              check=False)  # fmt: skip
            assert allowed.stdout.strip() == "yes", (router["metadata"]["name"], verb, allowed)

    # The budget lets one router pod go.
    budget = f"poddisruptionbudgets.v1.policy/{NAME}-router"
    wait_until(
        lambda: ((get(kubectl, namespace, budget) or {}).get("status") or {})
        .get("disruptionsAllowed") == 1,
        "the router budget allowing one disruption",
        timeout=SLOW,
    )  # fmt: skip

    runtime = _uids(kubectl, namespace)
    assert len(runtime) == 3, runtime  # 1 prefill and 2 decode pods
    evicted = next(r for r in routers if r["metadata"]["name"] == first)
    node = evicted["spec"]["nodeName"]
    for router in routers:
        kubectl("annotate", "pod", "-n", namespace, router["metadata"]["name"],
                f"{TERMINATE_AFTER}=3")  # fmt: skip
    stream = EndpointRequests(ROUTER_LABELS, duration=1.0, pods_per_instance=1)
    try:
        with RecordingRouter(api_client, namespace, stream, ROUTER):
            wait_until(lambda: len({r.worker for r in stream.sent}) == 2,
                       "requests through both router pods", timeout=SLOW)  # fmt: skip
            drained = kubectl("drain", node, f"--pod-selector={ROUTER}", "--ignore-daemonsets",
                              "--delete-emptydir-data", f"--timeout={int(SLOW)}s",
                              check=False)  # fmt: skip
            assert drained.returncode == 0, drained.stderr
            # the evicted pod is gone and its replacement, on another node, is Ready
            replaced = wait_until(
                lambda: (
                    len(r := [p for p in _routers(kubectl, namespace) if _ready(p)]) == 2
                    and evicted["metadata"]["uid"] not in {p["metadata"]["uid"] for p in r}
                    and r
                ),
                "the evicted router pod replaced by a Ready one",
                timeout=SLOW,
            )
            fresh = [p for p in replaced if p["metadata"]["name"] != second]
            assert len(fresh) == 1 and fresh[0]["spec"]["nodeName"] != node, fresh
            # requests reach the replacement too before the stream is judged
            wait_until(lambda: fresh[0]["metadata"]["uid"] in {r.worker for r in stream.sent},
                       "a request through the replacement", timeout=SLOW)  # fmt: skip
    finally:
        kubectl("uncordon", node, check=False)

    assert stream.unanswered == 0, f"{stream.unanswered} moments with no router endpoint"
    assert stream.lost() == [], stream.lost()
    through = {r.worker for r in stream.completed(float("inf"))}
    assert {evicted["metadata"]["uid"], fresh[0]["metadata"]["uid"]} <= through, through
    wait_until(
        lambda: (status(kubectl, namespace, NAME).get("router") or {}).get("ready") == "2/2",
        "the router at 2/2",
        timeout=SLOW,
    )
    # the drain took the router pod alone: every runtime pod is the one it was
    assert _uids(kubectl, namespace) == runtime
