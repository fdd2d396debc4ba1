"""`helm test` for the ascend-pd operator: apply a tiny PDDeployment, wait for Validated=True.

Runs in the operator image as the chart's test Job, with the operator's own API client,
or as a local process with KUBECONFIG set (the project's e2e tests do that on a control
plane whose kubelet runs no containers). The resource has an inline model config and zero
replicas, so a passing test proves the CRD, the operator's watch, its RBAC and its
validation path without scheduling anything. Exit 0 on Validated=True, 1 otherwise; the
resource is deleted either way.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import yaml

from ascend_pd_operator.kubeio.denials import Denials
from ascend_pd_operator.kubeio.kube import Connection, Kube, KubeError

KIND = "PDDeployment"
PLURAL = "pddeployments"
#: how long a 403 may be the authorizer's cache catching up with the hook's RoleBinding
RBAC_SETTLE_SECONDS = 30.0
T = TypeVar("T")


def log(message: str) -> None:
    print(f"helm-test: {message}", flush=True)


def validated(resource: dict[str, Any]) -> dict[str, Any] | None:
    """The Validated condition of the resource's current generation, if set."""
    status = resource.get("status") or {}
    generation = resource.get("metadata", {}).get("generation")
    observed = status.get("observedGeneration")
    if observed is not None and generation is not None and observed < generation:
        return None
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Validated":
            return dict(condition)
    return None


def retry_forbidden(call: Callable[[], T], seconds: float, pause: float = 1.0) -> T:
    """``call()``, retried while it is refused with 403 for up to ``seconds``.

    The hook's Role and RoleBinding are created just before this Job, and the API
    server's authorizer learns of new bindings from a cache: the first requests may be
    refused for a moment. A 403 that outlasts that is a real missing grant and raises.
    """
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except KubeError as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                raise
            log("refused (403); waiting for the hook's RoleBinding to take effect")
            time.sleep(pause)


def main() -> int:
    namespace = os.environ["TEST_NAMESPACE"]
    name = os.environ["TEST_NAME"]
    timeout = float(os.environ.get("TEST_TIMEOUT_SECONDS", "180"))
    with open(os.environ["TEST_RESOURCE_FILE"], encoding="utf-8") as handle:
        body = yaml.safe_load(handle)
    body["metadata"] = {**body.get("metadata", {}), "name": name, "namespace": namespace}
    # the pod's service account, else $KUBECONFIG; 403s are ours to judge (retry_forbidden)
    kube = Kube(Connection.from_environment(), denials=Denials())

    def delete() -> None:
        kube.delete(KIND, namespace, name)  # a 404 is no error

    retry_forbidden(delete, RBAC_SETTLE_SECONDS)  # also removes a leftover of an earlier run
    deadline = time.monotonic() + timeout
    while True:
        try:
            kube.create(KIND, namespace, body)
            break
        except KubeError as exc:
            # 409: the earlier copy is still being deleted
            if exc.status != 409 or time.monotonic() > deadline:
                raise
            time.sleep(1)
    log(f"created {PLURAL}/{name} in {namespace}; waiting for Validated=True")
    try:
        while time.monotonic() < deadline:
            resource = kube.get(KIND, namespace, name)
            condition = validated(resource) if resource else None
            if condition is not None:
                state = f"Validated={condition.get('status')} ({condition.get('reason')})"
                if condition.get("status") == "True":
                    log(f"{state}: the operator is working")
                    return 0
                if condition.get("status") == "False":
                    log(f"{state}: {condition.get('message')}")
                    return 1
            time.sleep(2)
        log(f"no Validated condition within {timeout:.0f}s: is the operator running?")
        return 1
    finally:
        delete()
        log(f"deleted {PLURAL}/{name}")


if __name__ == "__main__":
    sys.exit(main())
