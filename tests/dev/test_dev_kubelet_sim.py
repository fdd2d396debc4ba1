"""The status logic and the failure knobs of the simulated kubelet (no API server); the pods
are bound as kube-scheduler would have bound them."""

from __future__ import annotations

import copy
import json

import pytest

from ascend_pd_dev.kubelet_sim import knobs
from ascend_pd_dev.kubelet_sim.nodes import (
    ASCEND_RESOURCE,
    DOMAIN_LABEL,
    NODE_STATUS_REPORT_SECONDS,
    SIM_LABEL,
    kubelet_version,
    node_manifest,
)
from ascend_pd_dev.kubelet_sim.pod_status import desired_status, status_signature
from ascend_pd_dev.kubelet_sim.pods import IpPool
from ascend_pd_dev.kubelet_sim.simulator import Simulator
from ascend_pd_dev.kubelet_sim.testing import crash_pod, fail_pod, set_node_ready

NOW = "2026-01-01T00:00:00Z"


def pod(name: str, ascend: int | None = 8, node: str | None = None, **extra: object) -> dict:
    resources = {"limits": {ASCEND_RESOURCE: str(ascend)}} if ascend else {}
    spec: dict = {"containers": [{"name": "main", "image": "img:1", "resources": resources}]}
    if node:
        spec["nodeName"] = node
    spec.update(extra.pop("spec", {}))  # type: ignore[arg-type]
    meta = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": {"app": "x"}}
    meta.update(extra.pop("metadata", {}))  # type: ignore[arg-type]
    return {"metadata": meta, "spec": spec, "status": extra.pop("status", {"phase": "Pending"})}


def test_node_manifest_declares_ascend_capacity_and_says_it_is_simulated() -> None:
    node = node_manifest(3, 8, NOW)
    assert node["metadata"]["name"] == "sim-ascend-3"
    assert node["status"]["capacity"][ASCEND_RESOURCE] == "8"
    assert node["status"]["allocatable"][ASCEND_RESOURCE] == "8"
    assert node["metadata"]["labels"][SIM_LABEL] == "true"
    assert "no container" in node["status"]["nodeInfo"]["osImage"]
    assert node["status"]["addresses"][0] == {"type": "InternalIP", "address": "127.0.1.4"}


def test_nodes_report_the_api_server_s_release_as_their_kubelet_s() -> None:
    version = kubelet_version("v1.36.3")
    assert version == "v1.36.3-sim"
    node = node_manifest(0, 8, NOW, version=version)
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.36.3-sim"
    # no answer from /version: a version that claims no release
    assert kubelet_version("") == "v0.0.0-sim"


def _ready(status: dict) -> str:
    return next(c["status"] for c in status["conditions"] if c["type"] == "Ready")


@pytest.mark.parametrize(
    ("outcome", "phase", "ready", "state"),
    [
        (None, "Running", "True", "running"),
        ("ready", "Running", "True", "running"),
        ("unready", "Running", "False", "running"),
        ("crash", "Running", "False", "waiting"),
        ("succeed", "Succeeded", "False", "terminated"),
        ("fail", "Failed", "False", "terminated"),
        ("bogus", "Failed", "False", "terminated"),
    ],
)
def test_outcome_annotation_decides_the_reported_status(
    outcome: str | None, phase: str, ready: str, state: str
) -> None:
    annotations = {knobs.OUTCOME: outcome} if outcome else {}
    p = pod("a", node="sim-ascend-0", metadata={"annotations": annotations})
    status = desired_status(p, "127.0.1.1", "127.1.0.9", NOW)
    assert status["phase"] == phase
    assert _ready(status) == ready
    assert status["podIP"] == "127.1.0.9" and status["hostIP"] == "127.0.1.1"
    container = status["containerStatuses"][0]
    assert list(container["state"]) == [state]
    if state == "terminated":
        assert container["state"]["terminated"]["exitCode"] == (0 if phase == "Succeeded" else 1)
    if outcome == "bogus":
        assert knobs.OUTCOME in status["message"] and "'bogus'" in status["message"]


def test_an_unchanged_pod_gives_an_unchanged_signature() -> None:
    p = pod("a", node="sim-ascend-0")
    first = desired_status(p, "127.0.1.1", "127.1.0.2", NOW)
    p["status"] = first
    again = desired_status(p, "127.0.1.1", "127.1.0.2", "2030-01-01T00:00:00Z")
    assert status_signature(again) == status_signature(first)
    assert again["startTime"] == NOW
    p["metadata"]["annotations"] = {knobs.OUTCOME: "unready"}
    changed = desired_status(p, "127.0.1.1", "127.1.0.2", NOW)
    assert status_signature(changed) != status_signature(first)


def test_ip_pool_gives_unique_loopback_addresses_and_skips_reserved_ones() -> None:
    pool = IpPool()
    pool.reserve("127.1.0.2")
    got = [pool.allocate() for _ in range(3)]
    assert got == ["127.1.0.1", "127.1.0.3", "127.1.0.4"]
    pool.release("127.1.0.1")
    assert all(ip.startswith("127.") for ip in got)


@pytest.mark.parametrize("restart", [None, "Always", "Never", "OnFailure"])
def test_without_annotation_every_pod_runs_and_none_is_declared_finished(
    restart: str | None,
) -> None:
    p = pod("a", node="sim-ascend-0", spec={"restartPolicy": restart} if restart else {})
    assert desired_status(p, "127.0.1.1", "127.1.0.9", NOW)["phase"] == "Running"


# --------------------------------------------------------------------------- failures and time
#
# Simulator.step() against an in-memory API (FakeCore) and an injected clock: the readiness
# delay, crashes, pod failure and node readiness as the state machine sees them, second by
# second, without sleeping. What a kubelet shows in each case (restartCount, lastState,
# CrashLoopBackOff back-off of 0, 10, 20 s..., Ready=False on a NotReady node's pods, the
# not-ready/unreachable NoSchedule taints) is written from the Kubernetes documentation; the
# e2e tests (tests/e2e/test_control_plane.py) check the same against the real API server.

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


class Response:
    def __init__(self, body: object) -> None:
        self.data = json.dumps(body).encode()


def _merge_status(target: dict, patch: dict) -> None:
    """The strategic merge the API server does on pods/status and nodes/status: conditions
    merge by type (a null field is deleted), other lists and fields are replaced."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif key == "conditions":
            by_type = {c["type"]: c for c in target.get("conditions") or []}
            for cond in value:
                merged = {**by_type.get(cond["type"], {}), **cond}
                by_type[cond["type"]] = {k: v for k, v in merged.items() if v is not None}
            target["conditions"] = list(by_type.values())
        else:
            target[key] = copy.deepcopy(value)


def _merge_annotations(obj: dict, patch: dict, field: str = "annotations") -> None:
    """A merge patch of ``metadata.<field>`` (a null deletes the key)."""
    notes = obj["metadata"].setdefault(field, {})
    for key, value in ((patch.get("metadata") or {}).get(field) or {}).items():
        if value is None:
            notes.pop(key, None)
        else:
            notes[key] = value


class FakeCore:
    """The CoreV1Api calls kubelet-sim makes, kept in memory."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict] = {}
        self.pods: dict[tuple[str, str], dict] = {}
        self.events: list[dict] = []
        self.namespaces: dict[str, dict] = {}
        self.status_writes = 0
        self.node_status_writes = 0

    # nodes
    def list_node(
        self, label_selector: str = "", _preload_content: bool = True, resource_version: str = ""
    ) -> Response:
        return Response({"items": [copy.deepcopy(n) for n in self.nodes.values()]})

    def create_node(self, body: dict, _preload_content: bool = True) -> None:
        node = copy.deepcopy(body)
        node["status"] = {}  # the API server ignores status on create
        self.nodes[node["metadata"]["name"]] = node

    def patch_node_status(self, name: str, body: dict, _preload_content: bool = True) -> None:
        self.node_status_writes += 1
        _merge_status(self.nodes[name].setdefault("status", {}), body["status"])

    def patch_node(self, name: str, body: dict, _preload_content: bool = True) -> None:
        node = self.nodes[name]
        _merge_annotations(node, body)
        _merge_annotations(node, body, "labels")
        if "spec" in body:
            _merge_status(node.setdefault("spec", {}), body["spec"])

    def delete_node(self, name: str) -> None:
        del self.nodes[name]

    # pods
    def add_pod(self, pod: dict) -> None:
        pod["metadata"].setdefault("creationTimestamp", NOW)
        self.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod

    def pod(self, name: str, namespace: str = "ns") -> dict:
        return self.pods[(namespace, name)]

    def list_pod_for_all_namespaces(
        self, _preload_content: bool = True, resource_version: str = ""
    ) -> Response:
        return Response({"items": [copy.deepcopy(p) for p in self.pods.values()]})

    def patch_namespaced_pod_status(
        self, name: str, namespace: str, body: dict, _preload_content: bool = True
    ) -> None:
        self.status_writes += 1
        _merge_status(self.pods[(namespace, name)].setdefault("status", {}), body["status"])

    def patch_namespaced_pod(
        self, name: str, namespace: str, body: dict, _preload_content: bool = True
    ) -> None:
        _merge_annotations(self.pods[(namespace, name)], body)

    def delete_namespaced_pod(self, name: str, namespace: str, **_: object) -> None:
        self.pods.pop((namespace, name), None)

    def create_namespaced_event(
        self, namespace: str, body: dict, _preload_content: bool = True
    ) -> None:
        self.events.append(body)

    def list_namespace(self, _preload_content: bool = True, resource_version: str = "") -> Response:
        return Response({"items": [{"metadata": {"name": name, "annotations": notes}}
                                   for name, notes in self.namespaces.items()]})  # fmt: skip

    # what a launcher check reads; no pod here has a launcher container
    read_namespaced_config_map = read_namespaced_secret = read_namespaced_service = None


def sim(nodes_count: int = 2, ready_after: float = 0.0) -> tuple[Simulator, FakeCore, Clock]:
    api, clock = FakeCore(), Clock()
    simulator = Simulator(api, nodes_count, 8, owner="1", ready_after=ready_after, clock=clock)
    return simulator, api, clock


def step_at(simulator: Simulator, clock: Clock, seconds: float) -> None:
    """One kubelet-sim cycle at ``seconds`` after T0."""
    clock.t = T0 + seconds
    simulator.step()


def cond(obj: dict, kind: str) -> dict:
    return next(c for c in obj["status"]["conditions"] if c["type"] == kind)


def container(p: dict) -> dict:
    return p["status"]["containerStatuses"][0]


def running_pod(
    simulator: Simulator,
    api: FakeCore,
    name: str = "p",
    node: str = "sim-ascend-0",
    **extra: object,
) -> dict:
    """A pod the scheduler bound to ``node``, after one kubelet-sim cycle."""
    api.add_pod(pod(name, ascend=1, node=node, **extra))
    simulator.step()
    return api.pod(name)


def test_readiness_delay_runs_the_container_at_once_and_readies_it_after_the_delay() -> None:
    simulator, api, clock = sim(ready_after=5)
    p = running_pod(simulator, api)
    assert p["status"]["phase"] == "Running"
    assert list(container(p)["state"]) == ["running"] and container(p)["started"] is True
    assert cond(p, "Ready")["status"] == "False" and cond(p, "ContainersReady")["status"] == "False"
    assert cond(p, "Ready")["message"] == "containers with unready status: [main]"
    step_at(simulator, clock, 4.9)
    assert cond(api.pod("p"), "Ready")["status"] == "False"
    step_at(simulator, clock, 5)
    p = api.pod("p")
    assert cond(p, "Ready")["status"] == "True" and container(p)["ready"] is True
    assert "reason" not in cond(p, "Ready") and "message" not in cond(p, "Ready")
    assert cond(p, "Ready")["lastTransitionTime"] == "2026-01-01T00:00:05Z"


def test_the_pod_annotation_overrides_the_default_readiness_delay() -> None:
    simulator, api, clock = sim(ready_after=30)
    p = running_pod(simulator, api, metadata={"annotations": {knobs.READY_AFTER: "2"}})
    assert cond(p, "Ready")["status"] == "False"
    step_at(simulator, clock, 2)
    assert cond(api.pod("p"), "Ready")["status"] == "True"
    # default 0: ready at once, as before
    simulator, api, clock = sim()
    assert cond(running_pod(simulator, api), "Ready")["status"] == "True"


def test_a_bad_readiness_delay_fails_the_pod_naming_the_annotation() -> None:
    simulator, api, _ = sim()
    p = running_pod(simulator, api, metadata={"annotations": {knobs.READY_AFTER: "soon"}})
    assert p["status"]["phase"] == "Failed"
    assert knobs.READY_AFTER in p["status"]["message"]


def test_a_crash_shows_the_termination_raises_restart_count_and_restarts_the_container() -> None:
    simulator, api, clock = sim(ready_after=3)
    running_pod(simulator, api)
    step_at(simulator, clock, 10)
    assert cond(api.pod("p"), "Ready")["status"] == "True"
    clock.t = T0 + 20
    crash_id = crash_pod(api, "ns", "p", 137, "Error", "HCCL timeout on rank 1")
    simulator.step()
    p = api.pod("p")
    c = container(p)
    assert c["restartCount"] == 1
    assert c["lastState"]["terminated"] == {
        "exitCode": 137, "reason": "Error", "message": "HCCL timeout on rank 1",
        "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:20Z",
        "containerID": "kubelet-sim://uid-p/main/0",
    }  # fmt: skip
    assert c["state"]["waiting"]["reason"] == "CrashLoopBackOff" and c["ready"] is False
    assert cond(p, "Ready")["status"] == "False" and p["status"]["phase"] == "Running"
    assert p["metadata"]["annotations"][knobs.CRASH_HANDLED] == crash_id
    assert [e["reason"] for e in api.events if e["reason"] == "BackOff"] == ["BackOff"]
    # the first restart is at once (no back-off yet); ready again after the delay
    step_at(simulator, clock, 21)
    c = container(api.pod("p"))
    assert c["state"] == {"running": {"startedAt": "2026-01-01T00:00:21Z"}}
    assert c["restartCount"] == 1 and c["ready"] is False
    assert c["lastState"]["terminated"]["message"] == "HCCL timeout on rank 1"
    step_at(simulator, clock, 23.5)
    assert cond(api.pod("p"), "Ready")["status"] == "False"
    step_at(simulator, clock, 24)
    p = api.pod("p")
    assert cond(p, "Ready")["status"] == "True" and container(p)["restartCount"] == 1
    # the same request is applied once, however many cycles see it
    for _ in range(3):
        simulator.step()
    assert container(api.pod("p"))["restartCount"] == 1


def test_a_second_crash_counts_again_and_waits_out_the_kubelet_back_off() -> None:
    simulator, api, clock = sim()
    running_pod(simulator, api)
    crash_pod(api, "ns", "p", 1, "Error", "first")
    simulator.step()
    step_at(simulator, clock, 1)
    assert container(api.pod("p"))["state"]["running"]
    clock.t = T0 + 30
    crash_pod(api, "ns", "p", 139, "Error", "second")
    simulator.step()
    c = container(api.pod("p"))
    assert c["restartCount"] == 2
    assert c["lastState"]["terminated"]["message"] == "second"
    assert c["lastState"]["terminated"]["exitCode"] == 139
    assert c["state"]["waiting"]["message"].startswith("back-off 10s restarting failed")
    step_at(simulator, clock, 39.9)
    assert list(container(api.pod("p"))["state"]) == ["waiting"]
    step_at(simulator, clock, 40)
    p = api.pod("p")
    assert list(container(p)["state"]) == ["running"] and cond(p, "Ready")["status"] == "True"


def test_restart_after_seconds_overrides_the_back_off_and_survives_a_restarted_sim() -> None:
    simulator, api, clock = sim()
    running_pod(simulator, api)
    crash_pod(api, "ns", "p", message="slow", restart_after_seconds=5)
    simulator.step()
    # a new kubelet-sim process: it reads the back-off from the pod and repeats no crash
    again = Simulator(api, 2, 8, owner="2", clock=clock)
    clock.t = T0 + 4
    again.step()
    c = container(api.pod("p"))
    assert list(c["state"]) == ["waiting"] and c["restartCount"] == 1
    clock.t = T0 + 5
    again.step()
    c = container(api.pod("p"))
    assert list(c["state"]) == ["running"] and c["restartCount"] == 1


def test_a_crash_of_a_restart_policy_never_pod_fails_the_pod() -> None:
    simulator, api, _ = sim()
    running_pod(simulator, api, spec={"restartPolicy": "Never"})
    crash_pod(api, "ns", "p", 2, "Error", "bad config")
    simulator.step()
    p = api.pod("p")
    assert p["status"]["phase"] == "Failed"
    c = container(p)
    assert c["state"]["terminated"]["message"] == "bad config" and c["restartCount"] == 0
    assert "reason" not in p["status"]  # the container's exit: a kubelet names no pod reason


@pytest.mark.parametrize(
    "annotation",
    ["{not json", '{"exitCode": "137"}', '{"surprise": 1}', '{"container": "nope"}'],
)
def test_a_malformed_crash_request_fails_the_pod_saying_why(annotation: str) -> None:
    simulator, api, _ = sim()
    running_pod(simulator, api)
    api.pod("p")["metadata"]["annotations"] = {knobs.CRASH: annotation}
    simulator.step()
    p = api.pod("p")
    assert p["status"]["phase"] == "Failed"
    assert p["status"]["reason"] == "InvalidSimulationRequest"
    assert knobs.CRASH in p["status"]["message"]


@pytest.mark.parametrize(("restart", "pod_reason"), [("Never", None), ("Always", "Evicted")])
def test_fail_pod_ends_the_pod_with_its_containers_terminated(
    restart: str, pod_reason: str | None
) -> None:
    simulator, api, _ = sim()
    running_pod(simulator, api, spec={"restartPolicy": restart})
    fail_pod(api, "ns", "p", 3, "Error", "device lost")
    simulator.step()
    p = api.pod("p")
    assert p["status"]["phase"] == "Failed"
    terminated = container(p)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"], terminated["message"]) == (
        3, "Error", "device lost")  # fmt: skip
    assert p["status"].get("reason") == pod_reason
    assert cond(p, "Ready")["status"] == "False"
    # Failed is final: nothing brings it back
    del p["metadata"]["annotations"][knobs.FAIL]
    simulator.step()
    assert api.pod("p")["status"]["phase"] == "Failed"


def test_a_not_ready_node_makes_its_pods_not_ready_and_gets_them_back() -> None:
    simulator, api, clock = sim()
    running_pod(simulator, api, "a")
    running_pod(simulator, api, "b", node="sim-ascend-1")
    set_node_ready(api, "sim-ascend-0", False)
    step_at(simulator, clock, 5)
    node = api.nodes["sim-ascend-0"]
    assert cond(node, "Ready")["status"] == "False"
    assert cond(node, "Ready")["reason"] == "KubeletNotReady"
    assert node["spec"]["taints"] == [{"key": "node.kubernetes.io/not-ready",
                                       "effect": "NoSchedule",
                                       "timeAdded": "2026-01-01T00:00:05Z"}]  # fmt: skip
    a = api.pod("a")
    assert cond(a, "Ready")["status"] == "False" and cond(a, "Ready")["reason"] == "NodeNotReady"
    assert cond(a, "ContainersReady")["status"] == "True"  # only Ready flips, as the controller
    assert a["status"]["phase"] == "Running"
    assert cond(api.pod("b"), "Ready")["status"] == "True"
    set_node_ready(api, "sim-ascend-0", True)
    step_at(simulator, clock, 10)
    node = api.nodes["sim-ascend-0"]
    assert cond(node, "Ready")["status"] == "True" and not node["spec"].get("taints")
    a = api.pod("a")
    assert cond(a, "Ready")["status"] == "True" and "reason" not in cond(a, "Ready")


def test_an_unreachable_node_stops_its_heartbeat_and_its_kubelet() -> None:
    simulator, api, clock = sim(1)
    running_pod(simulator, api, "a")
    beat = cond(api.nodes["sim-ascend-0"], "Ready")["lastHeartbeatTime"]
    set_node_ready(api, "sim-ascend-0", unreachable=True)
    step_at(simulator, clock, 3)
    node = api.nodes["sim-ascend-0"]
    for kind in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"):
        assert cond(node, kind)["status"] == "Unknown"
        assert cond(node, kind)["message"] == "Kubelet stopped posting node status."
    assert node["spec"]["taints"][0]["key"] == "node.kubernetes.io/unreachable"
    a = api.pod("a")
    assert cond(a, "Ready")["status"] == "False" and cond(a, "Ready")["reason"] == "NodeNotReady"
    # no kubelet: no crash is applied, no deleted pod goes away, the heartbeat stays put
    crash_pod(api, "ns", "a", message="later")
    api.pod("a")["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:04Z"
    clock.t = T0 + 10 * NODE_STATUS_REPORT_SECONDS
    simulator.step()
    assert cond(api.nodes["sim-ascend-0"], "Ready")["lastHeartbeatTime"] == beat
    assert container(api.pod("a"))["restartCount"] == 0
    set_node_ready(api, "sim-ascend-0")
    simulator.step()
    assert ("ns", "a") not in api.pods  # the kubelet is back and confirms the deletion
    assert cond(api.nodes["sim-ascend-0"], "Ready")["lastHeartbeatTime"] != beat


def test_a_ready_node_heartbeats_every_report_interval_and_only_then() -> None:
    simulator, api, clock = sim(1)
    simulator.step()
    assert cond(api.nodes["sim-ascend-0"], "Ready")["lastHeartbeatTime"] == NOW
    writes = api.node_status_writes
    clock.t = T0 + NODE_STATUS_REPORT_SECONDS - 1
    simulator.step()
    assert api.node_status_writes == writes
    clock.t = T0 + NODE_STATUS_REPORT_SECONDS
    simulator.step()
    assert api.node_status_writes == writes + 1
    ready = cond(api.nodes["sim-ascend-0"], "Ready")
    assert ready["lastHeartbeatTime"] == "2026-01-01T00:01:00Z"
    assert ready["lastTransitionTime"] == NOW


def test_a_ready_again_pod_keeps_no_stale_not_ready_message() -> None:
    simulator, api, _ = sim()
    running_pod(simulator, api, metadata={"annotations": {knobs.OUTCOME: "unready"}})
    assert api.pod("p")["status"]["message"]
    api.pod("p")["metadata"]["annotations"] = {}
    simulator.step()
    writes = api.status_writes
    p = api.pod("p")
    assert "message" not in p["status"] and "reason" not in p["status"]
    simulator.step()
    assert api.status_writes == writes  # settled: no write per cycle


def test_on_a_not_ready_node_an_unready_container_keeps_its_own_reason() -> None:
    p = pod("a", node="sim-ascend-0", metadata={"annotations": {knobs.READY_AFTER: "9"}})
    status = desired_status(p, "127.0.1.1", "127.1.0.2", NOW, node_readiness="False")
    reasons = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert reasons["Ready"] == ("False", "NodeNotReady")
    assert reasons["ContainersReady"] == ("False", "ContainersNotReady")


# --------------------------------------------------------------------------- images


def test_an_unpullable_image_waits_in_err_image_pull_then_image_pull_back_off() -> None:
    simulator, api, clock = sim()
    p = running_pod(simulator, api, metadata={"annotations": {
        knobs.UNPULLABLE_IMAGES: "registry.example.com/other:2, img:1"}})  # fmt: skip
    assert p["status"]["phase"] == "Pending"
    assert "reason" not in p["status"]  # a kubelet gives such a pod no reason
    assert container(p)["ready"] is False and container(p)["started"] is False
    waiting = container(p)["state"]["waiting"]
    assert waiting["reason"] == "ErrImagePull" and '"img:1": not found' in waiting["message"]
    assert cond(p, "Ready")["status"] == "False"
    assert cond(p, "Ready")["message"] == "containers with unready status: [main]"
    step_at(simulator, clock, 9.9)
    assert container(api.pod("p"))["state"]["waiting"]["reason"] == "ErrImagePull"
    step_at(simulator, clock, 10)
    assert container(api.pod("p"))["state"] == {
        "waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "img:1"'}
    }
    # the registry has it after all: the container starts
    api.pod("p")["metadata"]["annotations"] = {}
    step_at(simulator, clock, 20)
    p = api.pod("p")
    assert p["status"]["phase"] == "Running" and cond(p, "Ready")["status"] == "True"
    assert container(p)["state"] == {"running": {"startedAt": "2026-01-01T00:00:20Z"}}


def test_an_image_the_registry_has_is_pulled() -> None:
    simulator, api, _ = sim()
    p = running_pod(simulator, api, metadata={"annotations": {knobs.UNPULLABLE_IMAGES: "img:2"}})
    assert p["status"]["phase"] == "Running" and cond(p, "Ready")["status"] == "True"


def test_an_image_its_namespace_says_is_unpullable_waits_too() -> None:
    """A router has no podAnnotations: its namespace names the image the registry lacks."""
    simulator, api, clock = sim()
    api.namespaces["ns"] = {knobs.UNPULLABLE_IMAGES: "img:1"}
    p = running_pod(simulator, api)
    assert p["status"]["phase"] == "Pending"
    assert container(p)["state"]["waiting"]["reason"] == "ErrImagePull"
    step_at(simulator, clock, 10)
    assert container(api.pod("p"))["state"]["waiting"]["reason"] == "ImagePullBackOff"
    api.namespaces["ns"] = {knobs.UNPULLABLE_IMAGES: "img:2"}
    step_at(simulator, clock, 20)
    assert api.pod("p")["status"]["phase"] == "Running"


def test_a_pod_being_deleted_runs_on_for_its_terminate_after_within_its_grace_period() -> None:
    from ascend_pd_dev.kubelet_sim.knobs import TERMINATE_AFTER
    from ascend_pd_dev.kubelet_sim.objects import parse_iso
    from ascend_pd_dev.kubelet_sim.pods import terminated

    # deleted at 12:00:00 with a grace period of 90 s: deletionTimestamp is 12:01:30
    deleted = parse_iso("2026-01-01T12:00:00Z") or 0.0
    pod = {"metadata": {"deletionTimestamp": "2026-01-01T12:01:30Z",
                        "deletionGracePeriodSeconds": 90,
                        "annotations": {TERMINATE_AFTER: "3"}}}  # fmt: skip
    assert not terminated(pod, deleted + 2.9)
    assert terminated(pod, deleted + 3)
    # never past the grace period: the kubelet kills it then
    pod["metadata"]["annotations"][TERMINATE_AFTER] = "600"
    assert not terminated(pod, deleted + 89) and terminated(pod, deleted + 90)
    # without the annotation: gone at once
    del pod["metadata"]["annotations"][TERMINATE_AFTER]
    assert terminated(pod, deleted)


# --------------------------------------------------------------------------- topology labels


def test_nodes_are_spread_over_domains_and_added_nodes_keep_every_domain_as_it_was() -> None:
    api, clock = FakeCore(), Clock()
    Simulator(api, 4, 8, owner="1", domains=2, clock=clock).step()
    domains = {n: api.nodes[n]["metadata"]["labels"][DOMAIN_LABEL] for n in api.nodes}
    assert domains == {"sim-ascend-0": "sp-0", "sim-ascend-1": "sp-1",
                       "sim-ascend-2": "sp-0", "sim-ascend-3": "sp-1"}  # fmt: skip
    labels = api.nodes["sim-ascend-0"]["metadata"]["labels"]
    assert labels["accelerator-type"] == "module-910b-8"
    assert labels["node.kubernetes.io/npu.chip.name"] == "910B3"
    # an administrator's own label survives kubelet-sim's cycles
    api.nodes["sim-ascend-1"]["metadata"]["labels"]["team"] = "llm"
    Simulator(api, 6, 8, owner="2", domains=2, clock=clock).step()
    grown = {n: api.nodes[n]["metadata"]["labels"][DOMAIN_LABEL] for n in api.nodes}
    assert {n: grown[n] for n in domains} == domains
    assert grown["sim-ascend-4"] == "sp-0" and grown["sim-ascend-5"] == "sp-1"
    assert api.nodes["sim-ascend-1"]["metadata"]["labels"]["team"] == "llm"
    # without domains the label goes
    Simulator(api, 6, 8, owner="3", clock=clock).step()
    assert not any(DOMAIN_LABEL in n["metadata"]["labels"] for n in api.nodes.values())
    assert api.nodes["sim-ascend-1"]["metadata"]["labels"]["team"] == "llm"
