"""The spec rules that need no model facts, each written once for both enforcers.

A ``Rule`` carries a CEL expression (the API server's ``x-kubernetes-validations``
on clusters that have CEL) and a Python predicate (the pydantic validator, which
the operator runs on every cluster and ``ascend-pd render`` runs offline). Tests
evaluate both on the same specs, so the two cannot drift apart.

Rules that need model facts (layer partition sums, layout compatibility) run at
reconcile through the runtime's layout core, never here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import ascend_pd_runtime.env_contract as ec
from ascend_pd_operator.api import host_mounts as hm
from ascend_pd_operator.api.vocabulary import (
    POD_ANNOTATIONS,
    PREFIX,
    ROLES,
    RUNTIME_VOLUMES,
    SERVICE_ACCOUNT_TOKEN_PATH,
    SHM_MOUNT_PATH,
    host_mount_volume,
)
from ascend_pd_runtime.layout import (
    SGLANG_PP_PREFILL_DRAFT,
    SUPPORTED_SGLANG_MAX,
    SUPPORTED_SGLANG_MIN,
    parse_sglang_version,
)

#: StatefulSet names must leave room for the controller-revision-hash label (63 chars):
#: 63 - len("-") - 10 (hash) = 52; the longest child is ``<name>-prefill-<index>``.
MAX_STATEFULSET_NAME = 52
MAX_REPLICAS = 64
#: A P:D ratio bound, or one of the planner's targets: a decimal string with at most 3
#: decimals (no floats in the API).
RATIO_PATTERN = "^(0|[1-9][0-9]{0,2})([.][0-9]{1,3})?$"
MAX_RATIO_LENGTH = 7
RATIO = 'a decimal number written as a string, at most 3 decimals ("0.25", "1", "2.5")'
#: A share below 1 (the planner's tolerance, its latency quantile): "0" to "0.999".
SHARE_PATTERN = "^0([.][0-9]{1,3})?$"
#: A share up to 1 (the planner's KV token usage target): "0" to "1".
UNIT_SHARE_PATTERN = "^(0([.][0-9]{1,3})?|1([.]0{1,3})?)$"
MAX_SHARE_LENGTH = 5
SHARE = 'a decimal number below 1 written as a string, at most 3 decimals ("0.1", "0.95")'
#: The planner's interval and window: an hour is far past any useful setting.
MAX_PLANNER_SECONDS = 3600
#: The planner's latency targets in milliseconds (TTFT, ITL): at most 10 minutes.
MAX_LATENCY_MILLISECONDS = 600_000
#: A day: longer than any request; the pods' terminationGracePeriodSeconds follows it.
MAX_DRAIN_TIMEOUT_SECONDS = 86400
#: A drain's grace period when the spec sets none.
DEFAULT_DRAIN_TIMEOUT_SECONDS = 600
#: HCCL_CONNECT_TIMEOUT's range, as CANN documents it (seconds; HCCL's default is 120).
MIN_HCCL_CONNECT_TIMEOUT_SECONDS = 120
MAX_HCCL_CONNECT_TIMEOUT_SECONDS = 7200
MAX_NAME_LENGTH = MAX_STATEFULSET_NAME - len("-prefill-") - len(str(MAX_REPLICAS - 1))
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

#: SGLang flags the operator sets itself; a user's extraArgs may not override them.
MANAGED_FLAGS = (
    "tp",
    "tp-size",
    "tensor-parallel-size",
    "pp",
    "pp-size",
    "pipeline-parallel-size",
    "dp",
    "dp-size",
    "data-parallel-size",
    "disaggregation-[a-z0-9-]+",
    "dist-init-addr",
    "nccl-init-addr",
    "nnodes",
    "node-rank",
    "model",
    "model-path",
    "served-model-name",
    "host",
    "port",
    "speculative-algorithm",
    "speculative-num-steps",
    "speculative-eagle-topk",
    "speculative-num-draft-tokens",
)
#: A managed flag anywhere in an element: alone, as ``--flag=value``, or after whitespace
#: (``"--foo --tp-size 4"``: one argv element SGLang would refuse, and whose intent is
#: an override). Written as CEL string literal text (see CONTROL_CHARACTER_PATTERN).
_SPACE = "[ \\\\x09-\\\\x0d]"  # space, tab, newline, vertical tab, form feed, return
MANAGED_FLAG_PATTERN = f"(^|{_SPACE})--(" + "|".join(MANAGED_FLAGS) + f")(=|{_SPACE}|$)"
#: Control characters (newline, tab, NUL, DEL...): never part of a real argument. The
#: pattern is the regex text ``[\x00-\x1f\x7f]``; in CEL its backslashes are escaped.
CONTROL_CHARACTER_PATTERN = "[\\\\x00-\\\\x1f\\\\x7f]"

#: Kubernetes' qualified names (label and annotation keys, extended resources): an optional
#: DNS-subdomain prefix and '/', then a name of at most 63 characters, alphanumeric at both
#: ends with '-', '_', '.' inside. A label value is such a name, or empty.
_DNS_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = f"{_DNS_LABEL}([.]{_DNS_LABEL})*"
_NAME = "[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
MAX_PREFIX_LENGTH = 253
MAX_NAME_PART_LENGTH = 63
LABEL_KEY_PATTERN = f"^({_DNS_SUBDOMAIN}/)?{_NAME}$"
#: Kubernetes lowercases an annotation key before checking it: its prefix may hold capitals.
_ANY_CASE_LABEL = "[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?"
ANNOTATION_KEY_PATTERN = f"^({_ANY_CASE_LABEL}([.]{_ANY_CASE_LABEL})*/)?{_NAME}$"
#: The prefix's length, which a regex of DNS labels cannot bound.
PREFIX_LENGTH_PATTERN = f"^([^/]{{1,{MAX_PREFIX_LENGTH}}}/)?[^/]*$"
LABEL_VALUE_PATTERN = f"^({_NAME})?$"
#: A label key's longest form: a DNS-subdomain prefix, '/', a name.
MAX_LABEL_KEY_LENGTH = MAX_PREFIX_LENGTH + 1 + MAX_NAME_PART_LENGTH
#: Domains in spec.placement.domains: far more than a cluster's super-pods or racks, and a
#: bound the CEL cost estimate needs.
MAX_PLACEMENT_DOMAINS = 64
#: Volcano numbers HyperNode tiers from 1, the leaf tier next to the nodes (its scheduler's
#: virtual cluster-wide HyperNode is the highest tier + 1); a bound of 0 holds no HyperNode.
MIN_VOLCANO_TIER = 1
#: An extended resource name (IsExtendedResourceName): a qualified name with a prefix of at
#: most 244 characters, since quota's ``requests.<name>`` must stay a qualified name.
EXTENDED_RESOURCE_PATTERN = f"^{_DNS_SUBDOMAIN}/{_NAME}$"
EXTENDED_RESOURCE_MAX_LENGTH = 244 + 1 + MAX_NAME_PART_LENGTH

#: A container env var's name as Kubernetes before 1.34 checks it (IsEnvVarName; later
#: releases accept more, but the operator's StatefulSets must apply on 1.20 too).
ENV_NAME_PATTERN = "^[-._a-zA-Z][-._a-zA-Z0-9]*$"
#: Extra env vars per container, and their names' length: bounds the CEL cost estimate needs.
MAX_ENV = 128
MAX_ENV_NAME_LENGTH = 256

#: A resource quantity written as a string, as Kubernetes parses one (resource.Quantity),
#: never negative (a container's resources may not be): digits with an optional fraction,
#: then a binary (Ki..Ei) or decimal (n, u, m, k, M..E) suffix or a decimal exponent.
_NUMBER = "(([0-9]+([.][0-9]*)?)|([.][0-9]+))"
QUANTITY_PATTERN = f"^[+]?{_NUMBER}(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?{_NUMBER}))?$"
MAX_QUANTITY_LENGTH = 64
#: What a quantity is, in words (the pydantic message, the API's descriptions).
QUANTITY = "an integer or a string such as 500m, 64Gi or 1.5 (a fraction as a string), not negative"
#: The container resources Kubernetes knows besides extended resources (<domain>/<name>).
STANDARD_RESOURCE_PATTERN = "^(cpu|memory|ephemeral-storage|hugepages-[^/]+)$"

#: Entries of a map that reaches a pod (podAnnotations, nodeSelector, resources): far more
#: than a pod needs, and a bound the API server's CEL cost estimate needs.
MAX_MAP_ENTRIES = 64
#: Kubernetes allows 256 KiB of annotations per object (keys and values, in bytes); 1 KiB of
#: it stays free for the annotations the operator adds to a runtime pod itself.
MAX_POD_ANNOTATIONS_BYTES = 255 * 1024
#: The first Kubernetes minor whose CEL cost estimate knows the size of a list built by
#: ``map()`` (cel-go v0.17.8): before it such a list counts as unbounded, and a rule that sums
#: one exceeds the budget a hundredfold whatever the schema's bounds (docs/compatibility.md).
SIZED_MAP_MINOR = 30
#: Names Kubernetes checks as DNS-1123 subdomains (Secrets, ServiceAccounts, PriorityClasses;
#: empty: none given) and as DNS-1123 labels (volumes).
OPTIONAL_DNS_SUBDOMAIN_PATTERN = f"^({_DNS_SUBDOMAIN})?$"
MAX_DNS_SUBDOMAIN_LENGTH = 253
DNS_LABEL_PATTERN = f"^{_DNS_LABEL}$"
#: A mount path, absolute and normalized (no empty, '.' or '..' segment, no trailing '/', not
#: '/' itself), so that "at, inside or above another mount" is a comparison of strings.
_SEGMENT = "([^/.][^/]*|[.][^/.][^/]*|[.][.][^/]+)"
MOUNT_PATH_PATTERN = f"^(/{_SEGMENT})+$"
#: Linux's PATH_MAX: a bound the CEL cost estimate needs on the paths rules compare.
MAX_PATH_LENGTH = 4096
#: A sysctl name as Kubernetes checks it (IsValidSysctlName: '.' or '/' separated).
_SYSCTL_PART = "[a-z0-9]([-_a-z0-9]*[a-z0-9])?"
SYSCTL_NAME_PATTERN = f"^({_SYSCTL_PART}[./])*{_SYSCTL_PART}$"
#: Entries of a list that reaches a pod (volumes, mounts, pull secrets, sysctls, capabilities):
#: far more than a pod needs, and a bound the CEL cost estimate needs.
MAX_POD_LIST = 64
#: Where the operator mounts something into every runtime container, besides the model
#: (model.path, with model.volume) and the driver (ascend.driverHostPath): shared memory for
#: SGLang, the KV layout the launcher checks, the termination message the launcher writes.
RUNTIME_MOUNTS = (SHM_MOUNT_PATH, ec.KV_LAYOUT_MOUNT_DIR, ec.DEFAULT_TERMINATION_LOG)
#: The router's: the ServiceAccount token its service discovery watches pods with.
ROUTER_MOUNTS = (SERVICE_ACCOUNT_TOKEN_PATH,)
#: The capability whose addition Kubernetes refuses with allowPrivilegeEscalation false.
CAP_SYS_ADMIN = "CAP_SYS_ADMIN"
#: Annotations under our prefix (or a subdomain of it) are the operator's.
OWNED_ANNOTATION_PREFIX_PATTERN = "^([^/]*[.])?" + PREFIX.replace(".", "[.]") + "/"

_SUFFIX = "([.+-]?(post|rc|dev)?[0-9]*)?$"
_lo, _hi = SUPPORTED_SGLANG_MIN[2], SUPPORTED_SGLANG_MAX[2]
# The supported range is 0.5.10-0.5.23; the pattern is checked against it in tests.
SUPPORTED_VERSION_PATTERN = "^v?0[.]5[.](1[0-9]|2[0-3])" + _SUFFIX
#: Versions before 0.5.20 refuse speculative decoding on a PP prefill (the layout core's rule).
NO_PP_PREFILL_DRAFT_PATTERN = "^v?0[.]5[.]1[0-9]" + _SUFFIX


@dataclass(frozen=True)
class Rule:
    """One rule on one schema object (``where`` is the pydantic class name, or ``root``), or
    on one of its fields (``field``, the wire name): then ``self`` and the checked value are
    the field's, and both enforcers' messages start with the field's path."""

    where: str
    cel: str
    message: str
    check: Callable[[Any], bool]
    detail: Callable[[Any], str]
    field: str = ""
    #: the oldest Kubernetes minor whose API server takes the CEL (prices it within its
    #: cost budget; 0: every release with CEL): the CRD for an older one leaves it out,
    #: and there the operator's validator alone enforces the rule
    since: int = 0

    def violation(self, obj: Any) -> str | None:
        """The pydantic-side message when ``obj`` breaks the rule, else None."""
        if self.check(obj):
            return None
        return f"{self.message} ({self.detail(obj)})"


def _version_supported(text: str) -> bool:
    v = parse_sglang_version(text)
    return v is not None and SUPPORTED_SGLANG_MIN <= v <= SUPPORTED_SGLANG_MAX


def _version_refuses_pp_prefill_draft(text: str) -> bool:
    v = parse_sglang_version(text)
    return v is not None and SUPPORTED_SGLANG_MIN <= v < SGLANG_PP_PREFILL_DRAFT


def _role_devices_ok(r: Any) -> bool:
    p = r.parallelism
    return bool(p.tensor * p.pipeline % r.devices_per_node == 0)


def _spec_spec_ok(s: Any) -> bool:
    sp = s.speculative
    return not (
        sp.algorithm != "NONE"
        and "prefill" in sp.roles
        and s.prefill.parallelism.pipeline > 1
        and _version_refuses_pp_prefill_draft(s.runtime.sglang_version)
    )


def _mooncake_ok(s: Any) -> bool:
    cfg = s.model.config
    mla = cfg is not None and cfg.kv_lora_rank > 0
    return not (
        s.runtime.transfer_backend == "mooncake" and s.prefill.parallelism.pipeline > 1 and mla
    )


def _regex(cel_literal: str) -> str:
    """The regex a CEL string literal of ours denotes (CEL unescapes ``\\\\``), for Python:
    RE2's ``$`` is the end of the text, Python's also matches before a final newline."""
    return cel_literal.replace("\\\\", "\\").replace("$", "\\Z")


def _matching(pattern: str, texts: Iterable[str]) -> list[str]:
    """The texts a CEL ``matches`` of ``pattern`` (CEL literal text) is true for."""
    return [t for t in texts if re.search(_regex(pattern), t)]


def _managed(args: list[str]) -> list[str]:
    return _matching(MANAGED_FLAG_PATTERN, args)


def _with_control(args: list[str]) -> list[str]:
    return _matching(CONTROL_CHARACTER_PATTERN, args)


def _bad_keys(pattern: str, keys: Collection[str]) -> list[str]:
    good = set(_matching(pattern, _matching(PREFIX_LENGTH_PATTERN, keys)))
    return [k for k in keys if k not in good]


def _keys_rule(field: str, pattern: str, keys_are: str, where: str = "RoleSpec") -> Rule:
    """Every key of the map ``field`` of ``where`` is a qualified name of ``pattern``."""
    return Rule(
        where=where,
        field=field,
        cel=f"self.all(k, k.matches('{pattern}') && k.matches('{PREFIX_LENGTH_PATTERN}'))",
        message=f"keys must be {keys_are}",
        check=lambda keys: not _bad_keys(pattern, keys),
        detail=lambda keys: _got(_bad_keys(pattern, keys)),
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
        detail=lambda value: _got(found(value)),
    )


def overlaps(path: str, owned: str) -> bool:
    """``path`` is ``owned``, lies inside it, or contains it: a mount there would hide the
    owned one, or the owned one part of it (the order runtimes mount in is theirs)."""
    return path == owned or path.startswith(owned + "/") or owned.startswith(path + "/")


def _overlaps_cel(path: str, owned: str) -> str:
    """``overlaps(path, owned)`` in CEL; both are CEL expressions of strings."""
    inside, above = f"{path}.startsWith({owned} + '/')", f"{owned}.startsWith({path} + '/')"
    return f"({path} == {owned} || {inside} || {above})"


def _mounts_over(mounts: Iterable[Any], owned: Iterable[str]) -> list[str]:
    owned = tuple(owned)
    return [m.mount_path for m in mounts if any(overlaps(m.mount_path, o) for o in owned)]


def _mounts_rule(where: str, owned: tuple[str, ...], what: str) -> Rule:
    """No volumeMount of ``where`` is at, inside or above a path in ``owned``."""
    return Rule(
        where=where,
        field="volumeMounts",
        cel="self.all(m, "
        + " && ".join(f"!{_overlaps_cel('m.mountPath', repr(o))}" for o in owned)
        + ")",
        message=f"mountPath may not be at, inside or above a path the operator mounts: {what}",
        check=lambda mounts: not _mounts_over(mounts, owned),
        detail=lambda mounts: _got(_mounts_over(mounts, owned)),
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
        detail=lambda obj: _got(_unmounted(obj)),
    )


def _owned_paths(s: Any) -> list[str]:
    """The paths the operator mounts itself: the driver, and the model when a volume holds it."""
    owned = [s.ascend.driver_host_path]
    if s.model.volume is not None:
        owned.append(s.model.path)
    return owned


def _role_mounts_over(s: Any) -> list[str]:
    """Mount paths of a role over the driver, or over the model when a volume holds it."""
    owned = _owned_paths(s)
    return [
        f"{role}.volumeMounts {path!r}"
        for role in ("prefill", "decode")
        for path in _mounts_over(s.role(role).volume_mounts, owned)
    ]


def _role_mounts_cel(role: str) -> str:
    driver = _overlaps_cel("m.mountPath", "self.ascend.driverHostPath")
    model = _overlaps_cel("m.mountPath", "self.model.path")
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


def _cel_list(texts: Iterable[str]) -> str:
    return "[" + ", ".join(f"'{t}'" for t in texts) + "]"


def is_quantity(value: Any) -> bool:
    """What the schema's int-or-string with QUANTITY_PATTERN accepts."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return False
    if isinstance(value, int):
        return value >= 0
    return len(value) <= MAX_QUANTITY_LENGTH and bool(_matching(QUANTITY_PATTERN, [value]))


def _bad_resource_names(names: Collection[str]) -> list[str]:
    standard = set(_matching(STANDARD_RESOURCE_PATTERN, names))
    extended = set(_matching(EXTENDED_RESOURCE_PATTERN, names))
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
        detail=lambda names: _got(_bad_resource_names(names)),
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
    owned = set(_matching(OWNED_ANNOTATION_PREFIX_PATTERN, keys))
    return [k for k in keys if k in POD_ANNOTATIONS or k in owned]


def _owned_env(env: Iterable[Any]) -> list[str]:
    return [e.name for e in env if e.name.startswith(ec.PREFIX) or e.name in ec.LAUNCHER_EXPORTS]


def _annotations_bytes(annotations: dict[str, str]) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())


def _got(items: list[str]) -> str:
    return f"got {', '.join(map(repr, items))}"


#: What the operator owns, in words (the rules' messages, the API's descriptions).
OWNED_ANNOTATIONS = f"{', '.join(POD_ANNOTATIONS)} (it sets them on pods), any key under {PREFIX}/"
OWNED_ENV = (
    f"{ec.PREFIX}* (the launcher's contract), {', '.join(ec.LAUNCHER_EXPORTS)} (the launcher "
    "sets them from ascend.storePort, ascend.transferProtocol, layerPartition and "
    "ascend.hcclSocketIfname)"
)
OWNED_VOLUMES = (
    f"{', '.join(RUNTIME_VOLUMES)} (the model, shared memory, the driver, the KV layout)"
)
OWNED_RUNTIME_MOUNTS = (
    f"{', '.join(RUNTIME_MOUNTS)} (shared memory, the KV layout, the launcher's termination "
    "message)"
)
OWNED_ROUTER_MOUNTS = f"{SERVICE_ACCOUNT_TOKEN_PATH} (the token the router's discovery uses)"
#: What a qualified name is, in words (the rules' messages, the API's descriptions).
QUALIFIED_NAME = (
    f"an optional DNS-subdomain prefix of at most {MAX_PREFIX_LENGTH} characters and '/', "
    f"then a name of at most {MAX_NAME_PART_LENGTH} characters: letters, digits, '-', '_' "
    "and '.', a letter or digit at both ends"
)


def _native_resource(name: str) -> bool:
    """In Kubernetes' own namespace, or quota's ``requests.`` prefix: not an extended name."""
    return "kubernetes.io/" in name or name.startswith("requests.")


def _not_native_cel(name: str) -> str:
    """``not _native_resource(name)`` in CEL."""
    return f"!{name}.contains('kubernetes.io/') && !{name}.startsWith('requests.')"


RULES: tuple[Rule, ...] = (
    Rule(
        where="root",
        # The API server already holds names to DNS-1123 subdomains (lowercase, digits,
        # '-', '.', alphanumeric at both ends); what a DNS label starting with a letter adds
        # is no '.' and a letter first. Short patterns keep the estimated cost low, since
        # metadata.name has no maxLength the cost estimator could use.
        cel=f"size(self.metadata.name) <= {MAX_NAME_LENGTH} && "
        "!self.metadata.name.contains('.') && self.metadata.name.matches('^[a-z]')",
        message=f"metadata.name must be a DNS label of at most {MAX_NAME_LENGTH} characters "
        "starting with a letter, so every child name is valid",
        check=lambda name: bool(re.match(NAME_PATTERN, name)) and len(name) <= MAX_NAME_LENGTH,
        detail=lambda name: f"got {name!r}, {len(name)} characters",
    ),
    Rule(
        where="RoleSpec",
        cel="(self.parallelism.tensor * self.parallelism.pipeline) % self.devicesPerNode == 0",
        message="parallelism.tensor × parallelism.pipeline must be divisible by devicesPerNode "
        "(one pod per node, devicesPerNode NPUs each)",
        check=_role_devices_ok,
        detail=lambda r: (
            f"{r.parallelism.tensor} × {r.parallelism.pipeline} = "
            f"{r.parallelism.tensor * r.parallelism.pipeline}, devicesPerNode {r.devices_per_node}"
        ),
    ),
    Rule(
        where="RoleSpec",
        cel="size(self.layerPartition) == 0 || "
        "size(self.layerPartition) == self.parallelism.pipeline",
        message="layerPartition must be empty or have one entry per pipeline stage",
        check=lambda r: len(r.layer_partition) in (0, r.parallelism.pipeline),
        detail=lambda r: (
            f"{len(r.layer_partition)} entries {r.layer_partition}, "
            f"pipeline {r.parallelism.pipeline}"
        ),
    ),
    Rule(
        where="RoleSpec",
        cel=f"self.extraArgs.all(a, !a.matches('{MANAGED_FLAG_PATTERN}'))",
        message="extraArgs may not set flags the operator manages (parallel sizes, "
        "disaggregation, dist-init address, nnodes, node rank, model path, served model "
        "name, host, port, speculative settings)",
        check=lambda r: not _managed(r.extra_args),
        detail=lambda r: f"got {', '.join(_managed(r.extra_args))}",
    ),
    Rule(
        where="RoleSpec",
        cel=f"self.extraArgs.all(a, !a.matches('{CONTROL_CHARACTER_PATTERN}'))",
        message="extraArgs elements may not contain control characters (newline, tab, ...): "
        "each element is one argument, give every flag and value its own element",
        check=lambda r: not _with_control(r.extra_args),
        detail=lambda r: _got(_with_control(r.extra_args)),
    ),
    _keys_rule("podAnnotations", ANNOTATION_KEY_PATTERN, f"annotation keys: {QUALIFIED_NAME}"),
    _owned_rule(
        "podAnnotations",
        f"self.all(k, !(k in {_cel_list(POD_ANNOTATIONS)}) && "
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
        f"!(e.name in {_cel_list(ec.LAUNCHER_EXPORTS)}))",
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
        f"self.all(v, !(v.name in {_cel_list(RUNTIME_VOLUMES)}))",
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
        where="ModelVolume",
        cel="has(self.persistentVolumeClaim) != has(self.hostPath)",
        message="model.volume must set exactly one of persistentVolumeClaim and hostPath",
        check=lambda v: (v.persistent_volume_claim is None) != (v.host_path is None),
        detail=lambda v: "both are set" if v.host_path else "neither is set",
    ),
    Rule(
        where="Speculative",
        cel="self.algorithm == 'NONE' || !('prefill' in self.roles) || 'decode' in self.roles",
        message="speculative.roles with prefill must include decode: prefill's draft KV "
        "needs a destination on decode",
        check=lambda s: s.algorithm == "NONE" or "prefill" not in s.roles or "decode" in s.roles,
        detail=lambda s: f"roles {s.roles}",
    ),
    Rule(
        where="Rollout",
        cel="self.maxUnavailable + self.maxSurge >= 1",
        message="rollout.maxUnavailable and rollout.maxSurge may not both be 0: "
        "a rollout could never take an instance down nor start a new one",
        check=lambda r: r.max_unavailable + r.max_surge >= 1,
        detail=lambda r: f"maxUnavailable {r.max_unavailable}, maxSurge {r.max_surge}",
    ),
    Rule(
        where="Runtime",
        cel=f"self.sglangVersion.matches('{SUPPORTED_VERSION_PATTERN}')",
        message=f"runtime.sglangVersion must be a supported SGLang release "
        f"(0.5.{_lo} to 0.5.{_hi})",
        check=lambda r: _version_supported(r.sglang_version),
        detail=lambda r: f"got {r.sglang_version!r}",
    ),
    Rule(
        where="PDDeploymentSpec",
        cel="self.decode.parallelism.pipeline == 1 || "
        "self.decode.parallelism.pipeline == self.prefill.parallelism.pipeline",
        message="decode.parallelism.pipeline must be 1 or equal to prefill.parallelism.pipeline",
        check=lambda s: s.decode.parallelism.pipeline in (1, s.prefill.parallelism.pipeline),
        detail=lambda s: (
            f"decode {s.decode.parallelism.pipeline}, prefill {s.prefill.parallelism.pipeline}"
        ),
    ),
    Rule(
        where="PDDeploymentSpec",
        cel="size(self.decode.layerPartition) == 0 || "
        "self.decode.layerPartition == self.prefill.layerPartition",
        message="decode.layerPartition must be empty or equal to prefill.layerPartition "
        "(decode at the prefill's pipeline size uses the prefill's partition)",
        check=lambda s: (
            not s.decode.layer_partition or s.decode.layer_partition == s.prefill.layer_partition
        ),
        detail=lambda s: f"decode {s.decode.layer_partition}, prefill {s.prefill.layer_partition}",
    ),
    Rule(
        where="PDDeploymentSpec",
        cel="self.speculative.algorithm == 'NONE' || !('prefill' in self.speculative.roles) || "
        "self.prefill.parallelism.pipeline == 1 || "
        f"!self.runtime.sglangVersion.matches('{NO_PP_PREFILL_DRAFT_PATTERN}')",
        message="SGLang before 0.5.20 refuses speculative decoding on a prefill with pipeline "
        "size > 1: remove prefill from speculative.roles, use prefill pipeline 1, or "
        "SGLang >= 0.5.20",
        check=_spec_spec_ok,
        detail=lambda s: (
            f"sglangVersion {s.runtime.sglang_version!r}, prefill pipeline "
            f"{s.prefill.parallelism.pipeline}, roles {s.speculative.roles}"
        ),
    ),
    Rule(
        where="PDDeploymentSpec",
        cel="self.runtime.transferBackend != 'mooncake' || self.prefill.parallelism.pipeline == 1"
        " || !has(self.model.config) || self.model.config.kvLoraRank == 0",
        message="transferBackend mooncake with prefill pipeline > 1 on an MLA model is refused "
        "(it corrupts KV); use transferBackend ascend",
        check=_mooncake_ok,
        detail=lambda s: (
            f"prefill pipeline {s.prefill.parallelism.pipeline}, kvLoraRank "
            f"{s.model.config.kv_lora_rank if s.model.config else '?'}"
        ),
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


# --- scaling: role bounds and the P:D ratio --------------------------------------------


def role_range(r: Any) -> tuple[int, int]:
    """The instance counts a role may run: a Static role its replicas, a scaled role its
    [minReplicas, maxReplicas]."""
    if r.scaling.mode == "Static":
        return r.replicas, r.replicas
    return r.scaling.min_replicas, r.scaling.max_replicas


def ratio_bounds(s: Any) -> tuple[Fraction | None, Fraction | None]:
    """spec.scaling.prefillPerDecode as exact fractions (None: unbounded on that side)."""
    b = s.scaling.prefill_per_decode
    if b is None:
        return None, None
    return (Fraction(b.min) if b.min else None), (Fraction(b.max) if b.max else None)


def bounds_apply(s: Any) -> bool:
    """Whether the roles' counts are bounded at all: a role is scaled, or a ratio is set.
    Two Static roles without a ratio keep exactly their replicas, zeros included."""
    return s.scaling.prefill_per_decode is not None or any(
        s.role(role).scaling.mode != "Static" for role in ("prefill", "decode")
    )


def pair_ok(prefill: int, decode: int, bounds: tuple[Fraction | None, Fraction | None]) -> bool:
    """Both roles at zero, or both running within the ratio bounds."""
    if prefill == 0 or decode == 0:
        return prefill == decode
    lo, hi = bounds
    ratio = Fraction(prefill, decode)
    return (lo is None or ratio >= lo) and (hi is None or ratio <= hi)


def feasible_pairs(s: Any) -> list[tuple[int, int]]:
    """Every (prefill, decode) pair the roles' ranges and the ratio bounds allow."""
    (plo, phi), (dlo, dhi) = role_range(s.prefill), role_range(s.decode)
    bounds = ratio_bounds(s)
    return [
        (p, d) for p in range(plo, phi + 1) for d in range(dlo, dhi + 1) if pair_ok(p, d, bounds)
    ]


def _scaling_feasible(s: Any) -> bool:
    return not bounds_apply(s) or bool(feasible_pairs(s))


def _range_cel(role: str, end: str) -> str:
    bound = "minReplicas" if end == "lo" else "maxReplicas"
    return (
        f"(self.{role}.scaling.mode == 'Static' ? self.{role}.replicas : "
        f"self.{role}.scaling.{bound})"
    )


def _feasible_cel() -> str:
    """``_scaling_feasible`` in CEL, with the smallest work the API server can do: with one
    bound, the best decode count is an end of its range (the smallest under a lower bound,
    the largest under an upper one); with both, each decode count d of the range tries the
    largest prefill count the range and the upper bound allow against the lower bound.
    Doubles with a margin far below the bounds' 0.001 steps stand in for the exact
    fractions. Ternaries, not ``||``: they skip what they need not evaluate."""
    plo, phi = _range_cel("prefill", "lo"), _range_cel("prefill", "hi")
    dlo, dhi = _range_cel("decode", "lo"), _range_cel("decode", "hi")
    bounds = "self.scaling.prefillPerDecode"
    lo, hi = f"double({bounds}.min)", f"double({bounds}.max)"
    eps = "0.000001"
    p1, d1 = f"({plo} > 1 ? {plo} : 1)", f"({dlo} > 1 ? {dlo} : 1)"

    def top(d: str) -> str:  # the largest prefill count for decode count d
        by_hi = f"int({hi} * double({d}) + {eps})"
        return f"({by_hi} < {phi} ? {by_hi} : {phi})"

    running = f"{p1} <= {phi} && {d1} <= {dhi}"
    only_lo = f"{running} && double({phi}) >= {lo} * double({d1}) - {eps}"
    only_hi = f"{running} && {top(dhi)} >= {p1}"
    counts = ", ".join(str(n) for n in range(1, MAX_REPLICAS + 1))
    pair = f"{top('d')} >= {p1} && double({top('d')}) >= {lo} * double(d) - {eps}"
    both = f"{running} && [{counts}].exists(d, d < {d1} || d > {dhi} ? false : {pair})"
    static = "self.prefill.scaling.mode == 'Static' && self.decode.scaling.mode == 'Static'"
    # a role's own range rule (RoleScaling) and the order rule (RatioBounds) speak for a
    # reversed range or reversed bounds
    reversed_bounds = f"has({bounds}) && has({bounds}.min) && has({bounds}.max) && {lo} > {hi}"
    vacuous = (
        f"({static} && !has({bounds})) || {plo} > {phi} || {dlo} > {dhi} || "
        f"({reversed_bounds}) || ({plo} == 0 && {dlo} == 0)"
    )
    return (
        f"{vacuous} ? true : !has({bounds}) ? {running} : "
        f"!has({bounds}.max) ? (has({bounds}.min) ? {only_lo} : {running}) : "
        f"!has({bounds}.min) ? {only_hi} : {both}"
    )


def _describe_scaling(s: Any) -> str:
    def role(name: str) -> str:
        r = s.role(name)
        if r.scaling.mode == "Static":
            return f"{name}.replicas {r.replicas} (Static)"
        lo, hi = r.scaling.min_replicas, r.scaling.max_replicas
        return f"{name}.scaling.minReplicas {lo}, {name}.scaling.maxReplicas {hi}"

    b = s.scaling.prefill_per_decode
    ratio = "none" if b is None else f"min {b.min or 'none'}, max {b.max or 'none'}"
    return f"{role('prefill')}; {role('decode')}; scaling.prefillPerDecode {ratio}"


SCALING_RULES: tuple[Rule, ...] = (
    Rule(
        where="RoleScaling",
        cel="self.minReplicas <= self.maxReplicas",
        message="minReplicas must not exceed maxReplicas",
        check=lambda c: c.min_replicas <= c.max_replicas,
        detail=lambda c: f"got minReplicas {c.min_replicas}, maxReplicas {c.max_replicas}",
    ),
    Rule(
        where="RatioBounds",
        cel="!has(self.min) || !has(self.max) || double(self.min) <= double(self.max)",
        message="min must not exceed max",
        check=lambda b: not (b.min and b.max and Fraction(b.min) > Fraction(b.max)),
        detail=lambda b: f"got min {b.min}, max {b.max}",
    ),
    Rule(
        where="PDDeploymentSpec",
        cel=_feasible_cel(),
        message="no pair of instance counts satisfies the roles' ranges (prefill.replicas "
        "of a Static role, else prefill.scaling.minReplicas to maxReplicas; decode likewise) "
        "and spec.scaling.prefillPerDecode: both roles at zero, or both running with "
        "prefill/decode within the bounds",
        check=_scaling_feasible,
        detail=_describe_scaling,
    ),
)
RULES += SCALING_RULES


# --- the built-in planner's settings -----------------------------------------------------


def _positive_rule(field: str, attr: str, what: str) -> Rule:
    """The decimal string ``field`` of the planner's settings is above 0 (its pattern already
    bounds its form): a zero target would make every load infinitely above it."""
    return Rule(
        where="PlannerSettings",
        cel=f"double(self.{field}) > 0.0",
        message=f"scaling.planner.{field} must be greater than 0 ({what})",
        check=lambda p: Fraction(getattr(p, attr)) > 0,
        detail=lambda p: f"got {getattr(p, attr)!r}",
    )


PLANNER_RULES: tuple[Rule, ...] = (
    _positive_rule("prefillQueueTarget", "prefill_queue_target", "requests per instance"),
    _positive_rule("decodeTokenUsageTarget", "decode_token_usage_target", "a share of the KV pool"),
    _positive_rule(
        "decodePreallocQueueTarget", "decode_prealloc_queue_target", "requests per instance"
    ),
    _positive_rule("latencyQuantile", "latency_quantile", "a quantile such as 0.9"),
)
RULES += PLANNER_RULES


# --- placement ------------------------------------------------------------------------


PLACEMENT_RULES: tuple[Rule, ...] = (
    Rule(
        where="Placement",
        # The schema's pattern checks the form; a regex of DNS labels cannot bound the
        # prefix's length (as for the nodeSelector's keys).
        cel=f"self.topologyKey.matches('{PREFIX_LENGTH_PATTERN}')",
        message=f"placement.topologyKey must be a label key: {QUALIFIED_NAME}",
        check=lambda p: not _bad_keys(LABEL_KEY_PATTERN, [p.topology_key]),
        detail=lambda p: f"got {p.topology_key!r}",
    ),
    Rule(
        where="Placement",
        # has(): the API server evaluates rules on the schema's defaults as written.
        cel="!has(self.exclusive) || !self.exclusive || !has(self.scope) || self.scope != 'None'",
        message="placement.exclusive needs scope Deployment or Instance: with scope None the "
        "deployment holds no domain that could be kept for it",
        check=lambda p: not (p.exclusive and p.scope == "None"),
        detail=lambda p: f"got exclusive {str(p.exclusive).lower()}, scope {p.scope}",
    ),
    Rule(
        where="Placement",
        cel="!has(self.highestTierAllowed) || !has(self.scope) || self.scope != 'None'",
        message="placement.highestTierAllowed needs scope Deployment or Instance: with scope "
        "None no group of pods is kept within one domain",
        check=lambda p: p.highest_tier_allowed is None or p.scope != "None",
        detail=lambda p: f"got highestTierAllowed {p.highest_tier_allowed}, scope {p.scope}",
    ),
    Rule(
        where="PDDeploymentSpec",
        # has(): scheduling defaults to {} and its gang to none, but a rule may meet the
        # object before the defaults (render, the operator's own parse).
        cel="!has(self.placement) || !has(self.placement.highestTierAllowed) || "
        "(has(self.scheduling) && has(self.scheduling.gang) && self.scheduling.gang == 'volcano')",
        message="placement.highestTierAllowed needs scheduling.gang volcano: it is the Volcano "
        "PodGroups' networkTopology, which nothing else reads",
        check=lambda s: (
            s.placement is None
            or s.placement.highest_tier_allowed is None
            or s.scheduling.gang == "volcano"
        ),
        detail=lambda s: f"got scheduling.gang {s.scheduling.gang}",
    ),
)
RULES += PLACEMENT_RULES


# --- ascend.hostMounts ------------------------------------------------------------------
# The CEL binds each computed path once (``[expr].all(p, ...)``, ``paths_cel``): written
# out at every use, the expressions would be long past reading and past the cost budget.


def _clash(a: str, b: str) -> bool:
    """``overlaps`` for a path that may be unknown (""): an entry without one is refused
    by its own rule, never as a clash."""
    return bool(a) and bool(b) and overlaps(a, b)


def _host_mount_over_runtime(h: Any) -> bool:
    return any(_clash(h.target(), o) for o in RUNTIME_MOUNTS)


def _host_mounts_clashing(mounts: list[Any]) -> list[str]:
    return [
        f"{x.name} {x.target()!r} and {y.name} {y.target()!r}"
        for i, x in enumerate(mounts)
        for y in mounts[i + 1 :]
        if _clash(x.target(), y.target())
    ]


def _host_mounts_over_owned(s: Any) -> list[str]:
    """Entries at, inside or above the driver, or the model when a volume holds it."""
    owned = _owned_paths(s)
    return [
        f"{h.name} {h.target()!r}"
        for h in s.ascend.host_mounts
        if any(_clash(h.target(), o) for o in owned)
    ]


def _role_over_host_mounts(s: Any, role: str) -> list[str]:
    return [
        f"{role}.volumeMounts {m.mount_path!r} (hostMounts {h.name})"
        for m in s.role(role).volume_mounts
        for h in s.ascend.host_mounts
        if _clash(m.mount_path, h.target())
    ]


def _role_over_host_mounts_rule(role: str) -> Rule:
    """One rule per role: each has its own CEL cost budget (64 mounts × 16 entries)."""
    return Rule(
        where="PDDeploymentSpec",
        cel=f"[{hm.paths_cel('self.ascend.hostMounts')}].all(ps, self.{role}.volumeMounts.all("
        f"m, ps.all(p, p == '' || !{_overlaps_cel('m.mountPath', 'p')})))",
        message=f"{role}.volumeMounts may not mount at, inside or above a path of "
        "ascend.hostMounts: the operator mounts the node's path there (drop the role's "
        "mount, or the entry)",
        check=lambda s: not _role_over_host_mounts(s, role),
        detail=lambda s: f"got {', '.join(_role_over_host_mounts(s, role))}",
    )


def _role_volumes_of_host_mounts(s: Any) -> list[str]:
    volumes = {host_mount_volume(h.name): h.name for h in s.ascend.host_mounts}
    return [
        f"{role}.volumes {v.name!r} (hostMounts {volumes[v.name]})"
        for role in ("prefill", "decode")
        for v in s.role(role).volumes
        if v.name in volumes
    ]


HOST_MOUNT_RULES: tuple[Rule, ...] = (
    Rule(
        where="HostMount",
        cel=f"self.name in {_cel_list(hm.KNOWN_NAMES)} || "
        "(has(self.hostPath) && size(self.hostPath) > 0)",
        message="hostPath is required for a name that is not well-known: "
        f"{', '.join(hm.KNOWN_NAMES)}",
        check=lambda h: bool(h.source()),
        detail=lambda h: f"got name {h.name!r} without hostPath",
    ),
    Rule(
        where="HostMount",
        cel=f"[{hm.mount_path_cel('self')}].all(p, p == '' || ("
        + " && ".join(f"!{_overlaps_cel('p', repr(o))}" for o in RUNTIME_MOUNTS)
        + "))",
        message="its mountPath (or hostPath, or the well-known path) may not be at, inside or "
        f"above a path the operator mounts: {OWNED_RUNTIME_MOUNTS}",
        check=lambda h: not _host_mount_over_runtime(h),
        detail=lambda h: f"got name {h.name!r} at {h.target()!r}",
    ),
    Rule(
        where="Ascend",
        field="hostMounts",
        # each path overlaps itself once; a second entry at, inside or above it is a clash
        cel=f"[{hm.paths_cel('self')}].all(ps, ps.all(a, a == '' || "
        f"size(ps.filter(b, b != '' && {_overlaps_cel('a', 'b')})) == 1))",
        message="entries may not mount at, inside or above one another",
        check=lambda mounts: not _host_mounts_clashing(mounts),
        detail=lambda mounts: f"got {', '.join(_host_mounts_clashing(mounts))}",
    ),
    Rule(
        where="PDDeploymentSpec",
        # each entry's path bound by a one-element list: cel-go before v0.17.8 (Kubernetes
        # 1.28, 1.29) prices a list made by map() as unbounded, far past the budget
        cel=f"self.ascend.hostMounts.all(h, [{hm.mount_path_cel('h')}].all(p, p == '' || "
        f"(!{_overlaps_cel('p', 'self.ascend.driverHostPath')} && (!has(self.model.volume) "
        f"|| !{_overlaps_cel('p', 'self.model.path')}))))",
        message="ascend.hostMounts may not mount at, inside or above ascend.driverHostPath "
        "(hccn_tool is in its tools/), nor model.path when model.volume is set: the operator "
        "mounts the Ascend driver and the model there",
        check=lambda s: not _host_mounts_over_owned(s),
        detail=lambda s: f"got {', '.join(_host_mounts_over_owned(s))}",
    ),
    _role_over_host_mounts_rule("prefill"),
    _role_over_host_mounts_rule("decode"),
    Rule(
        where="PDDeploymentSpec",
        cel=f"[{hm.volumes_cel('self.ascend.hostMounts')}].all(vs, "
        + " && ".join(f"self.{role}.volumes.all(v, !(v.name in vs))" for role in ROLES)
        + ")",
        message="prefill.volumes and decode.volumes may not use the volume name of an "
        "ascend.hostMounts entry: ascend-* for a well-known name, host-<name> for one of yours",
        check=lambda s: not _role_volumes_of_host_mounts(s),
        detail=lambda s: f"got {', '.join(_role_volumes_of_host_mounts(s))}",
    ),
)
RULES += HOST_MOUNT_RULES

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
RULES += TOLERATION_RULES
_ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")
#: An env var's valueFrom names one source, as Kubernetes requires (arithmetic, no list).
RULES += (
    Rule(
        where="EnvVarSource",
        cel=" + ".join(f"(has(self.{f}) ? 1 : 0)" for f in _ENV_SOURCES) + " == 1",
        message="must name exactly one source: fieldRef, resourceFieldRef, configMapKeyRef "
        "or secretKeyRef",
        check=lambda v: len(v.model_dump(exclude_none=True)) == 1,
        detail=lambda v: f"got {len(v.model_dump(exclude_none=True))}",
    ),
)


def rules_for(where: str, field: str = "") -> list[Rule]:
    """The rules on object ``where``, or on its field ``field`` (the wire name)."""
    return [r for r in RULES if r.where == where and r.field == field]


def violations(where: str, obj: Any, field: str = "") -> list[str]:
    return [msg for rule in rules_for(where, field) if (msg := rule.violation(obj))]
