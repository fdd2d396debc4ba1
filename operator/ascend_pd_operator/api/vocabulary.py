"""Names, labels, ports and owner references of everything the operator creates.

Every builder takes names from here, so ``<name>-prefill-<i>`` is spelled once and
the router, the env contract and the status all agree on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import ascend_pd_runtime.env_contract as ec
from ascend_pd_operator.api.json_object import Json

#: The PDDeployment API's group and version (``models`` serve them; owner references name them).
GROUP = "ascendpd.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "PDDeployment"
#: A role's scale target (one per scaled role, owned by its PDDeployment).
SCALER_KIND = "PDRoleScaler"

#: Our labels and annotations live under the API group's name.
PREFIX = GROUP
#: Every object of ours carries it; the child watches select by it.
LABEL_DEPLOYMENT = f"{PREFIX}/deployment"
#: prefill or decode, on runtime objects only (their selectors use it).
LABEL_ROLE = f"{PREFIX}/role"
LABEL_INSTANCE = f"{PREFIX}/instance"
#: What an object is: a role, or one of the COMPONENT_* below.
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
#: The KV-layout fingerprint of a runtime pod's instance: its layout generation.
LABEL_FINGERPRINT = f"{PREFIX}/kv-fingerprint"
#: The StatefulSet controller's label naming the template revision a pod was made from.
LABEL_REVISION = "controller-revision-hash"
#: On pod 0 of every instance, the instance's leader: the operator labels it as soon as it
#: sees it (the controller's pod-index label, beta from 1.28, has a feature gate that can
#: turn it off). The router discovers leaders by it (with the
#: serving generation's fingerprint), and a PDRoleScaler's selector counts instances by it.
#: sglang-router 0.3.x adds a matching pod once it is Running and Ready but drops a worker
#: only when its pod is being deleted (removing a label, or the pod turning NotReady, does
#: not remove it): a generation, or a drained instance, leaves the router by its pods'
#: deletion.
LABEL_LEADER = f"{PREFIX}/leader"
#: The leader label of operator builds before the elastic roles (main before 9f74067, before
#: the 0.1.0 release), which the router selected on. Leaders
#: that carry it keep it (the router never forgets by a label); the router's selector moves
#: to LABEL_LEADER once every leader carries that (``router.discovery_label``), so a running
#: deployment's routing never has a gap.
LABEL_LEGACY_ROUTABLE = f"{PREFIX}/routable"
#: On the router Deployment: the leader label its pods' discovery selects on ("leader":
#: LABEL_LEADER; absent: a router of a build before
#: 9f74067, on LABEL_LEGACY_ROUTABLE).
LABEL_ROUTER_DISCOVERY = f"{PREFIX}/discovery"
DISCOVERY_LEADER = "leader"
#: On an instance being drained by a scale-down (its StatefulSet and pods): it leaves its
#: PDRoleScaler's selector and ``status.replicas`` at once (``drain``).
LABEL_DRAINING = f"{PREFIX}/draining"
#: On the StatefulSet of a rollout's surge instance (maxSurge): not one of the role's own.
LABEL_SURGE = f"{PREFIX}/surge"
#: On prefill pods: the bootstrap port the router tells decode to reach (service discovery).
#: sglang-router 0.3.0 to 0.3.2 read this one name (``from_cli_args`` sets it; no flag
#: changes it), so it is theirs, not under our prefix.
ANNOTATION_BOOTSTRAP_PORT = "sglang.ai/bootstrap-port"
#: Volcano's name of the PodGroup a pod belongs to (with ``scheduling.gang: volcano``).
ANNOTATION_VOLCANO_GROUP = "scheduling.k8s.io/group-name"
#: Every annotation the operator sets on runtime pods. A user's podAnnotations may set none
#: of them (ours would win, the user's value would be lost), nor any key under PREFIX.
POD_ANNOTATIONS = (ANNOTATION_BOOTSTRAP_PORT, ANNOTATION_VOLCANO_GROUP)
#: The model path an inspector Job read, and its stored facts describe.
ANNOTATION_MODEL_PATH = f"{PREFIX}/model-path"
#: The PDDeployment generation an inspector Job was started for: a failed inspection is
#: retried after the next spec change (the user's fix), never in a tight loop.
ANNOTATION_GENERATION = f"{PREFIX}/generation"
#: On each CRD ``ascend-pd crd`` generates: ``ascend-pd <version>``. The operator's schema check
#: names the installed CRD's in its message, so an old CRD says which release it came from.
ANNOTATION_GENERATED_BY = f"{PREFIX}/generated-by"
#: On the StatefulSet of an instance created under ``spec.placement``: the domain it was
#: pinned to and how (JSON: topologyKey, domain, mode, exclusive). The pin is rebuilt from
#: it on every apply, so a running instance keeps exactly the affinity it was created with:
#: a change of spec.placement never re-pins it (no rollout); ``placement`` owns the rule.
ANNOTATION_PLACEMENT = f"{PREFIX}/placement"
#: On an instance's StatefulSet and the router's Deployment: a digest of what their pod
#: template was last applied for (the PDDeployment's generation, the user's trigger, and for
#: the router the generation it routes to and its discovery label) and one of that template.
#: A template the operator alone changed waits for the user (``operator_updates``). Labels,
#: not annotations: a Deployment's annotations are copied to its ReplicaSets, so changing
#: them moves its generation (its rollout reads as unfinished for a moment).
LABEL_APPLIED_FOR = f"{PREFIX}/applied-for"
LABEL_TEMPLATE_DIGEST = f"{PREFIX}/template-digest"
#: On a PDDeployment: a new value applies the operator's pending template changes once.
ANNOTATION_APPLY_OPERATOR_UPDATES = f"{PREFIX}/apply-operator-updates"
#: On the pods of an instance created under ``spec.placement.exclusive``: other
#: PDDeployments see by it that the pod's domain is held exclusively (``placement``).
LABEL_EXCLUSIVE = f"{PREFIX}/exclusive"
#: The taint an admin puts on a node that is shut down or lost for good (Kubernetes'
#: non-graceful node shutdown): its pods may be force-deleted.
TAINT_OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
FIELD_MANAGER = "ascend-pd-operator"
MANAGED_BY = "ascend-pd-operator"

COMPONENT_ROUTER = "router"
COMPONENT_INSPECTOR = "model-inspector"
COMPONENT_FACTS = "model-facts"
COMPONENT_KV_LAYOUT = "kv-layout"
#: A role's PDRoleScaler, the scale target of an HPA, KEDA or the built-in planner.
COMPONENT_SCALER = "scaler"
#: The deployment's Volcano PodGroup (spec.placement scope Deployment, ``gang_name``).
COMPONENT_GANG = "gang"

#: Ports inside runtime pods (the host's ports under hostNetwork).
HTTP_PORT = 30000
DIST_INIT_PORT = 5757
#: Prefill instance i bootstraps on BOOTSTRAP_PORT_BASE + i: unique per instance, so
#: instances sharing a host network never collide and the router can tell them apart.
BOOTSTRAP_PORT_BASE = 8998

ROLES = ("prefill", "decode")

#: The volumes of every runtime pod, and where its container mounts them (``workloads``).
#: A role's own volumes and volumeMounts may use none of these names and no path at, inside
#: or above these mounts (``rules``): the launcher reads the KV layout and writes its
#: termination message there, SGLang needs the shared memory.
VOLUME_MODEL = "model"
VOLUME_SHM = "dshm"
VOLUME_DRIVER = "ascend-driver"
VOLUME_KV_LAYOUT = "kv-layout"
RUNTIME_VOLUMES = (VOLUME_MODEL, VOLUME_SHM, VOLUME_DRIVER, VOLUME_KV_LAYOUT)
SHM_MOUNT_PATH = "/dev/shm"
#: The router's writable /tmp on its read-only root filesystem (``security.router_tmp``):
#: left out where the router's own volumes name it or mount /tmp, so it never collides.
VOLUME_ROUTER_TMP = "ascend-pd-tmp"
ROUTER_TMP_MOUNT_PATH = "/tmp"
#: The node label that tells nodes apart: the router's replicas spread over its values.
TOPOLOGY_HOSTNAME = "kubernetes.io/hostname"


@dataclass(frozen=True)
class HostFile:
    """A node path of the Ascend software that ``spec.ascend.hostMounts`` names: mounted
    read-only at the same path, as volume ``volume``, with hostPath type ``type``."""

    path: str
    type: str
    volume: str
    what: str


#: The well-known ``spec.ascend.hostMounts`` names: the node paths SGLang's own Ascend
#: container recipe mounts besides the driver (docs/compatibility.md, "Node prerequisites").
#: Neither Ascend Docker Runtime nor the Ascend device plugin mounts firmware, localSbin,
#: ascendInstallInfo or hccnConf on an A2/A3 server; the runtime does mount npuSmi, dcmi and
#: queueSchedule, so they matter on nodes without it. hccn_tool needs no entry: it is
#: ``<ascend.driverHostPath>/tools/hccn_tool``, inside the driver mount. Volume names are
#: ``ascend-*`` (the driver's is ``ascend-driver``); a custom entry's are ``host-<name>``.
HOST_FILES: dict[str, HostFile] = {
    "firmware": HostFile("/usr/local/Ascend/firmware", "Directory", "ascend-firmware",
                         "the NPU firmware"),
    "localSbin": HostFile("/usr/local/sbin", "Directory", "ascend-local-sbin",
                          "npu-smi, and hccn_tool where the driver links it there"),
    "npuSmi": HostFile("/usr/local/bin/npu-smi", "File", "ascend-npu-smi", "npu-smi"),
    "dcmi": HostFile("/usr/local/dcmi", "Directory", "ascend-dcmi",
                     "the DCMI libraries npu-smi loads"),
    "ascendInstallInfo": HostFile("/etc/ascend_install.info", "File", "ascend-install-info",
                                  "where the driver is installed, which CANN reads"),
    "hccnConf": HostFile("/etc/hccn.conf", "File", "ascend-hccn-conf",
                         "the NPUs' RoCE addresses (HCCL, the launcher's preflight)"),
    "queueSchedule": HostFile("/var/queue_schedule", "Directory", "ascend-queue-schedule",
                              "the FlowGW scheduling framework's directory"),
}  # fmt: skip
#: A custom hostMounts entry's volume: this prefix and its name.
HOST_MOUNT_VOLUME_PREFIX = "host-"


def host_mount_volume(name: str) -> str:
    """The pod volume of the ``spec.ascend.hostMounts`` entry ``name``."""
    known = HOST_FILES.get(name)
    return known.volume if known is not None else HOST_MOUNT_VOLUME_PREFIX + name


#: Where the kubelet mounts a pod's ServiceAccount token: the router's discovery reads it.
SERVICE_ACCOUNT_TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"

# --- status: condition types, reasons, phases ------------------------------------------
COND_VALIDATED = "Validated"
COND_MODEL_RESOLVED = "ModelResolved"
COND_KV_LAYOUT_COMPATIBLE = "KVLayoutCompatible"
COND_PREFILL_READY = "PrefillReady"
COND_DECODE_READY = "DecodeReady"
COND_ROUTER_READY = "RouterReady"
COND_READY = "Ready"
#: False while an instance is in a restart loop (group recovery gave up waiting it out).
COND_INSTANCES_HEALTHY = "InstancesHealthy"
#: Whether spec.scaling.prefillPerDecode changed the instance counts the roles asked for.
COND_RATIO_CONSTRAINED = "RatioConstrained"
#: False while a runtime pod's launcher reports a failed NPU preflight check (exit
#: ``env_contract.EXIT_PREFLIGHT``), until the instances are ready again.
COND_NPU_PREFLIGHT = "NPUPreflight"

#: With spec.placement: whether a domain can hold the instances to create (``placement``).
COND_PLACEMENT_FEASIBLE = "PlacementFeasible"
#: True while a template change the operator made (not the user) waits for the user
#: (``operator_updates``); status.roles.<role>.updatePending names the fields.
COND_UPDATE_PENDING = "UpdatePending"

REASON_VALID = "Valid"
REASON_INVALID_SPEC = "InvalidSpec"
#: ModelResolved: where the facts came from ...
REASON_INLINE = "Inline"
REASON_CONFIGMAP = "ConfigMap"
REASON_INSPECTED = "Inspected"
REASON_LOCAL = "Local"
#: ... or why there are none.
REASON_INSPECTING = "InspectingModel"
REASON_CONFIGMAP_NOT_FOUND = "ConfigMapNotFound"
REASON_CONFIGMAP_KEY_MISSING = "ConfigMapKeyMissing"
REASON_INVALID_MODEL_CONFIG = "InvalidModelConfig"
REASON_INSPECTION_FAILED = "InspectionFailed"
REASON_NOT_VALIDATED = "NotValidated"
#: KVLayoutCompatible
REASON_COMPATIBLE = "Compatible"
REASON_INVALID_LAYOUT = "InvalidLayout"
REASON_INCOMPATIBLE = "Incompatible"
REASON_MODEL_NOT_RESOLVED = "ModelNotResolved"
#: <Role>Ready and RouterReady
REASON_INSTANCES_READY = "InstancesReady"
REASON_INSTANCES_NOT_READY = "InstancesNotReady"
REASON_ROUTER_READY = "RouterReady"
REASON_ROUTER_NOT_READY = "RouterNotReady"
REASON_DISABLED = "Disabled"
REASON_NOT_APPLIED = "NotApplied"
#: ``<Role>Ready`` when SGLang's parser refused a pod's command line (the launcher's exit
#: ``env_contract.EXIT_ARGS_REFUSED``); also the Warning Event's.
REASON_LAUNCH_REFUSED = "LaunchRefused"
#: ``<Role>Ready`` when a pod's launcher refused the env contract's version (exit
#: ``env_contract.EXIT_CONTRACT_VERSION``): operator and runtime image of different
#: ascend-pd versions; also the Warning Event's.
REASON_ENV_CONTRACT_MISMATCH = "EnvContractMismatch"
#: ``<Role>Ready`` when a pod's launcher, and ``ModelResolved`` when the inspector, found
#: another SGLang in the image than ``spec.runtime.sglangVersion`` (or none: exit
#: ``env_contract.EXIT_SGLANG_VERSION``); also the Warning Event's.
REASON_SGLANG_VERSION_MISMATCH = "SGLangVersionMismatch"
#: NPUPreflight=False: the check that failed (``env_contract.PREFLIGHT_REASONS``, which the
#: launcher names in its termination message) ...
REASON_DEVICE_MISSING = ec.PREFLIGHT_REASONS["devices"]
REASON_HCCN_CONF_MISSING = ec.PREFLIGHT_REASONS["hccnConf"]
REASON_LINK_DOWN = ec.PREFLIGHT_REASONS["links"]
REASON_LEADER_UNREACHABLE = ec.PREFLIGHT_REASONS["leader"]
REASON_STORE_UNREACHABLE = ec.PREFLIGHT_REASONS["store"]
#: ... or True: no runtime pod reports a failed check.
REASON_NO_PREFLIGHT_FAILURE = "NoPreflightFailure"
#: Ready
REASON_READY = "Ready"
REASON_NOT_READY = "NotReady"
#: Ready: the children run, but not every instance runs the current spec yet.
REASON_ROLLOUT_IN_PROGRESS = "RolloutInProgress"
#: InstancesHealthy: every instance runs; or one restarted too often (RestartLoop).
REASON_HEALTHY = "Healthy"
REASON_RESTART_LOOP = "RestartLoop"
#: The Event of each group restart.
REASON_INSTANCE_RESTARTED = "InstanceRestarted"
#: Event: kube-scheduler cannot place a pod of an instance (its words, the instance named)
REASON_INSTANCE_UNSCHEDULABLE = "InstanceUnschedulable"
#: Why group recovery restarted an instance: a pod's node is not Ready, or an admin took
#: it out of service (``TAINT_OUT_OF_SERVICE``).
REASON_NODE_NOT_READY = "NodeNotReady"
REASON_NODE_OUT_OF_SERVICE = "NodeOutOfService"
#: Why a node's pods were force-deleted: unreachable past ``forceDeleteAfterSeconds``
#: (or out of service, above).
REASON_NODE_UNREACHABLE = "NodeUnreachable"
#: The Event of each force-deletion of an instance's pods on a lost node.
REASON_PODS_FORCE_DELETED = "PodsForceDeleted"
REASON_APPLY_FAILED = "ApplyFailed"
REASON_PRUNE_FAILED = "PruneFailed"
#: RatioConstrained: True when the bounds changed a count (and an Event says how).
REASON_RATIO_BOUNDED = "RatioBounded"
#: UpdatePending: an operator-made template change waits; one the runtime needs; none.
REASON_OPERATOR_CHANGED = "OperatorChanged"
REASON_OPERATOR_CHANGE_REQUIRED = "OperatorChangeRequired"
REASON_UP_TO_DATE = "UpToDate"
#: The Event when a drained instance is gone: how long it took; Normal within its grace
#: period, Warning when forced (the kubelet ended it, cutting what it still held).
REASON_INSTANCE_DRAINED = "InstanceDrained"
REASON_WITHIN_BOUNDS = "WithinBounds"
#: PlacementFeasible (``placement``): True, a domain was chosen (or every instance keeps
#: its own); True, scope None pins no domain; True, Preferred and no domain fits (the
#: instances are created unpinned); False: no domain fits, no instance is created.
REASON_DOMAIN_CHOSEN = "DomainChosen"
#: PlacementFeasible True with nothing to choose, and no earlier choice to tell.
REASON_PLACED = "Placed"
REASON_UNSCOPED = "Unscoped"
REASON_PREFERRED_DOMAIN_UNAVAILABLE = "PreferredDomainUnavailable"
REASON_NO_TOPOLOGY_LABEL = "NoTopologyLabel"
REASON_INSUFFICIENT_DOMAIN_CAPACITY = "InsufficientDomainCapacity"
REASON_UNHEALTHY_NPUS = "UnhealthyNPUs"
REASON_DOMAINS_TAKEN = "DomainsTaken"
REASON_NODE_USAGE_UNKNOWN = "NodeUsageUnknown"
#: PlacementFeasible False: the KV transfer protocol reaches only within one topology
#: domain, and the placement lets prefill and decode land in different ones
#: (``placement.transfer_mismatch``).
REASON_TRANSFER_PROTOCOL_MISMATCH = "TransferProtocolMismatch"

#: MindCluster's device plugin publishes each node's NPU health in a ConfigMap
#: ``mindx-dl-deviceinfo-<node>`` in ``kube-system``, data key ``DeviceInfoCfg``
#: (``decisions.device_info`` records where this was verified). Read only with
#: ``ascend-pd run --placement-device-info`` (chart value ``placement.deviceInfo``).
DEVICE_INFO_NAMESPACE = "kube-system"
DEVICE_INFO_PREFIX = "mindx-dl-deviceinfo-"
DEVICE_INFO_KEY = "DeviceInfoCfg"

PHASE_PENDING = "Pending"
PHASE_PROGRESSING = "Progressing"
PHASE_READY = "Ready"
PHASE_DEGRADED = "Degraded"
PHASE_INVALID = "Invalid"


def role_ready_condition(role: str) -> str:
    """``PrefillReady`` or ``DecodeReady``."""
    return {"prefill": COND_PREFILL_READY, "decode": COND_DECODE_READY}[role]


#: A PDDeployment's status keeps each role's instances at ``status.roles.<role>``.
STATUS_ROLES = "roles"


def role_status(status: Json | None, role: str) -> Json:
    """``status.roles.<role>`` of a PDDeployment's ``status`` ({} while it has none)."""
    found: Json = ((status or {}).get(STATUS_ROLES) or {}).get(role) or {}
    return found


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
                "apiVersion": API_VERSION,
                "kind": KIND,
                "name": self.name,
                "uid": self.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]


def instance_name(owner: Owner, role: str, index: int) -> str:
    """StatefulSet, headless Service and PodGroup of one instance."""
    return f"{owner.name}-{role}-{index}"


def gang_name(owner: Owner) -> str:
    """The deployment's Volcano PodGroup, one gang of its instances (placement scope
    Deployment); an instance's own PodGroup is named after the instance."""
    return f"{owner.name}-gang"


def leader_host(owner: Owner, role: str, index: int) -> str:
    sts = instance_name(owner, role, index)
    return f"{sts}-0.{sts}.{owner.namespace}.svc"


def scaler_name(owner: Owner, role: str) -> str:
    """A role's PDRoleScaler: ``kubectl scale pdrs/<name>-<role>``."""
    return f"{owner.name}-{role}"


def router_name(owner: Owner) -> str:
    """The router's Deployment and Service, and its ServiceAccount, Role and RoleBinding."""
    return f"{owner.name}-router"


def disruption_budget_name(owner: Owner, role: str) -> str:
    """The PodDisruptionBudget of one role's runtime pods."""
    return f"{owner.name}-{role}"


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


def component_selector(owner: Owner, component: str) -> dict[str, str]:
    """The labels that select one non-runtime component's pods (the router's)."""
    return {LABEL_DEPLOYMENT: owner.name, LABEL_COMPONENT: component}


def labels(owner: Owner, component: str, index: int | None = None) -> dict[str, str]:
    """Recommended app.kubernetes.io labels plus ours; the role label on runtime objects
    (``component`` a role) only."""
    ours = (
        selector(owner, component, index) if component in ROLES else {LABEL_DEPLOYMENT: owner.name}
    )
    return {
        "app.kubernetes.io/name": "ascend-pd",
        "app.kubernetes.io/instance": owner.name,
        LABEL_COMPONENT: component,
        "app.kubernetes.io/part-of": "ascend-pd",
        LABEL_MANAGED_BY: MANAGED_BY,
        **ours,
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
