"""The rules on what reaches the pods: annotations, env, node selectors, volumes and
mounts, security contexts, resources, sysctls, tolerations, each as Kubernetes would check
it or where it would clash with what the operator sets itself."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any

import ascend_pd_runtime.env_contract as ec
from ascend_pd_operator.api.rules.limits import (
    ANNOTATION_KEY_PATTERN,
    CAP_SYS_ADMIN,
    EXTENDED_RESOURCE_MAX_LENGTH,
    EXTENDED_RESOURCE_PATTERN,
    LABEL_KEY_PATTERN,
    MAX_POD_ANNOTATIONS_BYTES,
    MAX_QUANTITY_LENGTH,
    OWNED_ANNOTATION_PREFIX_PATTERN,
    OWNED_ANNOTATIONS,
    OWNED_ENV,
    OWNED_ROUTER_MOUNTS,
    OWNED_RUNTIME_MOUNTS,
    OWNED_VOLUMES,
    PREFIX_LENGTH_PATTERN,
    QUALIFIED_NAME,
    QUANTITY_PATTERN,
    ROUTER_MOUNTS,
    RUNTIME_MOUNTS,
    SIZED_MAP_MINOR,
    STANDARD_RESOURCE_PATTERN,
)
from ascend_pd_operator.api.rules.rule import (
    Rule,
    bad_keys,
    cel_list,
    got,
    matching,
    mounts_over,
    overlaps_cel,
    owned_paths,
)
from ascend_pd_operator.api.vocabulary import POD_ANNOTATIONS, RUNTIME_VOLUMES


def _keys_rule(field: str, pattern: str, keys_are: str, where: str = "RoleSpec") -> Rule:
    """Every key of the map ``field`` of ``where`` is a qualified name of ``pattern``."""
    return Rule(
        where=where,
        field=field,
        cel=f"self.all(k, k.matches('{pattern}') && k.matches('{PREFIX_LENGTH_PATTERN}'))",
        message=f"keys must be {keys_are}",
        check=lambda keys: not bad_keys(pattern, keys),
        detail=lambda keys: got(bad_keys(pattern, keys)),
    )


def _owned_rule(
    field: str, cel: str, owned: str, found: Callable[[Any], list[str]], where: str = "RoleSpec"
) -> Rule:
    """The field ``field`` of ``where`` sets nothing the operator does (``found`` lists what)."""
    return Rule(
        where=where,
        field=field,
        cel=cel,
        message=f"may not set {owned}",
        check=lambda value: not found(value),
        detail=lambda value: got(found(value)),
    )


def _mounts_rule(where: str, owned: tuple[str, ...], what: str) -> Rule:
    """No volumeMount of ``where`` is at, inside or above a path in ``owned``."""
    return Rule(
        where=where,
        field="volumeMounts",
        cel="self.all(m, "
        + " && ".join(f"!{overlaps_cel('m.mountPath', repr(o))}" for o in owned)
        + ")",
        message=f"mountPath may not be at, inside or above a path the operator mounts: {what}",
        check=lambda mounts: not mounts_over(mounts, owned),
        detail=lambda mounts: got(mounts_over(mounts, owned)),
    )


def _unmounted(obj: Any) -> list[str]:
    names = {v.name for v in obj.volumes}
    return [m.name for m in obj.volume_mounts if m.name not in names]


def _mount_names_rule(where: str, whose: str) -> Rule:
    """Every volumeMount of ``where`` names one of its own volumes."""
    return Rule(
        where=where,
        cel="self.volumeMounts.all(m, self.volumes.exists(v, v.name == m.name))",
        message=f"volumeMounts must each name a volume of volumes ({whose}); the operator's "
        "own volumes cannot be mounted again",
        check=lambda obj: not _unmounted(obj),
        detail=lambda obj: got(_unmounted(obj)),
    )


def _role_mounts_over(s: Any) -> list[str]:
    """Mount paths of a role over the driver, or over the model when a volume holds it."""
    owned = owned_paths(s)
    return [
        f"{role}.volumeMounts {path!r}"
        for role in ("prefill", "decode")
        for path in mounts_over(s.role(role).volume_mounts, owned)
    ]


def _role_mounts_cel(role: str) -> str:
    driver = overlaps_cel("m.mountPath", "self.ascend.driverHostPath")
    model = overlaps_cel("m.mountPath", "self.model.path")
    return f"self.{role}.volumeMounts.all(m, !{driver} && (!has(self.model.volume) || !{model}))"


def _bidirectional(obj: Any) -> list[str]:
    """Mount paths of ``obj`` (a role or the router) with Bidirectional propagation while
    its container is not privileged."""
    context = obj.container_security_context
    if context is not None and context.privileged:
        return []
    return [m.mount_path for m in obj.volume_mounts if m.mount_propagation == "Bidirectional"]


def _privilege_text(obj: Any) -> str:
    context = obj.container_security_context
    if context is None or context.privileged is None:
        return "containerSecurityContext.privileged unset"
    return "containerSecurityContext.privileged false"


def _bidirectional_rule(where: str) -> Rule:
    """A mount of ``where`` with Bidirectional propagation needs a privileged container:
    Kubernetes refuses the pod otherwise, so the workload would never apply."""
    return Rule(
        where=where,
        cel="self.volumeMounts.all(m, !has(m.mountPropagation) || "
        "m.mountPropagation != 'Bidirectional') || (has(self.containerSecurityContext) && "
        "has(self.containerSecurityContext.privileged) && "
        "self.containerSecurityContext.privileged)",
        message="volumeMounts with mountPropagation Bidirectional need "
        "containerSecurityContext.privileged true (Kubernetes refuses such a pod)",
        check=lambda obj: not _bidirectional(obj),
        detail=lambda obj: (
            f"got mountPath {', '.join(map(repr, _bidirectional(obj)))} with {_privilege_text(obj)}"
        ),
    )


def _seccomp_detail(p: Any) -> str:
    profile = (
        f"localhostProfile {p.localhost_profile!r}"
        if p.localhost_profile
        else ("no localhostProfile")
    )
    return f"got type {p.type} with {profile}"


def _is_net_sysctl(name: str) -> bool:
    return name.startswith(("net.", "net/"))


def _host_net_sysctls(s: Any) -> list[str]:
    if not s.ascend.host_network:
        return []
    return [
        f"{role}.podSecurityContext.sysctls {sysctl.name!r}"
        for role in ("prefill", "decode")
        if (psc := s.role(role).pod_security_context) is not None
        for sysctl in psc.sysctls
        if _is_net_sysctl(sysctl.name)
    ]


def _host_net_sysctls_cel(role: str) -> str:
    ctx = f"self.{role}.podSecurityContext"
    return (
        f"(!has({ctx}) || {ctx}.sysctls.all(s, "
        "!s.name.startsWith('net.') && !s.name.startsWith('net/')))"
    )


def _escalation_contradiction(c: Any) -> list[str]:
    if c.allow_privilege_escalation is not False:
        return []
    found = ["privileged true"] if c.privileged else []
    if c.capabilities is not None and CAP_SYS_ADMIN in c.capabilities.add:
        found.append(f"capabilities.add {CAP_SYS_ADMIN}")
    return found


def is_quantity(value: Any) -> bool:
    """What the schema's int-or-string with QUANTITY_PATTERN accepts."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return False
    if isinstance(value, int):
        return value >= 0
    return len(value) <= MAX_QUANTITY_LENGTH and bool(matching(QUANTITY_PATTERN, [value]))


def _bad_resource_names(names: Collection[str]) -> list[str]:
    standard = set(matching(STANDARD_RESOURCE_PATTERN, names))
    extended = set(matching(EXTENDED_RESOURCE_PATTERN, names))
    return [
        n
        for n in names
        if n not in standard
        and (n not in extended or len(n) > EXTENDED_RESOURCE_MAX_LENGTH or _native_resource(n))
    ]


def _resource_names_rule(field: str) -> Rule:
    """The keys of a ResourceRequirements map are resource names a container may have."""
    return Rule(
        where="ResourceRequirements",
        field=field,
        cel=f"self.all(n, n.matches('{STANDARD_RESOURCE_PATTERN}') || "
        f"(size(n) <= {EXTENDED_RESOURCE_MAX_LENGTH} && n.matches('{EXTENDED_RESOURCE_PATTERN}') "
        f"&& {_not_native_cel('n')}))",
        message="keys must be resource names: cpu, memory, ephemeral-storage, hugepages-<size>, "
        "or an extended resource <domain>/<name> outside kubernetes.io/",
        check=lambda names: not _bad_resource_names(names),
        detail=lambda names: got(_bad_resource_names(names)),
    )


#: The resource maps of both roles (one CEL list cannot hold both: each path has its type).
_ROLE_RESOURCES = [(r, kind) for r in ("prefill", "decode") for kind in ("requests", "limits")]


def _npus_in_resources(s: Any) -> list[str]:
    npu = s.ascend.resource_name
    return [
        f"{role}.resources.{kind}"
        for role, kind in _ROLE_RESOURCES
        if npu in getattr(s.role(role).resources, kind)
    ]


def _owned_annotations(keys: Collection[str]) -> list[str]:
    owned = set(matching(OWNED_ANNOTATION_PREFIX_PATTERN, keys))
    return [k for k in keys if k in POD_ANNOTATIONS or k in owned]


def _owned_env(env: Iterable[Any]) -> list[str]:
    return [e.name for e in env if e.name.startswith(ec.PREFIX) or e.name in ec.LAUNCHER_EXPORTS]


def _annotations_bytes(annotations: dict[str, str]) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())


def _native_resource(name: str) -> bool:
    """In Kubernetes' own namespace, or quota's ``requests.`` prefix: not an extended name."""
    return "kubernetes.io/" in name or name.startswith("requests.")


def _not_native_cel(name: str) -> str:
    """``not _native_resource(name)`` in CEL."""
    return f"!{name}.contains('kubernetes.io/') && !{name}.startsWith('requests.')"


POD_RULES: tuple[Rule, ...] = (
    _keys_rule("podAnnotations", ANNOTATION_KEY_PATTERN, f"annotation keys: {QUALIFIED_NAME}"),
    _owned_rule(
        "podAnnotations",
        f"self.all(k, !(k in {cel_list(POD_ANNOTATIONS)}) && "
        f"!k.matches('{OWNED_ANNOTATION_PREFIX_PATTERN}'))",
        f"annotations the operator owns: {OWNED_ANNOTATIONS}",
        _owned_annotations,
    ),
    Rule(
        where="RoleSpec",
        field="podAnnotations",
        # Sizes in bytes, as Kubernetes counts; sum() is Kubernetes' list library (a joined
        # string instead would cost the CEL estimate 100 times its budget). A sum needs a
        # list built by map(), which 1.28 and 1.29 price as unbounded: no form of it fits
        # their budget, so their CRD leaves the rule to the operator.
        cel="self.map(k, size(bytes(k)) + size(bytes(self[k]))).sum() <= "
        f"{MAX_POD_ANNOTATIONS_BYTES}",
        since=SIZED_MAP_MINOR,
        message=f"keys and values may hold at most {MAX_POD_ANNOTATIONS_BYTES // 1024} KiB "
        "together: a pod's annotations may hold 256 KiB, and the operator adds its own",
        check=lambda a: _annotations_bytes(a) <= MAX_POD_ANNOTATIONS_BYTES,
        detail=lambda a: f"got {_annotations_bytes(a)} bytes",
    ),
    _owned_rule(
        "env",
        f"self.all(e, !e.name.startsWith('{ec.PREFIX}') && "
        f"!(e.name in {cel_list(ec.LAUNCHER_EXPORTS)}))",
        f"variables the operator owns: {OWNED_ENV}",
        _owned_env,
    ),
    Rule(
        where="EnvVar",
        # has(): value has an empty default, which the CRD leaves out (absent means empty).
        cel="!has(self.valueFrom) || !has(self.value) || size(self.value) == 0",
        message="value and valueFrom may not both be set",
        check=lambda e: e.value_from is None or not e.value,
        detail=lambda e: f"name {e.name!r}",
    ),
    _keys_rule(
        "nodeSelector", LABEL_KEY_PATTERN, f"label keys: {QUALIFIED_NAME}; the prefix in lowercase"
    ),
    _keys_rule(
        "nodeSelector",
        LABEL_KEY_PATTERN,
        f"label keys: {QUALIFIED_NAME}; the prefix in lowercase",
        where="Router",
    ),
    _owned_rule(
        "volumes",
        f"self.all(v, !(v.name in {cel_list(RUNTIME_VOLUMES)}))",
        f"volume names the operator uses: {OWNED_VOLUMES}",
        lambda volumes: [v.name for v in volumes if v.name in RUNTIME_VOLUMES],
    ),
    _mounts_rule("RoleSpec", RUNTIME_MOUNTS, OWNED_RUNTIME_MOUNTS),
    _mounts_rule("Router", ROUTER_MOUNTS, OWNED_ROUTER_MOUNTS),
    _mount_names_rule("RoleSpec", "this role's"),
    _mount_names_rule("Router", "the router's"),
    _bidirectional_rule("RoleSpec"),
    _bidirectional_rule("Router"),
    Rule(
        where="VolumeMount",
        # has(): subPath and subPathExpr have empty defaults, which the CRD leaves out.
        cel="!has(self.subPath) || size(self.subPath) == 0 || !has(self.subPathExpr) || "
        "size(self.subPathExpr) == 0",
        message="subPath and subPathExpr may not both be set (Kubernetes refuses such a pod)",
        check=lambda m: not (m.sub_path and m.sub_path_expr),
        detail=lambda m: (
            f"got mountPath {m.mount_path!r} with subPath {m.sub_path!r} and subPathExpr "
            f"{m.sub_path_expr!r}"
        ),
    ),
    Rule(
        where="SeccompProfile",
        cel="self.type != 'Localhost' || (has(self.localhostProfile) && "
        "size(self.localhostProfile) > 0)",
        message="type Localhost needs localhostProfile, the profile's path (Kubernetes "
        "refuses such a pod)",
        check=lambda p: p.type != "Localhost" or bool(p.localhost_profile),
        detail=_seccomp_detail,
    ),
    Rule(
        where="SeccompProfile",
        cel="self.type == 'Localhost' || !has(self.localhostProfile) || "
        "size(self.localhostProfile) == 0",
        message="localhostProfile may only be set with type Localhost (Kubernetes refuses "
        "such a pod)",
        check=lambda p: p.type == "Localhost" or not p.localhost_profile,
        detail=_seccomp_detail,
    ),
    Rule(
        where="ContainerSecurityContext",
        # Kubernetes refuses such a container in a pod; the router's Deployment would not
        # apply, nor a role's StatefulSet (the executor's dry run): refused at admission.
        cel="!has(self.allowPrivilegeEscalation) || self.allowPrivilegeEscalation || "
        "((!has(self.privileged) || !self.privileged) && "
        f"(!has(self.capabilities) || !('{CAP_SYS_ADMIN}' in self.capabilities.add)))",
        message="allowPrivilegeEscalation false contradicts privileged true and an added "
        f"{CAP_SYS_ADMIN} (Kubernetes refuses such a container)",
        check=lambda c: not _escalation_contradiction(c),
        detail=lambda c: (
            f"got allowPrivilegeEscalation false with {' and '.join(_escalation_contradiction(c))}"
        ),
    ),
    _resource_names_rule("requests"),
    _resource_names_rule("limits"),
    Rule(
        where="Ascend",
        # has(): the API server evaluates rules on the schema's defaults as written.
        cel=f"!has(self.resourceName) || ({_not_native_cel('self.resourceName')})",
        message="ascend.resourceName must be an extended resource name outside Kubernetes' "
        "own kubernetes.io/ namespace and the requests. prefix",
        check=lambda a: not _native_resource(a.resource_name),
        detail=lambda a: f"got {a.resource_name!r}",
    ),
    Rule(
        where="PDDeploymentSpec",
        cel=" && ".join(
            f"!(self.ascend.resourceName in self.{role}.resources.{kind})"
            for role, kind in _ROLE_RESOURCES
        ),
        message="prefill.resources and decode.resources may not set the NPUs (the resource "
        "ascend.resourceName): devicesPerNode sets their request and limit",
        check=lambda s: not _npus_in_resources(s),
        detail=lambda s: f"{s.ascend.resource_name} in {', '.join(_npus_in_resources(s))}",
    ),
    Rule(
        where="PDDeploymentSpec",
        cel=" && ".join(_role_mounts_cel(role) for role in ("prefill", "decode")),
        message="prefill.volumeMounts and decode.volumeMounts may not mount at, inside or above "
        "ascend.driverHostPath, nor model.path when model.volume is set: the operator mounts "
        "the Ascend driver and the model there",
        check=lambda s: not _role_mounts_over(s),
        detail=lambda s: f"got {', '.join(_role_mounts_over(s))}",
    ),
    Rule(
        where="PDDeploymentSpec",
        cel="!self.ascend.hostNetwork || ("
        + " && ".join(_host_net_sysctls_cel(role) for role in ("prefill", "decode"))
        + ")",
        message="prefill.podSecurityContext.sysctls and decode.podSecurityContext.sysctls may "
        "not set net.* sysctls while ascend.hostNetwork is true: they would be the node's, and "
        "the kubelet refuses such a pod",
        check=lambda s: not _host_net_sysctls(s),
        detail=lambda s: f"got {', '.join(_host_net_sysctls(s))}",
    ),
)

#: One toleration's cross-field rules, as Kubernetes validates a pod's (its enums and types
#: are the schema's, ``scheduling.Toleration``). Each reads one toleration, no list.
TOLERATION_RULES: tuple[Rule, ...] = (
    Rule(
        where="Toleration",
        cel="(has(self.key) && size(self.key) > 0) || "
        "(has(self.operator) && self.operator == 'Exists')",
        message="operator must be Exists when key is empty (a toleration of every taint)",
        check=lambda t: bool(t.key) or t.operator == "Exists",
        detail=lambda t: f"got operator {t.operator or 'Equal'!r}",
    ),
    Rule(
        where="Toleration",
        cel="!has(self.operator) || self.operator != 'Exists' || !has(self.value) || "
        "size(self.value) == 0",
        message="value must be empty with operator Exists",
        check=lambda t: t.operator != "Exists" or not t.value,
        detail=lambda t: f"got value {t.value!r}",
    ),
    Rule(
        where="Toleration",
        cel="!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
        message="tolerationSeconds may only be set with effect NoExecute",
        check=lambda t: t.toleration_seconds is None or t.effect == "NoExecute",
        detail=lambda t: f"got effect {t.effect or ''!r}",
    ),
)

_ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")
#: An env var's valueFrom names one source, as Kubernetes requires (arithmetic, no list).
ENV_SOURCE_RULES: tuple[Rule, ...] = (
    Rule(
        where="EnvVarSource",
        cel=" + ".join(f"(has(self.{f}) ? 1 : 0)" for f in _ENV_SOURCES) + " == 1",
        message="must name exactly one source: fieldRef, resourceFieldRef, configMapKeyRef "
        "or secretKeyRef",
        check=lambda v: len(v.model_dump(exclude_none=True)) == 1,
        detail=lambda v: f"got {len(v.model_dump(exclude_none=True))}",
    ),
)
