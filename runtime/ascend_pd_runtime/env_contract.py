"""The contract between the operator and the runtime container: env vars and their encoding.

The operator writes these variables into every prefill/decode container
(``launch_env``) and into the model-inspector Job (``inspector_env``); the
launcher and the inspector read them back with ``read_launch_env`` and
``read_inspector_env``. Both sides import this one module, so a name or an
encoding can only change in one place.

Encoding rules (every value is a string, as Kubernetes requires):

* integers: decimal (``"8"``); a port is an integer in 1..65535.
* lists of integers or words: comma-separated, no spaces (``"30,31"``,
  ``"prefill,decode"``); the empty string is the empty list.
* ``ASCEND_PD_EXTRA_ARGS``: a JSON array of strings (arguments may contain commas).
* addresses: ``host:port``; the memfabric store URL is ``tcp://host:port``.
* ``ASCEND_PD_SPECULATIVE_ALGORITHM`` is the deployment's algorithm in SGLang's
  spelling (``NONE``, ``NEXTN``, ``EAGLE``); whether this pod runs it is
  ``role in ASCEND_PD_SPECULATIVE_ROLES`` (``LaunchEnv.speculative_here``).

Node rank is not an env var: a StatefulSet gives every pod the same template,
so the launcher takes the ordinal from ``ASCEND_PD_POD_NAME`` (``<sts>-<ordinal>``,
set from the downward API). Pod 0 is the distributed-init leader.

The model inspector (``ascend-pd-runtime inspect``) gets ``ASCEND_PD_MODEL_PATH``,
``ASCEND_PD_INSPECT_OUTPUT`` (default ``/dev/termination-log``) and the spec's
``ASCEND_PD_SGLANG_VERSION``. It reads
``<model path>/config.json`` and writes ``encode_inspect_result`` there: on
success ``{"ok": true, "config": {...}}`` holding only ``MODEL_CONFIG_KEYS`` (small
enough for a termination message), on failure ``{"ok": false, "error": "..."}``
with the exact message, and exits 0 or 1. The operator reads the terminated
container's message with ``decode_inspect_result`` and stores ``config`` as key
``config.json`` of the ConfigMap ``<name>-model-facts`` it owns; the inspector
needs no Kubernetes credentials.

The launcher exits ``EXIT_ARGS_REFUSED`` when the installed SGLang's parser refuses
the command it built, after writing the parser's message and the offending argument
to ``ASCEND_PD_TERMINATION_LOG`` (default ``/dev/termination-log``); the operator
shows that termination message in the PDDeployment's status.

The launcher and the inspector exit ``EXIT_SGLANG_VERSION`` when the image's SGLang is not
the spec's ``SGLANG_VERSION`` (``sglang_version``), naming both, before anything else loads.

The launcher exits ``EXIT_PREFLIGHT`` when an NPU preflight check fails (``preflight``),
with a termination message ``preflight_message`` writes and ``preflight_reason`` reads: the
check's reason (``PREFLIGHT_REASONS``) first, then the device and the value. Which checks run
is ``PREFLIGHT_CHECKS_VAR``, written only for a spec that sets ``spec.preflight`` (like
``HCCL_CONNECT_TIMEOUT_SECONDS`` for ``ascend.hcclConnectTimeoutSeconds``: a variable new in
every template would restart every instance on an operator upgrade); unset, the launcher
runs each check where the node has what it reads.

The contract has a version (``CONTRACT_VERSION``, written by ``launch_env`` on every
runtime pod and by ``inspector_env`` on the inspector Job). The launcher and the inspector
read it before any other variable and exit ``EXIT_CONTRACT_VERSION`` naming both versions
when it is not one they speak (``SPOKEN_CONTRACT_VERSIONS``): an operator and a runtime
image of different ascend-pd versions may name or encode the other variables differently,
and an error about one of them would hide the real cause. Bump ``CONTRACT`` for any change
an older launcher or inspector would misread (a variable renamed, re-encoded or newly
required); a new optional variable with a default needs no bump.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from .errors import BadInput, ContractMismatch
from .layout import SPECULATIVE_ALGORITHMS, LayoutRequest
from .partition import format_partition, parse_partition

PREFIX = "ASCEND_PD_"

# --- the contract itself ----------------------------------------------------------------
CONTRACT_VERSION = "ASCEND_PD_CONTRACT_VERSION"  #: the version of this contract, decimal
#: The version ``launch_env`` writes.
CONTRACT = 1
#: The versions ``read_launch_env`` reads (a later launcher may read older ones too).
SPOKEN_CONTRACT_VERSIONS = (1,)
# --- identity -------------------------------------------------------------------------
ROLE = "ASCEND_PD_ROLE"  #: prefill | decode
DEPLOYMENT = "ASCEND_PD_DEPLOYMENT"  #: the PDDeployment's name
NAMESPACE = "ASCEND_PD_NAMESPACE"  #: its namespace
INSTANCE = "ASCEND_PD_INSTANCE"  #: instance index within the role (0-based)
POD_NAME = "ASCEND_PD_POD_NAME"  #: downward API metadata.name; ordinal = node rank
POD_IP = "ASCEND_PD_POD_IP"  #: downward API status.podIP
# --- model ----------------------------------------------------------------------------
MODEL_PATH = "ASCEND_PD_MODEL_PATH"  #: directory holding config.json and weights
SERVED_MODEL_NAME = "ASCEND_PD_SERVED_MODEL_NAME"
# --- distributed layout of this instance ---------------------------------------------
NNODES = "ASCEND_PD_NNODES"  #: pods in this instance
DIST_INIT_ADDR = "ASCEND_PD_DIST_INIT_ADDR"  #: <sts>-0.<svc>.<ns>.svc:<port>
TP_SIZE = "ASCEND_PD_TP_SIZE"
PP_SIZE = "ASCEND_PD_PP_SIZE"
DP_SIZE = "ASCEND_PD_DP_SIZE"
DEVICES_PER_NODE = "ASCEND_PD_DEVICES_PER_NODE"
PORT = "ASCEND_PD_PORT"  #: SGLang HTTP server port
# --- PD disaggregation ------------------------------------------------------------------
BOOTSTRAP_PORT = "ASCEND_PD_BOOTSTRAP_PORT"  #: this prefill instance's bootstrap port
TRANSFER_BACKEND = "ASCEND_PD_TRANSFER_BACKEND"  #: ascend | mooncake
TRANSFER_PROTOCOL = "ASCEND_PD_TRANSFER_PROTOCOL"  #: TransferProtocol (ASCEND_MF_TRANSFER_PROTOCOL)
STORE_URL = "ASCEND_PD_STORE_URL"  #: tcp://host:port, exported as ASCEND_MF_STORE_URL
HCCL_SOCKET_IFNAME = "ASCEND_PD_HCCL_SOCKET_IFNAME"  #: empty: leave HCCL's default
#: seconds, exported as HCCL_CONNECT_TIMEOUT; only on pods of a spec that sets
#: ``ascend.hcclConnectTimeoutSeconds`` (unset: HCCL's own default)
HCCL_CONNECT_TIMEOUT_SECONDS = "ASCEND_PD_HCCL_CONNECT_TIMEOUT"
# --- NPU preflight (``preflight``): only on pods of a spec that sets ``spec.preflight`` ---
#: the checks to run, comma-separated names of ``PREFLIGHT_CHECKS`` ("" runs none); unset:
#: ``PREFLIGHT_AUTO`` (each check runs where the node gives it what it reads)
PREFLIGHT_CHECKS_VAR = "ASCEND_PD_PREFLIGHT_CHECKS"
#: how long the leader and store checks retry, seconds (unset: ``DEFAULT_PREFLIGHT_TIMEOUT``)
PREFLIGHT_TIMEOUT = "ASCEND_PD_PREFLIGHT_TIMEOUT_SECONDS"
#: Where the checks look, for tests and simulated nodes (no operator writes them): the
#: device directory (``/dev``), the HCCN config (``/etc/hccn.conf``) and ``hccn_tool`` (on
#: ``PATH``, else ``DEFAULT_HCCN_TOOL``).
PREFLIGHT_DEV_DIR = "ASCEND_PD_PREFLIGHT_DEV_DIR"
PREFLIGHT_HCCN_CONF = "ASCEND_PD_PREFLIGHT_HCCN_CONF"
PREFLIGHT_HCCN_TOOL = "ASCEND_PD_PREFLIGHT_HCCN_TOOL"
#: What the Ascend runtime reads: the logical NPU ids this process may use (CANN's own
#: variable; a device plugin or a user sets it, never the operator).
ASCEND_VISIBLE = "ASCEND_RT_VISIBLE_DEVICES"
# --- the whole deployment's KV layout request (both roles) ----------------------------
PREFILL_PP = "ASCEND_PD_PREFILL_PP"
DECODE_PP = "ASCEND_PD_DECODE_PP"
LAYER_PARTITION = "ASCEND_PD_LAYER_PARTITION"  #: prefill partition "30,31" or ""
SGLANG_VERSION = "ASCEND_PD_SGLANG_VERSION"
SPECULATIVE_ALGORITHM = "ASCEND_PD_SPECULATIVE_ALGORITHM"  #: NONE | NEXTN | EAGLE
SPECULATIVE_ROLES = "ASCEND_PD_SPECULATIVE_ROLES"  #: "decode", "prefill,decode"
SPECULATIVE_NUM_STEPS = "ASCEND_PD_SPECULATIVE_NUM_STEPS"
SPECULATIVE_EAGLE_TOPK = "ASCEND_PD_SPECULATIVE_EAGLE_TOPK"
SPECULATIVE_NUM_DRAFT_TOKENS = "ASCEND_PD_SPECULATIVE_NUM_DRAFT_TOKENS"
# --- the layout the operator computed -------------------------------------------------
KV_LAYOUT_FILE = "ASCEND_PD_KV_LAYOUT_FILE"  #: the mounted plan JSON
KV_FINGERPRINT = "ASCEND_PD_KV_FINGERPRINT"  #: its fingerprint
TOTAL_KV_LAYERS = "ASCEND_PD_TOTAL_KV_LAYERS"
KV_BUF_GROUPS = "ASCEND_PD_KV_BUF_GROUPS"
# --- user additions -------------------------------------------------------------------
EXTRA_ARGS = "ASCEND_PD_EXTRA_ARGS"  #: JSON array of extra SGLang arguments
# --- what the launcher exports from the values above (``launcher.sglang_environment``) ---
MF_STORE_URL = "ASCEND_MF_STORE_URL"  #: STORE_URL, its host resolved
#: the same, under the name newer memfabric releases read (``launch_ascend_mf_store`` and
#: the transfer engine take it first)
MF_CONFIG_STORE_URL = "MF_CONFIG_STORE_URL"
MF_TRANSFER_PROTOCOL = "ASCEND_MF_TRANSFER_PROTOCOL"  #: TRANSFER_PROTOCOL
SGLANG_LAYER_PARTITION = "SGLANG_PP_LAYER_PARTITION"  #: LAYER_PARTITION, where it applies
HCCL_IFNAME = "HCCL_SOCKET_IFNAME"  #: HCCL_SOCKET_IFNAME
GLOO_IFNAME = "GLOO_SOCKET_IFNAME"  #: HCCL_SOCKET_IFNAME too
HCCL_CONNECT_TIMEOUT = "HCCL_CONNECT_TIMEOUT"  #: HCCL_CONNECT_TIMEOUT_SECONDS, when set
#: A user's value for one of these would be overridden by the launcher, or contradict the KV
#: layout: with every name under PREFIX, a container's extra env may set none of them.
LAUNCHER_EXPORTS = (
    MF_STORE_URL,
    MF_CONFIG_STORE_URL,
    MF_TRANSFER_PROTOCOL,
    SGLANG_LAYER_PARTITION,
    HCCL_IFNAME,
    GLOO_IFNAME,
)
# --- model inspector ------------------------------------------------------------------
INSPECT_OUTPUT = "ASCEND_PD_INSPECT_OUTPUT"
# --- launcher failures --------------------------------------------------------------------
#: Where the launcher writes why it exits (default ``DEFAULT_TERMINATION_LOG``).
TERMINATION_LOG = "ASCEND_PD_TERMINATION_LOG"
#: The launcher's exit codes (every one with a termination message saying why):
#: bad input (a variable of this contract, the KV layout file or the model's config.json);
EXIT_BAD_INPUT = 1
#: the model on disk gives another KV layout than the operator computed;
EXIT_LAYOUT_MISMATCH = 3
#: the instance leader's or the memfabric store's host did not resolve in time;
EXIT_UNRESOLVED = 4
#: SGLang's own parser refused the command line (the operator: LaunchRefused);
EXIT_ARGS_REFUSED = 5
#: the pod's contract version is not one this launcher speaks (the operator:
#: EnvContractMismatch).
EXIT_CONTRACT_VERSION = 6
#: an NPU preflight check failed (``preflight``; the operator: NPUPreflight=False with the
#: reason of ``PREFLIGHT_REASONS``, read back by ``preflight_reason``).
EXIT_PREFLIGHT = 7
#: the SGLang installed in the image is not the spec's ``SGLANG_VERSION``, or there is none
#: (``sglang_version``; the operator: SGLangVersionMismatch). The inspector exits so too.
EXIT_SGLANG_VERSION = 8
#: What each exit means, in a few words: the operator's status says it beside the code.
LAUNCHER_EXITS = {
    EXIT_BAD_INPUT: "bad input: an env contract variable, the KV layout file or the "
    "model's config.json",
    EXIT_LAYOUT_MISMATCH: "the model's KV layout differs from the operator's",
    EXIT_UNRESOLVED: "the instance leader's or the store's host did not resolve",
    EXIT_ARGS_REFUSED: "SGLang's parser refused the command line",
    EXIT_CONTRACT_VERSION: "the runtime image speaks another env contract version than the "
    "operator",
    EXIT_PREFLIGHT: "an NPU preflight check failed",
    EXIT_SGLANG_VERSION: "the image's SGLang is not the spec's sglangVersion",
}

# --- NPU preflight: the checks, and what the operator's status calls their failures ---------
#: Each check of ``preflight``, by the name ``spec.preflight`` gives it.
PREFLIGHT_CHECKS = ("devices", "hccnConf", "links", "leader", "store")
#: The reason of ``NPUPreflight=False`` for each check's failure.
PREFLIGHT_REASONS = {
    "devices": "DeviceMissing",
    "hccnConf": "HccnConfMissing",
    "links": "LinkDown",
    "leader": "LeaderUnreachable",
    "store": "StoreUnreachable",
}
#: How long the leader and store checks retry by default (seconds): the leader's pod may be
#: scheduled, pulled and started well after a worker's.
DEFAULT_PREFLIGHT_TIMEOUT = 600
MAX_PREFLIGHT_TIMEOUT = 3600
#: ``LaunchEnv.preflight_checks`` when the operator wrote no ``PREFLIGHT_CHECKS_VAR``.
PREFLIGHT_AUTO = None
#: Where ``hccn_tool`` is when it is not on ``PATH``: the driver's tools, which the operator
#: mounts (``ascend.driverHostPath``).
DEFAULT_HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"
DEFAULT_HCCN_CONF = "/etc/hccn.conf"
DEFAULT_DEV_DIR = "/dev"
#: Every preflight termination message starts so: ``preflight_message`` writes it,
#: ``preflight_reason`` reads the reason back.
_PREFLIGHT_HEAD = "NPU preflight failed ({reason}, check {check}): "
_PREFLIGHT_HEAD_RE = re.compile(r"^NPU preflight failed \((\w+), check (\w+)\): ")


def preflight_message(check: str, detail: str) -> str:
    """The termination message of a failed ``check``: its reason, the check, the detail."""
    return _PREFLIGHT_HEAD.format(reason=PREFLIGHT_REASONS[check], check=check) + detail


def preflight_reason(message: str) -> str:
    """The reason a preflight termination message names ("" when it names none)."""
    found = _PREFLIGHT_HEAD_RE.match(message.strip())
    if found is None or found.group(1) not in PREFLIGHT_REASONS.values():
        return ""
    return found.group(1)


def format_preflight_checks(checks: tuple[str, ...] | None) -> str | None:
    """``PREFLIGHT_CHECKS_VAR``'s value for ``checks`` (None: the variable is left out)."""
    return None if checks is None else ",".join(checks)


#: Where the operator mounts the ``<name>-kv-layout`` ConfigMap, and its key.
KV_LAYOUT_MOUNT_DIR = "/etc/ascend-pd/kv-layout"
KV_LAYOUT_KEY = "plan.json"
#: Key of the model facts in ``<name>-model-facts`` (and in a user's configMapRef default).
MODEL_CONFIG_KEY = "config.json"
DEFAULT_INSPECT_OUTPUT = "/dev/termination-log"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"

#: The ``config.json`` keys the inspector publishes: everything ``parse_model_facts`` reads
#: for the KV layout. The weights' sizes it also reads (``weights.WEIGHT_KEYS``, for the
#: offline fit check of ``ascend-pd plan``/``render``) are left out: the operator does not
#: judge the fit, and the message must stay small.
MODEL_CONFIG_KEYS = (
    "architectures",
    "model_type",
    "num_hidden_layers",
    "num_nextn_predict_layers",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "index_head_dim",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_size",
    "torch_dtype",
)

ROLES = ("prefill", "decode")

#: The memfabric transfer protocols (ASCEND_MF_TRANSFER_PROTOCOL) every supported SGLang
#: carries on A2 and A3: ``sdma`` (the default: HCCS/UB, within one server or super-pod)
#: and ``device_rdma`` (the NPUs' RoCE NICs, across servers). SGLang's
#: ``AscendTransferEngine`` (sglang/srt/disaggregation/ascend/transfer_engine.py) takes only
#: these two in 0.5.10; 0.5.20 and later take any ``TransDataOpType`` of the installed
#: memfabric (1.3.0 also names host_rdma, and device_urma and device_uboe, the fabrics of
#: Ascend 950, which ascend-pd does not run on). Both read any other value, a typo
#: included, as sdma with only a log warning: the API refuses it instead.
TransferProtocol = Literal["sdma", "device_rdma"]
TRANSFER_PROTOCOLS: tuple[str, ...] = get_args(TransferProtocol)


@dataclass(frozen=True)
class LaunchEnv:
    """Everything the operator tells one prefill/decode container, typed."""

    role: str
    deployment: str
    namespace: str
    instance: int
    pod_name: str
    pod_ip: str
    model_path: str
    served_model_name: str
    nnodes: int
    dist_init_addr: str
    tp_size: int
    pp_size: int
    dp_size: int
    devices_per_node: int
    port: int
    bootstrap_port: int | None
    transfer_backend: str
    transfer_protocol: str
    store_url: str
    hccl_socket_ifname: str
    prefill_pp: int
    decode_pp: int
    layer_partition: tuple[int, ...]
    sglang_version: str
    speculative_algorithm: str
    speculative_roles: tuple[str, ...]
    speculative_num_steps: int
    speculative_eagle_topk: int
    speculative_num_draft_tokens: int
    kv_layout_file: str
    kv_fingerprint: str
    total_kv_layers: int
    kv_buf_groups: int
    extra_args: tuple[str, ...] = field(default=())
    #: ``HCCL_CONNECT_TIMEOUT`` in seconds (None: not set, HCCL's default)
    hccl_connect_timeout: int | None = None
    #: the preflight checks to run, in ``PREFLIGHT_CHECKS`` order (``PREFLIGHT_AUTO``: the
    #: operator said nothing; each runs where the node has what it reads)
    preflight_checks: tuple[str, ...] | None = PREFLIGHT_AUTO
    preflight_timeout: int = DEFAULT_PREFLIGHT_TIMEOUT

    @property
    def node_rank(self) -> int:
        """This pod's ordinal in its StatefulSet (``<sts>-<ordinal>``)."""
        return pod_ordinal(self.pod_name)

    @property
    def is_leader(self) -> bool:
        return self.node_rank == 0

    @property
    def speculative_here(self) -> bool:
        """Whether this pod's role runs speculative decoding."""
        return self.speculative_algorithm != "NONE" and self.role in self.speculative_roles

    def layout_request(self) -> LayoutRequest:
        """The deployment's layout request, for ``compute_layout`` in the launcher."""
        return LayoutRequest(
            prefill_pp=self.prefill_pp,
            decode_pp=self.decode_pp,
            layer_partition=self.layer_partition,
            speculative=self.speculative_algorithm.lower(),
            speculative_roles=self.speculative_roles or ROLES,
            sglang_version=self.sglang_version,
            transfer_backend=self.transfer_backend,
        )


def pod_ordinal(pod_name: str) -> int:
    head, _, tail = pod_name.rpartition("-")
    if not head or not tail.isdigit():
        raise BadInput(
            f"{POD_NAME} {pod_name!r} is invalid: expected a StatefulSet pod name "
            "<statefulset>-<ordinal>"
        )
    return int(tail)


def launch_env(values: LaunchEnv) -> dict[str, str]:
    """Encode a ``LaunchEnv`` as env vars (the operator's side; pod name/IP excluded,
    they come from the downward API)."""
    env = {
        CONTRACT_VERSION: str(CONTRACT),
        ROLE: values.role,
        DEPLOYMENT: values.deployment,
        NAMESPACE: values.namespace,
        INSTANCE: str(values.instance),
        MODEL_PATH: values.model_path,
        SERVED_MODEL_NAME: values.served_model_name,
        NNODES: str(values.nnodes),
        DIST_INIT_ADDR: values.dist_init_addr,
        TP_SIZE: str(values.tp_size),
        PP_SIZE: str(values.pp_size),
        DP_SIZE: str(values.dp_size),
        DEVICES_PER_NODE: str(values.devices_per_node),
        PORT: str(values.port),
        BOOTSTRAP_PORT: "" if values.bootstrap_port is None else str(values.bootstrap_port),
        TRANSFER_BACKEND: values.transfer_backend,
        TRANSFER_PROTOCOL: values.transfer_protocol,
        STORE_URL: values.store_url,
        HCCL_SOCKET_IFNAME: values.hccl_socket_ifname,
        PREFILL_PP: str(values.prefill_pp),
        DECODE_PP: str(values.decode_pp),
        LAYER_PARTITION: format_partition(values.layer_partition),
        SGLANG_VERSION: values.sglang_version,
        SPECULATIVE_ALGORITHM: values.speculative_algorithm,
        SPECULATIVE_ROLES: ",".join(values.speculative_roles),
        SPECULATIVE_NUM_STEPS: str(values.speculative_num_steps),
        SPECULATIVE_EAGLE_TOPK: str(values.speculative_eagle_topk),
        SPECULATIVE_NUM_DRAFT_TOKENS: str(values.speculative_num_draft_tokens),
        KV_LAYOUT_FILE: values.kv_layout_file,
        KV_FINGERPRINT: values.kv_fingerprint,
        TOTAL_KV_LAYERS: str(values.total_kv_layers),
        KV_BUF_GROUPS: str(values.kv_buf_groups),
        EXTRA_ARGS: json.dumps(list(values.extra_args)),
    }
    # Newer variables only where a spec asks for them: a template that gains a variable
    # restarts its instances on an operator upgrade (``test_pod_template_stability``).
    if values.hccl_connect_timeout is not None:
        env[HCCL_CONNECT_TIMEOUT_SECONDS] = str(values.hccl_connect_timeout)
    checks = format_preflight_checks(values.preflight_checks)
    if checks is not None:
        env[PREFLIGHT_CHECKS_VAR] = checks
        env[PREFLIGHT_TIMEOUT] = str(values.preflight_timeout)
    return env


def read_launch_env(environ: Mapping[str, str]) -> LaunchEnv:
    """Read and check the launcher's env vars; ``BadInput`` names the variable and value,
    ``ContractMismatch`` both contract versions (checked first: see the module's docstring)."""
    check_contract_version(environ)
    r = _Reader(environ)
    role = r.choice(ROLE, ROLES)
    algorithm = r.choice(SPECULATIVE_ALGORITHM, SPECULATIVE_ALGORITHMS, default="NONE")
    roles = tuple(r.words(SPECULATIVE_ROLES))
    for item in roles:
        if item not in ROLES:
            raise BadInput(
                f"{SPECULATIVE_ROLES} {environ.get(SPECULATIVE_ROLES)!r} is invalid: every "
                "entry must be prefill or decode"
            )
    bootstrap = r.port(BOOTSTRAP_PORT, required=role == "prefill")
    return LaunchEnv(
        role=role,
        deployment=r.text(DEPLOYMENT),
        namespace=r.text(NAMESPACE),
        instance=r.integer(INSTANCE, minimum=0),
        pod_name=r.text(POD_NAME),
        pod_ip=r.text(POD_IP, default=""),
        model_path=r.text(MODEL_PATH),
        served_model_name=r.text(SERVED_MODEL_NAME, default=""),
        nnodes=r.integer(NNODES, minimum=1),
        dist_init_addr=r.address(DIST_INIT_ADDR),
        tp_size=r.integer(TP_SIZE, minimum=1),
        pp_size=r.integer(PP_SIZE, minimum=1),
        dp_size=r.integer(DP_SIZE, minimum=1),
        devices_per_node=r.integer(DEVICES_PER_NODE, minimum=1),
        port=r.port(PORT) or 0,
        bootstrap_port=bootstrap,
        transfer_backend=r.choice(TRANSFER_BACKEND, ("ascend", "mooncake")),
        transfer_protocol=r.text(TRANSFER_PROTOCOL, default=""),
        store_url=r.text(STORE_URL, default=""),
        hccl_socket_ifname=r.text(HCCL_SOCKET_IFNAME, default=""),
        prefill_pp=r.integer(PREFILL_PP, minimum=1),
        decode_pp=r.integer(DECODE_PP, minimum=1),
        layer_partition=tuple(r.partition(LAYER_PARTITION)),
        sglang_version=r.text(SGLANG_VERSION),
        speculative_algorithm=algorithm,
        speculative_roles=roles,
        speculative_num_steps=r.integer(SPECULATIVE_NUM_STEPS, minimum=0, default=0),
        speculative_eagle_topk=r.integer(SPECULATIVE_EAGLE_TOPK, minimum=0, default=0),
        speculative_num_draft_tokens=r.integer(SPECULATIVE_NUM_DRAFT_TOKENS, minimum=0, default=0),
        kv_layout_file=r.text(KV_LAYOUT_FILE, default=f"{KV_LAYOUT_MOUNT_DIR}/{KV_LAYOUT_KEY}"),
        kv_fingerprint=r.text(KV_FINGERPRINT, default=""),
        total_kv_layers=r.integer(TOTAL_KV_LAYERS, minimum=1),
        kv_buf_groups=r.integer(KV_BUF_GROUPS, minimum=1),
        extra_args=tuple(r.json_strings(EXTRA_ARGS)),
        hccl_connect_timeout=(
            r.integer(HCCL_CONNECT_TIMEOUT_SECONDS, minimum=1)
            if environ.get(HCCL_CONNECT_TIMEOUT_SECONDS)
            else None
        ),
        preflight_checks=read_preflight_checks(environ),
        preflight_timeout=r.integer(
            PREFLIGHT_TIMEOUT, minimum=0, default=DEFAULT_PREFLIGHT_TIMEOUT
        ),
    )


def read_preflight_checks(environ: Mapping[str, str]) -> tuple[str, ...] | None:
    """``PREFLIGHT_CHECKS_VAR`` as checks in ``PREFLIGHT_CHECKS`` order; unset:
    ``PREFLIGHT_AUTO``; an unknown name is ``BadInput``."""
    raw = environ.get(PREFLIGHT_CHECKS_VAR)
    if raw is None:
        return PREFLIGHT_AUTO
    names = [w.strip() for w in raw.split(",") if w.strip()]
    unknown = [n for n in names if n not in PREFLIGHT_CHECKS]
    if unknown:
        raise BadInput(
            f"{PREFLIGHT_CHECKS_VAR} {raw!r} is invalid: {', '.join(unknown)} is not a check; "
            f"expected some of {', '.join(PREFLIGHT_CHECKS)}"
        )
    return tuple(c for c in PREFLIGHT_CHECKS if c in names)


def check_contract_version(environ: Mapping[str, str], reader: str = "launcher") -> int:
    """The pod's contract version, if this image's ``reader`` (the launcher, the inspector)
    speaks it; else ``ContractMismatch`` naming the pod's version and the ones spoken here."""
    spoken = ", ".join(str(v) for v in SPOKEN_CONTRACT_VERSIONS)
    here = f"this runtime image's {reader} speaks version {spoken}"
    fix = (
        "use the runtime image of the operator's ascend-pd version, or the operator of the "
        "image's (docs/upgrade.md)"
    )
    raw = environ.get(CONTRACT_VERSION)
    if raw is None or raw == "":
        raise ContractMismatch(
            f"env contract version mismatch: {CONTRACT_VERSION} is not set, so the pod was "
            f"made by an operator older than versioned env contracts; {here}; {fix}"
        )
    if not raw.isdigit():
        raise ContractMismatch(
            f"env contract version mismatch: {CONTRACT_VERSION} {raw!r} is not a version "
            f"(a decimal integer); {here}; {fix}"
        )
    version = int(raw)
    if version not in SPOKEN_CONTRACT_VERSIONS:
        which = "newer" if version > max(SPOKEN_CONTRACT_VERSIONS) else "older"
        raise ContractMismatch(
            f"env contract version mismatch: the operator wrote version {version} "
            f"({CONTRACT_VERSION}), {here} (the operator is {which} than the image); {fix}"
        )
    return version


@dataclass(frozen=True)
class InspectorEnv:
    model_path: str
    output: str
    #: the spec's SGLang version, which the image's must follow ("": not given, no check)
    sglang_version: str = ""


def inspector_env(model_path: str, sglang_version: str = "") -> dict[str, str]:
    """The inspector Job's env (the operator's side), with the contract's version and the
    spec's SGLang version (a new optional variable: an older operator's Job goes unchecked)."""
    env = {
        CONTRACT_VERSION: str(CONTRACT),
        MODEL_PATH: model_path,
        INSPECT_OUTPUT: DEFAULT_INSPECT_OUTPUT,
    }
    if sglang_version:
        env[SGLANG_VERSION] = sglang_version
    return env


def read_inspector_env(environ: Mapping[str, str], check_version: bool = True) -> InspectorEnv:
    """The inspector's env; ``ContractMismatch`` first, as for the launcher (unless
    ``check_version`` is false: a person gave the model path, no operator wrote the env)."""
    if check_version:
        check_contract_version(environ, reader="inspector")
    r = _Reader(environ)
    return InspectorEnv(
        model_path=r.text(MODEL_PATH),
        output=r.text(INSPECT_OUTPUT, default=DEFAULT_INSPECT_OUTPUT),
        sglang_version=r.text(SGLANG_VERSION, default="") if check_version else "",
    )


def model_config_subset(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a ``config.json`` the inspector publishes (``text_config`` unwrapped)."""
    if "num_hidden_layers" not in raw and isinstance(raw.get("text_config"), Mapping):
        raw = raw["text_config"]
    return {k: raw[k] for k in MODEL_CONFIG_KEYS if k in raw and raw[k] is not None}


def encode_inspect_result(*, config: Mapping[str, Any] | None = None, error: str = "") -> str:
    """The inspector's termination message: success with the config subset, or the error."""
    if error:
        return json.dumps({"ok": False, "error": error}, separators=(",", ":"))
    if config is None:
        raise ValueError("encode_inspect_result needs config or error")
    return json.dumps({"ok": True, "config": dict(config)}, separators=(",", ":"))


def decode_inspect_result(message: str) -> tuple[dict[str, Any] | None, str]:
    """``(config, "")`` on success, ``(None, error)`` otherwise (also for a garbled message)."""
    try:
        doc = json.loads(message)
    except json.JSONDecodeError:
        text = message.strip() or "the model inspector left no message"
        return None, text
    if not isinstance(doc, dict):
        return None, f"the model inspector wrote {message!r}; expected a JSON object"
    if doc.get("ok") is True and isinstance(doc.get("config"), dict):
        return dict(doc["config"]), ""
    return None, str(doc.get("error") or f"the model inspector wrote {message!r}")


class _Reader:
    """Typed access to env vars; every error names the variable, the value and the rule."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ

    def text(self, name: str, default: str | None = None) -> str:
        value = self.environ.get(name)
        if value is None or value == "":
            if default is None:
                raise BadInput(f"{name} is not set; the operator sets it on every runtime pod")
            return default
        return value

    def choice(self, name: str, allowed: tuple[str, ...], default: str | None = None) -> str:
        value = self.text(name, default)
        if value not in allowed:
            raise BadInput(f"{name} {value!r} is invalid: expected one of {', '.join(allowed)}")
        return value

    def integer(self, name: str, minimum: int, default: int | None = None) -> int:
        raw = self.text(name, None if default is None else str(default))
        try:
            value = int(raw)
        except ValueError:
            raise BadInput(f"{name} {raw!r} is invalid: expected a decimal integer") from None
        if value < minimum:
            raise BadInput(f"{name} {raw!r} is invalid: expected an integer >= {minimum}")
        return value

    def port(self, name: str, required: bool = True) -> int | None:
        if not required and not self.environ.get(name):
            return None
        value = self.integer(name, minimum=1)
        if value > 65535:
            raise BadInput(f"{name} {value} is invalid: a port is at most 65535")
        return value

    def address(self, name: str) -> str:
        value = self.text(name)
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise BadInput(f"{name} {value!r} is invalid: expected host:port")
        return value

    def words(self, name: str) -> list[str]:
        return [w for w in self.environ.get(name, "").split(",") if w]

    def partition(self, name: str) -> list[int]:
        try:
            return parse_partition(self.environ.get(name, ""))
        except BadInput as exc:
            raise BadInput(f"{name}: {exc}") from None

    def json_strings(self, name: str) -> list[str]:
        raw = self.environ.get(name, "") or "[]"
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise BadInput(f"{name} {raw!r} is invalid: expected a JSON array of strings")
        return value
