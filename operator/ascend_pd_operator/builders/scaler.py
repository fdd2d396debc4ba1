"""Pure builders of a scaled role's PDRoleScaler: the object the operator creates once, its
status, and the label selector its scale subresource serves (no I/O)."""

from __future__ import annotations

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import (
    API_VERSION,
    COMPONENT_SCALER,
    LABEL_DEPLOYMENT,
    LABEL_DRAINING,
    LABEL_LEADER,
    LABEL_ROLE,
    SCALER_KIND,
    Owner,
    metadata,
    scaler_name,
)


def scaler(owner: Owner, role: str, seed: int) -> Json:
    """The PDRoleScaler of ``role``, starting at ``seed`` instances. It is created once and
    its spec never applied again: spec.replicas belongs to whoever scales it from then on."""
    meta = metadata(owner, scaler_name(owner, role), COMPONENT_SCALER)
    meta["labels"][LABEL_ROLE] = role
    return {"apiVersion": API_VERSION, "kind": SCALER_KIND, "metadata": meta,
            "spec": {"replicas": seed}}  # fmt: skip


def leader_selector(owner: Owner, role: str) -> str:
    """The scale subresource's selector: the leader pod of each instance of ``role`` that
    is not draining, one pod per instance (``kubectl get pods -l`` counts the instances)."""
    return (
        f"{LABEL_DEPLOYMENT}={owner.name},{LABEL_ROLE}={role},{LABEL_LEADER}=true,!{LABEL_DRAINING}"
    )


def scaler_status(
    owner: Owner,
    role: str,
    replicas: int,
    ready: int,
    effective: int,
    message: str,
    generation: int,
) -> Json:
    """The status the operator writes on the scaler (camelCase, as stored)."""
    return {
        "replicas": replicas,
        "readyReplicas": ready,
        "effectiveReplicas": effective,
        "selector": leader_selector(owner, role),
        "message": message,
        "observedGeneration": generation,
    }
