"""Pure builders of the runtime workloads: per instance a headless Service, a StatefulSet
(one pod per node, pod 0 leads distributed init) and, with Volcano, a PodGroup.

The pod template carries the env contract (``ascend_pd_runtime.env_contract``) the
launcher reads; nothing here does I/O.
"""

from __future__ import annotations

import ascend_pd_runtime.env_contract as ec
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import EnvVar, PDDeploymentSpec, RoleSpec, Router, dump
from ascend_pd_operator.api.scheduling import given
from ascend_pd_operator.api.vocabulary import (
    ANNOTATION_BOOTSTRAP_PORT,
    ANNOTATION_VOLCANO_GROUP,
    DIST_INIT_PORT,
    HTTP_PORT,
    LABEL_FINGERPRINT,
    SHM_MOUNT_PATH,
    VOLUME_DRIVER,
    VOLUME_KV_LAYOUT,
    VOLUME_MODEL,
    VOLUME_SHM,
    Owner,
    bootstrap_port,
    host_mount_volume,
    instance_name,
    kv_layout_name,
    leader_host,
    metadata,
    selector,
)
from ascend_pd_operator.builders.pinning import Pin, pin_annotations, pin_labels, pinned_affinity
from ascend_pd_operator.builders.resources import runtime_resources
from ascend_pd_operator.builders.security import runtime_container_security
from ascend_pd_operator.builders.volcano import VOLCANO_SCHEDULER, instance_podgroup
from ascend_pd_runtime.layout import KVLayout
from ascend_pd_runtime.plan import layout_fingerprint

CONTAINER = "sglang"
#: How long a leader pod being deleted keeps serving before SGLang gets its SIGTERM:
#: sglang-router 0.3 drops a worker on the watch event of its pod's deletionTimestamp,
#: well within this; a request it routes meanwhile is one SGLang still takes.
ROUTER_LEAVE_SECONDS = 5


def launch_values(
    owner: Owner, spec: PDDeploymentSpec, layout: KVLayout, role: str, index: int
) -> ec.LaunchEnv:
    """The env contract values of one instance (pod name and IP come from the pod)."""
    r = spec.role(role)
    sp = spec.speculative
    doc_fingerprint = layout_fingerprint(layout)
    return ec.LaunchEnv(
        role=role,
        deployment=owner.name,
        namespace=owner.namespace,
        instance=index,
        pod_name="",
        pod_ip="",
        model_path=spec.model.path,
        served_model_name=spec.model.name,
        nnodes=r.nodes_per_instance,
        dist_init_addr=f"{leader_host(owner, role, index)}:{DIST_INIT_PORT}",
        tp_size=r.parallelism.tensor,
        pp_size=r.parallelism.pipeline,
        dp_size=r.parallelism.data,
        devices_per_node=r.devices_per_node,
        port=HTTP_PORT,
        bootstrap_port=bootstrap_port(index) if role == "prefill" else None,
        transfer_backend=spec.runtime.transfer_backend,
        transfer_protocol=spec.ascend.transfer_protocol,
        store_url=f"tcp://{leader_host(owner, 'prefill', 0)}:{spec.ascend.store_port}",
        hccl_socket_ifname=spec.ascend.hccl_socket_ifname,
        prefill_pp=spec.prefill.parallelism.pipeline,
        decode_pp=spec.decode.parallelism.pipeline,
        layer_partition=tuple(spec.prefill.layer_partition),
        sglang_version=spec.runtime.sglang_version,
        speculative_algorithm=sp.algorithm,
        speculative_roles=tuple(sp.roles),
        speculative_num_steps=sp.num_steps,
        speculative_eagle_topk=sp.eagle_topk,
        speculative_num_draft_tokens=sp.num_draft_tokens,
        kv_layout_file=f"{ec.KV_LAYOUT_MOUNT_DIR}/{ec.KV_LAYOUT_KEY}",
        kv_fingerprint=doc_fingerprint,
        total_kv_layers=layout.facts.total_kv_layers,
        kv_buf_groups=layout.facts.kv_buf_groups,
        extra_args=tuple(r.extra_args),
        # Both reach the env only when the spec sets them (``env_contract.launch_env``).
        hccl_connect_timeout=spec.ascend.hccl_connect_timeout_seconds,
        preflight_checks=spec.preflight.checks() if spec.preflight is not None else None,
        preflight_timeout=(
            spec.preflight.network_timeout_seconds
            if spec.preflight is not None
            else ec.DEFAULT_PREFLIGHT_TIMEOUT
        ),
    )


def _env(values: ec.LaunchEnv, user_env: list[EnvVar]) -> list[Json]:
    env: list[Json] = [{"name": k, "value": v} for k, v in ec.launch_env(values).items()]
    env += [
        {"name": ec.POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": ec.POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    # The API refuses a user's variable of the contract's (the env rule of ``rules``).
    return env + [e.model_dump(by_alias=True, exclude_defaults=True) for e in user_env]


def _ports(role: str, index: int) -> list[Json]:
    ports = [
        {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
        {"name": "dist-init", "containerPort": DIST_INIT_PORT, "protocol": "TCP"},
    ]
    if role == "prefill":
        ports.append(
            {"name": "bootstrap", "containerPort": bootstrap_port(index), "protocol": "TCP"}
        )
    return ports


def _volumes(owner: Owner, spec: PDDeploymentSpec, role: str) -> tuple[list[Json], list[Json]]:
    # Memory-backed: what /dev/shm holds counts in the pod's memory, so it is bounded.
    shm = {"medium": "Memory", "sizeLimit": spec.role(role).shm_size_limit}
    volumes: list[Json] = [
        {"name": VOLUME_SHM, "emptyDir": shm},
        {
            "name": VOLUME_DRIVER,
            "hostPath": {"path": spec.ascend.driver_host_path, "type": "Directory"},
        },
        {"name": VOLUME_KV_LAYOUT, "configMap": {"name": kv_layout_name(owner)}},
    ]
    mounts: list[Json] = [
        {"name": VOLUME_SHM, "mountPath": SHM_MOUNT_PATH},
        {"name": VOLUME_DRIVER, "mountPath": spec.ascend.driver_host_path, "readOnly": True},
        {"name": VOLUME_KV_LAYOUT, "mountPath": ec.KV_LAYOUT_MOUNT_DIR, "readOnly": True},
    ]
    model = model_volume(spec)
    if model:
        volumes.insert(0, model[0])
        mounts.insert(0, model[1])
    host_volumes, host_mounts = node_files(spec)
    return volumes + host_volumes, mounts + host_mounts


def node_files(spec: PDDeploymentSpec) -> tuple[list[Json], list[Json]]:
    """(volumes, volumeMounts) of ``spec.ascend.hostMounts``: each a hostPath, read-only.
    None without entries, so a spec without them keeps its pod template."""
    volumes: list[Json] = []
    mounts: list[Json] = []
    for h in spec.ascend.host_mounts:
        name = host_mount_volume(h.name)
        source: Json = {"path": h.source()}
        if h.checked_type():
            source["type"] = h.checked_type()
        volumes.append({"name": name, "hostPath": source})
        mounts.append({"name": name, "mountPath": h.target(), "readOnly": True})
    return volumes, mounts


def model_volume(spec: PDDeploymentSpec) -> tuple[Json, Json] | None:
    """(volume, mount) of the model, or None when the model is in the image."""
    v = spec.model.volume
    if v is None:
        return None
    if v.persistent_volume_claim is not None:
        pvc = v.persistent_volume_claim
        source: Json = {
            "persistentVolumeClaim": {"claimName": pvc.claim_name, "readOnly": pvc.read_only}
        }
        read_only = pvc.read_only
    else:
        assert v.host_path is not None
        source = {"hostPath": {"path": v.host_path.path, "type": v.host_path.type}}
        read_only = True
    volume = {"name": VOLUME_MODEL, **source}
    mount = {"name": VOLUME_MODEL, "mountPath": spec.model.path, "readOnly": read_only}
    return volume, mount


def scheduling_fields(spec: PDDeploymentSpec, pod: RoleSpec | Router | None = None) -> Json:
    """schedulerName / priorityClassName for every pod the operator creates; ``pod``'s own
    priorityClassName (a role's, the router's) wins over scheduling's."""
    s = spec.scheduling
    out: Json = {}
    scheduler = s.scheduler_name or (VOLCANO_SCHEDULER if s.gang == "volcano" else "")
    if scheduler:
        out["schedulerName"] = scheduler
    priority = (pod.priority_class_name if pod is not None else "") or s.priority_class_name
    if priority:
        out["priorityClassName"] = priority
    return out


def user_pod_fields(pod: RoleSpec | Router) -> Json:
    """The pod spec fields a role or the router gives (imagePullSecrets, serviceAccountName,
    securityContext): only those given, so a spec without them keeps its pod template, and
    an operator upgrade restarts no pod."""
    out: Json = {}
    if pod.image_pull_secrets:
        out["imagePullSecrets"] = [dump(s) for s in pod.image_pull_secrets]
    if pod.service_account_name:
        out["serviceAccountName"] = pod.service_account_name
    if context := dump(pod.pod_security_context):
        out["securityContext"] = context
    return out


def user_container_fields(pod: RoleSpec | Router) -> Json:
    """The container's securityContext, when one is given."""
    context = dump(pod.container_security_context)
    return {"securityContext": context} if context else {}


def user_volumes(pod: RoleSpec | Router) -> tuple[list[Json], list[Json]]:
    """(volumes, volumeMounts) of the user's, to follow the operator's; the API refuses
    their names and paths where they would collide with the operator's (``rules``)."""
    return [dump(v) for v in pod.volumes], [dump(m) for m in pod.volume_mounts]


def readiness_probe(owner: Owner, role: str, index: int) -> Json:
    """Ready when the instance leader's SGLang answers /health.

    Only pod 0 of a multi-node SGLang instance serves HTTP, and it answers /health only
    once every rank is up, so every pod of the instance asks the leader: the instance
    becomes ready (and routable) as a whole.
    """
    url = f"http://{leader_host(owner, role, index)}:{HTTP_PORT}/health"
    check = f"import urllib.request; urllib.request.urlopen('{url}', timeout=4)"
    return {
        "exec": {"command": ["python3", "-c", check]},
        "periodSeconds": 10,
        "timeoutSeconds": 5,
        "failureThreshold": 3,
    }


def pre_stop_program(leader: str, pause: int) -> str:
    """The preStop hook of a runtime pod, as a ``python3 -c`` program (the readiness probe's
    interpreter; it needs nothing of the runtime image's version).

    The leader (ordinal 0) keeps serving ``pause`` seconds, so the router has dropped it
    before SGLang's SIGTERM. A worker waits while the leader's name resolves: the headless
    Service publishes not-ready addresses, so the name lasts until the leader pod is gone,
    and the leader's requests keep the ranks they need until then. A lookup that fails for
    another reason than "no such name" (a DNS hiccup) waits on; the kubelet's grace period
    bounds both.
    """
    return (
        "import os, socket, time\n"
        f"if os.environ['{ec.POD_NAME}'].rsplit('-', 1)[-1] == '0':\n"
        f"    time.sleep({pause})\n"
        "else:\n"
        "    while True:\n"
        "        try:\n"
        f"            socket.getaddrinfo('{leader}', None)\n"
        "        except socket.gaierror as e:\n"
        "            if e.errno == socket.EAI_NONAME:\n"
        "                break\n"
        "        time.sleep(1)\n"
    )


def drain_fields(owner: Owner, spec: PDDeploymentSpec, role: str, index: int) -> Json:
    """What a drain needs of the pods: their grace period follows ``drainTimeoutSeconds``
    and the preStop hook of ``pre_stop_program``. Only in the templates of a deployment
    whose spec sets ``scaling.drainTimeoutSeconds``: a field reaches a template only when a
    spec asks for it, so an operator upgrade or a role's switch of ``scaling.mode``
    restarts no instance (``test_pod_template_stability``); the 60 s grace stays otherwise.
    """
    grace = spec.scaling.drain_timeout_seconds
    if grace is None:
        return {"terminationGracePeriodSeconds": 60}
    program = pre_stop_program(leader_host(owner, role, index), min(ROUTER_LEAVE_SECONDS, grace))
    hook = {"preStop": {"exec": {"command": ["python3", "-c", program]}}}
    return {"terminationGracePeriodSeconds": grace, "lifecycle": hook}


def pod_template(
    owner: Owner,
    spec: PDDeploymentSpec,
    layout: KVLayout,
    role: str,
    index: int,
    pin: Pin | None = None,
) -> Json:
    """The pod template of instance ``index``; ``pin``, the domain it was created in
    (``pinning``): its affinity and labels come from the pin alone, never from
    ``spec.placement``, so that a placement change leaves the template as it is."""
    r = spec.role(role)
    values = launch_values(owner, spec, layout, role, index)
    volumes, mounts = _volumes(owner, spec, role)
    extra_volumes, extra_mounts = user_volumes(r)
    annotations: dict[str, str] = dict(r.pod_annotations)
    if role == "prefill":
        # The router's service discovery reads the bootstrap port it hands decode here.
        annotations[ANNOTATION_BOOTSTRAP_PORT] = str(bootstrap_port(index))
    if spec.scheduling.gang == "volcano":
        # The deployment's gang when the pin names it, else the instance's own group.
        gang = pin.gang if pin is not None else ""
        annotations[ANNOTATION_VOLCANO_GROUP] = gang or instance_name(owner, role, index)
    drain = drain_fields(owner, spec, role, index)
    container: Json = {
        "name": CONTAINER,
        "image": spec.runtime.image,
        "imagePullPolicy": spec.runtime.image_pull_policy,
        "command": ["ascend-pd-runtime", "launch"],
        "env": _env(values, r.env),
        "ports": _ports(role, index),
        "resources": runtime_resources(spec, layout, role),
        "volumeMounts": mounts + extra_mounts,
        "readinessProbe": readiness_probe(owner, role, index),
        **({"lifecycle": drain["lifecycle"]} if "lifecycle" in drain else {}),
        # The operator's defaults with the role's containerSecurityContext over them.
        "securityContext": runtime_container_security(r),
    }
    pod_spec: Json = {
        # Also with a serviceAccountName of the user's: the runtime uses no Kubernetes API.
        "automountServiceAccountToken": False,
        "hostNetwork": spec.ascend.host_network,
        "dnsPolicy": "ClusterFirstWithHostNet" if spec.ascend.host_network else "ClusterFirst",
        "terminationGracePeriodSeconds": drain["terminationGracePeriodSeconds"],
        "containers": [container],
        "volumes": volumes + extra_volumes,
        **scheduling_fields(spec, r),
        **user_pod_fields(r),
    }
    if r.node_selector:
        pod_spec["nodeSelector"] = dict(r.node_selector)
    if r.tolerations:
        pod_spec["tolerations"] = [given(t) for t in r.tolerations]
    affinity = given(r.affinity)
    if affinity or pin is not None:
        pod_spec["affinity"] = pinned_affinity(affinity, pin)
    meta = metadata(owner, "", role, index, annotations)
    # Not in the selector (immutable): the label changes with each layout generation.
    labels = {**meta["labels"], LABEL_FINGERPRINT: values.kv_fingerprint, **pin_labels(pin)}
    return {
        "metadata": {"labels": labels, "annotations": meta.get("annotations", {})},
        "spec": pod_spec,
    }


def _instance_object(
    api_version: str, kind: str, owner: Owner, role: str, index: int, spec: Json
) -> Json:
    """One of the objects of instance ``index`` of ``role``: named after the instance and
    labelled as its."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": metadata(owner, instance_name(owner, role, index), role, index),
        "spec": spec,
    }


def headless_service(owner: Owner, role: str, index: int) -> Json:
    """Stable DNS for every pod, published before readiness so pod 0 resolves at init."""
    ports = [
        {"name": p["name"], "port": p["containerPort"], "protocol": p["protocol"]}
        for p in _ports(role, index)
    ]
    service = {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": selector(owner, role, index),
        "ports": ports,
    }
    return _instance_object("v1", "Service", owner, role, index, service)


def statefulset(
    owner: Owner,
    spec: PDDeploymentSpec,
    layout: KVLayout,
    role: str,
    index: int,
    pin: Pin | None = None,
) -> Json:
    """The instance's StatefulSet; a pinned one (``pin``) records its pin in an annotation,
    from which every later apply rebuilds it (``pinning.pin_of``)."""
    workload = {
        "serviceName": instance_name(owner, role, index),
        "replicas": spec.role(role).nodes_per_instance,
        "podManagementPolicy": "Parallel",
        # The operator replaces an instance's pods together (``rollout``): a template
        # change alone must not roll one pod of a running group.
        "updateStrategy": {"type": "OnDelete"},
        "selector": {"matchLabels": selector(owner, role, index)},
        "template": pod_template(owner, spec, layout, role, index, pin),
    }
    sts = _instance_object("apps/v1", "StatefulSet", owner, role, index, workload)
    if pin is not None:
        sts["metadata"]["annotations"] = pin_annotations(pin)
    return sts


def podgroup(owner: Owner, spec: PDDeploymentSpec, role: str, index: int) -> Json:
    """Volcano gang: the instance starts only when all its nodes can."""
    priority = str(scheduling_fields(spec, spec.role(role)).get("priorityClassName", ""))
    return instance_podgroup(owner, spec, role, index, priority)
