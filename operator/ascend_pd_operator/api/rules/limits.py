"""The spec's bounds, patterns and words: what the schema, the rules and their messages
share (a pattern is written as CEL string literal text, the form both enforcers read)."""

from __future__ import annotations

import ascend_pd_runtime.env_contract as ec
from ascend_pd_operator.api.vocabulary import (
    POD_ANNOTATIONS,
    PREFIX,
    RUNTIME_VOLUMES,
    SERVICE_ACCOUNT_TOKEN_PATH,
    SHM_MOUNT_PATH,
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
#: releases accept more, but the operator's StatefulSets must apply on 1.28 too).
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
# The supported range is 0.5.10-0.5.23; the pattern is checked against it in tests.
SUPPORTED_VERSION_PATTERN = "^v?0[.]5[.](1[0-9]|2[0-3])" + _SUFFIX
#: Versions before 0.5.20 refuse speculative decoding on a PP prefill (the layout core's rule).
NO_PP_PREFILL_DRAFT_PATTERN = "^v?0[.]5[.]1[0-9]" + _SUFFIX

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
