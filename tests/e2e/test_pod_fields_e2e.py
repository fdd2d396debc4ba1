"""The pod fields of issue 26 on a real API server: each reaches the pods, each refusal comes
from the API server (its schema or its CEL), and a refused update leaves the running
deployment exactly as it was.

The API server's admission has its say too: a pod naming a ServiceAccount or PriorityClass
that does not exist is refused (the ServiceAccount and Priority plugins), and the Priority
plugin resolves the class to the pod's ``priority``. So the test creates both first, and
reads the pods themselves, not only the templates the operator wrote.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest
import yaml
from pdd_e2e import Operator, condition, get, status
from pydantic import ValidationError

from ascend_pd_operator.api.models import ContainerSecurityContext, Router
from ascend_pd_operator.api.rules import rules_for
from reliability.bad_inputs import CORPUS, Case, load_corpus, server_refusal_names
from reliability.specs import merged, pdd

pytestmark = [pytest.mark.simulated, pytest.mark.timeout(900)]

NAME = "hatch"
#: The pod fields, on both roles and the router; the router's own besides.
ROLE_FIELDS: dict[str, Any] = {
    "imagePullSecrets": [{"name": "registry"}],
    "serviceAccountName": "llm-runtime",
    "podSecurityContext": {"fsGroup": 2000, "supplementalGroups": [3000],
                           "sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}]},
    "containerSecurityContext": {"capabilities": {"add": ["IPC_LOCK"]},
                                 "seccompProfile": {"type": "RuntimeDefault"}},
    "volumes": [{"name": "toolkit", "hostPath": {"path": "/usr/local/Ascend/ascend-toolkit"}},
                {"name": "cache", "emptyDir": {}}],
    "volumeMounts": [{"name": "toolkit", "mountPath": "/usr/local/Ascend/ascend-toolkit",
                      "readOnly": True},
                     {"name": "cache", "mountPath": "/root/.cache"}],
}  # fmt: skip
ROUTER_FIELDS: dict[str, Any] = {
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "router",
                     "effect": "NoSchedule"}],
    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    "imagePullSecrets": [{"name": "registry"}],
    "serviceAccountName": "llm-router",
    "podSecurityContext": {"runAsUser": 1000, "runAsNonRoot": True},
    "containerSecurityContext": {"allowPrivilegeEscalation": False,
                                 "capabilities": {"drop": ["ALL"]},
                                 "readOnlyRootFilesystem": True},
    "volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory"}}],
    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
}  # fmt: skip


@pytest.fixture
def priority_class(kubectl: Any) -> Any:
    """A PriorityClass of the test's own (they are cluster-wide), deleted afterwards."""
    name = f"e2e-hatch-{uuid.uuid4().hex[:6]}"
    doc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
           "metadata": {"name": name}, "value": 4242}  # fmt: skip
    kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    yield name
    kubectl("delete", "priorityclass", name, "--ignore-not-found", check=False)


def _apply(kubectl: Any, doc: dict[str, Any], check: bool = True) -> Any:
    # --validate=false: the API server's own schema answers, not kubectl's copy of it
    return kubectl("apply", "--validate=false", "-f", "-", input=yaml.safe_dump(doc), check=check)


def _ready(kubectl: Any, namespace: str) -> dict[str, Any] | None:
    cr = get(kubectl, namespace, "pdd", NAME) or {}
    st = cr.get("status") or {}
    current = st.get("observedGeneration") == cr.get("metadata", {}).get("generation")
    return st if current and st.get("phase") == "Ready" else None


def _pods(kubectl: Any, namespace: str, selector: str) -> list[dict[str, Any]]:
    found = get(kubectl, namespace, "pods", "-l", selector) or {}
    return [p for p in found.get("items", []) if not p["metadata"].get("deletionTimestamp")]


def test_every_pod_field_reaches_the_pods(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any, priority_class: str
) -> None:
    for account in ("llm-runtime", "llm-router"):
        kubectl("create", "serviceaccount", account, "-n", namespace)
    doc = pdd(NAME, namespace, host_network=True)
    for role in ("prefill", "decode"):
        doc["spec"][role].update(copy.deepcopy(ROLE_FIELDS), priorityClassName=priority_class)
    doc["spec"]["router"].update(copy.deepcopy(ROUTER_FIELDS), priorityClassName=priority_class)
    _apply(kubectl, doc)
    wait_until(lambda: _ready(kubectl, namespace), f"{NAME} Ready")

    runtime = _pods(kubectl, namespace, f"ascendpd.io/deployment={NAME},ascendpd.io/role")
    assert len(runtime) == 3  # prefill PP 2 × TP 1 on 1 NPU per pod, and 1 decode pod
    for pod in runtime:
        spec, name = pod["spec"], pod["metadata"]["name"]
        container = spec["containers"][0]
        assert spec["imagePullSecrets"] == [{"name": "registry"}], name
        assert spec["serviceAccountName"] == "llm-runtime", name
        assert spec["automountServiceAccountToken"] is False, name
        # the Priority admission plugin resolved the class the operator passed on
        assert (spec["priorityClassName"], spec["priority"]) == (priority_class, 4242), name
        assert spec["securityContext"] == ROLE_FIELDS["podSecurityContext"], name
        # the role's over the operator's defaults, field by field (docs/security.md)
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"add": ["IPC_LOCK"], "drop": ["NET_RAW"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        }, name
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["toolkit"]["hostPath"]["path"] == "/usr/local/Ascend/ascend-toolkit"
        assert volumes["cache"]["emptyDir"] == {}
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert mounts["/usr/local/Ascend/ascend-toolkit"] == {
            "name": "toolkit",
            "mountPath": "/usr/local/Ascend/ascend-toolkit",
            "readOnly": True,
        }
        assert mounts["/root/.cache"] == {"name": "cache", "mountPath": "/root/.cache"}
        # the operator's own are all still there
        assert {"model", "dshm", "ascend-driver", "kv-layout"} <= set(volumes), name
        assert {"/dev/shm", "/etc/ascend-pd/kv-layout"} <= set(mounts), name
        assert spec["hostNetwork"] is True, name

    routers = _pods(kubectl, namespace, f"ascendpd.io/deployment={NAME},"
                                        "app.kubernetes.io/component=router")  # fmt: skip
    assert len(routers) == 2  # router.replicas' default
    spec = routers[0]["spec"]
    container = spec["containers"][0]
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert ROUTER_FIELDS["tolerations"][0] in spec["tolerations"]
    # the router's requests, and its default memory limit (above them, so it stays)
    assert container["resources"] == {**ROUTER_FIELDS["resources"], "limits": {"memory": "4Gi"}}
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert spec["serviceAccountName"] == "llm-router"
    assert (spec["priorityClassName"], spec["priority"]) == (priority_class, 4242)
    # theirs over the restricted defaults: their UID replaces the default UID and GID
    assert spec["securityContext"] == {
        **ROUTER_FIELDS["podSecurityContext"], "seccompProfile": {"type": "RuntimeDefault"}
    }  # fmt: skip
    assert container["securityContext"] == ROUTER_FIELDS["containerSecurityContext"]
    assert {"name": "tmp", "emptyDir": {"medium": "Memory"}} in spec["volumes"]
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    # its discovery reads pods with the account it runs as: the operator bound its Role to it
    account = f"system:serviceaccount:{namespace}:llm-router"
    for verb in ("get", "list", "watch"):
        done = kubectl("auth", "can-i", verb, "pods", "-n", namespace, "--as", account)
        assert done.stdout.strip() == "yes", verb
    done = kubectl("auth", "can-i", "delete", "pods", "-n", namespace, "--as", account,
                   check=False)  # fmt: skip
    assert done.stdout.strip() == "no"


def _snapshot(kubectl: Any, namespace: str) -> dict[str, str]:
    """uid@resourceVersion of every child and pod of the deployment."""
    found = get(kubectl, namespace, "configmaps,services,statefulsets,deployments,pods",
                "-l", f"ascendpd.io/deployment={NAME}") or {}  # fmt: skip
    return {
        f"{i['kind']}/{i['metadata']['name']}": f"{i['metadata']['uid']}@"
        f"{i['metadata']['resourceVersion']}"
        for i in found.get("items", [])
    }


def _refusal(kubectl: Any, namespace: str, case: Case) -> str:
    """Apply the case onto the Ready deployment; the API server's refusal."""
    doc = merged(pdd(NAME, namespace, host_network=True), case.patch)
    done = _apply(kubectl, doc, check=False)
    assert done.returncode != 0, f"{case.name}: the API server accepted it"
    return str(done.stderr)


#: The corpus of the fields that reach the pods: pod fields, preflight and the HCCL timeout.
POD_CASES = [c for c in load_corpus() if c.source in ("pods.yaml", "preflight.yaml")]


def test_each_refusal_comes_from_the_api_server_and_nothing_moves(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    """Every case of ``reliability/bad_inputs/pods.yaml`` and ``preflight.yaml`` as an update
    of a Ready deployment:
    refused with its message, and no child or pod of the deployment changes."""
    assert len(POD_CASES) >= 20, CORPUS / "pods.yaml"
    base = pdd(NAME, namespace, host_network=True)
    _apply(kubectl, base)
    wait_until(lambda: _ready(kubectl, namespace), f"{NAME} Ready")
    failures = []
    for case in POD_CASES:
        before = _snapshot(kubectl, namespace)
        message = _refusal(kubectl, namespace, case)
        if not server_refusal_names(case, message):
            failures.append(f"{case.name}: expected {case.message!r} in {message!r}")
        after = _snapshot(kubectl, namespace)
        touched = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        if touched:
            failures.append(f"{case.name}: touched {touched}")
    assert not failures, "\n".join(failures)
    assert status(kubectl, namespace, NAME)["phase"] == "Ready"


@pytest.mark.parametrize(
    ("context", "refused"),
    [({"allowPrivilegeEscalation": False, "privileged": True}, True),
     ({"allowPrivilegeEscalation": False, "capabilities": {"add": ["CAP_SYS_ADMIN"]}}, True),
     ({"allowPrivilegeEscalation": False, "capabilities": {"add": ["IPC_LOCK"]}}, False),
     ({"allowPrivilegeEscalation": True, "privileged": True}, False)],
    ids=["privileged", "cap-sys-admin", "other-capability", "escalation-allowed"],
)  # fmt: skip
def test_the_escalation_rule_is_what_kubernetes_refuses_in_a_pod(
    kubectl: Any, namespace: str, context: dict[str, Any], refused: bool
) -> None:
    """The ContainerSecurityContext rule (``api.rules``) refuses at admission exactly what the
    API server would refuse in the StatefulSet's pods, where it would be a failed apply."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "x", "securityContext": context}]},
    }
    done = kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(pod),
                   check=False)  # fmt: skip
    assert (done.returncode != 0) == refused, done.stderr
    if refused:
        assert "cannot set `allowPrivilegeEscalation` to false" in done.stderr, done.stderr
    try:
        ContainerSecurityContext.model_validate(context)
        ours = ""
    except ValidationError as exc:
        ours = str(exc)
    assert (rules_for("ContainerSecurityContext")[0].message in ours) == refused, ours


#: A pod's container fields (volumeMounts, securityContext) and pod securityContext; the
#: words of the API server's refusal, or None where it admits the pod.
_POD_RULE_CASES = [
    ("bidirectional-unprivileged",
     {"volumeMounts": [{"name": "v", "mountPath": "/v", "mountPropagation": "Bidirectional"}]},
     {}, "Bidirectional mount propagation is available only to privileged containers"),
    ("bidirectional-privileged-false",
     {"volumeMounts": [{"name": "v", "mountPath": "/v", "mountPropagation": "Bidirectional"}],
      "securityContext": {"privileged": False}},
     {}, "Bidirectional mount propagation is available only to privileged containers"),
    ("bidirectional-privileged",
     {"volumeMounts": [{"name": "v", "mountPath": "/v", "mountPropagation": "Bidirectional"}],
      "securityContext": {"privileged": True}}, {}, None),
    ("host-to-container", {"volumeMounts": [{"name": "v", "mountPath": "/v",
                                             "mountPropagation": "HostToContainer"}]}, {}, None),
    ("sub-path-and-expr",
     {"volumeMounts": [{"name": "v", "mountPath": "/v", "subPath": "a", "subPathExpr": "b"}]},
     {}, "subPathExpr and subPath are mutually exclusive"),
    ("sub-path-expr", {"volumeMounts": [{"name": "v", "mountPath": "/v", "subPathExpr": "b"}]},
     {}, None),
    ("pod-localhost-no-profile", {}, {"seccompProfile": {"type": "Localhost"}},
     "must be set when seccomp type is Localhost"),
    ("container-profile-not-localhost",
     {"securityContext": {"seccompProfile": {"type": "RuntimeDefault",
                                             "localhostProfile": "p.json"}}},
     {}, "can only be set when seccomp type is Localhost"),
    ("localhost-with-profile",
     {"securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}},
     {"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("container", "pod_context", "words"),
    [c[1:] for c in _POD_RULE_CASES],
    ids=[c[0] for c in _POD_RULE_CASES],
)
def test_the_mount_and_seccomp_rules_are_what_kubernetes_refuses_in_a_pod(
    kubectl: Any,
    namespace: str,
    container: dict[str, Any],
    pod_context: dict[str, Any],
    words: str | None,
) -> None:
    """The Bidirectional, subPath/subPathExpr and seccomp rules (``api.rules``) refuse at
    admission exactly what the API server refuses in a pod (a router's or a role's), where
    it would be a failed apply or a pod never created."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "x", **container}],
                 "volumes": [{"name": "v", "emptyDir": {}}], "securityContext": pod_context},
    }  # fmt: skip
    done = kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(pod),
                   check=False)  # fmt: skip
    assert (done.returncode != 0) == (words is not None), done.stderr
    if words is not None:
        assert words in done.stderr, done.stderr
    fields = {"volumes": [{"name": "v", "emptyDir": {}}],
              "volumeMounts": container.get("volumeMounts", []),
              "containerSecurityContext": container.get("securityContext"),
              "podSecurityContext": pod_context or None}  # fmt: skip
    try:
        Router.model_validate(fields)
        ours = ""
    except ValidationError as exc:
        ours = str(exc)
    assert bool(ours) == (words is not None), ours


def test_a_volume_source_kubernetes_refuses_reaches_no_running_pod(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    """A volume's source is kept as written (the CRD cannot see into it): one with two sources
    passes admission, yet Kubernetes refuses such a pod, and the API server does not check a
    StatefulSet's pod template. The running instance must keep its pods: the update is
    refused (ApplyFailed, the API server's verdict on the template) before any pod of the
    deployment is deleted. (A volume with no source is no test: Kubernetes defaults it to
    an emptyDir.)"""
    base = pdd(NAME, namespace, host_network=True)
    _apply(kubectl, base)
    wait_until(lambda: _ready(kubectl, namespace), f"{NAME} Ready")
    pods = {p["metadata"]["uid"] for p in _pods(kubectl, namespace, "ascendpd.io/role")}
    two_sources = {"name": "scratch", "emptyDir": {}, "hostPath": {"path": "/scratch"}}
    _apply(kubectl, merged(base, {"spec": {"prefill": {"volumes": [two_sources]}}}))

    def observed() -> dict[str, Any] | None:
        cr = get(kubectl, namespace, "pdd", NAME) or {}
        st = cr.get("status") or {}
        return st if st.get("observedGeneration") == cr["metadata"]["generation"] else None

    st = wait_until(observed, "the update observed")
    refused = condition(st, "Validated").get("status") == "False" or (
        condition(st, "Ready").get("reason") == "ApplyFailed"
    )
    assert refused, st["conditions"]
    ready = condition(st, "Ready")
    assert ready.get("reason") != "ApplyFailed" or "pod template" in ready["message"], ready
    assert {p["metadata"]["uid"] for p in _pods(kubectl, namespace, "ascendpd.io/role")} == pods
