"""kubelet-sim's one real step: a runtime pod's launcher check, run locally when the pod asks.

kubelet-sim runs no containers, so nothing on the dev cluster ever shows what the launcher
does with a pod's environment: whether SGLang's parser accepts the command it builds
(exit 5 and a termination message when it does not, which the operator reports as
``LaunchRefused``). For a pod that asks (``RUN_CHECK_ANNOTATION`` = ``"true"`` on the pod or
its namespace), kubelet-sim runs, for each container whose command is the launcher
(``ascend-pd-runtime launch ...``), that command with ``--check`` added: the real launcher
plans and asks the installed SGLang's own parser, then exits instead of exec'ing SGLang.

What a kubelet would provide, simulated here (this module owns it):

- the image: a *local runtime* registered for the container's image, a JSON file in
  kubelet-sim's ``--local-runtimes`` directory: ``{"image": ..., "python": ...,
  "pythonpath": [...], "env": {...}}`` (``register_runtime``). The check runs
  ``<python> -m ascend_pd_runtime.cli <args...> --check``: that Python must import
  ``ascend_pd_runtime`` and the SGLang the image would hold. An unregistered image leaves the
  container waiting with ``ErrImagePull``;
- the environment: literal values (with ``$(VAR)`` expansion), downward-API ``fieldRef``\\ s
  (name, namespace, uid, labels, annotations, node name, pod and host IP), ``configMapKeyRef``
  and ``secretKeyRef``;
- the volumes: ``configMap`` and ``secret`` volumes written to a scratch directory,
  ``emptyDir`` a scratch directory, ``hostPath`` this machine's directory (every simulated
  node is this machine; a hostPath missing here, such as the Ascend driver, is an empty
  directory). Paths under a ``mountPath`` in env values are rewritten to the local copy;
  other volume kinds (a PVC) cannot be mounted and leave the container ``ContainerCreating``;
- cluster DNS: ``<host>.<subdomain>.<ns>.svc[.cluster.local]`` (a StatefulSet pod) and
  ``<service>.<ns>.svc`` in env values are replaced by the pod's IP or the Service's cluster
  IP, as the cluster's DNS would answer; a name that does not resolve yet defers the check
  (the launcher would be waiting for it);
- the NPUs: as many ``/dev/davinci<N>`` files as the container's ``huawei.com/Ascend910``
  limit, an hccn.conf with their addresses and an ``hccn_tool`` answering for their links,
  written to the scratch directory and named to the launcher's NPU preflight by its path
  overrides (``npu``; ``knobs.NPU_LINK_DOWN`` takes a link down);
- the termination message: the container's ``terminationMessagePath`` is a local file,
  named to the launcher by ``ASCEND_PD_TERMINATION_LOG``; read back up to 4096 bytes, or the
  log's tail under ``FallbackToLogsOnError``.

Everything here is a simulation for the dev cluster; a real kubelet runs the image.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ascend_pd_dev.kubelet_sim import knobs, npu
from ascend_pd_dev.kubelet_sim.nodes import ASCEND_RESOURCE
from ascend_pd_dev.kubelet_sim.objects import is_terminal
from ascend_pd_runtime.env_contract import DEFAULT_TERMINATION_LOG, TERMINATION_LOG

RUN_CHECK_ANNOTATION = knobs.RUN_LAUNCH_CHECK
LAUNCHER = "ascend-pd-runtime"
#: kubelet reads at most this much of a termination message file
TERMINATION_MESSAGE_LIMIT = 4096
#: and under FallbackToLogsOnError at most this many log lines (and 2048 bytes)
FALLBACK_LOG_LINES, FALLBACK_LOG_BYTES = 80, 2048
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
CHECK_TIMEOUT = 300.0
#: environment every local runtime gets from this machine (an image has its own PATH etc.)
HOST_ENV = ("PATH", "LANG", "LC_ALL", "TMPDIR")

Obj = dict[str, Any]
_DNS_NAME = re.compile(
    r"(?<![A-Za-z0-9.-])((?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?\.){2,3}svc(?:\.cluster\.local)?)"
    r"(?![A-Za-z0-9-])"
)
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class NotStartable(Exception):
    """The container cannot start yet: ``reason`` is the waiting reason a kubelet reports."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Unresolved(Exception):
    """A cluster DNS name in the environment does not resolve (yet)."""


@dataclass(frozen=True)
class LocalRuntime:
    """What a registered image holds on this machine: an interpreter and its path."""

    image: str
    python: str
    pythonpath: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


def runtime_file(directory: Path, image: str) -> Path:
    return directory / (re.sub(r"[^A-Za-z0-9._-]+", "_", image) + ".json")


def register_runtime(
    directory: Path,
    image: str,
    python: str,
    pythonpath: list[str] | tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
) -> Path:
    """Register ``image`` as a local runtime (atomically: kubelet-sim may be reading)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = runtime_file(directory, image)
    doc = {"image": image, "python": python, "pythonpath": list(pythonpath), "env": dict(env or {})}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    tmp.replace(path)
    return path


def load_runtimes(directory: Path | None) -> dict[str, LocalRuntime]:
    """The registered local runtimes by image; unreadable files are skipped."""
    found: dict[str, LocalRuntime] = {}
    if directory is None or not directory.is_dir():
        return found
    for path in sorted(directory.glob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            runtime = LocalRuntime(
                image=str(doc["image"]),
                python=str(doc["python"]),
                pythonpath=tuple(str(p) for p in doc.get("pythonpath") or ()),
                env={str(k): str(v) for k, v in (doc.get("env") or {}).items()},
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        found[runtime.image] = runtime
    return found


def asks_for_check(pod: Obj, namespace_annotations: Mapping[str, str]) -> bool:
    annotations = pod.get("metadata", {}).get("annotations") or {}
    value = annotations.get(RUN_CHECK_ANNOTATION, namespace_annotations.get(RUN_CHECK_ANNOTATION))
    return str(value).lower() == "true"


def is_launcher(container: Obj) -> bool:
    """``ascend-pd-runtime launch ...`` (command plus args)."""
    words = [*(container.get("command") or []), *(container.get("args") or [])]
    return len(words) >= 2 and words[0] == LAUNCHER and words[1] == "launch"


# --------------------------------------------------------------------------- the pod's view


@dataclass
class Cluster:
    """What preparing a container reads from the API server (injected: tests pass dicts)."""

    config_map: Callable[[str, str], Obj | None]
    secret: Callable[[str, str], Obj | None]
    service: Callable[[str, str], Obj | None]
    pods: list[Obj]


@dataclass(frozen=True)
class Prepared:
    """A container ready to run: its argv, environment, and where its message lands."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    termination_file: Path
    fallback_to_logs: bool


def field_ref(pod: Obj, path: str, pod_ip: str, host_ip: str) -> str:
    meta, spec = pod.get("metadata", {}), pod.get("spec", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
    }
    if path in simple:
        return str(simple[path])
    keyed = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if keyed:
        return str((meta.get(keyed.group(1)) or {}).get(keyed.group(2), ""))
    raise NotStartable(
        "CreateContainerConfigError", f"kubelet-sim: unsupported fieldRef fieldPath {path!r}"
    )


def _expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: earlier variables only, ``$$`` escapes."""

    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _VAR_REF.sub(sub, value)


def _key_ref(kind: str, ref: Obj, namespace: str, cluster: Cluster) -> str | None:
    name, key = ref.get("name", ""), ref.get("key", "")
    reader = cluster.config_map if kind == "configMap" else cluster.secret
    obj = reader(namespace, name)
    data = (obj or {}).get("data") or {}
    if obj is None or key not in data:
        if ref.get("optional"):
            return None
        what = "configmap" if kind == "configMap" else "secret"
        missing = f"{what} {name!r} not found" if obj is None else f"key {key!r} not in {what}"
        raise NotStartable("CreateContainerConfigError", f"kubelet-sim: {missing} {name!r}")
    value = str(data[key])
    return base64.b64decode(value).decode("utf-8") if kind == "secret" else value


def container_env(
    pod: Obj, container: Obj, pod_ip: str, host_ip: str, cluster: Cluster
) -> dict[str, str]:
    """The container's environment as the kubelet would build it (envFrom, then env)."""
    namespace = pod["metadata"].get("namespace", "default")
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, ref_key in (("configMap", "configMapRef"), ("secret", "secretRef")):
            ref = source.get(ref_key)
            if not ref:
                continue
            reader = cluster.config_map if kind == "configMap" else cluster.secret
            obj = reader(namespace, ref.get("name", ""))
            if obj is None:
                if ref.get("optional"):
                    continue
                raise NotStartable(
                    "CreateContainerConfigError",
                    f"kubelet-sim: {kind} {ref.get('name')!r} not found",
                )
            for key, value in (obj.get("data") or {}).items():
                text = base64.b64decode(value).decode() if kind == "secret" else str(value)
                env[prefix + key] = text
    for item in container.get("env") or []:
        name = item["name"]
        if "valueFrom" not in item:
            env[name] = _expand(str(item.get("value", "")), env)
            continue
        source = item["valueFrom"]
        if "fieldRef" in source:
            env[name] = field_ref(pod, source["fieldRef"].get("fieldPath", ""), pod_ip, host_ip)
        elif "configMapKeyRef" in source or "secretKeyRef" in source:
            kind = "configMap" if "configMapKeyRef" in source else "secret"
            value = _key_ref(kind, source[f"{kind}KeyRef"], namespace, cluster)
            if value is not None:
                env[name] = value
        else:
            raise NotStartable(
                "CreateContainerConfigError",
                f"kubelet-sim: env {name}: unsupported valueFrom {sorted(source)}",
            )
    return env


# --------------------------------------------------------------------------- volumes


def _write_items(target: Path, data: Mapping[str, str], items: list[Obj], decode: bool) -> None:
    target.mkdir(parents=True, exist_ok=True)
    chosen = [(str(i["key"]), str(i.get("path", i["key"]))) for i in items]
    chosen = chosen or [(k, k) for k in data]
    for key, rel in chosen:
        if key not in data:
            continue
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        value = data[key]
        path.write_bytes(base64.b64decode(value) if decode else str(value).encode("utf-8"))


def materialise_volume(volume: Obj, namespace: str, scratch: Path, cluster: Cluster) -> Path:
    """This machine's directory for ``volume`` (written under ``scratch`` where needed)."""
    name = str(volume["name"])
    target = scratch / "volumes" / name
    if "hostPath" in volume:
        local = Path(volume["hostPath"].get("path", ""))
        if local.exists():
            return local
        target.mkdir(parents=True, exist_ok=True)  # e.g. the simulated node's Ascend driver
        return target
    if "emptyDir" in volume:
        target.mkdir(parents=True, exist_ok=True)
        return target
    for kind, ref_name, decode in (("configMap", "name", False), ("secret", "secretName", True)):
        if kind not in volume:
            continue
        source = volume[kind]
        reader = cluster.config_map if kind == "configMap" else cluster.secret
        obj = reader(namespace, source.get(ref_name, ""))
        if obj is None and not source.get("optional"):
            raise NotStartable(
                "ContainerCreating",
                f"kubelet-sim: volume {name!r}: {kind} {source.get(ref_name)!r} not found",
            )
        _write_items(target, (obj or {}).get("data") or {}, source.get("items") or [], decode)
        return target
    kinds = sorted(k for k in volume if k != "name")
    raise NotStartable(
        "ContainerCreating",
        f"kubelet-sim cannot mount volume {name!r} ({', '.join(kinds)}): only configMap, "
        "secret, emptyDir and hostPath volumes exist on simulated nodes",
    )


@dataclass(frozen=True)
class PathMap:
    """Container paths -> this machine's paths, longest mount first."""

    mounts: tuple[tuple[str, Path], ...]

    def local(self, path: str) -> Path | None:
        p = PurePosixPath(path)
        for mount, local in self.mounts:
            m = PurePosixPath(mount)
            if p == m:
                return local
            if m in p.parents:
                return local / p.relative_to(m)
        return None

    def rewrite(self, value: str) -> str:
        """An env value that is a path under a mount, as the local path; else unchanged."""
        if not value.startswith("/"):
            return value
        local = self.local(value)
        return str(local) if local is not None else value


def path_map(pod: Obj, container: Obj, scratch: Path, cluster: Cluster) -> PathMap:
    namespace = pod["metadata"].get("namespace", "default")
    volumes = {v["name"]: v for v in pod.get("spec", {}).get("volumes") or []}
    mounts: list[tuple[str, Path]] = []
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"])
        if volume is None:
            raise NotStartable(
                "CreateContainerConfigError",
                f"kubelet-sim: volumeMount {mount['name']!r} names no volume of the pod",
            )
        local = materialise_volume(volume, namespace, scratch, cluster)
        if mount.get("subPath"):
            local = local / mount["subPath"]
        mounts.append((mount["mountPath"], local))
    mounts.sort(key=lambda m: len(PurePosixPath(m[0]).parts), reverse=True)
    return PathMap(tuple(mounts))


# --------------------------------------------------------------------------- cluster DNS


def resolve_name(name: str, namespace_pods: list[Obj], cluster: Cluster) -> str:
    """What the cluster's DNS answers for ``name``; ``Unresolved`` when nothing (yet)."""
    labels = name.removesuffix(".cluster.local").split(".")
    if labels[-1] != "svc" or len(labels) not in (3, 4):
        raise Unresolved(name)
    if len(labels) == 4:  # <hostname>.<subdomain>.<namespace>.svc: a pod of a headless service
        host, subdomain, namespace = labels[:3]
        if cluster.service(namespace, subdomain) is None:
            raise Unresolved(f"{name}: no Service {namespace}/{subdomain}")
        for pod in namespace_pods:
            meta, spec = pod.get("metadata", {}), pod.get("spec", {})
            if (
                meta.get("namespace") == namespace
                and (spec.get("hostname") or meta.get("name")) == host
                and spec.get("subdomain") == subdomain
                and not meta.get("deletionTimestamp")
                and (ip := (pod.get("status") or {}).get("podIP"))
            ):
                return str(ip)
        raise Unresolved(f"{name}: no pod {host} with an IP under {namespace}/{subdomain}")
    service_name, namespace = labels[:2]
    service = cluster.service(namespace, service_name)
    ip = ((service or {}).get("spec") or {}).get("clusterIP")
    if not ip or ip == "None":
        raise Unresolved(f"{name}: no Service with a cluster IP")
    return str(ip)


def substitute_dns(value: str, resolve: Callable[[str], str]) -> str:
    return _DNS_NAME.sub(lambda m: resolve(m.group(1)), value)


# --------------------------------------------------------------------------- prepare and run


def prepare(
    pod: Obj,
    container: Obj,
    runtime: LocalRuntime,
    pod_ip: str,
    host_ip: str,
    cluster: Cluster,
    scratch: Path,
) -> Prepared:
    """Everything the check needs; ``NotStartable`` or ``Unresolved`` when it cannot run."""
    paths = path_map(pod, container, scratch, cluster)
    message_path = container.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH
    termination_file = scratch / "termination-log"
    termination_file.unlink(missing_ok=True)
    paths = PathMap(((message_path, termination_file), *paths.mounts))
    env = container_env(pod, container, pod_ip, host_ip, cluster)

    me = {**pod, "status": {**(pod.get("status") or {}), "podIP": pod_ip}}
    others = [
        p for p in cluster.pods if p.get("metadata", {}).get("uid") != me["metadata"].get("uid")
    ]

    def resolve(name: str) -> str:
        return resolve_name(name, [me, *others], cluster)

    env = {k: paths.rewrite(substitute_dns(v, resolve)) for k, v in env.items()}
    # the launcher writes to /dev/termination-log unless told; here that path is a file of ours
    wanted = env.get(TERMINATION_LOG) or DEFAULT_TERMINATION_LOG
    env[TERMINATION_LOG] = str(paths.local(wanted) or termination_file)
    image_env = {k: os.environ[k] for k in HOST_ENV if k in os.environ}
    image_env["HOME"] = str(scratch)
    if runtime.pythonpath:
        image_env["PYTHONPATH"] = os.pathsep.join(runtime.pythonpath)
    full_env = {**image_env, **simulated_npus(pod, container, scratch), **runtime.env, **env}
    words = [*(container.get("command") or []), *(container.get("args") or [])]
    argv = [runtime.python, "-m", "ascend_pd_runtime.cli", *words[1:], "--check"]
    workdir = container.get("workingDir")
    cwd = str(paths.local(workdir) or scratch) if workdir else str(scratch)
    policy = container.get("terminationMessagePolicy") or "File"
    return Prepared(argv, full_env, cwd, termination_file, policy == "FallbackToLogsOnError")


def npu_count(container: Obj) -> int:
    """The NPUs the device plugin gives ``container``: its ``huawei.com/Ascend910`` limit."""
    limits = (container.get("resources") or {}).get("limits") or {}
    try:
        return int(str(limits.get(ASCEND_RESOURCE, 0)))
    except ValueError:
        return 0


def simulated_npus(pod: Obj, container: Obj, scratch: Path) -> dict[str, str]:
    """The container's NPUs under ``scratch`` (``npu.write_node``) and the env naming them;
    nothing for a container that asks for none."""
    count = npu_count(container)
    if count <= 0:
        return {}
    try:
        down = knobs.npu_link_down(pod)
    except ValueError as exc:
        raise NotStartable("CreateContainerConfigError", f"kubelet-sim: {exc}") from None
    return npu.write_node(scratch / "npu", range(count), down=down)


@dataclass(frozen=True)
class Ended:
    """How one run of the check ended, as a kubelet reports a terminated container."""

    exit_code: int
    message: str
    log_tail: str


def run(prepared: Prepared, timeout: float = CHECK_TIMEOUT) -> Ended:
    try:
        done = subprocess.run(
            prepared.argv, env=prepared.env, cwd=prepared.cwd, capture_output=True,
            text=True, check=False, timeout=timeout, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        code, log = done.returncode, (done.stdout or "") + (done.stderr or "")
    except subprocess.TimeoutExpired:
        code, log = 137, f"kubelet-sim: the launcher check ran over {timeout:g} s and was killed"
    except OSError as exc:  # the runtime's python is missing: the image would not start
        code, log = 128, f"kubelet-sim: cannot run {prepared.argv[0]}: {exc}"
    code = code if code >= 0 else 128 - code  # killed by a signal: 128 + signal, as runtimes do
    message = ""
    if prepared.termination_file.exists():
        data = prepared.termination_file.read_bytes()[:TERMINATION_MESSAGE_LIMIT]
        message = data.decode("utf-8", errors="replace")
    if not message and code != 0 and prepared.fallback_to_logs:
        tail = "\n".join(log.splitlines()[-FALLBACK_LOG_LINES:])
        message = tail.encode()[-FALLBACK_LOG_BYTES:].decode("utf-8", errors="replace")
    return Ended(code, message, log[-2000:])


def scratch_dir(root: Path | None, pod: Obj, container: str) -> Path:
    """A fresh directory for one container's files."""
    base = root or Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    uid = pod["metadata"].get("uid", "nouid")
    return Path(tempfile.mkdtemp(prefix=f"{uid[:8]}-{container}-", dir=base))


def remove_scratch(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------- from the API server


def pods_asking(
    pods: list[Obj], nodes: set[str], namespaces: dict[str, dict[str, str]]
) -> set[str]:
    """Uids of the live pods on ``nodes`` with a launcher container that ask for its check
    (``namespaces``: each namespace's annotations)."""
    candidates = [
        p for p in pods
        if p.get("spec", {}).get("nodeName") in nodes
        and not is_terminal(p)
        and not p["metadata"].get("deletionTimestamp")
        and any(is_launcher(c) for c in p.get("spec", {}).get("containers") or [])
    ]  # fmt: skip
    if not candidates:
        return set()
    return {
        str(p["metadata"].get("uid"))
        for p in candidates
        if asks_for_check(p, namespaces.get(p["metadata"]["namespace"], {}))
    }


def cluster_view(api: Any, pods: list[Obj]) -> Cluster:
    """The reads a check needs, from the API server: ConfigMaps, Secrets, Services (404: None)."""
    from kubernetes.client.exceptions import ApiException

    def reader(call: Any) -> Callable[[str, str], Obj | None]:
        def read(namespace: str, name: str) -> Obj | None:
            try:
                response = call(name, namespace, _preload_content=False)
            except ApiException as err:
                if err.status == 404:
                    return None
                raise
            found: Obj = json.loads(response.data)
            return found

        return read

    return Cluster(
        config_map=reader(api.read_namespaced_config_map),
        secret=reader(api.read_namespaced_secret),
        service=reader(api.read_namespaced_service),
        pods=pods,
    )
