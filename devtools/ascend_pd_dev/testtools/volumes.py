"""The model volume a cluster administrator would have provisioned, for the dev cluster.

The examples mount the PersistentVolumeClaim ``models`` (``examples/models-pvc.yaml``). With
the real kube-scheduler a pod whose claim is missing or unbound stays Pending, as on any
cluster, so the demo and the tests give each namespace what an administrator gives it: a
PersistentVolume reserved for that namespace's ``models`` claim (``claimRef``, the static
provisioning of the Kubernetes docs), which kube-controller-manager's persistent-volume binder
binds once the claim exists. kubelet-sim mounts nothing, so the hostPath never needs to exist.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

#: the claim the examples mount
CLAIM = "models"
#: what the PersistentVolume offers: at least what ``examples/models-pvc.yaml`` asks
CAPACITY = "2Ti"
ACCESS_MODES = ("ReadWriteMany", "ReadOnlyMany")


def volume_name(namespace: str) -> str:
    return f"{CLAIM}-{namespace}"


def models_volume(namespace: str, storage_class: str = "") -> dict[str, Any]:
    """The PersistentVolume kept for ``namespace``'s ``models`` claim (``storage_class``:
    the claim's ``storageClassName``; "" for a claim that names none on a cluster without a
    default class)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": volume_name(namespace),
            "labels": {"ascend-pd.dev/models-for": namespace},
        },
        "spec": {
            "capacity": {"storage": CAPACITY},
            "accessModes": list(ACCESS_MODES),
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": storage_class,
            "claimRef": {"namespace": namespace, "name": CLAIM},
            "hostPath": {"path": f"/var/lib/ascend-pd-dev/models/{namespace}"},
        },
    }


def for_namespace(project_root: Path, namespace: str, claim: bool = True) -> list[dict[str, Any]]:
    """What ``namespace`` gets: its volume and (``claim``) the examples' claim, to apply."""
    return [models_volume(namespace), *([models_claim(project_root, namespace)] if claim else [])]


def models_claim(project_root: Path, namespace: str) -> dict[str, Any]:
    """``examples/models-pvc.yaml`` as a user applies it, in ``namespace``."""
    (claim,) = [
        d
        for d in yaml.safe_load_all((project_root / "examples" / "models-pvc.yaml").read_text())
        if d
    ]
    claim["metadata"]["namespace"] = namespace
    return dict(claim)
