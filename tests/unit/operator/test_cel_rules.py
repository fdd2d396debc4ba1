"""Every CEL rule of the CRD, evaluated with cel-python on valid and invalid specs,
agrees with the pydantic validator that enforces the same rule in the operator."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from typing import Any

import celpy
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import ascend_pd_runtime.env_contract as ec
from ascend_pd_operator.api.crd import openapi_schema
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import SpecError, check_name, parse_spec
from ascend_pd_operator.api.rules import RULES, rules_for, violations
from ascend_pd_operator.api.rules.host_mounts import HOST_MOUNT_RULES
from ascend_pd_operator.api.rules.placement import PLACEMENT_RULES
from ascend_pd_operator.api.rules.scaling import SCALING_RULES
from ascend_pd_operator.api.vocabulary import HOST_FILES as KNOWN_HOST_FILES

from .conftest import apply_defaults, load_example

_ENV = celpy.Environment()


def _sum(items: Any) -> celpy.celtypes.IntType:
    return celpy.celtypes.IntType(sum(int(i) for i in items))


#: Kubernetes' CEL libraries that rules use and cel-python lacks (the lists library's sum).
K8S_FUNCTIONS = {"sum": _sum}


def _validations(schema: Json, obj: Any, path: str = "") -> Iterator[tuple[str, Json, Any]]:
    """(path, validation, self) for every rule whose object, map or list is present."""
    if not isinstance(obj, dict | list):
        return
    for validation in schema.get("x-kubernetes-validations", []):
        yield path, validation, obj
    if isinstance(obj, list):
        for i, item in enumerate(obj):
            yield from _validations(schema.get("items") or {}, item, f"{path}[{i}]")
        return
    for name, prop in (schema.get("properties") or {}).items():
        if name in obj:
            yield from _validations(prop, obj[name], f"{path}.{name}")


@functools.cache
def _program(rule: str) -> Any:
    """Each rule compiled once for the whole session (cel-python compiles slowly)."""
    return _ENV.program(_ENV.compile(rule), functions=K8S_FUNCTIONS)


def cel_failures(resource: Json) -> list[str]:
    """Messages of the CEL rules the API server would reject ``resource`` with."""
    schema = openapi_schema()
    obj = apply_defaults(schema, resource)
    failed = []
    for _path, validation, self_obj in _validations(schema, obj):
        result = _program(validation["rule"]).evaluate(celpy.json_to_cel({"self": self_obj}))
        assert isinstance(result, celpy.celtypes.BoolType), (validation["rule"], result)
        if not result:
            failed.append(validation["message"])
    return failed


def pydantic_error(resource: Json) -> str:
    try:
        check_name(resource["metadata"]["name"])
        parse_spec(resource["spec"])
    except SpecError as exc:
        return str(exc)
    return ""


def base() -> Json:
    return load_example("deepseek-v3-pp2.yaml")


Mutation = Callable[[Json], None]


def _set(path: str, value: Any) -> Mutation:
    def mutate(resource: Json) -> None:
        node = resource
        keys = path.split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value

    return mutate


def _all(*mutations: Mutation) -> Mutation:
    def mutate(resource: Json) -> None:
        for m in mutations:
            m(resource)

    return mutate


def _msg(where: str, index: int = 0, field: str = "") -> str:
    return rules_for(where, field)[index].message


def _annotations(role: str, annotations: dict[str, str]) -> Mutation:
    return _set(f"spec.{role}.podAnnotations", annotations)


ANNOTATION_KEY = _msg("RoleSpec", 0, "podAnnotations")
OWNED_ANNOTATION = _msg("RoleSpec", 1, "podAnnotations")
ANNOTATIONS_SIZE = _msg("RoleSpec", 2, "podAnnotations")
LABEL_KEY = _msg("RoleSpec", 0, "nodeSelector")
OWNED_ENV = _msg("RoleSpec", 0, "env")
RESOURCE_NAME = _msg("ResourceRequirements", 0, "requests")
NPUS_IN_RESOURCES = _msg("PDDeploymentSpec", 4)
#: A DNS subdomain of exactly 253 characters, and one of 254.
PREFIX_253 = ".".join(["a" * 63] * 4)[:251] + "bc"
PREFIX_254 = PREFIX_253 + "d"


INVALID: list[tuple[str, Mutation, str | list[str]]] = [
    ("uppercase name", _set("metadata.name", "DSV3"), _msg("root")),
    ("name with a dot", _set("metadata.name", "ds.v3"), _msg("root")),
    ("name too long for child names", _set("metadata.name", "a" * 42), _msg("root")),
    ("devices do not divide", _set("spec.prefill.devicesPerNode", 6), _msg("RoleSpec", 0)),
    (
        "decode devices do not divide",
        _set("spec.decode.parallelism", {"tensor": 12, "pipeline": 1, "data": 1}),
        _msg("RoleSpec", 0),
    ),
    ("partition length", _set("spec.prefill.layerPartition", [61]), _msg("RoleSpec", 1)),
    ("extra --tp-size", _set("spec.decode.extraArgs", ["--tp-size", "4"]), _msg("RoleSpec", 2)),
    (
        "extra disaggregation flag",
        _set("spec.prefill.extraArgs", ["--disaggregation-mode=decode"]),
        _msg("RoleSpec", 2),
    ),
    ("extra --port=", _set("spec.prefill.extraArgs", ["--port=1"]), _msg("RoleSpec", 2)),
    ("extra --model-path", _set("spec.prefill.extraArgs", ["--model-path"]), _msg("RoleSpec", 2)),
    (
        "extra managed flag after a space",
        _set("spec.prefill.extraArgs", ["--enable-dp-attention --tp-size 4"]),
        _msg("RoleSpec", 2),
    ),
    (
        "extra managed flag after a tab is two problems",
        _set("spec.prefill.extraArgs", ["--enable-dp-attention\t--nnodes=2"]),
        [_msg("RoleSpec", 2), _msg("RoleSpec", 3)],
    ),
    ("extra with a newline", _set("spec.decode.extraArgs", ["--foo\n--bar"]), _msg("RoleSpec", 3)),
    ("extra with DEL", _set("spec.decode.extraArgs", ["--foo\x7f"]), _msg("RoleSpec", 3)),
    (
        "resource name in kubernetes.io",
        _set("spec.ascend.resourceName", "kubernetes.io/npu"),
        _msg("Ascend"),
    ),
    (
        "resource name in a kubernetes.io subdomain",
        _set("spec.ascend.resourceName", "npu.kubernetes.io/ascend"),
        _msg("Ascend"),
    ),
    (
        "resource name with the quota prefix",
        _set("spec.ascend.resourceName", "requests.huawei.com/Ascend910"),
        _msg("Ascend"),
    ),
    (
        "two volume sources",
        _set("spec.model.volume.hostPath", {"path": "/data"}),
        _msg("ModelVolume"),
    ),
    ("no volume source", _set("spec.model.volume", {}), _msg("ModelVolume")),
    (
        "speculative prefill without decode",
        _set("spec.speculative.roles", ["prefill"]),
        _msg("Speculative"),
    ),
    ("old sglang", _set("spec.runtime.sglangVersion", "0.4.9"), _msg("Runtime")),
    ("too new sglang", _set("spec.runtime.sglangVersion", "0.5.24"), _msg("Runtime")),
    ("garbage sglang", _set("spec.runtime.sglangVersion", "latest"), _msg("Runtime")),
    (
        "decode pipeline neither 1 nor prefill's",
        _set("spec.decode.parallelism", {"tensor": 8, "pipeline": 3, "data": 1}),
        _msg("PDDeploymentSpec", 0),
    ),
    (
        "decode partition differs",
        _all(
            _set("spec.decode.parallelism", {"tensor": 8, "pipeline": 2, "data": 1}),
            _set("spec.decode.layerPartition", [31, 30]),
        ),
        _msg("PDDeploymentSpec", 1),
    ),
    (
        "speculative on a PP prefill before 0.5.20",
        _all(
            _set("spec.runtime.sglangVersion", "0.5.15"),
            _set("spec.speculative.roles", ["prefill", "decode"]),
        ),
        _msg("PDDeploymentSpec", 2),
    ),
    (
        "speculative on a PP prefill at 0.5.10",
        _all(
            _set("spec.runtime.sglangVersion", "0.5.10"),
            _set("spec.speculative.roles", ["decode", "prefill"]),
        ),
        _msg("PDDeploymentSpec", 2),
    ),
    (
        "mooncake with prefill PP on MLA",
        _set("spec.runtime.transferBackend", "mooncake"),
        _msg("PDDeploymentSpec", 3),
    ),
    (
        "a rollout that can neither take down nor surge",
        _set("spec.rollout", {"maxUnavailable": 0, "maxSurge": 0}),
        _msg("Rollout"),
    ),
]

INVALID += [
    ("annotation key with a space and a !", _annotations("prefill", {"bad key!": "1"}),
     ANNOTATION_KEY),
    ("annotation key with two slashes", _annotations("decode", {"a/b/c": ""}), ANNOTATION_KEY),
    ("annotation key with an empty prefix", _annotations("decode", {"/c": ""}), ANNOTATION_KEY),
    ("annotation name of 64", _annotations("prefill", {"a" * 64: ""}), ANNOTATION_KEY),
    ("annotation name ending in a dash", _annotations("prefill", {"example.com/a-": ""}),
     ANNOTATION_KEY),
    ("annotation prefix of 254", _annotations("prefill", {f"{PREFIX_254}/a": ""}),
     ANNOTATION_KEY),
    ("annotation prefix with an underscore", _annotations("prefill", {"a_b.com/a": ""}),
     ANNOTATION_KEY),
    ("the bootstrap port annotation",
     _annotations("prefill", {"sglang.ai/bootstrap-port": "9000"}), OWNED_ANNOTATION),
    ("the Volcano group annotation",
     _annotations("decode", {"scheduling.k8s.io/group-name": "mine"}), OWNED_ANNOTATION),
    ("an annotation under our prefix", _annotations("decode", {"ascendpd.io/routable": "true"}),
     OWNED_ANNOTATION),
    ("an annotation under a subdomain of our prefix",
     _annotations("prefill", {"x.ascendpd.io/y": ""}), OWNED_ANNOTATION),
    ("a bad key under our prefix is two problems", _annotations("prefill", {"ascendpd.io/a!": ""}),
     [ANNOTATION_KEY, OWNED_ANNOTATION]),
    ("annotations one byte over 255 KiB",
     _annotations("prefill", {"a": "x" * 255 * 1024}), ANNOTATIONS_SIZE),
    # 130,561 characters, 261,121 bytes: Kubernetes counts bytes
    ("multi-byte annotations one byte over 255 KiB",
     _annotations("decode", {"a": "é" * (255 * 512)}), ANNOTATIONS_SIZE),
    ("env of the contract", _set("spec.decode.env", [{"name": ec.TP_SIZE, "value": "1"}]),
     OWNED_ENV),
    ("env under the contract's prefix", _set("spec.prefill.env", [{"name": "ASCEND_PD_X"}]),
     OWNED_ENV),
    ("env the launcher exports",
     _set("spec.prefill.env", [{"name": "A", "value": "1"},
                               {"name": ec.SGLANG_LAYER_PARTITION, "value": "30,31"}]),
     OWNED_ENV),
    ("env the launcher exports for newer memfabric",
     _set("spec.decode.env", [{"name": ec.MF_CONFIG_STORE_URL, "value": "tcp://10.0.0.1:1"}]),
     OWNED_ENV),
    ("env with value and valueFrom",
     _set("spec.prefill.env", [{"name": "A", "value": "1",
                                "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]),
     _msg("EnvVar")),
    ("the NPUs in prefill's requests",
     _set("spec.prefill.resources", {"requests": {"huawei.com/Ascend910": "4", "cpu": 8}}),
     NPUS_IN_RESOURCES),
    ("the NPUs in decode's limits",
     _set("spec.decode.resources", {"limits": {"huawei.com/Ascend910": 8}}), NPUS_IN_RESOURCES),
    ("a resource without a domain", _set("spec.prefill.resources", {"requests": {"gpu": 1}}),
     RESOURCE_NAME),
    ("a resource in kubernetes.io",
     _set("spec.decode.resources", {"limits": {"kubernetes.io/x": 1}}),
     _msg("ResourceRequirements", 0, "limits")),
    ("a router resource with a space",
     _set("spec.router.resources", {"requests": {"my cpu": "1"}}), RESOURCE_NAME),
    ("node selector key with a space", _set("spec.prefill.nodeSelector", {"my zone": "a"}),
     LABEL_KEY),
    ("node selector prefix with capitals",
     _set("spec.decode.nodeSelector", {"Example.com/zone": "a"}), LABEL_KEY),
    ("node selector prefix of 254", _set("spec.decode.nodeSelector", {f"{PREFIX_254}/a": ""}),
     LABEL_KEY),
]  # fmt: skip

OWNED_VOLUME = _msg("RoleSpec", 0, "volumes")
RUNTIME_MOUNT = _msg("RoleSpec", 0, "volumeMounts")
ROUTER_MOUNT = _msg("Router", 0, "volumeMounts")
ROLE_MOUNT_NAME = _msg("RoleSpec", 4)
ROUTER_MOUNT_NAME = _msg("Router", 0)
ROLE_MOUNT_OVER_DRIVER_OR_MODEL = _msg("PDDeploymentSpec", 5)
HOST_NET_SYSCTL = _msg("PDDeploymentSpec", 6)
ESCALATION = _msg("ContainerSecurityContext")
ROLE_BIDIRECTIONAL = _msg("RoleSpec", 5)
ROUTER_BIDIRECTIONAL = _msg("Router", 1)
SUB_PATHS = _msg("VolumeMount")
LOCALHOST_WITHOUT_PROFILE = _msg("SeccompProfile", 0)
PROFILE_WITHOUT_LOCALHOST = _msg("SeccompProfile", 1)


def _mounts(role: str, *paths: str, volume: str = "extra", **fields: Any) -> Mutation:
    """``role`` gets the emptyDir ``volume`` mounted at each of ``paths`` (with ``fields``)."""
    return _all(
        _set(f"spec.{role}.volumes", [{"name": volume, "emptyDir": {}}]),
        _set(f"spec.{role}.volumeMounts",
             [{"name": volume, "mountPath": p, **fields} for p in paths]),
    )  # fmt: skip


# The example's driver is at /usr/local/Ascend/driver (the default) and its model at
# /models/DeepSeek-V3 on a PVC (model.volume).
INVALID += [
    ("a volume named as the shared memory", _set("spec.prefill.volumes", [{"name": "dshm",
     "emptyDir": {}}]), OWNED_VOLUME),
    ("a volume named as the model", _set("spec.decode.volumes", [{"name": "model",
     "hostPath": {"path": "/data"}}]), OWNED_VOLUME),
    ("a mount at /dev/shm", _mounts("decode", "/dev/shm"), RUNTIME_MOUNT),
    ("a mount inside the KV layout", _mounts("prefill", "/etc/ascend-pd/kv-layout/x"),
     RUNTIME_MOUNT),
    ("a mount above the KV layout", _mounts("prefill", "/etc/ascend-pd"), RUNTIME_MOUNT),
    ("a mount at the termination log", _mounts("decode", "/dev/termination-log"),
     RUNTIME_MOUNT),
    ("a mount over /dev hides shared memory and the log", _mounts("decode", "/dev"),
     RUNTIME_MOUNT),
    ("a mount at the driver", _mounts("prefill", "/usr/local/Ascend/driver"),
     ROLE_MOUNT_OVER_DRIVER_OR_MODEL),
    ("a mount above the driver", _mounts("decode", "/usr/local/Ascend"),
     ROLE_MOUNT_OVER_DRIVER_OR_MODEL),
    ("a mount at a driver moved elsewhere",
     _all(_set("spec.ascend.driverHostPath", "/opt/driver"), _mounts("decode", "/opt/driver/x")),
     ROLE_MOUNT_OVER_DRIVER_OR_MODEL),
    ("a mount inside the model on its volume", _mounts("decode", "/models/DeepSeek-V3/cache"),
     ROLE_MOUNT_OVER_DRIVER_OR_MODEL),
    ("a mount above the model on its volume", _mounts("prefill", "/models"),
     ROLE_MOUNT_OVER_DRIVER_OR_MODEL),
    ("a mount naming no volume",
     _set("spec.prefill.volumeMounts", [{"name": "missing", "mountPath": "/x"}]),
     ROLE_MOUNT_NAME),
    ("a mount of the operator's model volume",
     _set("spec.decode.volumeMounts", [{"name": "model", "mountPath": "/m"}]), ROLE_MOUNT_NAME),
    ("a router mount over its token", _mounts("router", "/var/run/secrets"), ROUTER_MOUNT),
    ("a router mount inside its token",
     _mounts("router", "/var/run/secrets/kubernetes.io/serviceaccount/token"), ROUTER_MOUNT),
    ("a router mount naming no volume",
     _set("spec.router.volumeMounts", [{"name": "cache", "mountPath": "/cache"}]),
     ROUTER_MOUNT_NAME),
    ("a router nodeSelector key with a space", _set("spec.router.nodeSelector", {"my zone": "a"}),
     LABEL_KEY),
    ("a net sysctl in the host network",
     _set("spec.prefill.podSecurityContext", {"sysctls": [
         {"name": "net.core.somaxconn", "value": "1024"}]}), HOST_NET_SYSCTL),
    ("a net sysctl written with slashes in the host network",
     _set("spec.decode.podSecurityContext", {"sysctls": [
         {"name": "kernel.shm_rmid_forced", "value": "1"},
         {"name": "net/ipv4/ip_local_port_range", "value": "1024 65000"}]}), HOST_NET_SYSCTL),
    ("no escalation yet privileged",
     _set("spec.decode.containerSecurityContext", {"allowPrivilegeEscalation": False,
                                                   "privileged": True}), ESCALATION),
    ("no escalation yet CAP_SYS_ADMIN on the router",
     _set("spec.router.containerSecurityContext", {"allowPrivilegeEscalation": False,
                                                   "capabilities": {"add": ["CAP_SYS_ADMIN"]}}),
     ESCALATION),
    ("a Bidirectional mount, no securityContext",
     _mounts("prefill", "/mnt/a", mountPropagation="Bidirectional"), ROLE_BIDIRECTIONAL),
    ("a Bidirectional mount, privileged unset",
     _all(_mounts("decode", "/mnt/a", mountPropagation="Bidirectional"),
          _set("spec.decode.containerSecurityContext", {"capabilities": {"add": ["SYS_ADMIN"]}})),
     ROLE_BIDIRECTIONAL),
    ("a Bidirectional router mount, privileged false",
     _all(_mounts("router", "/mnt/a", mountPropagation="Bidirectional"),
          _set("spec.router.containerSecurityContext", {"privileged": False})),
     ROUTER_BIDIRECTIONAL),
    ("the other role's privilege does not count",
     _all(_mounts("prefill", "/mnt/a", mountPropagation="Bidirectional"),
          _set("spec.decode.containerSecurityContext", {"privileged": True})),
     ROLE_BIDIRECTIONAL),
    ("subPath and subPathExpr", _mounts("decode", "/mnt/a", subPath="a", subPathExpr="$(B)"),
     SUB_PATHS),
    ("subPath and subPathExpr on the router",
     _mounts("router", "/mnt/a", subPath="a", subPathExpr="$(POD)/b"), SUB_PATHS),
    ("Localhost seccomp without its profile on a pod",
     _set("spec.prefill.podSecurityContext", {"seccompProfile": {"type": "Localhost"}}),
     LOCALHOST_WITHOUT_PROFILE),
    ("Localhost seccomp with an empty profile on a container",
     _set("spec.router.containerSecurityContext",
          {"seccompProfile": {"type": "Localhost", "localhostProfile": ""}}),
     LOCALHOST_WITHOUT_PROFILE),
    ("a profile with RuntimeDefault on a container",
     _set("spec.decode.containerSecurityContext",
          {"seccompProfile": {"type": "RuntimeDefault", "localhostProfile": "p.json"}}),
     PROFILE_WITHOUT_LOCALHOST),
    ("a profile with Unconfined on the router's pod",
     _set("spec.router.podSecurityContext",
          {"seccompProfile": {"type": "Unconfined", "localhostProfile": "p.json"}}),
     PROFILE_WITHOUT_LOCALHOST),
]  # fmt: skip

VALID: list[tuple[str, Mutation]] = [
    ("the example", lambda r: None),
    ("longest name", _set("metadata.name", "a" * 41)),
    ("no volume (model in the image)", lambda r: r["spec"]["model"].pop("volume")),
    ("hostPath volume", _set("spec.model.volume", {"hostPath": {"path": "/data/m"}})),
    (
        "decode at the prefill's PP with the same partition",
        _all(
            _set("spec.decode.parallelism", {"tensor": 8, "pipeline": 2, "data": 1}),
            _set("spec.decode.layerPartition", [30, 31]),
        ),
    ),
    ("decode-only speculative on old sglang", _set("spec.runtime.sglangVersion", "0.5.15")),
    ("release candidate", _set("spec.runtime.sglangVersion", "0.5.23rc1")),
    (
        "mooncake at prefill PP 1",
        _all(
            _set("spec.runtime.transferBackend", "mooncake"),
            _set("spec.prefill.parallelism", {"tensor": 8, "pipeline": 1, "data": 1}),
            _set("spec.prefill.layerPartition", []),
        ),
    ),
    (
        "mooncake with PP on an MHA model",
        _all(
            _set("spec.runtime.transferBackend", "mooncake"),
            _set("spec.model.config", {"numHiddenLayers": 28}),
            _set("spec.speculative", {"algorithm": "NONE"}),
            _set("spec.prefill.layerPartition", [14, 14]),
        ),
    ),
    ("surge-only rollout", _set("spec.rollout", {"maxUnavailable": 0, "maxSurge": 1})),
    ("decode first", _set("spec.rollout", {"roleOrder": ["decode", "prefill"]})),
    ("allowed extra args", _set("spec.prefill.extraArgs", ["--portal", "--model-loader-extra"])),
    (
        "extra args naming a managed flag inside a word",
        _set("spec.prefill.extraArgs", ["--json-model-override-args", '{"x--tp-size": 1}']),
    ),
    ("another vendor's resource", _set("spec.ascend.resourceName", "example.com/npu-910_b")),
    ("ascend left to its defaults", lambda r: r["spec"].pop("ascend")),
    ("speculative off, prefill role alone", _set("spec.speculative", {"roles": ["prefill"]})),
    (
        "annotations of other owners, capitals in a prefix, the longest parts",
        _annotations(
            "prefill",
            {
                "prometheus.io/scrape": "true",
                "sglang.ai/other": "x",
                "notascendpd.io/a": "",
                "Example.COM/Name_1.b": "",
                f"{PREFIX_253}/{'a' * 63}": "",
                "a" * 63: "",
            },
        ),
    ),
    (
        "env of the user's, one from a field",
        _set(
            "spec.decode.env",
            [
                {"name": "HCCL_BUFFSIZE", "value": "512"},
                # the user's own HCCL timeout stays allowed (it wins over the spec's field)
                {"name": ec.HCCL_CONNECT_TIMEOUT, "value": "1200"},
                {"name": "ASCEND_PDX"},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            ],
        ),
    ),
    (
        "resources of every kind, quantities as integers and strings",
        _set(
            "spec.prefill.resources",
            {
                "requests": {
                    "cpu": "500m",
                    "memory": "64Gi",
                    "hugepages-2Mi": "1Gi",
                    "example.com/rdma": 1,
                    "ephemeral-storage": "1.5e3",
                },
                "limits": {"cpu": 4, "example.com/rdma": 1},
            },
        ),
    ),
    (
        "the NPU resource is ascend.resourceName's: another name is the user's",
        _all(
            _set("spec.ascend.resourceName", "example.com/npu"),
            _set("spec.decode.resources", {"limits": {"huawei.com/Ascend910": 1}}),
        ),
    ),
    ("annotations of exactly 255 KiB", _annotations("decode", {"a": "x" * (255 * 1024 - 1)})),
    (
        "node selector with a prefixed key and an empty value",
        _set("spec.prefill.nodeSelector", {"kubernetes.io/hostname": "node-1", "zone": ""}),
    ),
]


#: Every pod field of issue 26's escape hatches, set as a platform would.
_EVERY_POD_FIELD = {
    "imagePullSecrets": [{"name": "registry"}, {"name": "mirror.example.com"}],
    "serviceAccountName": "llm-runtime",
    "priorityClassName": "llm-high",
    "podSecurityContext": {
        "runAsUser": 0, "runAsGroup": 0, "fsGroup": 1000, "fsGroupChangePolicy": "OnRootMismatch",
        "supplementalGroups": [1000, 1001], "seLinuxOptions": {"level": "s0:c1"},
        "seccompProfile": {"type": "RuntimeDefault"},
        "sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}],
    },
    "containerSecurityContext": {
        "privileged": True,
        "capabilities": {"add": ["IPC_LOCK", "SYS_PTRACE"], "drop": ["NET_RAW"]},
        "readOnlyRootFilesystem": False, "runAsNonRoot": False,
    },
    "volumes": [
        {"name": "toolkit", "hostPath": {"path": "/usr/local/Ascend/ascend-toolkit"}},
        {"name": "cache", "emptyDir": {"sizeLimit": "10Gi"}},
        {"name": "hccn", "configMap": {"name": "hccn", "defaultMode": 420}},
    ],
    "volumeMounts": [
        # beside the driver, not above it; names that only start like an owned path
        {"name": "toolkit", "mountPath": "/usr/local/Ascend/ascend-toolkit", "readOnly": True},
        {"name": "cache", "mountPath": "/dev/shmem", "subPath": "a"},
        {"name": "cache", "mountPath": "/etc/ascend-pd/kv-layouts"},
        {"name": "cache", "mountPath": "/models/DeepSeek-V3-cache"},
        {"name": "hccn", "mountPath": "/etc/hccn.conf", "subPath": "hccn.conf",
         "mountPropagation": "HostToContainer"},
    ],
}  # fmt: skip

VALID += [
    ("every pod field on both roles",
     _all(*(_set(f"spec.{role}.{k}", v) for role in ("prefill", "decode")
            for k, v in _EVERY_POD_FIELD.items()))),
    ("every pod field on the router, and its own",
     _all(*(_set(f"spec.router.{k}", v) for k, v in _EVERY_POD_FIELD.items()),
          _set("spec.router.nodeSelector", {"node-role.kubernetes.io/infra": ""}),
          _set("spec.router.tolerations", [{"key": "infra", "operator": "Exists"}]),
          _mounts("router", "/var/run/secrets-of-mine", "/var/run/x"))),
    ("a net sysctl off the host network",
     _all(_set("spec.ascend.hostNetwork", False),
          _set("spec.prefill.podSecurityContext", {"sysctls": [
              {"name": "net.core.somaxconn", "value": "1024"}]}))),
    ("a net sysctl on the router, in the pod network",
     _set("spec.router.podSecurityContext", {"sysctls": [
         {"name": "net.ipv4.ip_local_port_range", "value": "1024 65000"}]})),
    ("the model on a volume of the user's, at model.path",
     _all(lambda r: r["spec"]["model"].pop("volume"),
          _set("spec.prefill.volumes", [{"name": "weights", "nfs": {"server": "nfs.example.com",
                                                                      "path": "/models"}}]),
          _set("spec.prefill.volumeMounts", [{"name": "weights", "mountPath": "/models"}]))),
    ("the driver moved, its old place free", _all(_set("spec.ascend.driverHostPath", "/opt/drv"),
                                                  _mounts("decode", "/usr/local/Ascend"))),
    ("no escalation and unprivileged, capabilities dropped",
     _set("spec.decode.containerSecurityContext", {
         "allowPrivilegeEscalation": False, "privileged": False,
         "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]}})),
    ("escalation allowed and CAP_SYS_ADMIN",
     _set("spec.prefill.containerSecurityContext", {
         "allowPrivilegeEscalation": True, "capabilities": {"add": ["CAP_SYS_ADMIN"]}})),
    ("a Bidirectional mount of a privileged role",
     _all(_mounts("decode", "/mnt/a", mountPropagation="Bidirectional"),
          _set("spec.decode.containerSecurityContext", {"privileged": True}))),
    ("a Bidirectional mount of the privileged router",
     _all(_mounts("router", "/mnt/a", mountPropagation="Bidirectional"),
          _set("spec.router.containerSecurityContext", {"privileged": True}))),
    ("other propagations need no privilege",
     _all(_mounts("prefill", "/mnt/a", mountPropagation="HostToContainer"),
          _mounts("router", "/mnt/b", mountPropagation="None"))),
    ("subPathExpr alone", _mounts("prefill", "/mnt/a", subPathExpr="$(POD)")),
    ("Localhost seccomp with its profile on pod and container",
     _all(_set("spec.prefill.podSecurityContext",
               {"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}),
          _set("spec.router.containerSecurityContext",
               {"seccompProfile": {"type": "Localhost", "localhostProfile": "x/p.json"}}))),
    ("Unconfined seccomp, no profile",
     _set("spec.decode.containerSecurityContext", {"seccompProfile": {"type": "Unconfined"}})),
]  # fmt: skip


def _host_mounts(*entries: Json) -> Mutation:
    return _set("spec.ascend.hostMounts", list(entries))


def _hm_msg(where: str, index: int = 0) -> str:
    return [r for r in HOST_MOUNT_RULES if r.where == where][index].message


HOST_MOUNT_CUSTOM_NEEDS_PATH = _hm_msg("HostMount", 0)
HOST_MOUNT_OVER_RUNTIME = _hm_msg("HostMount", 1)
HOST_MOUNTS_CLASH = _hm_msg("Ascend")
HOST_MOUNT_OVER_DRIVER_OR_MODEL = _hm_msg("PDDeploymentSpec", 0)
PREFILL_OVER_HOST_MOUNT = _hm_msg("PDDeploymentSpec", 1)
DECODE_OVER_HOST_MOUNT = _hm_msg("PDDeploymentSpec", 2)
VOLUME_OF_HOST_MOUNT = _hm_msg("PDDeploymentSpec", 3)

# The example's driver is at /usr/local/Ascend/driver and its model on a volume at
# /models/DeepSeek-V3 (as above); the well-known paths are vocabulary.HOST_FILES'.
INVALID += [
    ("a custom host mount without a path", _host_mounts({"name": "weak-dict"}),
     HOST_MOUNT_CUSTOM_NEEDS_PATH),
    ("a custom host mount with only a mountPath",
     _host_mounts({"name": "firmware"}, {"name": "x", "mountPath": "/x"}),
     HOST_MOUNT_CUSTOM_NEEDS_PATH),
    ("a well-known host mount moved onto shared memory",
     _host_mounts({"name": "dcmi", "mountPath": "/dev/shm/dcmi"}), HOST_MOUNT_OVER_RUNTIME),
    ("a custom host mount at the KV layout, by its hostPath",
     _host_mounts({"name": "layout", "hostPath": "/etc/ascend-pd"}), HOST_MOUNT_OVER_RUNTIME),
    ("two entries at one path",
     _host_mounts({"name": "hccnConf"}, {"name": "hccn", "hostPath": "/etc/hccn.conf"}),
     HOST_MOUNTS_CLASH),
    ("a custom entry inside localSbin",
     _host_mounts({"name": "localSbin"},
                  {"name": "tool", "hostPath": "/opt/x", "mountPath": "/usr/local/sbin/x"}),
     HOST_MOUNTS_CLASH),
    ("a well-known entry moved above another",
     _host_mounts({"name": "npuSmi"}, {"name": "dcmi", "mountPath": "/usr/local/bin"}),
     HOST_MOUNTS_CLASH),
    ("a host mount inside the driver", _host_mounts(
        {"name": "hccn-tool", "hostPath": "/usr/local/Ascend/driver/tools/hccn_tool"}),
     HOST_MOUNT_OVER_DRIVER_OR_MODEL),
    ("a host mount above the driver",
     _host_mounts({"name": "ascend", "hostPath": "/usr/local/Ascend"}),
     HOST_MOUNT_OVER_DRIVER_OR_MODEL),
    ("firmware inside a driver moved above it",
     _all(_set("spec.ascend.driverHostPath", "/usr/local/Ascend"),
          _host_mounts({"name": "firmware"})), HOST_MOUNT_OVER_DRIVER_OR_MODEL),
    ("a host mount at the model on its volume",
     _host_mounts({"name": "weights", "hostPath": "/data", "mountPath": "/models"}),
     HOST_MOUNT_OVER_DRIVER_OR_MODEL),
    ("prefill mounts at hccn.conf beside the entry",
     _all(_host_mounts({"name": "hccnConf"}), _mounts("prefill", "/etc/hccn.conf")),
     PREFILL_OVER_HOST_MOUNT),
    ("decode mounts above the firmware",
     _all(_host_mounts({"name": "firmware"}), _mounts("decode", "/usr/local/Ascend/firmware/x")),
     DECODE_OVER_HOST_MOUNT),
    ("both roles mount where a custom entry does",
     _all(_host_mounts({"name": "cann", "hostPath": "/opt/cann", "mountPath": "/cann"}),
          _mounts("prefill", "/cann"), _mounts("decode", "/cann/x")),
     [PREFILL_OVER_HOST_MOUNT, DECODE_OVER_HOST_MOUNT]),
    ("a role volume named as a well-known entry's",
     _all(_host_mounts({"name": "hccnConf"}),
          _set("spec.decode.volumes", [{"name": "ascend-hccn-conf", "emptyDir": {}}])),
     VOLUME_OF_HOST_MOUNT),
    ("a role volume named as a custom entry's",
     _all(_host_mounts({"name": "cann", "hostPath": "/opt/cann"}),
          _set("spec.prefill.volumes", [{"name": "host-cann", "emptyDir": {}}])),
     VOLUME_OF_HOST_MOUNT),
]  # fmt: skip

VALID += [
    ("every well-known host mount", _host_mounts(*({"name": n} for n in KNOWN_HOST_FILES))),
    ("well-known and custom host mounts, moved and typed",
     _host_mounts({"name": "npuSmi", "hostPath": "/usr/local/sbin/npu-smi"},
                  {"name": "firmware", "type": ""},
                  {"name": "weak-dict", "hostPath": "/etc/hccn_weak_dict.conf", "type": "File"},
                  {"name": "cann", "hostPath": "/opt/cann", "mountPath": "/usr/local/cann",
                   "type": "Directory"})),
    ("paths that only start like another entry's or the driver's",
     _host_mounts({"name": "firmware"}, {"name": "fw2", "hostPath": "/usr/local/Ascend/firmware2"},
                  {"name": "drv", "hostPath": "/usr/local/Ascend/driver-tools"},
                  {"name": "sbin", "hostPath": "/usr/local/sbinx"}, {"name": "localSbin"})),
    ("a role volume of a name an absent entry would use",
     _all(_host_mounts({"name": "firmware"}),
          _set("spec.decode.volumes", [{"name": "ascend-hccn-conf", "emptyDir": {}}]))),
    ("a role's mount beside the entries",
     _all(_host_mounts({"name": "hccnConf"}, {"name": "queueSchedule"}),
          _mounts("prefill", "/etc/hccn.conf.d", "/var/queue"))),
    ("firmware while the model is in the image at a path above it",
     _all(lambda r: r["spec"]["model"].pop("volume"), _set("spec.model.path", "/usr/local"),
          _host_mounts({"name": "firmware"}))),
]  # fmt: skip


SCALER_BOUNDS = _msg("RoleScaling")
RATIO_ORDER = _msg("RatioBounds")
SCALING_FEASIBLE = next(r.message for r in SCALING_RULES if r.where == "PDDeploymentSpec")


def _scaled(role: str, lo: int, hi: int, mode: str = "External") -> Mutation:
    return _set(f"spec.{role}.scaling", {"mode": mode, "minReplicas": lo, "maxReplicas": hi})


def _ratio(lo: str | None, hi: str | None) -> Mutation:
    bounds = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
    return _set("spec.scaling.prefillPerDecode", bounds)


INVALID += [
    ("scaler min above max", _scaled("decode", 5, 4), SCALER_BOUNDS),
    ("ratio min above max", _ratio("2", "1.5"), RATIO_ORDER),
    # prefill 1..2, decode 8..8: 2/8 = 0.25 at best, the bound wants at least 0.5
    ("no pair within the ratio", _all(_scaled("prefill", 1, 2), _scaled("decode", 8, 8),
                                      _ratio("0.5", None)), SCALING_FEASIBLE),
    # integers leave no room: d in [2, 3], p = 1: 1/2 and 1/3 miss [0.4, 0.45]
    ("the ratio falls between the integers",
     _all(_scaled("prefill", 1, 1), _scaled("decode", 2, 3), _ratio("0.4", "0.45")),
     SCALING_FEASIBLE),
    ("two Static roles outside the ratio", _all(_set("spec.prefill.replicas", 1),
                                                _set("spec.decode.replicas", 3),
                                                _ratio("0.5", "2")), SCALING_FEASIBLE),
    # the Static prefill at 0 allows only (0, 0), which decode's minReplicas 1 excludes
    ("a lone zero that cannot be raised",
     _all(_set("spec.prefill.replicas", 0), _scaled("decode", 1, 4)), SCALING_FEASIBLE),
]  # fmt: skip

VALID += [
    ("both roles scaled, no ratio", _all(_scaled("prefill", 1, 4), _scaled("decode", 1, 8))),
    ("the planner with a ratio", _all(_scaled("prefill", 1, 4, "Planner"),
                                      _scaled("decode", 2, 8), _ratio("0.25", "1"))),
    ("only the upper bound", _all(_scaled("decode", 1, 8), _ratio(None, "0.5"))),
    ("scale to zero together", _all(_scaled("prefill", 0, 4), _scaled("decode", 0, 8),
                                    _ratio("0.5", "0.5"))),
    ("one exact pair between the integers",
     _all(_scaled("prefill", 1, 1), _scaled("decode", 2, 3), _ratio("0.5", "0.5"))),
    ("two Static roles inside the ratio", _all(_set("spec.prefill.replicas", 2),
                                               _set("spec.decode.replicas", 3),
                                               _ratio("0.5", "1"))),
    ("a drain timeout", _set("spec.scaling.drainTimeoutSeconds", 30)),
]  # fmt: skip


def _planner(**settings: Any) -> Mutation:
    return _set("spec.scaling.planner", settings)


INVALID += [
    ("a zero prefill queue target", _planner(prefillQueueTarget="0"), _msg("PlannerSettings", 0)),
    ("a zero token usage target", _planner(decodeTokenUsageTarget="0.000"),
     _msg("PlannerSettings", 1)),
    ("a zero prealloc queue target", _planner(decodePreallocQueueTarget="0.0"),
     _msg("PlannerSettings", 2)),
    ("a zero latency quantile", _planner(latencyQuantile="0"), _msg("PlannerSettings", 3)),
    ("two zero targets at once", _planner(prefillQueueTarget="0", decodePreallocQueueTarget="0"),
     [_msg("PlannerSettings", 0), _msg("PlannerSettings", 2)]),
]  # fmt: skip

VALID += [
    ("the planner's defaults written out",
     _all(_scaled("decode", 1, 8, "Planner"),
          _planner(intervalSeconds=15, stabilizationWindowSeconds=300, tolerance="0.1",
                   maxStepUp=2, prefillQueueTarget="4", decodeTokenUsageTarget="0.7",
                   decodePreallocQueueTarget="2", latencyQuantile="0.9"))),
    ("the planner with latency targets and tight pacing",
     _all(_scaled("prefill", 1, 4, "Planner"), _scaled("decode", 1, 8, "Planner"),
          _planner(intervalSeconds=1, stabilizationWindowSeconds=0, tolerance="0",
                   prefillQueueTarget="0.5", decodeTokenUsageTarget="1",
                   decodePreallocQueueTarget="999.999", ttftTargetMilliseconds=800,
                   itlTargetMilliseconds=50, latencyQuantile="0.999"))),
]  # fmt: skip


def _placement(**fields: Any) -> Mutation:
    return _set("spec.placement", {"topologyKey": "example.com/super-pod", **fields})


VOLCANO = _set("spec.scheduling.gang", "volcano")
#: A label key whose prefix is a DNS subdomain of 254 characters: the pattern passes it.
LONG_PREFIX_KEY = f"{PREFIX_254}/rack"

INVALID += [
    ("an exclusive placement without a scope",
     _placement(scope="None", exclusive=True), _msg("Placement", 1)),
    ("a topology key with a prefix of 254 characters",
     _placement(topologyKey=LONG_PREFIX_KEY), _msg("Placement", 0)),
    ("a Volcano tier without a scope",
     _all(_placement(scope="None", highestTierAllowed=2), VOLCANO), _msg("Placement", 2)),
    ("a Volcano tier without Volcano", _placement(highestTierAllowed=1),
     next(r.message for r in PLACEMENT_RULES if r.where == "PDDeploymentSpec")),
]  # fmt: skip

VALID += [
    ("a placement with its defaults", _placement()),
    ("a placement per instance, preferred, in two domains",
     _placement(scope="Instance", mode="Preferred", exclusive=True, domains=["sp-0", "sp-1"])),
    ("a placement without a scope, in one domain", _placement(scope="None", domains=["rack-a"])),
    ("a topology key with a prefix of 253 characters",
     _placement(topologyKey=f"{PREFIX_253}/rack")),
    ("a Volcano tier per instance, with Volcano",
     _all(_placement(scope="Instance", highestTierAllowed=1), VOLCANO)),
    ("a Volcano tier for the deployment, preferred",
     _all(_placement(mode="Preferred", highestTierAllowed=3), VOLCANO)),
]  # fmt: skip


@given(
    plo=st.integers(0, 6), pspan=st.integers(0, 6), dlo=st.integers(0, 6),
    dspan=st.integers(0, 6), lo=st.sampled_from([None, "0", "0.25", "0.4", "0.5", "1", "1.5"]),
    hi=st.sampled_from([None, "0.3", "0.45", "0.5", "1", "2", "10"]),
)  # fmt: skip
@settings(max_examples=60, deadline=None)
def test_the_feasibility_rule_agrees_with_a_brute_force_search(
    plo: int, pspan: int, dlo: int, dspan: int, lo: str | None, hi: str | None
) -> None:
    """CEL's doubles and pydantic's fractions give the verdict a search over every pair
    gives (the oracle: both roles at zero, or both running with lo <= p/d <= hi)."""
    resource = copy.deepcopy(base())
    _all(_scaled("prefill", plo, max(plo + pspan, 1)), _scaled("decode", dlo, max(dlo + dspan, 1)),
         _ratio(lo, hi))(resource)  # fmt: skip
    if lo is not None and hi is not None and float(lo) > float(hi):
        return  # the order rule's case
    feasible = any(
        (p == 0 and d == 0)
        or (p > 0 and d > 0 and (lo is None or p >= float(lo) * d)
            and (hi is None or p <= float(hi) * d))
        for p in range(plo, max(plo + pspan, 1) + 1)
        for d in range(dlo, max(dlo + dspan, 1) + 1)
    )  # fmt: skip
    cel = SCALING_FEASIBLE in cel_failures(resource)
    pydantic = SCALING_FEASIBLE in pydantic_error(resource)
    assert (cel, pydantic) == (not feasible, not feasible)


def _tolerations(where: str, *tolerations: Json) -> Mutation:
    return _set(f"spec.{where}.tolerations", list(tolerations))


EMPTY_KEY_EXISTS = _msg("Toleration", 0)
EXISTS_NO_VALUE = _msg("Toleration", 1)
SECONDS_NO_EXECUTE = _msg("Toleration", 2)

# Kubernetes' ValidateTolerations, case by case (core/v1 validation).
INVALID += [
    ("toleration without key, Equal", _tolerations("prefill", {"operator": "Equal"}),
     EMPTY_KEY_EXISTS),
    ("toleration without key or operator", _tolerations("router", {"effect": "NoSchedule"}),
     EMPTY_KEY_EXISTS),
    ("toleration with empty key and operator", _tolerations("decode", {"key": "", "operator": ""}),
     EMPTY_KEY_EXISTS),
    ("toleration Exists with a value",
     _tolerations("decode", {"key": "k", "operator": "Exists", "value": "v"}), EXISTS_NO_VALUE),
    ("tolerationSeconds with NoSchedule",
     _tolerations("router", {"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}),
     SECONDS_NO_EXECUTE),
    ("tolerationSeconds without effect",
     _tolerations("prefill", {"key": "k", "operator": "Exists", "tolerationSeconds": 5}),
     SECONDS_NO_EXECUTE),
]  # fmt: skip
ONE_ENV_SOURCE = _msg("EnvVarSource")
_REF = {"configMapKeyRef": {"name": "c", "key": "k"}, "fieldRef": {"fieldPath": "spec.nodeName"}}
INVALID += [
    ("env valueFrom with two sources", _set("spec.decode.env", [{"name": "X", "valueFrom": _REF}]),
     ONE_ENV_SOURCE),
    ("env valueFrom with none", _set("spec.prefill.env", [{"name": "X", "valueFrom": {}}]),
     ONE_ENV_SOURCE),
]  # fmt: skip
VALID += [
    ("env valueFrom a resource", _set("spec.prefill.env", [{"name": "MEM", "valueFrom": {
        "resourceFieldRef": {"resource": "requests.memory", "divisor": "1Mi"}}}])),
    ("env valueFrom a secret", _set("spec.decode.env", [{"name": "TOKEN", "valueFrom": {
        "secretKeyRef": {"name": "s", "key": "token", "optional": True}}}])),
]  # fmt: skip
VALID += [
    ("toleration of every taint", _tolerations("prefill", {"operator": "Exists"})),
    ("toleration Equal by default", _tolerations("decode", {"key": "k", "value": "v"})),
    ("toleration with empty operator and effect",
     _tolerations("router", {"key": "k", "operator": "", "value": "", "effect": ""})),
    ("toleration Exists with an empty value",
     _tolerations("decode", {"key": "k", "operator": "Exists", "value": ""})),
    ("tolerationSeconds with NoExecute",
     _tolerations("router", {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300})),
]  # fmt: skip


@pytest.mark.parametrize(("case", "mutation", "message"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_rejected_by_cel_and_pydantic(
    case: str, mutation: Mutation, message: str | list[str]
) -> None:
    resource = copy.deepcopy(base())
    mutation(resource)
    messages = message if isinstance(message, list) else [message]
    assert cel_failures(resource) == messages, case
    error = pydantic_error(resource)
    assert all(m in error for m in messages), error


@pytest.mark.parametrize(("case", "mutation"), VALID, ids=[c[0] for c in VALID])
def test_valid_accepted_by_cel_and_pydantic(case: str, mutation: Mutation) -> None:
    resource = copy.deepcopy(base())
    mutation(resource)
    assert cel_failures(resource) == [], case
    assert pydantic_error(resource) == ""


def test_every_rule_has_an_invalid_case() -> None:
    covered = {
        m
        for _, _, message in INVALID
        for m in (message if isinstance(message, list) else [message])
    }
    assert {rule.message for rule in RULES} == covered


@pytest.mark.parametrize("patch", range(0, 31))
def test_version_patterns_match_the_layout_core(patch: int) -> None:
    """The CEL version regexes say the same as the core's version comparisons."""
    from ascend_pd_operator.api.rules.spec import _version_supported
    from ascend_pd_runtime.layout import SGLANG_PP_PREFILL_DRAFT, parse_sglang_version

    for version in (f"0.5.{patch}", f"v0.5.{patch}", f"0.5.{patch}.post1"):
        resource = copy.deepcopy(base())
        _set("spec.runtime.sglangVersion", version)(resource)
        _set("spec.speculative.roles", ["prefill", "decode"])(resource)
        failures = cel_failures(resource)
        supported = _version_supported(version)
        assert (_msg("Runtime") not in failures) == supported, version
        parsed = parse_sglang_version(version)
        assert parsed is not None
        # Only meaningful for supported versions; others are refused by the Runtime rule.
        refuses = supported and parsed < SGLANG_PP_PREFILL_DRAFT
        assert (_msg("PDDeploymentSpec", 2) in failures) == refuses, version
        assert (_msg("PDDeploymentSpec", 2) in pydantic_error(resource)) == refuses, version


def test_pydantic_message_names_field_and_value() -> None:
    resource = copy.deepcopy(base())
    resource["spec"]["prefill"]["devicesPerNode"] = 6
    error = pydantic_error(resource)
    assert error.startswith("spec.prefill: ")
    assert "8 × 2 = 16, devicesPerNode 6" in error


def test_duplicate_speculative_roles_are_refused() -> None:
    resource = copy.deepcopy(base())
    resource["spec"]["speculative"]["roles"] = ["decode", "decode"]
    assert "has duplicates" in pydantic_error(resource)


def test_cel_rules_use_no_backslash_escapes_but_escaped_backslashes() -> None:
    """CEL-go rejects escapes like ``\\.`` in string literals that cel-python tolerates;
    an escaped backslash (``\\\\``, for a regex's ``\\x00``) is valid CEL."""
    for rule in RULES:
        assert "\\" not in rule.cel.replace("\\\\", ""), rule.cel


@pytest.mark.parametrize(
    "name", ["a", "dsv3", "a-1", "a" * 41, "1dsv3", "ds.v3", "a" * 42, "-a", "Dsv3"]
)
def test_name_rule_agrees_with_the_dns_label_pattern(name: str) -> None:
    """CEL checks only what DNS-1123 subdomain validation leaves open; together they are
    the DNS-label pattern the pydantic side checks."""
    import re

    from ascend_pd_operator.api.rules.limits import MAX_NAME_LENGTH, NAME_PATTERN

    subdomain = re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) is not None
    resource = copy.deepcopy(base())
    resource["metadata"]["name"] = name
    api_server_accepts = subdomain and not cel_failures(resource)
    label = re.fullmatch(NAME_PATTERN.strip("^$"), name) is not None
    assert api_server_accepts == (label and len(name) <= MAX_NAME_LENGTH)
    assert (pydantic_error(resource) == "") == api_server_accepts


def _k8s_qualified_name(key: str) -> bool:
    """apimachinery's IsQualifiedName: split at '/', then check the prefix and the name."""
    import re

    parts = key.split("/")
    if len(parts) > 2:
        return False
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        label = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
        if not prefix or len(prefix) > 253 or not re.fullmatch(f"{label}(\\.{label})*", prefix):
            return False
    return len(name) <= 63 and bool(re.fullmatch("([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", name))


_KEY_PARTS = ["a", "Z", "0", "-", "_", ".", "/", " ", "!", "é", "\n", "a" * 62, PREFIX_253]


def _key_rule_holds(field: str, key: str) -> bool:
    """The CEL of the field's key rule (the first of its rules) on ``{key: ""}``."""
    schema = openapi_schema()["properties"]["spec"]["properties"]["prefill"]["properties"][field]
    rule = schema["x-kubernetes-validations"][0]["rule"]
    result = _ENV.program(_ENV.compile(rule)).evaluate(celpy.json_to_cel({"self": {key: ""}}))
    return bool(result)


@settings(max_examples=200, deadline=None)
@example("a\n")  # Python's $ matches before a final newline, RE2's does not
@example("Example.com/a")
@example(f"{PREFIX_254}/a")
@example(f"{PREFIX_253}/{'a' * 63}")
@example("a/")
@given(st.lists(st.sampled_from(_KEY_PARTS), max_size=6).map("".join))
def test_key_rules_agree_with_kubernetes(key: str) -> None:
    """Annotation keys are qualified names once lowercased (ValidateAnnotations), label keys
    as they are (ValidateLabels); CEL and pydantic both say what Kubernetes says."""
    for field, message, kubernetes in (
        ("podAnnotations", ANNOTATION_KEY, _k8s_qualified_name(key.lower())),
        ("nodeSelector", LABEL_KEY, _k8s_qualified_name(key)),
    ):
        assert _key_rule_holds(field, key) == kubernetes, (field, key)
        python = violations("RoleSpec", {key: ""}, field)
        assert (message not in "".join(python)) == kubernetes, (field, key, python)


@pytest.mark.parametrize(
    ("value", "ok"),
    [("", True), ("a", True), ("a" * 63, True), ("a.b-c_D9", True), ("a" * 64, False),
     ("-a", False), ("a.", False), ("a b", False), ("a/b", False)],
)  # fmt: skip
def test_node_selector_values_are_label_values(value: str, ok: bool) -> None:
    """Refused by the CRD's schema (on every Kubernetes), generated from the pydantic type."""
    import re

    resource = copy.deepcopy(base())
    resource["spec"]["decode"]["nodeSelector"] = {"zone": value}
    assert (pydantic_error(resource) == "") == ok, pydantic_error(resource)
    schema = openapi_schema()["properties"]["spec"]["properties"]["decode"]
    values = schema["properties"]["nodeSelector"]["additionalProperties"]
    assert (len(value) <= values["maxLength"] and bool(re.search(values["pattern"], value))) == ok


def test_a_map_rule_message_names_the_field_and_the_key() -> None:
    resource = copy.deepcopy(base())
    resource["spec"]["prefill"]["podAnnotations"] = {
        "bad key!": "1",
        "sglang.ai/bootstrap-port": "1",
    }
    error = pydantic_error(resource)
    assert error.startswith(f"spec.prefill.podAnnotations: {ANNOTATION_KEY} (got 'bad key!')"), (
        error
    )
    assert f"{OWNED_ANNOTATION} (got 'sglang.ai/bootstrap-port')" in error, error


@pytest.mark.parametrize(
    ("name", "ok"),
    [("A", True), ("_a.b-C9", True), ("-x", True), ("9A", False), ("A B", False), ("A=B", False),
     ("", False), ("A" * 256, True), ("A" * 257, False)],
)  # fmt: skip
def test_env_names_are_checked_by_the_schema(name: str, ok: bool) -> None:
    """IsEnvVarName as Kubernetes before 1.34 checks it, refused by the CRD's schema (on
    every Kubernetes)."""
    import re

    resource = copy.deepcopy(base())
    resource["spec"]["prefill"]["env"] = [{"name": name, "value": "1"}]
    assert (pydantic_error(resource) == "") == ok, pydantic_error(resource)
    schema = openapi_schema()["properties"]["spec"]["properties"]["prefill"]["properties"]["env"]
    names = schema["items"]["properties"]["name"]
    assert (len(name) <= names["maxLength"] and bool(re.search(names["pattern"], name))) == ok


@pytest.mark.parametrize(
    ("quantity", "ok"),
    [(0, True), (4, True), ("1", True), ("500m", True), ("1.5", True), ("64Gi", True),
     ("1e3", True), (".5", True), ("+1", True), ("1E", True), ("2e-3", True), ("1.", True),
     (-1, False), ("-1", False), ("1.5.5", False), ("Gi", False), ("1GB", False), ("", False),
     ("1 Gi", False), ("0x10", False), ("1" * 65, False), (0.5, False), (True, False),
     ("1.5e3M", False), (None, False)],
)  # fmt: skip
def test_quantities_are_checked_by_the_schema(quantity: Any, ok: bool) -> None:
    """resource.Quantity's syntax, never negative; an int-or-string in the CRD (a fraction is
    written as a string), refused by the schema on every Kubernetes."""
    import re

    resource = copy.deepcopy(base())
    resource["spec"]["prefill"]["resources"] = {"limits": {"cpu": quantity}}
    assert (pydantic_error(resource) == "") == ok, pydantic_error(resource)
    schema = openapi_schema()["properties"]["spec"]["properties"]["prefill"]["properties"]
    values = schema["resources"]["properties"]["limits"]["additionalProperties"]
    assert values["x-kubernetes-int-or-string"] is True
    if isinstance(quantity, bool) or not isinstance(quantity, int | str):
        schema_ok = False
    elif isinstance(quantity, int):
        schema_ok = quantity >= values["minimum"]
    else:
        schema_ok = len(quantity) <= values["maxLength"] and bool(
            re.search(values["pattern"], quantity)
        )
    assert schema_ok == ok


@pytest.mark.parametrize(
    ("path", "ok"),
    [("/data", True), ("/a/b.c/.hidden/...", True), ("/a..b", True), ("/a b", True),
     ("/", False), ("", False), ("data", False), ("/data/", False), ("//data", False),
     ("/a//b", False), ("/a/./b", False), ("/a/..", False), ("/.", False),
     ("/" + "a" * 4095, True), ("/" + "a" * 4096, False)],
)  # fmt: skip
def test_mount_paths_are_absolute_and_plain(path: str, ok: bool) -> None:
    """A mountPath is compared with the operator's as a string: the schema keeps it plain (no
    '.', '..' or empty part), so '/dev/./shm' cannot slip past the rule for /dev/shm."""
    import re

    resource = copy.deepcopy(base())
    _set("spec.decode.volumes", [{"name": "v", "emptyDir": {}}])(resource)
    _set("spec.decode.volumeMounts", [{"name": "v", "mountPath": path}])(resource)
    assert (pydantic_error(resource) == "") == ok, pydantic_error(resource)
    schema = openapi_schema()["properties"]["spec"]["properties"]["decode"]["properties"]
    paths = schema["volumeMounts"]["items"]["properties"]["mountPath"]
    assert (len(path) <= paths["maxLength"] and bool(re.search(paths["pattern"], path))) == ok


@pytest.mark.parametrize(
    ("field", "value", "ok"),
    [("serviceAccountName", "llm-runtime", True), ("serviceAccountName", "a.b-c", True),
     ("serviceAccountName", "", True), ("serviceAccountName", "LLM", False),
     ("serviceAccountName", "a_b", False), ("serviceAccountName", "-a", False),
     ("serviceAccountName", "a" * 253, True), ("serviceAccountName", "a" * 254, False),
     ("priorityClassName", "system-node-critical", True), ("priorityClassName", "high.", False),
     ("priorityClassName", "High", False)],
)  # fmt: skip
def test_account_and_priority_class_names_are_dns_subdomains(
    field: str, value: str, ok: bool
) -> None:
    """Kubernetes checks both as DNS-1123 subdomains; the schema refuses what it would."""
    import re

    for where in ("prefill", "router"):
        resource = copy.deepcopy(base())
        _set(f"spec.{where}.{field}", value)(resource)
        assert (pydantic_error(resource) == "") == ok, (where, pydantic_error(resource))
        schema = openapi_schema()["properties"]["spec"]["properties"][where]["properties"][field]
        schema_ok = len(value) <= schema["maxLength"] and bool(re.search(schema["pattern"], value))
        assert schema_ok == ok


@pytest.mark.parametrize(
    ("field", "items", "message"),
    [("imagePullSecrets", [{"name": "r"}, {"name": "r"}], "imagePullSecrets ['r'] given more"),
     ("volumes", [{"name": "v", "emptyDir": {}}, {"name": "v", "secret": {"secretName": "s"}}],
      "volumes ['v'] given more"),
     ("volumeMounts", [{"name": "v", "mountPath": "/a"}, {"name": "w", "mountPath": "/a"}],
      "volumeMounts mountPath ['/a'] given more")],
)  # fmt: skip
def test_lists_keyed_as_in_a_pod_refuse_duplicates(field: str, items: list, message: str) -> None:
    """The CRD declares them maps on the key Kubernetes keys them by (the API server refuses a
    duplicate); pydantic says the same for ascend-pd render."""
    for where in ("decode", "router"):
        resource = copy.deepcopy(base())
        _set(f"spec.{where}.{field}", items)(resource)
        assert message in pydantic_error(resource), pydantic_error(resource)
        schema = openapi_schema()["properties"]["spec"]["properties"][where]["properties"][field]
        assert schema["x-kubernetes-list-type"] == "map"
    resource = copy.deepcopy(base())
    _set(
        "spec.prefill.podSecurityContext",
        {
            "sysctls": [
                {"name": "kernel.msgmax", "value": "1"},
                {"name": "kernel.msgmax", "value": "2"},
            ]
        },
    )(resource)
    assert "sysctls ['kernel.msgmax'] given more" in pydantic_error(resource)


def test_a_volume_keeps_its_source_as_written() -> None:
    """A volume's source is Kubernetes' to check: kept whole, only its name is the schema's."""
    source = {"csi": {"driver": "nfs.csi.k8s.io", "volumeAttributes": {"server": "x"}}}
    resource = copy.deepcopy(base())
    _set("spec.prefill.volumes", [{"name": "w", **source}])(resource)
    spec = parse_spec(resource["spec"])
    assert spec.prefill.volumes[0].model_dump(by_alias=True) == {"name": "w", **source}
    schema = openapi_schema()["properties"]["spec"]["properties"]["prefill"]["properties"]
    assert schema["volumes"]["items"]["x-kubernetes-preserve-unknown-fields"] is True
