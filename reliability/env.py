"""The scenarios' environment: the cluster, the chart, the operator as its ServiceAccount.

``Env`` wraps one API server (the local control plane unless told otherwise): an
admin ``Kube`` client for the scenarios' own reads and writes, kubectl, the CRD, a
Helm release of the chart per set of namespaces, and ``Operator``, the real
``ascend-pd run`` started with the chart Deployment's own arguments and only the
chart ServiceAccount's token, optionally through a fault proxy.
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_dev.controlplane import cluster as dev_cluster
from ascend_pd_dev.controlplane import paths
from ascend_pd_dev.testtools.helm import ensure_helm
from ascend_pd_dev.testtools.kubectl import install_crd, kubectl_path
from ascend_pd_dev.testtools.local_run import LocalOperator
from ascend_pd_dev.testtools.rbac import service_account_kubeconfig
from ascend_pd_operator.kubeio.kube import Connection, Kube

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "ascend-pd-operator"
Json = dict[str, Any]


class ScenarioError(RuntimeError):
    """The environment could not be set up (not a finding about the operator)."""


def wait_for(
    predicate: Callable[[], Any], timeout: float, interval: float = 0.3
) -> tuple[Any, float]:
    """Poll until ``predicate()`` is truthy: (its value or the last falsy one, seconds)."""
    started = time.monotonic()
    while True:
        value = predicate()
        elapsed = time.monotonic() - started
        if value or elapsed >= timeout:
            return value, elapsed
        time.sleep(interval)


#: The scenarios' own control plane: this many simulated nodes of this many NPUs each.
SCENARIO_NODES = 8
SCENARIO_NPUS_PER_NODE = 8


@contextlib.contextmanager
def scenario_cluster(
    progress: Callable[[str], None] = lambda _: None, state: str = "reliability"
) -> Iterator[Path]:
    """The kubeconfig of a local control plane of the scenarios' own (8 nodes × 8 NPUs),
    started from empty and stopped afterwards: the table never depends on what ran before
    (the demo's deployment once held 48 of the 64 simulated NPUs the scenarios need)."""
    layout = dev_cluster.Layout(paths.scratch_state_dir(state))
    dev_cluster.fresh(
        layout, nodes=SCENARIO_NODES, ascend_per_node=SCENARIO_NPUS_PER_NODE, progress=progress
    )
    try:
        yield layout.kubeconfig
    finally:
        dev_cluster.down(layout, progress)


@dataclass
class Env:
    kubeconfig: Path
    workdir: Path
    kube: Kube = field(init=False)
    #: The kubernetes client library's client, for the samplers' typed reads.
    api_client: Any = field(init=False)
    server_version: tuple[int, int] = field(init=False)

    def __post_init__(self) -> None:
        from kubernetes import client, config

        api_client = config.new_client_from_config(config_file=str(self.kubeconfig))
        self.api_client = api_client
        self.kube = Kube(Connection.from_kubeconfig(self.kubeconfig))
        info = client.VersionApi(api_client).get_code()
        self.server_version = (int(info.major), int("".join(c for c in info.minor if c.isdigit())))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._helm = str(ensure_helm(quiet=True))

    # --- kubectl and helm -------------------------------------------------------------

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(kubectl_path()), "--kubeconfig", str(self.kubeconfig), *args],
            input=input, capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise ScenarioError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done

    def apply(self, docs: list[Json], check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs), check=check)

    def get_json(self, *args: str) -> Json | None:
        done = self.kubectl("get", *args, "-o", "json", check=False)
        return json.loads(done.stdout) if done.returncode == 0 else None

    def helm(self, *args: str) -> str:
        done = subprocess.run(
            [self._helm, "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True, text=True, check=False, timeout=600,
        )  # fmt: skip
        if done.returncode != 0:
            raise ScenarioError(f"helm {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    # --- namespaces, CRD, chart ---------------------------------------------------------

    def new_namespace(self, prefix: str) -> str:
        name = f"rel-{prefix}-{uuid.uuid4().hex[:5]}"
        self.kubectl("create", "namespace", name)
        return name

    def delete_namespace(self, name: str, wait: bool = False) -> None:
        """Delete ``name``; ``wait``: until it is gone, so its pods' NPUs are free again."""
        self.kubectl("delete", "namespace", name, f"--wait={str(wait).lower()}",
                     "--timeout=300s", "--ignore-not-found", check=False)  # fmt: skip

    def install_crd(self) -> None:
        # The CRD is cluster-wide and shared with other tests: apply ours, take its fields.
        install_crd(self.kubeconfig, "ascend-pd-reliability")

    def install_chart(self, watched: list[str], *values: str) -> Release:
        """A release of the chart in a namespace of its own, watching ``watched``."""
        namespace = self.new_namespace("chart")
        fullname = f"apd-{namespace.rsplit('-', 1)[-1]}"
        self.helm("install", "apd", str(CHART), "--namespace", namespace,
                  "--set", f"fullnameOverride={fullname}", "--set", "crds.install=false",
                  "--set", f"watch.namespaces={{{','.join(watched)}}}", *values,
                  "--wait", "--timeout", "5m")  # fmt: skip
        deployment = self.get_json("-n", namespace, "deployment", fullname)
        if deployment is None:
            raise ScenarioError(f"the chart's Deployment {namespace}/{fullname} is missing")
        token_config = service_account_kubeconfig(
            self.kubeconfig, namespace, fullname, self.workdir / f"{fullname}.kubeconfig"
        )
        return Release(self, namespace, fullname, deployment, token_config)

    def uninstall(self, release: Release) -> None:
        with contextlib.suppress(ScenarioError):
            self.helm("uninstall", "apd", "--namespace", release.namespace)
        self.delete_namespace(release.namespace)


@dataclass
class Release:
    env: Env
    namespace: str
    fullname: str
    deployment: Json
    token_kubeconfig: Path

    def token(self) -> str:
        doc = yaml.safe_load(self.token_kubeconfig.read_text())
        return str(doc["users"][0]["user"]["token"])

    def proxied_kubeconfig(self, proxy_url: str, name: str) -> Path:
        """A kubeconfig holding only the ServiceAccount token, with the proxy as server."""
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": proxy_url}}],
            "users": [{"name": "sa", "user": {"token": self.token()}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "sa"}}],
            "current-context": "proxy",
        }
        target = self.env.workdir / f"{name}.kubeconfig"
        target.write_text(yaml.safe_dump(doc))
        target.chmod(0o600)
        return target

    def ca_file(self) -> str:
        doc = yaml.safe_load(self.env.kubeconfig.read_text())
        cluster = doc["clusters"][0]["cluster"]
        if "certificate-authority-data" in cluster:
            target = self.env.workdir / f"{self.fullname}-ca.crt"
            target.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
            return str(target)
        ca = Path(cluster["certificate-authority"])
        return str(ca if ca.is_absolute() else self.env.kubeconfig.parent / ca)

    def server(self) -> str:
        doc = yaml.safe_load(self.env.kubeconfig.read_text())
        return str(doc["clusters"][0]["cluster"]["server"])

    def operator(
        self,
        namespaces: list[str],
        log_name: str,
        resync_seconds: float = 5.0,
        kubeconfig: Path | None = None,
        identity: str = "",
        extra_args: tuple[str, ...] = (),
    ) -> Operator:
        """``ascend-pd run`` with the chart Deployment's args, scoped to ``namespaces``."""
        deployment = json.loads(json.dumps(self.deployment))
        (container,) = [
            c for c in deployment["spec"]["template"]["spec"]["containers"]
            if c["name"] == "operator"
        ]  # fmt: skip
        # The release watches every scenario namespace; each operator serves only its own.
        args = [a for a in container["args"] if not a.startswith("--namespace")]
        container["args"] = [*(f"--namespace={ns}" for ns in namespaces), *args]
        if identity:
            deployment["metadata"]["name"] = identity
        log = self.env.workdir / f"{log_name}.log"
        return Operator(
            deployment,
            kubeconfig or self.token_kubeconfig,
            log,
            ("--resync-seconds", str(resync_seconds), *extra_args),
        )


class Operator:
    """A (re)startable ``ascend-pd run``; each start appends to one log."""

    def __init__(
        self, deployment: Json, kubeconfig: Path, log: Path, extra_args: tuple[str, ...]
    ) -> None:
        self.deployment = deployment
        self.kubeconfig = kubeconfig
        self.log = log
        self.extra_args = extra_args
        self.process: LocalOperator | None = None
        self.starts = 0
        self._logs: list[str] = []

    def start(self, wait_healthy: bool = True, timeout: float = 120.0) -> None:
        self.starts += 1
        part = self.log.with_suffix(f".{self.starts}.log")
        self.process = LocalOperator(self.deployment, self.kubeconfig, part, self.extra_args)
        self._logs.append(str(part))
        if wait_healthy:
            healthy, _ = wait_for(self.process.healthy, timeout, 0.2)
            if not healthy:
                raise ScenarioError(f"the operator was not healthy within {timeout:.0f}s")

    def kill(self) -> None:
        """SIGKILL the whole process group, as the kernel or a node loss would."""
        if self.process is None:
            return
        self.process.kill()
        self.process = None

    def stop(self) -> bool:
        """SIGTERM; True when it exited on its own (not SIGKILLed after the grace period)."""
        if self.process is None:
            return True
        clean = self.process.stop(timeout=30.0)
        self.process = None
        return clean

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def alive(self) -> bool:
        return self.process is not None and self.process.process.poll() is None

    def log_text(self) -> str:
        return "".join(Path(p).read_text(errors="replace") for p in self._logs if Path(p).exists())

    def log_paths(self) -> Iterator[str]:
        yield from self._logs
