"""Pure builders of the PD router: a Deployment running the SGLang router in PD mode
and its Service ``<name>-router``.

The router's arguments list every prefill leader with its bootstrap port and every
decode leader, so scaling a role rewrites them (and rolls the router).
"""

from __future__ import annotations

from typing import Any

from .api import PDDeploymentSpec
from .naming import (
    COMPONENT_ROUTER,
    HTTP_PORT,
    Owner,
    bootstrap_port,
    component_selector,
    leader_host,
    metadata,
    router_name,
)
from .workloads import scheduling_fields

Json = dict[str, Any]


def router_args(owner: Owner, spec: PDDeploymentSpec) -> list[str]:
    args = ["--pd-disaggregation"]
    for i in range(spec.prefill.replicas):
        url = f"http://{leader_host(owner, 'prefill', i)}:{HTTP_PORT}"
        args += ["--prefill", url, str(bootstrap_port(i))]
    for j in range(spec.decode.replicas):
        args += ["--decode", f"http://{leader_host(owner, 'decode', j)}:{HTTP_PORT}"]
    args += ["--policy", spec.router.policy, "--host", "0.0.0.0", "--port", str(spec.router.port)]
    return args


def router_deployment(owner: Owner, spec: PDDeploymentSpec) -> Json:
    name = router_name(owner)
    meta = metadata(owner, name, COMPONENT_ROUTER)
    probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10}
    container: Json = {
        "name": "router",
        "image": spec.router.image or spec.runtime.image,
        "imagePullPolicy": spec.runtime.image_pull_policy,
        "command": ["python3", "-m", "sglang_router.launch_router"],
        "args": router_args(owner, spec),
        "ports": [{"name": "http", "containerPort": spec.router.port, "protocol": "TCP"}],
        "readinessProbe": probe,
        "livenessProbe": {**probe, "failureThreshold": 6},
    }
    if spec.router.resources:
        container["resources"] = dict(spec.router.resources)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": spec.router.replicas,
            "selector": {"matchLabels": component_selector(owner, COMPONENT_ROUTER)},
            "template": {
                "metadata": {"labels": meta["labels"]},
                "spec": {
                    "automountServiceAccountToken": False,
                    "containers": [container],
                    **{
                        k: v for k, v in scheduling_fields(spec).items() if k == "priorityClassName"
                    },
                },
            },
        },
    }


def router_service(owner: Owner, spec: PDDeploymentSpec) -> Json:
    meta = metadata(owner, router_name(owner), COMPONENT_ROUTER)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": "ClusterIP",
            "selector": component_selector(owner, COMPONENT_ROUTER),
            "ports": [
                {"name": "http", "port": spec.router.port, "targetPort": "http", "protocol": "TCP"}
            ],
        },
    }
