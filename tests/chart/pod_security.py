"""The Pod Security Standard "restricted" profile as checks on a pod spec.

Mirrors the controls of the Kubernetes pod-security admission "restricted" level (plus
readOnlyRootFilesystem, which the chart promises on top), so the static tests can say
which field of which container breaks which rule.
"""

from __future__ import annotations

from typing import Any

#: volume types the restricted profile allows
ALLOWED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def restricted_violations(pod_spec: dict[str, Any]) -> list[str]:
    """Every restricted-profile rule the pod spec breaks, as 'field: rule' lines."""
    problems: list[str] = []
    pod_sc = pod_spec.get("securityContext") or {}
    for host_field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(host_field):
            problems.append(f"spec.{host_field}: must be unset or false")
    for volume in pod_spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUME_TYPES:
            problems.append(f"volumes[{volume.get('name')}]: type {sorted(kinds)} not allowed")
    pod_profile = (pod_sc.get("seccompProfile") or {}).get("type")
    containers = [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]
    if not containers:
        problems.append("spec.containers: a pod needs containers")
    for container in containers:
        where = f"containers[{container.get('name')}].securityContext"
        sc = container.get("securityContext") or {}
        if sc.get("privileged"):
            problems.append(f"{where}.privileged: must be false")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}.allowPrivilegeEscalation: must be false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            problems.append(f"{where}.capabilities.drop: must contain ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{where}.capabilities.add: only NET_BIND_SERVICE may be added")
        non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
        if non_root is not True:
            problems.append(f"{where}.runAsNonRoot: must be true (pod or container)")
        uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
        if uid is None or uid == 0:
            problems.append(f"{where}.runAsUser: must be a fixed non-zero UID")
        profile = (sc.get("seccompProfile") or {}).get("type", pod_profile)
        if profile not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{where}.seccompProfile.type: must be RuntimeDefault or Localhost")
        if sc.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{where}.readOnlyRootFilesystem: must be true")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                problems.append(f"containers[{container.get('name')}].ports: no hostPort")
    return problems


def pod_specs(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every pod spec in the manifests, keyed 'Kind/name'."""
    found: dict[str, dict[str, Any]] = {}
    for doc in manifests:
        key = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] == "Pod":
            found[key] = doc["spec"]
        elif doc["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}:
            found[key] = doc["spec"]["template"]["spec"]
        elif doc["kind"] == "CronJob":
            found[key] = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return found
