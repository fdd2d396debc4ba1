"""Names, labels, ports and owner references of everything the operator creates.

Every builder takes names from here, so ``<name>-prefill-<i>`` is spelled once and
the router, the env contract and the status all agree on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import api

Json = dict[str, Any]

PREFIX = "ascendpd.io"
LABEL_DEPLOYMENT = f"{PREFIX}/deployment"
LABEL_ROLE = f"{PREFIX}/role"
LABEL_INSTANCE = f"{PREFIX}/instance"
ANNOTATION_FINGERPRINT = f"{PREFIX}/kv-fingerprint"
ANNOTATION_SPEC_HASH = f"{PREFIX}/spec-hash"
FIELD_MANAGER = "ascend-pd-operator"
MANAGED_BY = "ascend-pd-operator"

#: Ports inside runtime pods (the host's ports under hostNetwork).
HTTP_PORT = 30000
DIST_INIT_PORT = 5757
#: Prefill instance i bootstraps on BOOTSTRAP_PORT_BASE + i: unique per instance, so
#: instances sharing a host network never collide and the router can tell them apart.
BOOTSTRAP_PORT_BASE = 8998

ROLES = ("prefill", "decode")

#: Condition reason of ``<Role>Ready`` when SGLang's parser refused a pod's command line
#: (the launcher's exit ``env_contract.EXIT_ARGS_REFUSED``); also the Warning Event's.
REASON_LAUNCH_REFUSED = "LaunchRefused"


@dataclass(frozen=True)
class Owner:
    """The PDDeployment a child belongs to (uid empty when rendering offline)."""

    name: str
    namespace: str
    uid: str = ""
    generation: int = 0

    def reference(self) -> list[Json]:
        if not self.uid:
            return []
        return [
            {
                "apiVersion": api.API_VERSION,
                "kind": api.KIND,
                "name": self.name,
                "uid": self.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]


def instance_name(owner: Owner, role: str, index: int) -> str:
    """StatefulSet, headless Service and PodGroup of one instance."""
    return f"{owner.name}-{role}-{index}"


def leader_host(owner: Owner, role: str, index: int) -> str:
    sts = instance_name(owner, role, index)
    return f"{sts}-0.{sts}.{owner.namespace}.svc"


def router_name(owner: Owner) -> str:
    return f"{owner.name}-router"


def kv_layout_name(owner: Owner) -> str:
    return f"{owner.name}-kv-layout"


def model_facts_name(owner: Owner) -> str:
    return f"{owner.name}-model-facts"


def inspector_name(owner: Owner) -> str:
    return f"{owner.name}-inspect"


def bootstrap_port(index: int) -> int:
    return BOOTSTRAP_PORT_BASE + index


def endpoint(owner: Owner, port: int) -> str:
    return f"http://{router_name(owner)}.{owner.namespace}.svc:{port}"


def selector(owner: Owner, role: str, index: int | None = None) -> dict[str, str]:
    labels = {LABEL_DEPLOYMENT: owner.name, LABEL_ROLE: role}
    if index is not None:
        labels[LABEL_INSTANCE] = str(index)
    return labels


def labels(owner: Owner, component: str, index: int | None = None) -> dict[str, str]:
    """Recommended app.kubernetes.io labels plus ours (the selectors)."""
    return {
        "app.kubernetes.io/name": "ascend-pd",
        "app.kubernetes.io/instance": owner.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "ascend-pd",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        **selector(owner, component, index),
    }


def metadata(
    owner: Owner,
    name: str,
    component: str,
    index: int | None = None,
    annotations: dict[str, str] | None = None,
) -> Json:
    meta: Json = {
        "name": name,
        "namespace": owner.namespace,
        "labels": labels(owner, component, index),
    }
    if annotations:
        meta["annotations"] = annotations
    refs = owner.reference()
    if refs:
        meta["ownerReferences"] = refs
    return meta
