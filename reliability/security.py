"""Security checks: the chart's ServiceAccount only, least privilege, no secret leaks.

- The operator runs with a kubeconfig that holds nothing but the chart ServiceAccount's
  token, and that account is refused what the operator never needs (Secrets, cluster-wide
  RBAC, binding or escalating a Role beyond what it holds, minting tokens, Nodes, deleting
  PDDeployments, anything outside its namespaces) while it is granted what it does (the
  exact allow-list is compared with the chart in tests/chart; it writes each router's
  ServiceAccount, Role and RoleBinding, which read pods only).
- The runtime pods of a Ready deployment ask for no privilege beyond ``EXCEPTIONS``,
  each with its reason: no privileged containers, no added capabilities, no host PID
  or IPC, hostPath only for the Ascend driver and a model directory the user named.
- A Hugging Face token given the only supported way (an env ``secretKeyRef``) never
  appears in the PDDeployment, a ConfigMap, an Event, a child or the operator's log.
"""

from __future__ import annotations

import secrets
import subprocess
from typing import Any

import yaml

from ascend_pd_dev.testtools.kubectl import kubectl_path
from ascend_pd_operator.api.vocabulary import COMPONENT_ROUTER, LABEL_COMPONENT

from .audit import wait_converged
from .env import Env, Release
from .result import ScenarioResult
from .specs import pdd

Json = dict[str, Any]

#: What runtime pods may ask for beyond a restricted pod, and why Ascend needs it.
EXCEPTIONS = {
    "hostNetwork": "HCCL and the memfabric KV transfer engine talk over the node's RDMA "
    "NICs (ascend.hostNetwork, on by default; off for a pod network with RoCE passthrough)",
    "hostPath:driver": "the Ascend driver and its tools live on the node "
    "(ascend.driverHostPath, mounted read-only)",
    "hostPath:model": "a model directory on the node, only when the user chose "
    "spec.model.volume.hostPath",
}

#: (verb, resource) the operator's ServiceAccount must be refused in its own namespace.
REFUSED = (
    ("get", "secrets"),
    ("list", "secrets"),
    ("create", "pods"),
    ("delete", "pddeployments.ascendpd.io"),
    # it writes the router's Role and RoleBinding, granting only what it holds itself
    ("bind", "roles.rbac.authorization.k8s.io"),
    ("escalate", "roles.rbac.authorization.k8s.io"),
    ("create", "clusterroles.rbac.authorization.k8s.io"),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
    ("create", "serviceaccounts/token"),
    ("create", "pods/exec"),
)
#: ... and granted (a sample; tests/chart compares the whole allow-list with the chart).
GRANTED = (
    ("patch", "statefulsets.apps"),
    ("patch", "pddeployments.ascendpd.io/status"),
    ("list", "pods"),
    # an instance is updated or restarted by deleting all its pods together
    ("delete", "pods"),
    ("create", "events"),
)


def _can_i(kubeconfig: str, verb: str, resource: str, namespace: str) -> bool:
    # "pods/exec" is a subresource; kubectl would read it as the pod named "exec"
    resource, _, sub = resource.partition("/")
    done = subprocess.run(
        [str(kubectl_path()), "--kubeconfig", kubeconfig, "auth", "can-i", verb, resource,
         "-n", namespace, *(["--subresource", sub] if sub else [])],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    return done.stdout.strip() == "yes"


def pod_privileges(pod: Json, model_host_path: str | None, driver_path: str) -> list[str]:
    """What ``pod`` asks for beyond a restricted pod and ``EXCEPTIONS``."""
    spec = pod["spec"]
    name = pod["metadata"]["name"]
    found = []
    for key in ("hostPID", "hostIPC"):
        if spec.get(key):
            found.append(f"{name}: {key}")
    for volume in spec.get("volumes") or []:
        path = (volume.get("hostPath") or {}).get("path")
        if path and path not in (driver_path, model_host_path):
            found.append(f"{name}: hostPath {path}")
    for container in [*spec.get("containers", []), *spec.get("initContainers", [])]:
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            found.append(f"{name}/{container['name']}: privileged")
        if context.get("allowPrivilegeEscalation"):
            found.append(f"{name}/{container['name']}: allowPrivilegeEscalation")
        added = (context.get("capabilities") or {}).get("add") or []
        if added:
            found.append(f"{name}/{container['name']}: capabilities {added}")
        for mount in container.get("volumeMounts") or []:
            volume = next(v for v in spec.get("volumes", []) if v["name"] == mount["name"])
            if (volume.get("hostPath") or {}).get("path") == driver_path and not mount.get(
                "readOnly"
            ):
                found.append(f"{name}/{container['name']}: driver mounted writable")
    return found


def run(env: Env, release: Release, namespace: str, bound_seconds: float = 120.0) -> ScenarioResult:
    result = ScenarioResult("security")
    token_config = str(release.token_kubeconfig)
    # 1. only the ServiceAccount's token
    users = yaml.safe_load(release.token_kubeconfig.read_text())["users"]
    only_token = len(users) == 1 and set(users[0]["user"]) == {"token"}
    result.record(only_token, 0.0, f"operator kubeconfig user has {set(users[0]['user'])}")
    refused = [f"{v} {r}" for v, r in REFUSED if _can_i(token_config, v, r, namespace)]
    other_ns = release.namespace  # a namespace the release does not watch
    outside = [f"{v} {r} in {other_ns}" for v, r in (("patch", "statefulsets.apps"),
               ("list", "configmaps")) if _can_i(token_config, v, r, other_ns)]  # fmt: skip
    missing = [f"{v} {r}" for v, r in GRANTED if not _can_i(token_config, v, r, namespace)]
    result.record(not refused and not outside and not missing, 0.0,
                  f"granted but should not be: {refused + outside}; refused but needed: "
                  f"{missing}")  # fmt: skip
    result.duplicated += len(refused) + len(outside)
    # 2. runtime pods and 3. the Hugging Face token
    token = f"hf_{secrets.token_hex(16)}"
    env.apply([{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token",
                "namespace": namespace}, "stringData": {"token": token}}])  # fmt: skip
    # the host network, as users run it: its exception is one this scenario judges
    doc = pdd("secure", namespace, host_network=True)
    hf_env = [{"name": "HF_TOKEN",
               "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}]  # fmt: skip
    doc["spec"]["prefill"]["env"] = hf_env
    doc["spec"]["decode"]["env"] = hf_env
    operator = release.operator([namespace], "security-operator")
    operator.start()
    try:
        env.apply([doc])
        found, seconds = wait_converged(env.kube, namespace, bound_seconds, 0.5)
        result.record(found.ok, seconds, f"not Ready: {found}")
        pods = [*env.kube.list("Pod", namespace, "ascendpd.io/deployment=secure")]
        model_path = doc["spec"]["model"]["volume"]["hostPath"]["path"]
        driver = "/usr/local/Ascend/driver"
        privileges = [p for pod in pods for p in pod_privileges(pod, model_path, driver)]
        router_host = [p["metadata"]["name"] for p in pods
                       if p["metadata"]["labels"].get(LABEL_COMPONENT) == COMPONENT_ROUTER
                       and (p["spec"].get("hostNetwork") or any(
                           "hostPath" in v for v in p["spec"].get("volumes", [])))]  # fmt: skip
        result.record(bool(pods) and not privileges and not router_host, 0.0,
                      f"privileges beyond the exceptions: {privileges}; router on the host: "
                      f"{router_host}; pods checked {len(pods)}")  # fmt: skip
        places = {
            "PDDeployment": env.kubectl("get", "pdd", "-n", namespace, "-o", "json").stdout,
            "ConfigMaps": env.kubectl("get", "configmaps", "-n", namespace, "-o", "json").stdout,
            "Events": env.kubectl("get", "events", "-n", namespace, "-o", "json").stdout,
            "children": env.kubectl(
                "get", "statefulsets,deployments,services,jobs", "-n", namespace, "-o", "json"
            ).stdout,
            "operator log": operator.log_text(),
        }
        leaks = [where for where, text in places.items() if token in text]
        result.record(not leaks, 0.0, f"the token appears in {leaks}")
        result.lost += 0
        result.duplicated += len(leaks)
        result.details.update({"pods_checked": len(pods), "exceptions": EXCEPTIONS,
                               "refused_checked": len(REFUSED), "leaks": leaks})  # fmt: skip
    finally:
        operator.kill()
    return result
