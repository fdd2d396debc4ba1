"""Pure builders of the security contexts of the router and runtime pods: the operator's
defaults, with the user's ``podSecurityContext`` / ``containerSecurityContext`` over them.

- The router meets Pod Security ``restricted`` by default: a fixed non-root UID and GID
  (``ROUTER_UID``; the runtime image it runs by default is an SGLang image whose user is
  root, so ``runAsNonRoot`` alone would stop the kubelet from starting it), no privilege
  escalation, every capability dropped, seccomp ``RuntimeDefault``, a read-only root
  filesystem with an emptyDir on ``/tmp``. Its ServiceAccount token stays mounted: the
  service discovery watches pods with it.
- A runtime container cannot meet ``baseline`` (host network, host ports, the driver's
  hostPath), but it needs no privilege either: no privilege escalation, seccomp
  ``RuntimeDefault`` and ``NET_RAW`` dropped (in the host network a raw socket would see
  and forge the node's traffic). Every other default capability stays: SGLang images run
  as root, and root reads the Ascend driver's files (owned by ``HwHiAiUser``) through
  ``DAC_OVERRIDE``; what CANN needs beyond that is unmeasured without Ascend hardware, so
  nothing more is dropped.

The user's fields win key by key (``capabilities`` per ``add`` / ``drop``). Two defaults
give way where Kubernetes would refuse or the kubelet would not start the container with
them: ``allowPrivilegeEscalation: false`` beside ``privileged: true`` or an added
``CAP_SYS_ADMIN``, and the router's ``runAsNonRoot`` beside a ``runAsUser: 0`` of the user's.
The router's UID and GID are one choice: a ``runAsUser`` or ``runAsGroup`` of the user's
(pod or container) replaces both. A capability the user adds is not dropped by default.
"""

from __future__ import annotations

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import RoleSpec, Router, dump
from ascend_pd_operator.api.vocabulary import ROUTER_TMP_MOUNT_PATH, VOLUME_ROUTER_TMP

#: The router's UID and GID: the operator image's and the chart's (no user of the image's).
ROUTER_UID = 65532
RUNTIME_DEFAULT_SECCOMP = {"type": "RuntimeDefault"}
#: Capabilities whose addition makes Kubernetes refuse ``allowPrivilegeEscalation: false``
#: (it checks the literal ``CAP_SYS_ADMIN``; a runtime adds ``SYS_ADMIN`` alike).
_ESCALATING = {"CAP_SYS_ADMIN", "SYS_ADMIN"}


def _cap(name: str) -> str:
    return name.upper().removeprefix("CAP_")


def _merged(defaults: Json, given: Json) -> Json:
    """``defaults`` with ``given`` over them key by key; the default ``allowPrivilegeEscalation``
    dropped where ``given`` makes it contradictory, default drops the user adds left out."""
    out = {**defaults, **given}
    caps_given = given.get("capabilities") or {}
    if "capabilities" in defaults:
        added = {_cap(c) for c in caps_given.get("add") or []}
        default_caps = {
            k: [c for c in v if _cap(c) not in added] if k == "drop" else v
            for k, v in defaults["capabilities"].items()
        }
        caps = {k: v for k, v in {**default_caps, **caps_given}.items() if v}
        if caps:
            out["capabilities"] = caps
        else:
            out.pop("capabilities", None)
    escalating = given.get("privileged") is True or bool(
        {str(c).upper() for c in caps_given.get("add") or []} & _ESCALATING
    )
    if escalating and "allowPrivilegeEscalation" not in given:
        out.pop("allowPrivilegeEscalation", None)
    return out


def runtime_container_security(role: RoleSpec) -> Json:
    """The runtime container's securityContext."""
    defaults: Json = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["NET_RAW"]},
        "seccompProfile": dict(RUNTIME_DEFAULT_SECCOMP),
    }
    return _merged(defaults, dump(role.container_security_context))


def router_pod_security(router: Router) -> Json:
    """The router pod's securityContext."""
    given = dump(router.pod_security_context)
    defaults: Json = {
        "runAsNonRoot": True,
        "runAsUser": ROUTER_UID,
        "runAsGroup": ROUTER_UID,
        "seccompProfile": dict(RUNTIME_DEFAULT_SECCOMP),
    }
    container = dump(router.container_security_context)
    if {"runAsUser", "runAsGroup"} & (set(given) | set(container)):
        # an identity of the user's: the UID and GID are one choice, theirs
        del defaults["runAsUser"], defaults["runAsGroup"]
    if 0 in (given.get("runAsUser"), container.get("runAsUser")):
        # root asked for: runAsNonRoot would keep the container from starting
        del defaults["runAsNonRoot"]
    return {**defaults, **given}


def router_container_security(router: Router) -> Json:
    """The router container's securityContext."""
    defaults: Json = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    return _merged(defaults, dump(router.container_security_context))


def router_tmp(router: Router) -> tuple[list[Json], list[Json]]:
    """(volumes, volumeMounts) of the writable ``/tmp`` of the router's read-only root
    filesystem; none where the user's volumes already name it or mount ``/tmp``."""
    if any(v.name == VOLUME_ROUTER_TMP for v in router.volumes) or any(
        m.mount_path.rstrip("/") == ROUTER_TMP_MOUNT_PATH for m in router.volume_mounts
    ):
        return [], []
    return (
        [{"name": VOLUME_ROUTER_TMP, "emptyDir": {}}],
        [{"name": VOLUME_ROUTER_TMP, "mountPath": ROUTER_TMP_MOUNT_PATH}],
    )
