"""RBAC as the Helm chart grants it, and a kubeconfig that acts as the chart's ServiceAccount.

The chart's rules are written by hand in ``charts/ascend-pd-operator/templates/rbac.yaml``;
the operator code declares what it calls in ``api.access``. ``grants_from_rules`` flattens
rendered rules into (apiGroup, resource, verb) triples so a test can compare the two sets
exactly: a verb the code needs but the chart lacks fails at runtime with 403, one the chart
grants but the code never uses is privilege nobody asked for.

``service_account_kubeconfig`` lets the operator (and the helm test script) run as a local
process with exactly the chart's rights, on a control plane whose kubelet runs no
containers, so a missing verb fails there as it would in a pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

#: (apiGroup, resource, verb); the core group is ""
Grant = tuple[str, str, str]


class RBACError(ValueError):
    """A rule the chart must never contain (wildcards, resourceNames, nonResourceURLs)."""


def grants_from_rules(rules: Iterable[Mapping[str, Any]]) -> set[Grant]:
    """Flatten RBAC rules into grants; refuse the shapes least privilege rules out."""
    grants: set[Grant] = set()
    for index, rule in enumerate(rules):
        where = f"rules[{index}]"
        if rule.get("nonResourceURLs"):
            raise RBACError(f"{where}.nonResourceURLs: {rule['nonResourceURLs']} not allowed")
        if rule.get("resourceNames"):
            raise RBACError(f"{where}.resourceNames: the operator's rules name no objects")
        groups = list(rule.get("apiGroups") or [])
        resources = list(rule.get("resources") or [])
        verbs = list(rule.get("verbs") or [])
        for field, values in (("apiGroups", groups), ("resources", resources), ("verbs", verbs)):
            if not values:
                raise RBACError(f"{where}.{field}: empty")
            if any("*" in value for value in values):
                raise RBACError(f"{where}.{field}: wildcard in {values} (list them exactly)")
        grants |= {(g, r, v) for g in groups for r in resources for v in verbs}
    return grants


def grants_by_role(manifests: Iterable[Mapping[str, Any]]) -> dict[str, set[Grant]]:
    """Grants of every Role and ClusterRole, keyed 'Kind/namespace/name' ('-' if cluster)."""
    found: dict[str, set[Grant]] = {}
    for doc in manifests:
        if doc.get("kind") not in ("Role", "ClusterRole"):
            continue
        meta = doc["metadata"]
        key = f"{doc['kind']}/{meta.get('namespace', '-')}/{meta['name']}"
        found[key] = grants_from_rules(doc.get("rules") or [])
    return found


# -- acting as the chart's ServiceAccount ---------------------------------------------


def service_account_token(core: Any, namespace: str, name: str) -> str:
    """A bearer token of the ServiceAccount ``namespace/name``, minted by the TokenRequest
    API (every supported release serves it and creates no token Secrets).
    ``core`` is a ``kubernetes.client.CoreV1Api``.
    """
    from kubernetes.client import (  # imported here: the pure part above needs no client
        AuthenticationV1TokenRequest,
        V1TokenRequestSpec,
    )

    request = AuthenticationV1TokenRequest(spec=V1TokenRequestSpec(audiences=[]))
    minted = core.create_namespaced_service_account_token(name, namespace, request)
    token = minted.status.token
    if not token:
        raise RuntimeError(f"serviceaccount {namespace}/{name}: TokenRequest gave no token")
    return str(token)


def kubeconfig_for_token(
    admin_kubeconfig: Mapping[str, Any], token: str, user: str
) -> dict[str, Any]:
    """A kubeconfig for the admin's current cluster that authenticates with ``token`` only."""
    contexts = {c["name"]: c["context"] for c in admin_kubeconfig["contexts"]}
    current = contexts[admin_kubeconfig["current-context"]]
    clusters = {c["name"]: c for c in admin_kubeconfig["clusters"]}
    cluster = clusters[current["cluster"]]
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": user, "context": {"cluster": cluster["name"], "user": user}},
        ],
        "current-context": user,
    }


def service_account_kubeconfig(
    admin_kubeconfig: Path, namespace: str, name: str, target: Path
) -> Path:
    """Write a kubeconfig at ``target`` that acts as ServiceAccount ``namespace/name``."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=str(admin_kubeconfig))  # type: ignore[no-untyped-call]
    core = client.CoreV1Api(api_client)
    token = service_account_token(core, namespace, name)
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    for entry in admin["clusters"]:
        ca = entry["cluster"].get("certificate-authority")
        if ca and not Path(ca).is_absolute():
            # kubeconfig paths are relative to the file; the new file may live elsewhere
            entry["cluster"]["certificate-authority"] = str(admin_kubeconfig.parent / ca)
    document = kubeconfig_for_token(admin, token, f"system:serviceaccount:{namespace}:{name}")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(document, sort_keys=False))
    target.chmod(0o600)
    return target


def local_operator_command(
    deployment: Mapping[str, Any], health_port: int, metrics_port: int = 0
) -> tuple[list[str], dict[str, str]]:
    """``ascend-pd run`` argv and env that reproduce the chart's operator pod locally.

    The args are the live Deployment's own (so the watch scope is the chart's), with the
    health and metrics ports replaced (the pod's ports may be taken here); the env adds what the pod
    gets from the downward API. Pair it with ``service_account_kubeconfig`` for its rights.
    """
    pod = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "operator"]
    ports = {"--health-port": health_port, "--metrics-port": metrics_port}
    args = [
        f"{arg.split('=', 1)[0]}={ports[arg.split('=', 1)[0]]}"
        if arg.split("=", 1)[0] in ports
        else arg
        for arg in container.get("args") or []
    ]
    meta = deployment["metadata"]
    env = {"POD_NAMESPACE": str(meta["namespace"]), "POD_NAME": f"{meta['name']}-local"}
    return ["run", *args], env
