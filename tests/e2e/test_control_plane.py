"""The e2e harness itself: a real API server with RBAC, real controllers, and kubelet-sim."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from ascend_pd_dev.controlplane import versions
from ascend_pd_dev.kubelet_sim import knobs
from ascend_pd_dev.kubelet_sim.nodes import ASCEND_RESOURCE, DOMAIN_LABEL, HOSTNAME_KEY, SIM_LABEL
from ascend_pd_dev.kubelet_sim.objects import parse_iso
from ascend_pd_dev.kubelet_sim.testing import crash_pod, fail_pod, set_node_ready

ASCEND = ASCEND_RESOURCE


def _get(kubectl: Any, *args: str) -> Any:
    return json.loads(kubectl("get", *args, "-o", "json").stdout)


def _not_found(kubectl: Any, *args: str) -> bool:
    """``kubectl get args`` fails saying NotFound (one request a check)."""
    got = kubectl("get", *args, check=False)
    return bool(got.returncode != 0 and "NotFound" in got.stderr)


def _apply(kubectl: Any, manifest: dict[str, Any], *flags: str) -> Any:
    return kubectl("apply", *flags, "-f", "-", input=yaml.safe_dump(manifest))


def _pod(
    name: str, ascend: int, annotations: dict[str, str] | None = None, restart: str = "Always"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "restartPolicy": restart,
            "containers": [{
                "name": "main", "image": "example.invalid/never-pulled:1",
                "resources": {"limits": {ASCEND: str(ascend)}},
            }],
        },
    }  # fmt: skip


def _ready_replicas(kubectl: Any, namespace: str, name: str) -> int:
    found = _get(kubectl, "statefulset", name, "-n", namespace)
    return int(found["status"].get("readyReplicas") or 0)


def _start_statefulset(
    kubectl: Any, namespace: str, wait_until: Any, statefulset: dict[str, Any]
) -> None:
    """Apply ``statefulset`` and wait until every replica of it is ready."""
    _apply(kubectl, statefulset, "-n", namespace)
    name, replicas = statefulset["metadata"]["name"], statefulset["spec"]["replicas"]
    wait_until(
        lambda: _ready_replicas(kubectl, namespace, name) == replicas,
        f"{replicas} ready replica{'s' if replicas > 1 else ''}",
    )


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def _statefulset(name: str, replicas: int, ascend: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{
                    "name": "engine", "image": "example.invalid/engine:1",
                    "resources": {"limits": {ASCEND: str(ascend)}},
                }]},
            },
        },
    }  # fmt: skip


def test_api_server_answers_and_reports_its_version(cluster: Any, kubectl: Any) -> None:
    version = json.loads(kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert (int(version["major"]), int(version["minor"].rstrip("+"))) == cluster.server_version
    if cluster.local:
        assert version["gitVersion"] == f"v{versions.control_plane().version}"


@pytest.mark.local
def test_pod_security_admission_enforces_only_the_level_a_namespace_is_labelled_with(
    cluster: Any, kubectl: Any, namespace: str
) -> None:
    """Pod Security admission (GA in 1.25, so on every supported release): an unlabelled
    namespace admits a privileged pod (every level defaults to ``privileged``, as upstream),
    a namespace labelled ``pod-security.kubernetes.io/enforce=restricted`` refuses it with
    the plugin's own words, and ``privileged`` (the label the docs tell users to set)
    admits it again."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "privileged", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/x:1",
                                 "securityContext": {"privileged": True}}]},
    }  # fmt: skip

    def create() -> Any:
        return kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod),
                       check=False)  # fmt: skip

    assert create().returncode == 0, create().stderr
    label = "pod-security.kubernetes.io/enforce"
    kubectl("label", "namespace", namespace, f"{label}=restricted")
    refused = create()
    assert refused.returncode != 0
    assert 'violates PodSecurity "restricted:latest": privileged' in refused.stderr, refused.stderr
    kubectl("label", "namespace", namespace, f"{label}=privileged", "--overwrite")
    assert create().returncode == 0, create().stderr


@pytest.mark.local
def test_rbac_refuses_a_user_without_roles_until_a_role_grants_it(
    cluster: Any, kubectl: Any, namespace: str
) -> None:
    nobody = cluster.layout.component_kubeconfig("nobody")
    denied = kubectl("get", "pods", "-n", namespace, kubeconfig=nobody, check=False)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()
    assert 'User "ascend-pd:nobody" cannot list resource "pods"' in denied.stderr
    kubectl("create", "role", "pod-reader", "-n", namespace, "--verb=list", "--resource=pods")
    kubectl("create", "rolebinding", "nobody-reads", "-n", namespace, "--role=pod-reader",
            "--user=ascend-pd:nobody")  # fmt: skip
    allowed = kubectl("get", "pods", "-n", namespace, kubeconfig=nobody, check=False)
    assert allowed.returncode == 0, allowed.stderr
    # the grant is exactly what the role says: still no write, still nothing elsewhere
    write = kubectl("create", "configmap", "x", "-n", namespace, kubeconfig=nobody, check=False)
    assert "forbidden" in write.stderr.lower()
    other = kubectl("get", "pods", "-n", "default", kubeconfig=nobody, check=False)
    assert "forbidden" in other.stderr.lower()


@pytest.mark.simulated
def test_simulated_nodes_offer_ascend_devices(kubectl: Any) -> None:
    nodes = _get(kubectl, "nodes", "-l", f"{SIM_LABEL}=true")["items"]
    assert nodes, "kubelet-sim registered no node"
    server = json.loads(kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
    for node in nodes:
        # the kubelets of the API server's release, as a cluster would run
        assert node["status"]["nodeInfo"]["kubeletVersion"] == f"{server}-sim"
        assert int(node["status"]["allocatable"][ASCEND]) > 0
        assert _condition(node, "Ready")["status"] == "True"  # type: ignore[index]
        assert "no container" in node["status"]["nodeInfo"]["osImage"]


@pytest.mark.simulated
def test_statefulset_of_whole_node_pods_becomes_ready_one_pod_per_node(
    kubectl: Any, namespace: str, wait_until: Any
) -> None:
    _start_statefulset(kubectl, namespace, wait_until, _statefulset("prefill", 2, 8))
    pods = _get(kubectl, "pods", "-n", namespace, "-l", "app=prefill")["items"]
    assert len(pods) == 2
    assert len({p["spec"]["nodeName"] for p in pods}) == 2, "8 devices each: one pod per node"
    scheduled = _get(kubectl, "events", "-n", namespace, "--field-selector", "reason=Scheduled")
    assert sorted(e["involvedObject"]["name"] for e in scheduled["items"]) == [
        "prefill-0", "prefill-1"]  # fmt: skip
    for p in pods:
        assert p["status"]["phase"] == "Running"
        assert p["status"]["podIP"].startswith("127.")
        assert _condition(p, "Ready")["status"] == "True"  # type: ignore[index]
        assert p["status"]["containerStatuses"][0]["ready"] is True


@pytest.mark.local
def test_kube_scheduler_keeps_an_instance_in_one_domain_of_the_labelled_topology(
    kubectl: Any, namespace: str, wait_until: Any
) -> None:
    """The real kube-scheduler honours required pod affinity on kubelet-sim's domain label (the
    e2e cluster spreads its nodes over 2 domains), which the home-made scheduler never did."""
    nodes = _get(kubectl, "nodes", "-l", f"{SIM_LABEL}=true")["items"]
    domain_of = {n["metadata"]["name"]: n["metadata"]["labels"][DOMAIN_LABEL] for n in nodes}
    assert set(domain_of.values()) == {"sp-0", "sp-1"}
    labels = nodes[0]["metadata"]["labels"]
    assert labels["accelerator-type"] == f"module-910b-{nodes[0]['status']['capacity'][ASCEND]}"
    sts = _statefulset("pinned", 3, 1)
    spec = sts["spec"]["template"]["spec"]
    spec["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": DOMAIN_LABEL, "operator": "In", "values": ["sp-1"]}]},
        ]}},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": HOSTNAME_KEY, "labelSelector": {"matchLabels": {"app": "pinned"}}},
        ]},
    }  # fmt: skip
    _start_statefulset(kubectl, namespace, wait_until, sts)
    pods = _get(kubectl, "pods", "-n", namespace, "-l", "app=pinned")["items"]
    placed = {p["spec"]["nodeName"] for p in pods}
    assert len(placed) == 3, "one pod per node (anti-affinity)"
    assert {domain_of[n] for n in placed} == {"sp-1"}


@pytest.mark.simulated
def test_a_pod_that_fits_no_node_stays_pending_and_says_why(
    kubectl: Any, namespace: str, wait_until: Any
) -> None:
    nodes = _get(kubectl, "nodes", "-l", f"{SIM_LABEL}=true")["items"]
    most = max(int(n["status"]["allocatable"][ASCEND]) for n in nodes)
    _apply(kubectl, _pod("too-big", most + 1), "-n", namespace)
    cond = wait_until(
        lambda: _condition(_get(kubectl, "pod", "too-big", "-n", namespace), "PodScheduled"),
        "a PodScheduled condition",
    )
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
    assert f"Insufficient {ASCEND}" in cond["message"]
    pod = _get(kubectl, "pod", "too-big", "-n", namespace)
    assert not pod["spec"].get("nodeName")
    assert pod["status"]["phase"] == "Pending"
    events = _get(kubectl, "events", "-n", namespace,
                  "--field-selector", "involvedObject.name=too-big")["items"]  # fmt: skip
    # kube-scheduler retries with back-off and records each attempt: one reason, maybe twice
    assert events and {e["reason"] for e in events} == {"FailedScheduling"}
    assert all("nodes are available" in e["message"] for e in events)


@pytest.mark.simulated
def test_unready_outcome_keeps_a_running_pod_unready_until_changed(
    kubectl: Any, namespace: str, wait_until: Any
) -> None:
    _apply(kubectl, _pod("slow", 1, {knobs.OUTCOME: "unready"}), "-n", namespace)

    def status() -> tuple[str | None, str | None]:
        pod = _get(kubectl, "pod", "slow", "-n", namespace)
        ready = _condition(pod, "Ready")
        return pod["status"].get("phase"), ready["status"] if ready else None

    wait_until(lambda: status()[0] == "Running", "the pod to run")
    assert status() == ("Running", "False")
    kubectl("annotate", "pod", "slow", "-n", namespace, f"{knobs.OUTCOME}=ready",
            "--overwrite")  # fmt: skip
    wait_until(lambda: status() == ("Running", "True"), "the pod to become ready")


@pytest.mark.simulated
def test_crash_outcome_shows_crash_loop_backoff(
    kubectl: Any, namespace: str, wait_until: Any
) -> None:
    _apply(kubectl, _pod("crashy", 1, {knobs.OUTCOME: "crash"}), "-n", namespace)
    state = wait_until(
        lambda: (_get(kubectl, "pod", "crashy", "-n", namespace)["status"].get(
            "containerStatuses") or [{}])[0].get("state", {}).get("waiting"),
        "a waiting container",
    )  # fmt: skip
    assert state["reason"] == "CrashLoopBackOff"
    assert _condition(_get(kubectl, "pod", "crashy", "-n", namespace), "Ready")["status"] == "False"  # type: ignore[index]


@pytest.mark.simulated
@pytest.mark.parametrize(("outcome", "condition"), [("succeed", "Complete"), ("fail", "Failed")])
def test_job_pods_run_to_the_chosen_outcome(
    kubectl: Any, namespace: str, wait_until: Any, outcome: str, condition: str
) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "once"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {knobs.OUTCOME: outcome}},
                "spec": {"restartPolicy": "Never", "containers": [
                    {"name": "check", "image": "example.invalid/check:1"}]},
            },
        },
    }  # fmt: skip
    _apply(kubectl, job, "-n", namespace)
    cond = wait_until(
        lambda: _condition(_get(kubectl, "job", "once", "-n", namespace), condition),
        f"Job condition {condition}",
    )
    assert cond["status"] == "True"
    pods = _get(kubectl, "pods", "-n", namespace, "-l", "job-name=once")["items"]
    expected = "Succeeded" if outcome == "succeed" else "Failed"
    assert [p["status"]["phase"] for p in pods] == [expected]


@pytest.mark.simulated
def test_a_deleted_pod_is_removed_and_its_statefulset_replaces_it(
    kubectl: Any, namespace: str, wait_until: Any
) -> None:
    _start_statefulset(kubectl, namespace, wait_until, _statefulset("decode", 1, 8))
    old = _get(kubectl, "pod", "decode-0", "-n", namespace)
    kubectl("delete", "pod", "decode-0", "-n", namespace, "--wait=true", "--timeout=120s")

    def replaced() -> bool:
        pod = _get(kubectl, "pods", "-n", namespace, "-l", "app=decode")["items"]
        return bool(
            pod
            and pod[0]["metadata"]["uid"] != old["metadata"]["uid"]
            and (_condition(pod[0], "Ready") or {}).get("status") == "True"
        )

    wait_until(replaced, "a new ready decode-0")


def test_garbage_collector_deletes_dependents_of_a_deleted_owner(
    kubectl: Any, namespace: str, wait_until: Any
) -> None:
    kubectl("create", "configmap", "owner", "-n", namespace, "--from-literal=a=1")
    owner = _get(kubectl, "configmap", "owner", "-n", namespace)
    dependent = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "dependent",
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                                 "uid": owner["metadata"]["uid"]}],
        },
        "data": {"b": "2"},
    }  # fmt: skip
    _apply(kubectl, dependent, "-n", namespace)
    kubectl("delete", "configmap", "owner", "-n", namespace)
    wait_until(
        lambda: _not_found(kubectl, "configmap", "dependent", "-n", namespace),
        "the garbage collector to delete the dependent",
    )


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.e2e.ascend-pd.dev"},
    "spec": {
        "group": "e2e.ascend-pd.dev",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                  "shortNames": ["wdg"]},
        "versions": [{
            "name": "v1alpha1", "served": True, "storage": True,
            "subresources": {"status": {}},
            "additionalPrinterColumns": [
                {"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object", "required": ["size"],
                        "properties": {
                            "size": {"type": "integer", "minimum": 1, "maximum": 8,
                                     "description": "How many devices."},
                            "labels": {"type": "object",
                                       "additionalProperties": {"type": "string"}},
                        },
                    },
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
            }},
        }],
    },
}  # fmt: skip


def test_crd_without_cel_server_side_applies_and_serves_custom_resources(
    cluster: Any, kubectl: Any, namespace: str, wait_until: Any
) -> None:
    _apply(kubectl, CRD, "--server-side", "--field-manager=ascend-pd-e2e")
    wait_until(
        lambda: (_condition(_get(kubectl, "crd", CRD["metadata"]["name"]), "Established")
                 or {}).get("status") == "True",
        "the CRD to be established",
    )  # fmt: skip
    widget = {
        "apiVersion": "e2e.ascend-pd.dev/v1alpha1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        # a map field: writing it iterates a Go map, which crashed an unfixed reflect2
        "spec": {"size": 3, "labels": {"a": "1", "b": "2", "c": "3"}},
    }
    _apply(kubectl, widget, "-n", namespace, "--server-side", "--field-manager=ascend-pd-e2e")
    got = _get(kubectl, "widget", "w", "-n", namespace, "--show-managed-fields")
    assert got["spec"] == widget["spec"]
    managers = [m["manager"] for m in got["metadata"]["managedFields"]]
    assert "ascend-pd-e2e" in managers
    explained = wait_until(
        lambda: kubectl("explain", "widget.spec.size", check=False).stdout,
        "kubectl explain to know the new kind",
    )
    assert "How many devices." in explained
    table = kubectl("get", "wdg", "-n", namespace).stdout
    assert table.split("\n")[0].split()[:2] == ["NAME", "SIZE"]
    bad = dict(widget, spec={"size": 9})
    refused = _apply_check(kubectl, bad, namespace)
    assert refused.returncode != 0 and "spec.size" in refused.stderr
    # the API server survived all of it
    assert kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"


def _apply_check(kubectl: Any, manifest: dict[str, Any], namespace: str) -> Any:
    return kubectl("apply", "-n", namespace, "--server-side", "--field-manager=ascend-pd-e2e",
                   "-f", "-", input=yaml.safe_dump(manifest), check=False)  # fmt: skip


@pytest.mark.simulated
def test_a_job_pod_without_an_outcome_runs_until_told_then_completes(
    kubectl: Any, namespace: str, wait_until: Any
) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "told"},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
                 "containers": [{"name": "check", "image": "example.invalid/check:1"}]}}},
    }  # fmt: skip
    _apply(kubectl, job, "-n", namespace)

    def pod() -> dict[str, Any] | None:
        items = _get(kubectl, "pods", "-n", namespace, "-l", "job-name=told")["items"]
        return items[0] if items and items[0]["status"].get("phase") == "Running" else None

    running = wait_until(pod, "the Job's pod to run")
    assert _get(kubectl, "job", "told", "-n", namespace)["status"].get("active") == 1
    kubectl("annotate", "pod", running["metadata"]["name"], "-n", namespace,
            f"{knobs.OUTCOME}=succeed")  # fmt: skip
    wait_until(
        lambda: (_condition(_get(kubectl, "job", "told", "-n", namespace), "Complete") or {}).get(
            "status") == "True",
        "the Job to complete",
    )  # fmt: skip


# --------------------------------------------------------------------------- failures and time
#
# kubelet-sim's readiness delay, crashes, pod failure and node readiness against the real API
# server and controllers: the StatefulSet controller replacing a failed pod and the endpoints
# controller moving a NotReady pod's address are the oracles, not kubelet-sim's own code.


def _ready(pod: dict[str, Any]) -> str | None:
    return (_condition(pod, "Ready") or {}).get("status")


def _seconds(timestamp: str) -> float:
    parsed = parse_iso(timestamp)
    assert parsed is not None, timestamp
    return parsed


@pytest.mark.simulated
def test_a_readiness_delay_readies_a_running_container_only_after_it(
    kubectl: Any, namespace: str, wait_until: Any
) -> None:
    _apply(kubectl, _pod("warm", 1, {knobs.READY_AFTER: "2"}), "-n", namespace)

    def ready_pod() -> dict[str, Any] | None:
        got = _get(kubectl, "pod", "warm", "-n", namespace)
        return got if _ready(got) == "True" else None

    pod = wait_until(ready_pod, "the pod to become ready")
    started = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    became_ready = _condition(pod, "Ready")["lastTransitionTime"]  # type: ignore[index]
    assert _seconds(became_ready) - _seconds(started) >= 2


@pytest.mark.simulated
def test_each_crash_request_restarts_the_container_once_and_keeps_its_termination(
    cluster: Any, kubectl: Any, namespace: str, wait_until: Any
) -> None:
    _apply(kubectl, _pod("engine", 1), "-n", namespace)
    wait_until(lambda: _ready(_get(kubectl, "pod", "engine", "-n", namespace)) == "True",
               "the pod to become ready")  # fmt: skip

    def restarted(count: int) -> dict[str, Any] | None:
        pod = _get(kubectl, "pod", "engine", "-n", namespace)
        status = pod["status"]["containerStatuses"][0]
        done = status["restartCount"] == count and _ready(pod) == "True"
        return status if done else None

    for count, message in ((1, "HCCL timeout on rank 1"), (2, "HCCL timeout on rank 3")):
        crash_pod(cluster.api_client, namespace, "engine", 137, "Error", message,
                     restart_after_seconds=0)  # fmt: skip
        status = wait_until(lambda c=count: restarted(c), f"restart {count}, ready again")
        ended = status["lastState"]["terminated"]
        assert (ended["exitCode"], ended["reason"], ended["message"]) == (137, "Error", message)
        assert "running" in status["state"]
    events = _get(kubectl, "events", "-n", namespace, "--field-selector", "reason=BackOff")
    assert len(events["items"]) == 2


@pytest.mark.simulated
def test_a_failed_statefulset_pod_is_replaced_by_the_statefulset_controller(
    cluster: Any, kubectl: Any, namespace: str, wait_until: Any
) -> None:
    _start_statefulset(kubectl, namespace, wait_until, _statefulset("prefill", 1, 1))
    old = _get(kubectl, "pod", "prefill-0", "-n", namespace)["metadata"]["uid"]
    fail_pod(cluster.api_client, namespace, "prefill-0", 3, "Error", "device lost")

    def replaced() -> bool:
        # by label: between the failed pod's deletion and its replacement there is no
        # prefill-0 at all, and a get by name fails (it did on a busy CI machine)
        pods = _get(kubectl, "pods", "-n", namespace, "-l", "app=prefill")["items"]
        return any(p["metadata"]["uid"] != old and _ready(p) == "True" for p in pods)

    wait_until(replaced, "a new ready prefill-0")


@pytest.mark.simulated
@pytest.mark.parametrize("unreachable", [False, True], ids=["not-ready", "unreachable"])
def test_a_not_ready_node_makes_its_statefulset_pod_unready_and_ready_again(
    cluster: Any, kubectl: Any, namespace: str, wait_until: Any, unreachable: bool
) -> None:
    # the StatefulSet controller's readyReplicas is the oracle (the endpoints controller
    # would be the natural one, but it refuses kubelet-sim's loopback pod IPs)
    nodes = _get(kubectl, "nodes", "-l", f"{SIM_LABEL}=true")["items"]
    node = max((n["metadata"]["name"] for n in nodes), key=lambda n: int(n.rsplit("-", 1)[1]))
    sts = _statefulset("edge", 1, 1)
    sts["spec"]["template"]["spec"]["nodeSelector"] = {HOSTNAME_KEY: node}
    _start_statefulset(kubectl, namespace, wait_until, sts)

    def ready_replicas() -> int:
        return _ready_replicas(kubectl, namespace, "edge")

    try:
        set_node_ready(cluster.api_client, node, False, unreachable=unreachable)
        wait_until(lambda: ready_replicas() == 0, "the StatefulSet to count no ready replica")
        ready = _condition(_get(kubectl, "node", node), "Ready")
        assert ready is not None and ready["status"] == ("Unknown" if unreachable else "False")
        got = _get(kubectl, "pod", "edge-0", "-n", namespace)
        assert _ready(got) == "False" and got["status"]["phase"] == "Running"
        assert _condition(got, "Ready")["reason"] == "NodeNotReady"  # type: ignore[index]
    finally:
        set_node_ready(cluster.api_client, node, True)
    wait_until(lambda: ready_replicas() == 1, "the replica ready again")
    assert _ready(_get(kubectl, "pod", "edge-0", "-n", namespace)) == "True"
