"""The ``PDDeployment`` API (ascendpd.io/v1alpha1) as pydantic models.

These models are the single definition of the API: the CRD schema is generated
from them (``crd.py``), the operator and ``ascend-pd render`` parse every custom
resource with them, and their validators enforce the spec rules of ``rules``
(the same rules the CRD carries as CEL). Field names are camelCase on the wire
and snake_case in Python; every field has a description for ``kubectl explain``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
)
from pydantic.functional_validators import PlainValidator

from ascend_pd_operator.api import host_mounts as hm
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.rules import violations
from ascend_pd_operator.api.rules.limits import (
    CAP_SYS_ADMIN,
    DEFAULT_DRAIN_TIMEOUT_SECONDS,
    DNS_LABEL_PATTERN,
    ENV_NAME_PATTERN,
    EXTENDED_RESOURCE_MAX_LENGTH,
    EXTENDED_RESOURCE_PATTERN,
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    MAX_DNS_SUBDOMAIN_LENGTH,
    MAX_DRAIN_TIMEOUT_SECONDS,
    MAX_ENV,
    MAX_ENV_NAME_LENGTH,
    MAX_HCCL_CONNECT_TIMEOUT_SECONDS,
    MAX_LABEL_KEY_LENGTH,
    MAX_LATENCY_MILLISECONDS,
    MAX_MAP_ENTRIES,
    MAX_NAME_PART_LENGTH,
    MAX_PATH_LENGTH,
    MAX_PLACEMENT_DOMAINS,
    MAX_PLANNER_SECONDS,
    MAX_POD_ANNOTATIONS_BYTES,
    MAX_POD_LIST,
    MAX_QUANTITY_LENGTH,
    MAX_RATIO_LENGTH,
    MAX_REPLICAS,
    MAX_SHARE_LENGTH,
    MIN_HCCL_CONNECT_TIMEOUT_SECONDS,
    MIN_VOLCANO_TIER,
    MOUNT_PATH_PATTERN,
    OPTIONAL_DNS_SUBDOMAIN_PATTERN,
    OWNED_ANNOTATIONS,
    OWNED_ENV,
    OWNED_ROUTER_MOUNTS,
    OWNED_RUNTIME_MOUNTS,
    OWNED_VOLUMES,
    QUALIFIED_NAME,
    QUANTITY,
    QUANTITY_PATTERN,
    RATIO,
    RATIO_PATTERN,
    SHARE,
    SHARE_PATTERN,
    SYSCTL_NAME_PATTERN,
    UNIT_SHARE_PATTERN,
)
from ascend_pd_operator.api.rules.pod import is_quantity

# The API's identity is vocabulary (owner references name it): naming holds it, api serves it.
from ascend_pd_operator.api.scheduling import Affinity, Toleration
from ascend_pd_operator.api.spec_model import SpecModel
from ascend_pd_operator.api.vocabulary import API_VERSION as API_VERSION
from ascend_pd_operator.api.vocabulary import GROUP as GROUP
from ascend_pd_operator.api.vocabulary import KIND as KIND
from ascend_pd_operator.api.vocabulary import SCALER_KIND as SCALER_KIND
from ascend_pd_operator.api.vocabulary import VERSION as VERSION
from ascend_pd_runtime import env_contract as ec
from ascend_pd_runtime.layout import SpeculativeAlgorithm

# The API's identity is vocabulary (owner references name it); the models serve it.

PLURAL = "pddeployments"
SHORT_NAMES = ("pdd",)
SCALER_PLURAL = "pdrolescalers"
SCALER_SHORT_NAMES = ("pdrs",)

Role = Literal["prefill", "decode"]
ROLES: tuple[Role, Role] = ("prefill", "decode")


_Model = SpecModel


def _sub(cls: type[BaseModel], description: str) -> Any:
    """A nested object with all-default fields: defaults to ``{}`` in the CRD as well."""
    return Field(default_factory=cls, description=description, json_schema_extra={"default": {}})


def _list(description: str, **kwargs: Any) -> Any:
    """A list defaulting to ``[]`` in the CRD too, so CEL rules can read it unguarded."""
    extra = {"default": [], **kwargs.pop("json_schema_extra", {})}
    return Field(default_factory=list, description=description, json_schema_extra=extra, **kwargs)


#: A label value: a name of at most 63 characters, or empty (Kubernetes' label syntax).
LabelValue = Annotated[str, Field(max_length=MAX_NAME_PART_LENGTH, pattern=LABEL_VALUE_PATTERN)]
#: An annotation value: any text; the bound is the annotations' total (a rule of ``rules``).
AnnotationValue = Annotated[str, Field(max_length=MAX_POD_ANNOTATIONS_BYTES)]


def _quantity(value: Any) -> int | str:
    if not is_quantity(value):
        raise ValueError(f"must be a resource quantity: {QUANTITY}")
    return value  # type: ignore[no-any-return]


#: A resource quantity: an integer, or a string as Kubernetes writes one. In the CRD an
#: int-or-string like Kubernetes' own (a fraction is written as a string).
Quantity = Annotated[
    int | str,
    PlainValidator(_quantity),
    WithJsonSchema({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
        "minimum": 0,
        "maxLength": MAX_QUANTITY_LENGTH,
        "pattern": QUANTITY_PATTERN,
    }),
]  # fmt: skip


class ResourceRequirements(_Model):
    """Container resources, as in a pod (core/v1 ResourceRequirements, without claims)."""

    requests: dict[str, Quantity] = Field(
        default_factory=dict,
        max_length=MAX_MAP_ENTRIES,
        description=f"Resources the container is scheduled with: name to quantity ({QUANTITY}).",
        json_schema_extra={"default": {}},
    )
    limits: dict[str, Quantity] = Field(
        default_factory=dict,
        max_length=MAX_MAP_ENTRIES,
        description=f"Most of each resource the container may use: name to quantity ({QUANTITY}).",
        json_schema_extra={"default": {}},
    )

    def manifest(self) -> Json:
        """The pod's ``resources``: only the maps that hold something."""
        return self.model_dump(by_alias=True, exclude_defaults=True)


# --- model ----------------------------------------------------------------------------


class ModelConfig(_Model):
    """Model facts given inline, so no inspection is needed."""

    architecture: str = Field("", description="Architecture, e.g. DeepseekV3ForCausalLM.")
    num_hidden_layers: int = Field(
        ..., ge=1, description="Target (non-draft) layers: config.json num_hidden_layers."
    )
    num_nextn_predict_layers: int = Field(
        0, ge=0, description="MTP draft layers: config.json num_nextn_predict_layers."
    )
    kv_lora_rank: int = Field(
        0, ge=0, description="MLA latent width: config.json kv_lora_rank; 0 for MHA models."
    )
    qk_rope_head_dim: int = Field(
        0, ge=0, description="MLA rope width: config.json qk_rope_head_dim (required for MLA)."
    )
    index_head_dim: int = Field(
        0,
        ge=0,
        description="DSA indexer width (config.json index_head_dim); > 0 adds the index_k "
        "buffer group.",
    )

    def to_config_json(self) -> Json:
        """The equivalent ``config.json`` subset, for the layout core's parser."""
        raw: Json = {
            "num_hidden_layers": self.num_hidden_layers,
            "num_nextn_predict_layers": self.num_nextn_predict_layers,
        }
        if self.architecture:
            raw["architectures"] = [self.architecture]
        if self.kv_lora_rank:
            raw["kv_lora_rank"] = self.kv_lora_rank
            raw["qk_rope_head_dim"] = self.qk_rope_head_dim
            if self.index_head_dim:
                raw["index_head_dim"] = self.index_head_dim
        return raw


class ConfigMapKeyRef(_Model):
    """A key of a ConfigMap in the PDDeployment's namespace holding config.json."""

    name: str = Field(..., min_length=1, max_length=253, description="ConfigMap name.")
    key: str = Field("config.json", min_length=1, description="Key holding config.json.")


class PVCSource(_Model):
    """A PersistentVolumeClaim holding the model."""

    claim_name: str = Field(..., min_length=1, description="PersistentVolumeClaim name.")
    read_only: bool = Field(True, description="Mount read-only.")


class HostPathSource(_Model):
    """A directory on every node holding the model."""

    path: str = Field(..., min_length=1, description="Directory on the node.")
    type: str = Field("Directory", description="hostPath type (Directory, ...).")


class ModelVolume(_Model):
    """Where the model files come from; exactly one source."""

    persistent_volume_claim: PVCSource | None = Field(
        None, description="A PersistentVolumeClaim holding the model."
    )
    host_path: HostPathSource | None = Field(
        None, description="A node directory holding the model."
    )


class ModelSpec(_Model):
    """The model to serve."""

    name: str = Field(..., min_length=1, description="Served model name (the API's model).")
    path: str = Field(
        ...,
        pattern=r"^/",
        # PATH_MAX, and a bound the CEL cost estimate needs (volumeMounts are compared to it).
        max_length=MAX_PATH_LENGTH,
        description="Model directory inside the container; config.json lives here.",
    )
    volume: ModelVolume | None = Field(
        None, description="Volume that holds the model, mounted at path; none: in the image."
    )
    config: ModelConfig | None = Field(
        None, description="Model facts given inline; else configMapRef; else inspected."
    )
    config_map_ref: ConfigMapKeyRef | None = Field(
        None, description="ConfigMap key with config.json; used when config is not given."
    )


# --- runtime and speculative ----------------------------------------------------------


class Runtime(_Model):
    """The serving runtime image and the SGLang it carries."""

    image: str = Field(..., min_length=1, description="ascend-pd runtime image.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", description="Image pull policy of runtime containers."
    )
    sglang_version: str = Field(
        "0.5.23",
        max_length=64,
        description="SGLang version in the image; the KV layout rules depend on it.",
    )
    transfer_backend: Literal["ascend", "mooncake"] = Field(
        "ascend", description="KV transfer backend (SGLang --disaggregation-transfer-backend)."
    )


class Speculative(_Model):
    """Speculative decoding with the model's MTP (draft) layers."""

    algorithm: SpeculativeAlgorithm = Field(
        "NONE", description="SGLang --speculative-algorithm; NONE disables it."
    )
    num_steps: int = Field(3, ge=1, le=64, description="--speculative-num-steps.")
    eagle_topk: int = Field(1, ge=1, le=64, description="--speculative-eagle-topk.")
    num_draft_tokens: int = Field(4, ge=1, le=256, description="--speculative-num-draft-tokens.")
    roles: list[Role] = Field(
        default_factory=lambda: list(ROLES),
        min_length=1,
        max_length=2,
        description="Roles that run speculative decoding (and hold draft KV layers).",
        json_schema_extra={"default": ["prefill", "decode"], "x-kubernetes-list-type": "set"},
    )

    @field_validator("roles")
    @classmethod
    def _unique_roles(cls, roles: list[Role]) -> list[Role]:
        # The CRD declares a set, so the API server refuses duplicates too.
        if len(set(roles)) != len(roles):
            raise ValueError(f"roles {roles} has duplicates; list each role once")
        return roles


# --- roles ----------------------------------------------------------------------------


class Parallelism(_Model):
    """Parallel sizes of one instance."""

    tensor: int = Field(1, ge=1, le=1024, description="Tensor parallel size (--tp-size).")
    pipeline: int = Field(1, ge=1, le=64, description="Pipeline parallel size (--pp-size).")
    data: int = Field(1, ge=1, le=1024, description="Data parallel size (--dp-size).")


class _KeyRef(_Model):
    """A key of a ConfigMap or Secret in the namespace (core/v1 ConfigMapKeySelector,
    SecretKeySelector)."""

    name: str | None = Field(None, description="The ConfigMap's or Secret's name.")
    key: str = Field(..., min_length=1, description="The key whose value is taken.")
    optional: bool | None = Field(
        None, description="true: the variable is unset if the key is missing."
    )


class ConfigMapKeySelector(_KeyRef):
    """A key of a ConfigMap in the namespace (core/v1 ConfigMapKeySelector)."""


class SecretKeySelector(_KeyRef):
    """A key of a Secret in the namespace (core/v1 SecretKeySelector)."""


class ObjectFieldSelector(_Model):
    """A field of the pod (core/v1 ObjectFieldSelector)."""

    api_version: str | None = Field(None, description="Schema of fieldPath; unset: v1.")
    field_path: str = Field(
        ..., min_length=1, description="The field, e.g. metadata.name or status.podIP."
    )


class ResourceFieldSelector(_Model):
    """A resource of a container of the pod (core/v1 ResourceFieldSelector)."""

    container_name: str | None = Field(None, description="The container; unset: this one.")
    resource: str = Field(..., min_length=1, description="The resource, e.g. limits.memory.")
    divisor: Quantity | None = Field(None, description=f"The unit: {QUANTITY}; unset: 1.")


class EnvVarSource(_Model):
    """Where an env var's value comes from (core/v1 EnvVarSource): exactly one source."""

    field_ref: ObjectFieldSelector | None = Field(None, description="A field of the pod.")
    resource_field_ref: ResourceFieldSelector | None = Field(
        None, description="A resource of a container."
    )
    config_map_key_ref: ConfigMapKeySelector | None = Field(
        None, description="A key of a ConfigMap."
    )
    secret_key_ref: SecretKeySelector | None = Field(None, description="A key of a Secret.")


class EnvVar(_Model):
    """An extra env var of the runtime container, as in a pod (core/v1 EnvVar)."""

    name: str = Field(
        ...,
        max_length=MAX_ENV_NAME_LENGTH,
        pattern=ENV_NAME_PATTERN,
        description="Variable name: letters, digits, '_', '-', '.', not starting with a digit.",
    )
    value: str = Field("", description="Value; $(VAR) references expand as in any pod.")
    value_from: EnvVarSource | None = Field(
        None,
        description="Source of the value instead of value (fieldRef, resourceFieldRef, "
        "configMapKeyRef or secretKeyRef: exactly one), passed to the pod as given.",
    )


# --- pod fields a platform needs (escape hatches) -------------------------------------

#: The range Kubernetes allows for user and group IDs.
MAX_ID = 2147483647
Id = Annotated[int, Field(ge=0, le=MAX_ID)]


def _unique(values: list[Any], key: str, what: str) -> list[Any]:
    """Refuse duplicate ``key``s; the CRD declares the list a map on ``key``, so the API
    server refuses them too (pydantic speaks for ``ascend-pd render``)."""
    seen = [getattr(v, key) for v in values]
    duplicates = sorted({k for k in seen if seen.count(k) > 1})
    if duplicates:
        raise ValueError(f"{what} {duplicates} given more than once; list each once")
    return values


def _map_list(description: str, key: str, max_length: int = MAX_POD_LIST) -> Any:
    """A list of objects keyed by ``key`` (as in a pod), at most ``max_length`` of them."""
    return _list(
        description,
        max_length=max_length,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key]},
    )


def _dns_subdomain(description: str) -> Any:
    return Field(
        "",
        max_length=MAX_DNS_SUBDOMAIN_LENGTH,
        pattern=OPTIONAL_DNS_SUBDOMAIN_PATTERN,
        description=f"{description} A DNS subdomain: lowercase letters, digits, '-' and '.', "
        f"a letter or digit at both ends, at most {MAX_DNS_SUBDOMAIN_LENGTH} characters.",
    )


class LocalObjectReference(_Model):
    """A Secret in the PDDeployment's namespace (core/v1 LocalObjectReference)."""

    name: str = Field(
        ...,
        min_length=1,
        max_length=MAX_DNS_SUBDOMAIN_LENGTH,
        pattern=OPTIONAL_DNS_SUBDOMAIN_PATTERN,
        description="Secret name (a DNS subdomain).",
    )


class Volume(_Model):
    """A pod volume (core/v1 Volume): its name and one volume source with that source's
    fields (configMap, secret, emptyDir, persistentVolumeClaim, hostPath, nfs, csi,
    projected, ...), passed to the pods as given."""

    # The source is any of Kubernetes' volume sources, kept as written: the API server checks
    # it when the operator applies the workload (a bad one is ApplyFailed, naming it).
    model_config = ConfigDict(extra="allow")

    name: str = Field(
        ...,
        max_length=MAX_NAME_PART_LENGTH,
        pattern=DNS_LABEL_PATTERN,
        description="Volume name (a DNS label: lowercase letters, digits and '-', at most 63), "
        "unique in the list; volumeMounts mount it by this name.",
    )


class VolumeMount(_Model):
    """Where the container mounts one of the volumes (core/v1 VolumeMount)."""

    name: str = Field(
        ..., max_length=MAX_NAME_PART_LENGTH, pattern=DNS_LABEL_PATTERN,
        description="The volume to mount: a name in volumes.",
    )  # fmt: skip
    mount_path: str = Field(
        ...,
        max_length=MAX_PATH_LENGTH,
        pattern=MOUNT_PATH_PATTERN,
        description="Absolute path in the container, written plainly: no empty, '.' or '..' "
        "part, no trailing '/'. Unique in the list.",
    )
    read_only: bool = Field(False, description="Mount read-only.")
    sub_path: str = Field(
        "", max_length=MAX_PATH_LENGTH,
        description="Path within the volume to mount instead of its root; empty: the root.",
    )  # fmt: skip
    sub_path_expr: str = Field(
        "", max_length=MAX_PATH_LENGTH,
        description="subPath with $(VAR) references to the container's env expanded; "
        "refused together with subPath.",
    )  # fmt: skip
    mount_propagation: Literal["None", "HostToContainer", "Bidirectional"] | None = Field(
        None,
        description="How mounts propagate between host and container; Bidirectional is "
        "refused unless containerSecurityContext.privileged is true. Unset: None.",
    )


class SELinuxOptions(_Model):
    """SELinux labels (core/v1 SELinuxOptions)."""

    user: str = Field("", max_length=MAX_PATH_LENGTH, description="SELinux user label.")
    role: str = Field("", max_length=MAX_PATH_LENGTH, description="SELinux role label.")
    type: str = Field("", max_length=MAX_PATH_LENGTH, description="SELinux type label.")
    level: str = Field("", max_length=MAX_PATH_LENGTH, description="SELinux level label.")


class SeccompProfile(_Model):
    """The seccomp profile (core/v1 SeccompProfile)."""

    type: Literal["RuntimeDefault", "Unconfined", "Localhost"] = Field(
        ..., description="RuntimeDefault, Unconfined, or Localhost (with localhostProfile)."
    )
    localhost_profile: str = Field(
        "", max_length=MAX_PATH_LENGTH,
        description="The profile's path, relative to the kubelet's seccomp directory: "
        "required with type Localhost, refused with any other type.",
    )  # fmt: skip


class Sysctl(_Model):
    """A namespaced sysctl of the pod (core/v1 Sysctl)."""

    name: str = Field(
        ..., max_length=MAX_DNS_SUBDOMAIN_LENGTH, pattern=SYSCTL_NAME_PATTERN,
        description="Sysctl name, e.g. kernel.shm_rmid_forced.",
    )  # fmt: skip
    value: str = Field(..., max_length=MAX_PATH_LENGTH, description="Its value.")


class Capabilities(_Model):
    """Linux capabilities added to and dropped from the container (core/v1 Capabilities)."""

    add: list[Annotated[str, Field(max_length=MAX_NAME_PART_LENGTH)]] = _list(
        "Capabilities to add, e.g. IPC_LOCK.", max_length=MAX_POD_LIST
    )
    drop: list[Annotated[str, Field(max_length=MAX_NAME_PART_LENGTH)]] = _list(
        "Capabilities to drop, e.g. ALL.", max_length=MAX_POD_LIST
    )


class PodSecurityContext(_Model):
    """The pod's securityContext (core/v1 PodSecurityContext, fields every supported
    Kubernetes has, without windowsOptions). Given fields replace the operator's defaults one by one
    (the router's: docs/security.md)."""

    run_as_user: Id | None = Field(
        None, description="UID the containers run as; unset: the image's."
    )
    run_as_group: Id | None = Field(
        None, description="GID the containers run as; unset: the image's."
    )
    run_as_non_root: bool | None = Field(
        None, description="Refuse to start a container whose user is root (SGLang images run "
        "as root: give runAsUser too)."
    )  # fmt: skip
    fs_group: Id | None = Field(
        None, description="Group owning the pod's volumes, added to every container."
    )
    fs_group_change_policy: Literal["OnRootMismatch", "Always"] | None = Field(
        None, description="When fsGroup ownership is applied: OnRootMismatch or Always."
    )
    supplemental_groups: list[Id] = _list(
        "Groups added to every container's first process.", max_length=MAX_POD_LIST
    )
    se_linux_options: SELinuxOptions | None = Field(None, description="SELinux labels.")
    seccomp_profile: SeccompProfile | None = Field(None, description="Seccomp profile.")
    sysctls: list[Sysctl] = _map_list(
        "Namespaced sysctls of the pod. On runtime pods in the host network "
        "(ascend.hostNetwork) no net.* sysctl: it would be the node's, and the kubelet refuses "
        "the pod.",
        "name",
    )

    @field_validator("sysctls")
    @classmethod
    def _each_sysctl_once(cls, sysctls: list[Sysctl]) -> list[Sysctl]:
        return _unique(sysctls, "name", "sysctls")


class ContainerSecurityContext(_Model):
    """The container's securityContext (core/v1 SecurityContext, fields every supported
    Kubernetes has, without procMount and windowsOptions); it overrides the pod's. Given
    fields replace the operator's defaults one by one (docs/security.md)."""

    run_as_user: Id | None = Field(None, description="UID the container runs as.")
    run_as_group: Id | None = Field(None, description="GID the container runs as.")
    run_as_non_root: bool | None = Field(
        None, description="Refuse to start the container if its user is root."
    )
    read_only_root_filesystem: bool | None = Field(
        None, description="Mount the image read-only (SGLang writes caches: give it "
        "writable volumes)."
    )  # fmt: skip
    allow_privilege_escalation: bool | None = Field(
        None, description="Whether a process may gain privileges (no_new_privs); false "
        f"contradicts privileged true and an added {CAP_SYS_ADMIN}."
    )  # fmt: skip
    privileged: bool | None = Field(None, description="Run the container privileged.")
    capabilities: Capabilities | None = Field(None, description="Capabilities to add and drop.")
    se_linux_options: SELinuxOptions | None = Field(None, description="SELinux labels.")
    seccomp_profile: SeccompProfile | None = Field(None, description="Seccomp profile.")


def dump(obj: BaseModel | None) -> Json:
    """A pod field as Kubernetes takes it: only what was given."""
    if obj is None:
        return {}
    return obj.model_dump(by_alias=True, exclude_defaults=True)


class RoleScaling(_Model):
    """Who decides a role's instance count, and its bounds."""

    mode: Literal["Static", "External", "Planner"] = Field(
        "Static",
        description="Static: replicas rules. External: the role's PDRoleScaler "
        "<name>-<role> rules (scale it with kubectl scale, an HPA or KEDA); replicas only "
        "seeds it. Planner: as External, and the operator's PD planner sets the scaler from "
        "the leaders' SGLang metrics. Switching from Static seeds the scaler with the current "
        "count, so nothing drains.",
    )
    min_replicas: int = Field(
        1, ge=0, le=MAX_REPLICAS,
        description="The fewest instances External or Planner may ask for; 0 lets the "
        "role (and then the other role too) scale to zero.",
    )  # fmt: skip
    max_replicas: int = Field(
        MAX_REPLICAS, ge=1, le=MAX_REPLICAS,
        description="The most instances External or Planner may ask for.",
    )  # fmt: skip


class RatioBounds(_Model):
    """Bounds of prefill instances / decode instances, as decimal strings."""

    min: str | None = Field(
        None, max_length=MAX_RATIO_LENGTH, pattern=RATIO_PATTERN,
        description=f"The lowest prefill/decode ratio, e.g. \"0.25\": {RATIO}. Unset: none.",
    )  # fmt: skip
    max: str | None = Field(
        None, max_length=MAX_RATIO_LENGTH, pattern=RATIO_PATTERN,
        description=f"The highest prefill/decode ratio, e.g. \"1\": {RATIO}. Unset: none.",
    )  # fmt: skip


class PlannerSettings(_Model):
    """The built-in PD planner's targets and pacing, for the roles in scaling.mode Planner.
    Targets are per Ready instance, read from each instance leader's SGLang /metrics; the
    defaults suit most deployments."""

    interval_seconds: int = Field(
        15, ge=1, le=MAX_PLANNER_SECONDS,
        description="How often the planner reads the leaders' metrics and decides.",
    )  # fmt: skip
    stabilization_window_seconds: int = Field(
        300, ge=0, le=MAX_PLANNER_SECONDS,
        description="A role steps down by one instance only after every reading of this "
        "long asked for fewer (an operator restart starts the window over). Scale-up is "
        "immediate.",
    )  # fmt: skip
    tolerance: str = Field(
        "0.1", max_length=MAX_SHARE_LENGTH, pattern=SHARE_PATTERN,
        description=f"No change while every signal is within this share of its target: {SHARE}.",
    )  # fmt: skip
    max_step_up: int = Field(
        2, ge=1, le=MAX_REPLICAS, description="The most instances one decision adds."
    )
    prefill_queue_target: str = Field(
        "4", max_length=MAX_RATIO_LENGTH, pattern=RATIO_PATTERN,
        description="Prefill: requests waiting per instance (sglang:num_queue_reqs), as "
        f"{RATIO}; above 0.",
    )  # fmt: skip
    decode_token_usage_target: str = Field(
        "0.7", max_length=MAX_SHARE_LENGTH, pattern=UNIT_SHARE_PATTERN,
        description="Decode: the share of the KV pool in use (sglang:token_usage), a "
        "decimal string in (0, 1], at most 3 decimals: room left for running requests to "
        "grow.",
    )  # fmt: skip
    decode_prealloc_queue_target: str = Field(
        "2", max_length=MAX_RATIO_LENGTH, pattern=RATIO_PATTERN,
        description="Decode: requests waiting for KV memory per instance "
        f"(sglang:num_decode_prealloc_queue_reqs), as {RATIO}; above 0.",
    )  # fmt: skip
    ttft_target_milliseconds: int | None = Field(
        None, ge=1, le=MAX_LATENCY_MILLISECONDS,
        description="Prefill: the time to first token at latencyQuantile, from "
        "sglang:time_to_first_token_seconds. Unset: not used.",
    )  # fmt: skip
    itl_target_milliseconds: int | None = Field(
        None, ge=1, le=MAX_LATENCY_MILLISECONDS,
        description="Decode: the inter-token latency at latencyQuantile, from "
        "sglang:inter_token_latency_seconds. Unset: not used.",
    )  # fmt: skip
    latency_quantile: str = Field(
        "0.9", max_length=MAX_SHARE_LENGTH, pattern=SHARE_PATTERN,
        description=f"The quantile the latency targets are read at: {SHARE}; above 0.",
    )  # fmt: skip


class Scaling(_Model):
    """Deployment-wide scaling: the P:D ratio bounds, the drain of removed instances and
    the built-in planner."""

    prefill_per_decode: RatioBounds | None = Field(
        None,
        description="Bounds of the ratio prefill instances / decode instances. After each "
        "role's count is clamped to its [minReplicas, maxReplicas] (a Static role's to its "
        "replicas), a ratio below min raises prefill (at its max: lowers decode) and a ratio "
        "above max raises decode (at its max: lowers prefill); both roles reach zero "
        "together, a lone zero is raised to 1. The counts used go to status "
        "(status.roles.<role>.effectiveReplicas), never back into a scaler's spec; the "
        "RatioConstrained condition and an Event say what changed.",
    )
    drain_timeout_seconds: int | None = Field(
        None, ge=0, le=MAX_DRAIN_TIMEOUT_SECONDS,
        description="How long a removed instance may finish its in-flight requests: the "
        f"grace period its pods are deleted with ({DEFAULT_DRAIN_TIMEOUT_SECONDS} when unset; "
        "SGLang ends on SIGTERM once the requests it holds are done). Set, it also goes "
        "into the runtime pods: their terminationGracePeriodSeconds follows it and a "
        "preStop hook keeps a leader serving until the router has dropped it and a worker "
        "until its leader is gone. Setting or changing it therefore updates every instance "
        "(a rollout); unset, the pods keep a 60 s grace period and no hook, so that an "
        "operator upgrade restarts nothing.",
    )  # fmt: skip

    @property
    def drain_grace_seconds(self) -> int:
        """The grace period of a drain's deletions."""
        if self.drain_timeout_seconds is None:
            return DEFAULT_DRAIN_TIMEOUT_SECONDS
        return self.drain_timeout_seconds

    planner: PlannerSettings = _sub(
        PlannerSettings,
        "The built-in PD planner (roles in scaling.mode Planner): what it aims for and how "
        "fast it moves.",
    )


class _PodFields(_Model):
    """What a role and the router share of the pod fields: each secret, volume and mount
    path at most once (their fields, with their own descriptions, are the subclasses')."""

    @field_validator("image_pull_secrets", check_fields=False)
    @classmethod
    def _each_secret_once(cls, secrets: list[LocalObjectReference]) -> list[LocalObjectReference]:
        return _unique(secrets, "name", "imagePullSecrets")

    @field_validator("volumes", check_fields=False)
    @classmethod
    def _each_volume_once(cls, volumes: list[Volume]) -> list[Volume]:
        return _unique(volumes, "name", "volumes")

    @field_validator("volume_mounts", check_fields=False)
    @classmethod
    def _each_mount_path_once(cls, mounts: list[VolumeMount]) -> list[VolumeMount]:
        return _unique(mounts, "mount_path", "volumeMounts mountPath")


class RoleSpec(_PodFields):
    """One role (prefill or decode): independent instances of tensor × pipeline NPUs."""

    replicas: int = Field(
        1, ge=0, le=MAX_REPLICAS, description="Independent instances of this role."
    )
    scaling: RoleScaling = _sub(
        RoleScaling,
        "Who decides the number of instances: replicas (Static), or the role's "
        "PDRoleScaler <name>-<role> (External: an HPA, KEDA or kubectl scale; Planner: the "
        "operator's PD planner).",
    )
    parallelism: Parallelism = _sub(Parallelism, "Parallel sizes of every instance.")
    layer_partition: list[int] = _list(
        "Layers per pipeline stage (SGLANG_PP_LAYER_PARTITION); empty: SGLang's default.",
        max_length=64,
        json_schema_extra={"items": {"type": "integer", "minimum": 1}},
    )
    devices_per_node: int = Field(8, ge=1, le=64, description="NPUs per pod; one pod per node.")
    resources: ResourceRequirements = _sub(
        ResourceRequirements,
        "Container resources; each one given here wins over the operator's default "
        "(defaultResources). The NPUs (ascend.resourceName, devicesPerNode of them) are added "
        "as request and limit, and may not be given here.",
    )
    default_resources: bool = Field(
        True,
        description="Give the runtime container CPU and memory requests where resources "
        "gives none: 2 CPUs per NPU plus 2, and for memory, per NPU, the weights its rank "
        "reads through host memory while loading plus 4 GiB, plus 4 GiB (docs/models.md). "
        "No CPU or memory limit. false: only resources and the NPUs.",
    )
    shm_size_limit: Quantity = Field(
        "16Gi",
        description=f"sizeLimit of the pods' /dev/shm (a memory-backed emptyDir, counted in "
        f"the pod's memory): {QUANTITY}.",
    )
    node_selector: dict[str, LabelValue] = Field(
        default_factory=dict,
        max_length=MAX_MAP_ENTRIES,
        description=f"Pod nodeSelector (the model inspector's too). Keys are label keys: "
        f"{QUALIFIED_NAME}, the prefix in lowercase; values are such names, or empty.",
    )
    pod_annotations: dict[str, AnnotationValue] = Field(
        default_factory=dict,
        max_length=MAX_MAP_ENTRIES,
        description="Extra annotations on this role's pods; changing them rolls the role's "
        f"instances like any template change. Keys are annotation keys: {QUALIFIED_NAME}. "
        f"Keys and values together at most {MAX_POD_ANNOTATIONS_BYTES // 1024} KiB. Refused, "
        f"the operator's: {OWNED_ANNOTATIONS}.",
    )
    tolerations: list[Toleration] = _list(
        "Pod tolerations (the model inspector's too), passed to the pods as given.",
        max_length=MAX_POD_LIST,
    )
    affinity: Affinity | None = Field(
        None, description="Pod affinity, passed to the pods as given (with the placement's "
        "pin added, spec.placement)."
    )  # fmt: skip
    env: list[EnvVar] = _list(
        f"Extra container env vars. Refused, the operator's: {OWNED_ENV}.",
        max_length=MAX_ENV,
    )
    extra_args: list[str] = _list(
        "Extra SGLang server arguments; may not set flags the operator manages.",
        max_length=64,
        json_schema_extra={"items": {"type": "string", "maxLength": 256}},
    )
    image_pull_secrets: list[LocalObjectReference] = _map_list(
        "Secrets in the namespace to pull the runtime image with (a private registry). The "
        "model inspector, a Job of the runtime image, uses prefill's.",
        "name",
    )
    service_account_name: str = _dns_subdomain(
        "ServiceAccount of this role's pods (for its imagePullSecrets or the policies bound "
        "to it); empty: the namespace's default. Its token is not mounted: the runtime uses "
        "no Kubernetes API. The model inspector uses prefill's."
    )
    priority_class_name: str = _dns_subdomain(
        "PriorityClass of this role's pods and PodGroups; empty: scheduling.priorityClassName. "
        "The model inspector uses prefill's."
    )
    pod_security_context: PodSecurityContext | None = Field(
        None,
        description="securityContext of this role's pods (and prefill's of the model "
        "inspector); unset: none. The pods still need a namespace that admits the host "
        "network and the driver's hostPath (docs/security.md).",
    )
    container_security_context: ContainerSecurityContext | None = Field(
        None,
        description="securityContext of the runtime container (and prefill's of the model "
        "inspector's), field by field over the operator's defaults for the runtime container: "
        "allowPrivilegeEscalation false, capabilities drop NET_RAW, seccompProfile "
        "RuntimeDefault. The NPUs come from the device plugin, not from privileges.",
    )
    volumes: list[Volume] = _map_list(
        "Extra volumes of this role's pods (and prefill's of the model inspector: a model on a "
        f"volume of yours is read there too). Refused, the operator's names: {OWNED_VOLUMES}.",
        "name",
    )
    volume_mounts: list[VolumeMount] = _map_list(
        "Where the runtime container (and prefill's of the model inspector) mounts volumes. "
        "Refused at, inside or above the operator's mounts: "
        f"{OWNED_RUNTIME_MOUNTS}, ascend.driverHostPath, and model.path when model.volume is "
        "set (with no model.volume, a volume of yours may hold the model at model.path).",
        "mountPath",
    )

    @property
    def nodes_per_instance(self) -> int:
        return self.parallelism.tensor * self.parallelism.pipeline // self.devices_per_node


class Router(_PodFields):
    """The SGLang router in PD mode in front of all instances."""

    enabled: bool = Field(True, description="Deploy the router.")
    replicas: int = Field(
        2,
        ge=0,
        le=64,
        description="Router replicas, spread over nodes (a preferred pod anti-affinity) with "
        "a PodDisruptionBudget <name>-router (maxUnavailable 1): with 2 or more a node drain "
        "keeps the endpoint answering.",
    )
    image: str = Field("", description="Router image; empty: the runtime image.")
    policy: Literal["cache_aware", "round_robin", "random", "power_of_two"] = Field(
        "cache_aware", description="Routing policy."
    )
    port: int = Field(8000, ge=1, le=65535, description="Router HTTP port (and Service port).")
    resources: ResourceRequirements = _sub(
        ResourceRequirements,
        "Router container resources; each one given here wins over the default (defaultResources).",
    )
    default_resources: bool = Field(
        True,
        description="Give the router container the requests cpu 1 and memory 1Gi and the "
        "limit memory 4Gi where resources gives none of them; false: only resources.",
    )
    node_selector: dict[str, LabelValue] = Field(
        default_factory=dict,
        max_length=MAX_MAP_ENTRIES,
        description=f"Router pod nodeSelector. Keys are label keys: {QUALIFIED_NAME}, the "
        "prefix in lowercase; values are such names, or empty.",
    )
    tolerations: list[Toleration] = _list(
        "Router pod tolerations, passed to the pod as given.", max_length=MAX_POD_LIST
    )
    image_pull_secrets: list[LocalObjectReference] = _map_list(
        "Secrets in the namespace to pull the router image with. With no router.image the "
        "router runs the runtime image: give it the roles' secrets.",
        "name",
    )
    service_account_name: str = _dns_subdomain(
        "ServiceAccount of the router pods; empty: <name>-router, which the operator creates. "
        "The router's service discovery watches pods with its token, so the operator binds "
        "its Role <name>-router (get, list and watch pods in the namespace) to this account "
        "too."
    )
    priority_class_name: str = _dns_subdomain(
        "PriorityClass of the router pods; empty: scheduling.priorityClassName."
    )
    pod_security_context: PodSecurityContext | None = Field(
        None,
        description="securityContext of the router pods, field by field over the "
        "operator's defaults (Pod Security restricted): runAsNonRoot true, runAsUser and "
        "runAsGroup 65532 (a runAsUser or runAsGroup given replaces both; runAsUser 0 drops "
        "runAsNonRoot), seccompProfile RuntimeDefault.",
    )
    container_security_context: ContainerSecurityContext | None = Field(
        None,
        description="securityContext of the router container, field by field over "
        "the operator's defaults: allowPrivilegeEscalation false (not beside privileged or "
        "CAP_SYS_ADMIN), capabilities drop ALL, readOnlyRootFilesystem true with an emptyDir "
        "on /tmp (unless the router's volumeMounts use /tmp).",
    )
    volumes: list[Volume] = _map_list("Extra volumes of the router pods.", "name")
    volume_mounts: list[VolumeMount] = _map_list(
        "Where the router container mounts volumes. Refused at, inside or above the "
        f"operator's mount: {OWNED_ROUTER_MOUNTS}.",
        "mountPath",
    )


class HostMount(_Model):
    """A node path mounted read-only into every runtime container: a well-known one of the
    Ascend software by its name, or one of yours (docs/compatibility.md, "Node
    prerequisites")."""

    name: str = Field(
        ..., max_length=hm.MAX_CUSTOM_NAME_LENGTH, pattern=hm.NAME_PATTERN,
        description=f"A well-known name, {hm.WELL_KNOWN}; or a name of yours (a DNS "
        f"label of at most {hm.MAX_CUSTOM_NAME_LENGTH} characters), which needs hostPath. "
        "Unique in the list; the pod volume is the well-known name's (ascend-firmware, "
        "ascend-hccn-conf, ...) or host-<name>.",
    )  # fmt: skip
    host_path: str = Field(
        "", max_length=MAX_PATH_LENGTH, pattern=f"^$|{MOUNT_PATH_PATTERN}",
        description="The path on the node, absolute and written plainly; empty: the "
        "well-known name's.",
    )  # fmt: skip
    mount_path: str = Field(
        "", max_length=MAX_PATH_LENGTH, pattern=f"^$|{MOUNT_PATH_PATTERN}",
        description="Where the container sees it; empty: hostPath (the same path).",
    )  # fmt: skip
    type: Literal["", "Directory", "File"] = Field(
        "",
        description="The hostPath type the kubelet checks before the pod starts (a missing "
        "path keeps it ContainerCreating); empty: the well-known name's, or no check.",
    )

    def source(self) -> str:
        return hm.host_path(self.name, self.host_path)

    def target(self) -> str:
        return hm.mount_path(self.name, self.host_path, self.mount_path)

    def checked_type(self) -> str:
        return hm.path_type(self.name, self.type)


class Ascend(_Model):
    """Ascend NPU and HCCL settings."""

    resource_name: str = Field(
        "huawei.com/Ascend910",
        max_length=EXTENDED_RESOURCE_MAX_LENGTH,
        pattern=EXTENDED_RESOURCE_PATTERN,
        description="Extended resource name of the NPUs: <domain>/<name>, e.g. "
        "huawei.com/Ascend910.",
    )
    host_network: bool = Field(True, description="Run runtime pods in the host network.")
    driver_host_path: str = Field(
        "/usr/local/Ascend/driver",
        # PATH_MAX, and a bound the CEL cost estimate needs (volumeMounts are compared to it).
        max_length=MAX_PATH_LENGTH,
        description="Ascend driver directory on the nodes, mounted at the same path.",
    )
    hccl_socket_ifname: str = Field("", description="HCCL_SOCKET_IFNAME; empty: HCCL's default.")
    store_port: int = Field(
        24666, ge=1, le=65535, description="Memfabric store port on prefill instance 0's leader."
    )
    transfer_protocol: ec.TransferProtocol = Field(
        "sdma",
        description="How memfabric (transferBackend ascend) moves the KV, as "
        "ASCEND_MF_TRANSFER_PROTOCOL: sdma over the HCCS/UB fabric, only within one domain "
        "(an A2 server, an A3 super-pod); device_rdma over the NPUs' RoCE NICs, across "
        "servers. docs/compatibility.md recommends one per chip: device_rdma on A2, sdma "
        "within an A3 super-pod.",
    )
    hccl_connect_timeout_seconds: int | None = Field(
        None, ge=MIN_HCCL_CONNECT_TIMEOUT_SECONDS, le=MAX_HCCL_CONNECT_TIMEOUT_SECONDS,
        description="HCCL_CONNECT_TIMEOUT of the runtime pods: how long HCCL waits for every "
        "rank of an instance to connect. Raise it when the nodes of an instance load their "
        "weights at uneven speeds, so that the first ready rank does not time out waiting for "
        "the last. Unset: HCCL's own default (120 s), and the pods are left as they were (no "
        "rollout on an operator upgrade); setting or changing it updates every instance. A "
        "role's env entry HCCL_CONNECT_TIMEOUT, if any, wins over it.",
    )  # fmt: skip
    host_mounts: list[HostMount] = _map_list(
        "Node paths of the Ascend software mounted read-only into every runtime container, "
        "beside the driver (driverHostPath): those the node's container runtime does not "
        'inject (docs/compatibility.md, "Node prerequisites"). hostPath volumes: the '
        "namespace must admit them (docs/security.md). Refused at, inside or above one "
        "another, the operator's mounts and a role's volumeMounts. Empty: none.",
        "name",
        max_length=hm.MAX_HOST_MOUNTS,
    )

    @field_validator("host_mounts")
    @classmethod
    def _each_name_once(cls, mounts: list[HostMount]) -> list[HostMount]:
        return _unique(mounts, "name", "hostMounts name")


class Preflight(_Model):
    """The NPU preflight checks the launcher runs in every runtime pod before SGLang starts;
    a failed one ends the container (exit 7) and shows as NPUPreflight=False."""

    devices: bool = Field(
        True, description="The NPU device files (/dev/davinci<N>) hold devicesPerNode "
        "devices, and ASCEND_RT_VISIBLE_DEVICES, if set, selects that many (DeviceMissing)."
    )  # fmt: skip
    hccn_conf: bool = Field(
        True, description="/etc/hccn.conf in the container has an address_<N> for each "
        "device (HccnConfMissing); mount the node's file with a role's volumes."
    )  # fmt: skip
    links: bool = Field(
        True, description="hccn_tool -link -g says UP and -net_health -g says Success for "
        "each device (LinkDown)."
    )  # fmt: skip
    leader: bool = Field(
        True, description="A worker's instance leader answers over TCP at its dist-init "
        "address (LeaderUnreachable)."
    )  # fmt: skip
    store: bool = Field(
        True, description="The memfabric store (prefill instance 0's leader) answers over "
        "TCP (StoreUnreachable)."
    )  # fmt: skip
    network_timeout_seconds: int = Field(
        ec.DEFAULT_PREFLIGHT_TIMEOUT, ge=0, le=ec.MAX_PREFLIGHT_TIMEOUT,
        description="How long the leader and store checks retry before they fail: the "
        "leader's pod may start well after a worker's.",
    )  # fmt: skip

    def checks(self) -> tuple[str, ...]:
        """The checks that are on, by their ``env_contract.PREFLIGHT_CHECKS`` names."""
        on = {"devices": self.devices, "hccnConf": self.hccn_conf, "links": self.links,
              "leader": self.leader, "store": self.store}  # fmt: skip
        return tuple(c for c in ec.PREFLIGHT_CHECKS if on[c])


#: A topology domain: a label value that is not empty.
Domain = Annotated[
    str, Field(min_length=1, max_length=MAX_NAME_PART_LENGTH, pattern=LABEL_VALUE_PATTERN)
]


class Placement(_Model):
    """Where the runtime pods go: into one topology domain (the value of a node label, e.g.
    a super-pod id or a switch), for the whole deployment or for each instance. The operator
    chooses the domain when it creates an instance and pins the instance's StatefulSet to
    it; a running instance is never pinned again, so a change here rolls nothing."""

    topology_key: str = Field(
        ..., min_length=1, max_length=MAX_LABEL_KEY_LENGTH, pattern=LABEL_KEY_PATTERN,
        description="The node label whose value is a node's domain, e.g. a super-pod id "
        f"(A3) or a rack or switch label (A2): {QUALIFIED_NAME}, the prefix in lowercase.",
    )  # fmt: skip
    scope: Literal["Deployment", "Instance", "None"] = Field(
        "Deployment",
        description="Deployment: every prefill and decode instance in one domain. Instance: "
        "each instance's pods in one domain, instances in any. None: no domain is chosen; "
        "with domains, the pods stay on nodes of those domains.",
    )
    mode: Literal["Required", "Preferred"] = Field(
        "Required",
        description="Required: an instance is created only once a domain can hold it, and "
        "its pods may run only there. Preferred: the scheduler prefers the chosen domain; "
        "when none can hold the instance it is created unpinned.",
    )
    exclusive: bool = Field(
        False,
        description="No other PDDeployment in the chosen domains: a domain with another "
        "PDDeployment's pods is not chosen, and this deployment's pods are labelled so "
        "that others keep out of its domains (needs scope Deployment or Instance).",
    )
    # No CRD default: Volcano reads a networkTopology without a tier differently by release
    # (v1.12 and v1.13 default it to 1, later ones bound nothing), so none is written
    # unless the user names the tier their domains are.
    highest_tier_allowed: int | None = Field(
        None, ge=MIN_VOLCANO_TIER,
        description="With scheduling.gang volcano: the Volcano HyperNode tier whose HyperNodes "
        "are this topologyKey's domains (1: the leaf tier). The PodGroups then carry "
        "networkTopology {mode: hard (Required) or soft (Preferred), highestTierAllowed: "
        "this}: Volcano keeps each instance's pods (scope Instance), or the whole deployment "
        "(scope Deployment, where the installed Volcano has subGroupPolicy: status.placement."
        "gang says) within one HyperNode of at most this tier. Unset: no networkTopology. "
        "Needs scope Deployment or Instance.",
    )  # fmt: skip
    domains: list[Domain] = _list(
        "The domains that may be chosen (label values, each once); empty: any.",
        max_length=MAX_PLACEMENT_DOMAINS,
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )

    @field_validator("domains")
    @classmethod
    def _each_domain_once(cls, domains: list[str]) -> list[str]:
        duplicates = sorted({d for d in domains if domains.count(d) > 1})
        if duplicates:
            raise ValueError(f"domains {duplicates} given more than once; list each once")
        return domains


class Scheduling(_Model):
    """Pod scheduling."""

    gang: Literal["none", "volcano"] = Field(
        "none", description="Gang scheduling: volcano creates a PodGroup per instance."
    )
    scheduler_name: str = Field("", description="Pod schedulerName; empty: the default.")
    priority_class_name: str = Field("", description="Pod priorityClassName.")


class Rollout(_Model):
    """How a change reaches running instances: whole instances, a few at a time."""

    max_unavailable: int = Field(
        1, ge=0, le=MAX_REPLICAS,
        description="Instances per role that may be down for an update at once.",
    )  # fmt: skip
    max_surge: int = Field(
        0, ge=0, le=MAX_REPLICAS,
        description="Extra instances per role started with the new spec during a rollout; "
        "they are removed when it completes.",
    )  # fmt: skip
    operator_updates: Literal["OnSpecChange", "Rolling"] = Field(
        "OnSpecChange",
        description="When a pod-template change the operator made (a new operator "
        "version), not the user, reaches running pods. OnSpecChange: with the next change "
        "of the spec or of the ascendpd.io/apply-operator-updates annotation; until then "
        "status.roles.<role>.updatePending names it. Rolling: at once, as a rollout.",
    )
    role_order: list[Role] = Field(
        default_factory=lambda: list(ROLES),
        min_length=2,
        max_length=2,
        description="The order roles are updated in, each role once: the next role starts "
        "when the previous one is updated and Ready. A KV-layout change updates both roles "
        "at once (a new generation needs a Ready instance of each).",
        json_schema_extra={"default": ["prefill", "decode"], "x-kubernetes-list-type": "set"},
    )

    @field_validator("role_order")
    @classmethod
    def _each_role_once(cls, roles: list[Role]) -> list[Role]:
        if len(set(roles)) != len(roles):
            raise ValueError(f"roleOrder {roles} has duplicates; list each role once")
        return roles


#: One day: a node gone longer than that is for an admin to declare out of service.
MAX_FORCE_DELETE_AFTER_SECONDS = 86400


class RecoverySpec(_Model):
    """What group recovery may do when a node is lost."""

    force_delete_after_seconds: int = Field(
        0, ge=0, le=MAX_FORCE_DELETE_AFTER_SECONDS,
        description="Seconds a node may stay unreachable (its Ready condition Unknown) "
        "before the operator force-deletes (grace period 0) this deployment's runtime pods "
        "on it, so that their instances start again whole on healthy nodes. 0 (the "
        "default) or null: never; the pods then stay Terminating, and their instances "
        "down, until the node returns or is removed (only a force-delete frees a "
        "StatefulSet pod's name). The trade-off: the lost node may still run the old "
        "server for a while, which costs that node's NPUs, never data (inference pods "
        "hold none), and its kubelet stops it when it returns. A node an admin tainted "
        "node.kubernetes.io/out-of-service has these pods force-deleted at once, whatever "
        "this field says. At most 86400 (a day).",
    )  # fmt: skip

    @field_validator("force_delete_after_seconds", mode="before")
    @classmethod
    def _null_is_off(cls, value: Any) -> Any:
        # The API server drops a null (the field is not nullable) and defaults it to 0;
        # render reads it the same way.
        return 0 if value is None else value


class PDDeploymentSpec(_Model):
    """A prefill/decode disaggregated SGLang deployment of one model."""

    model: ModelSpec = Field(..., description="The model to serve.")
    runtime: Runtime = Field(..., description="Runtime image and SGLang version.")
    speculative: Speculative = _sub(Speculative, "Speculative decoding.")
    prefill: RoleSpec = Field(..., description="Prefill instances.")
    decode: RoleSpec = Field(..., description="Decode instances.")
    router: Router = _sub(Router, "The PD router.")
    ascend: Ascend = _sub(Ascend, "Ascend NPU settings.")
    scheduling: Scheduling = _sub(Scheduling, "Scheduling.")
    rollout: Rollout = _sub(Rollout, "Rollouts: instances updated whole and a few at a time.")
    recovery: RecoverySpec = _sub(RecoverySpec, "Group recovery on lost nodes.")
    scaling: Scaling = _sub(
        Scaling, "P:D ratio bounds, the drain of removed instances and the PD planner."
    )
    # No CRD default: a spec that does not set it must stay one the server leaves without
    # it, so that its pods keep their template (no rollout on an operator upgrade).
    preflight: Preflight | None = Field(
        None,
        description="Turn the NPU preflight checks on or off one by one ({} for all of them). "
        "Unset, each check runs where the node has what it reads (device files, "
        "/etc/hccn.conf, hccn_tool) and is skipped where it does not, and the pods are left "
        "as they were; set, every check that is on must pass, a missing file or tool "
        "included. Setting or changing it updates every instance (a rollout).",
    )

    # No CRD default, as preflight: a spec without it keeps its pods' template.
    placement: Placement | None = Field(
        None,
        description="Place the runtime pods in one topology domain (a node label's value) "
        "per deployment or per instance, chosen where enough healthy NPUs are free; "
        "status.placement and the PlacementFeasible condition say where and why. Unset: "
        "the scheduler places every pod on its own. Applies to instances created after it "
        "is set; a running instance keeps its nodes.",
    )

    def role(self, role: str) -> RoleSpec:
        return self.prefill if role == "prefill" else self.decode


# --- status ---------------------------------------------------------------------------


class Condition(_Model):
    """A condition with reason and message."""

    type: str = Field(..., description="Condition type.")
    status: Literal["True", "False", "Unknown"] = Field(..., description="True, False, Unknown.")
    reason: str = Field("", description="CamelCase reason.")
    message: str = Field("", description="Human-readable detail.")
    last_transition_time: str = Field("", description="When status last changed (RFC 3339).")
    observed_generation: int = Field(0, description="Generation the condition is about.")


class StageStatus(_Model):
    """Layers of one pipeline stage: [startLayer, endLayer)."""

    pp_rank: int = Field(..., description="Pipeline rank.")
    start_layer: int = Field(..., description="First layer.")
    end_layer: int = Field(..., description="One past the last layer.")


class KVLayoutStatus(_Model):
    """The computed KV layout (full plan in ConfigMap <name>-kv-layout)."""

    total_kv_layers: int = Field(0, description="Target KV layers (no draft layers).")
    kv_buf_groups: int = Field(0, description="KV buffer groups per layer.")
    prefill_draft_layers: int = Field(0, description="Draft layers held by prefill.")
    decode_draft_layers: int = Field(0, description="Draft layers held by decode.")
    prefill_stages: list[StageStatus] = _list("Prefill stage layer ranges.")
    decode_stages: list[StageStatus] = _list("Decode stage layer ranges.")
    fingerprint: str = Field("", description="Layout fingerprint both sides check.")


class DrainingInstance(_Model):
    """An instance leaving by a scale-down: it finishes its requests, then goes."""

    instance: str = Field(..., description="The instance (its StatefulSet's name).")
    since: str = Field("", description="When it was marked draining (RFC 3339).")


def _update_pending() -> Any:
    """``updatePending`` of a role's and the router's status."""
    return Field(
        default_factory=list,
        description="The pod-template fields a change made by the operator (an upgrade), "
        "not by the user, would change: it waits for the next spec change, "
        "spec.rollout.operatorUpdates: Rolling or the ascendpd.io/apply-operator-updates "
        "annotation (docs/upgrade.md).",
    )


class RoleStatus(_Model):
    """Instances of one role."""

    replicas: int = Field(0, description="Desired instances.")
    ready_replicas: int = Field(0, description="Instances with every pod ready.")
    ready: str = Field(
        "", description="readyReplicas/effectiveReplicas, e.g. 1/2: the PREFILL and DECODE "
        "columns of kubectl get pdd.",
    )  # fmt: skip
    nodes_per_instance: int = Field(0, description="Pods (nodes) per instance.")
    updated_replicas: int = Field(0, description="Instances whose pods run the current spec.")
    available_replicas: int = Field(
        0, description="Ready instances of the serving KV-layout generation."
    )
    surge_replicas: int = Field(0, description="Extra instances of a rollout's maxSurge.")
    effective_replicas: int = Field(
        0,
        description="The instances the role runs: replicas, or its scaler's, within the "
        "role's bounds and spec.scaling.prefillPerDecode.",
    )
    scaler: str = Field("", description="The role's PDRoleScaler (External or Planner).")
    draining: list[DrainingInstance] = _list(
        "Instances draining: out of the scaler's count, still serving what they hold."
    )
    update_pending: list[str] = _update_pending()


class RolesStatus(_Model):
    """Each role's instances, by role."""

    prefill: RoleStatus | None = Field(None, description="Prefill instances.")
    decode: RoleStatus | None = Field(None, description="Decode instances.")


class RolloutStatus(_Model):
    """Where the rollout of the current spec stands."""

    phase: Literal["Complete", "Progressing"] = Field(
        "Complete", description="Complete once every instance runs the current spec."
    )
    serving_fingerprint: str = Field(
        "", description="KV-layout generation the router sends traffic to."
    )
    target_fingerprint: str = Field("", description="KV-layout generation of the current spec.")
    message: str = Field("", description="Progress per role, and what a generation change costs.")


class FailureRecord(_Model):
    """One failure of an instance: where and why."""

    pod: str = Field("", description="The pod that failed.")
    container: str = Field("", description="The container that ended, if one did.")
    reason: str = Field("", description="Why: the container's reason, Failed, or Deleted.")
    exit_code: int | None = Field(None, description="The container's exit code.")
    message: str = Field("", description="Its termination message.")


class ForceDeletion(_Model):
    """An instance's pods force-deleted because their node was lost."""

    time: str = Field("", description="When the operator force-deleted them.")
    node: str = Field("", description="The lost node.")
    reason: str = Field(
        "", description="NodeUnreachable (past forceDeleteAfterSeconds) or NodeOutOfService."
    )
    gone_seconds: int = Field(
        0,
        description="How long the node had been gone: since its Ready condition left True "
        "(or, on a node still Ready, since the out-of-service taint was added).",
    )
    pods: list[str] = _list("The pods force-deleted.")


class RecoveryRecord(_Model):
    """Group recovery of one instance: every failure restarts all its pods together."""

    instance: str = Field(..., description="The instance (its StatefulSet).")
    restarts: int = Field(0, description="Restarts since the operator first restarted it.")
    window_start: str = Field("", description="Start of the current failure window.")
    window_restarts: int = Field(0, description="Restarts within the current window.")
    last_restart_time: str = Field("", description="When it was last restarted.")
    first_failure: FailureRecord | None = Field(
        None, description="The first failure of the current window."
    )
    last_failure: FailureRecord | None = Field(None, description="The latest failure.")
    force_deletions: int = Field(0, description="Times its pods on a lost node were force-deleted.")
    last_force_deletion: ForceDeletion | None = Field(
        None, description="The latest force-deletion: the node and how long it was gone."
    )


class InstancePlacement(_Model):
    """The domain one instance is pinned to."""

    instance: str = Field(..., description="The instance (its StatefulSet).")
    domain: str = Field("", description="Its domain; empty: created unpinned.")


class DomainCapacity(_Model):
    """What one domain had free when the operator last chose."""

    domain: str = Field(..., description="The domain (the topology label's value).")
    nodes: int = Field(0, description="Healthy schedulable nodes in it.")
    free_npus: int = Field(0, description="NPUs free on those nodes.")


class PlacementStatus(_Model):
    """Where spec.placement put the instances, and why."""

    topology_key: str = Field("", description="The topology label.")
    scope: str = Field("", description="Deployment, Instance or None.")
    domain: str = Field("", description="The deployment's domain (scope Deployment).")
    reason: str = Field("", description="Why the last domain was chosen.")
    time: str = Field("", description="When it was chosen (RFC 3339).")
    capacity: list[DomainCapacity] = _list(
        "The domains as they were when the last domain was chosen (the chosen first)."
    )
    instances: list[InstancePlacement] = _list("The domain of each pinned instance.")
    gang: str = Field(
        "", description="With scheduling.gang volcano and scope Deployment: how Volcano "
        "gangs the instances, the deployment's PodGroup with a subgroup per instance, or "
        "each instance's own PodGroup and why (the installed PodGroup CRD has no "
        "subGroupPolicy, Volcano before 1.14)."
    )  # fmt: skip


class RouterStatus(_Model):
    """The router Deployment."""

    replicas: int = Field(0, description="Desired replicas.")
    ready_replicas: int = Field(0, description="Ready replicas.")
    ready: str = Field(
        "", description="readyReplicas/replicas, e.g. 2/2: the ROUTER column of kubectl get "
        "pdd -o wide.",
    )  # fmt: skip
    update_pending: list[str] = _update_pending()


class PDDeploymentStatus(_Model):
    """Observed state."""

    observed_generation: int = Field(0, description="Last generation reconciled.")
    phase: Literal["Pending", "Progressing", "Ready", "Degraded", "Invalid"] = Field(
        "Pending", description="Pending, Progressing, Ready, Degraded or Invalid."
    )
    conditions: list[Condition] = _list(
        "Validated, ModelResolved, KVLayoutCompatible, PrefillReady, DecodeReady, "
        "RouterReady, Ready (and InstancesHealthy, NPUPreflight, RatioConstrained, "
        "PlacementFeasible where they apply).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    kv_layout: KVLayoutStatus | None = Field(None, description="The computed KV layout.")
    roles: RolesStatus | None = Field(
        None, description="Each role's instances: status.roles.prefill and status.roles.decode."
    )
    router: RouterStatus | None = Field(None, description="Router.")
    rollout: RolloutStatus | None = Field(None, description="The rollout of the current spec.")
    recovery: list[RecoveryRecord] = _list("Instances restarted by group recovery.")
    placement: PlacementStatus | None = Field(
        None, description="Where spec.placement put the instances (set with it only)."
    )
    endpoint: str = Field("", description="Router URL inside the cluster.")
    update_pending: str = Field(
        "", description="The roles (prefill, decode, router) whose operator-made template "
        "change waits for the user; empty when none (the UPDATES column).",
    )  # fmt: skip


# --- PDRoleScaler ---------------------------------------------------------------------


class PDRoleScalerSpec(_Model):
    """What the scaler's users ask for; its scale subresource reads and writes replicas."""

    replicas: int = Field(
        ..., ge=0, le=MAX_REPLICAS,
        description="Instances of the role asked for. The operator seeds it when it creates "
        "the scaler and never writes it after (the planner does, in Planner mode).",
    )  # fmt: skip


class PlannerStatus(_Model):
    """What the PD planner last read and decided; written when the decision changes."""

    last_decision: Literal["up", "down", "hold"] = Field("hold", description="up, down or hold.")
    reason: str = Field("", description="Why, with the signal that decided and its target.")
    replicas: int = Field(0, description="The spec.replicas it decided on.")
    time: str = Field("", description="When it decided (RFC 3339).")
    metrics: dict[str, str] = Field(
        default_factory=dict,
        description="The values it read, per Ready instance (latencies: the quantile in "
        "seconds), as decimal text: queue, bootstrap_queue, ttft_seconds (prefill); "
        "token_usage, prealloc_queue, transfer_queue, itl_seconds (decode).",
    )


class PDRoleScalerStatus(_Model):
    """What the operator runs for the role; the scale subresource reads replicas and
    selector."""

    replicas: int = Field(0, description="Instances that exist and are not draining.")
    ready_replicas: int = Field(0, description="Instances with every pod ready.")
    effective_replicas: int = Field(
        0, description="Instances the operator runs: spec.replicas within the role's bounds "
        "and the P:D ratio.",
    )  # fmt: skip
    selector: str = Field(
        "", description="Selects each instance's leader pod, never a draining one: an HPA's "
        "Pods metrics average per instance.",
    )  # fmt: skip
    message: str = Field("", description="Why effectiveReplicas differs from spec.replicas.")
    observed_generation: int = Field(0, description="The scaler generation last read.")
    planner: PlannerStatus | None = Field(
        None, description="The PD planner's last decision (scaling.mode Planner)."
    )


# --- the resource ---------------------------------------------------------------------


class SpecError(ValueError):
    """A PDDeployment that breaks the API's rules; the message names each field."""


def parse_spec(spec: Any) -> PDDeploymentSpec:
    """Validate a spec mapping; ``SpecError`` lists every violation with its field path."""
    try:
        return PDDeploymentSpec.model_validate(spec)
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, "spec")) from None


def check_name(name: str) -> None:
    """The name rule (CEL on the root object); raises ``SpecError``."""
    problems = violations("root", name)
    if problems:
        raise SpecError(f"metadata.name: {problems[0]}")


def format_validation_error(exc: ValidationError, prefix: str) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join([prefix, *(str(p) for p in err["loc"])])
        msg = err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        shown = "" if isinstance(value, dict | list) or value is None else f" (got {value!r})"
        lines.append(f"{loc}: {msg}{shown}")
    return "; ".join(lines)
