"""Operator figures on a local control plane: convergence, idle API writes and memory.

The operator runs as ``ascend-pd run`` (a local process, the admin kubeconfig pointed at
the fault proxy, a process of its own with every fault rate at zero, so it only counts
requests) against a control plane of its own (``.dev/bench``: ``BENCH_NODES`` simulated
nodes, enough NPUs for every pod here, and no load from the e2e suite sharing the dev
cluster). It is brought up if needed and stopped again if this run started it.

- one CR: from the apply request (the API call ``kubectl apply --server-side`` makes) to
  every child existing, and to phase Ready through kubelet-sim; ``runs`` runs, one after
  the other;
- for each N of ``scales`` (10, 100, 300), in a namespace of its own: first a bare client
  (``bare_client``: the same 12 N server-side applies through the same proxy, with the
  operator's concurrency, nothing else) until all those objects exist, its namespace then
  deleted; then N CRs applied at once (10 concurrent apply requests) until all their
  children exist and until all are Ready, and the operator's RSS. The ratio operator /
  bare client is each run's own, side by side on one control plane; the per-CR time at the
  largest N against the reference N says whether the cost grows linearly; the RSS slope
  per Ready CR is a least-squares line through 0 and every N. Each N's namespace is deleted
  (and gone) before the next N starts;
- idle: write calls through the proxy during ``idle_seconds`` (``ASCEND_PD_BENCH_IDLE_SECONDS``,
  120) with the ``reference`` CRs Ready and a resync every ``resync_seconds``;

``FULL`` holds the sizes ``make bench`` uses; ``SMOKE`` the test suite's tiny ones.

Children and readiness are timed from watch events, never by polling.
"""

from __future__ import annotations

import json
import operator
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from ascend_pd_dev.controlplane import cluster as dev_cluster
from ascend_pd_dev.controlplane import paths, procs
from ascend_pd_dev.controlplane.certs import Pki
from ascend_pd_dev.controlplane.operator_venv import operator_python
from ascend_pd_dev.testtools.faultproxy import STATS_PATH
from ascend_pd_dev.testtools.kubectl import install_crd, kubectl_path
from ascend_pd_dev.testtools.local_run import OperatorProcess, free_port, stop_child_group
from ascend_pd_operator.api import models
from ascend_pd_operator.api.vocabulary import LABEL_DEPLOYMENT
from ascend_pd_operator.kubeio.kube import Connection, Kube
from ascend_pd_operator.wiring.render_cli import render
from ascend_pd_operator.wiring.run_cli import DEFAULT_WORKERS
from bench import bare_client
from bench.rows import Row, median_row, percentile, row
from reliability.specs import RUNTIME_IMAGE, document

BENCH_NODES = 40
#: 40 x 16 NPUs: room for the largest scale's deployments of 2 NPUs each (one scale's
#: namespace at a time).
BENCH_NPUS_PER_NODE = 16
GOAL_ONE_P95_S = 1.0
#: The operator against a bare client doing the same applies, at every scale.
GOAL_VS_BARE = 1.5
#: Per-CR time at the largest scale against the reference scale: linear growth.
GOAL_PER_CR_GROWTH = 1.2
GOAL_RSS_MIB = 100.0
#: A scaler's spec.replicas raised by one until the new instance's StatefulSet exists.
GOAL_SCALER_P95_S = 2.0
GOAL_RSS_SLOPE_MIB = 0.3
WATCHED = ("ConfigMap", "Service", "StatefulSet", "Deployment")


@dataclass(frozen=True)
class Sizes:
    runs: int
    #: Deployments applied at once, one scale after the other; the last two are the
    #: growth ratio's numerator and reference (``reference``).
    scales: tuple[int, ...]
    resync_seconds: int
    idle_seconds: float
    #: Whole measurements, each on a control plane and an operator started afresh; every
    #: figure is their median, with min and max.
    repeats: int

    @property
    def reference(self) -> int:
        """The scale of the RSS goal, the idle window and the growth ratio's denominator."""
        return self.scales[-2] if len(self.scales) > 1 else self.scales[0]


FULL = Sizes(
    runs=20,
    scales=(10, 100, 300),
    resync_seconds=10,
    idle_seconds=float(os.environ.get("ASCEND_PD_BENCH_IDLE_SECONDS", "120")),
    repeats=3,
)
#: The test suite's smoke run (on the e2e cluster): every code path, no meaningful figure.
SMOKE = Sizes(runs=2, scales=(1, 2), resync_seconds=1, idle_seconds=2.0, repeats=1)

MODEL_CONFIG = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "model_type": "deepseek_v2",
    "num_hidden_layers": 27,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "torch_dtype": "bfloat16",
}


def _progress(message: str) -> None:
    print(f"bench_operator: {message}", file=sys.stderr, flush=True)


def config_map(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "bench-model", "namespace": namespace},
        "data": {"config.json": json.dumps(MODEL_CONFIG)},
    }


def pddeployment(name: str, namespace: str, max_replicas: int = 4) -> dict[str, Any]:
    """A small deployment: one prefill and one decode instance of one NPU, a router; both
    roles scaled (External: a PDRoleScaler each, from 1 to ``max_replicas``). On the pod
    network: in the host network every runtime pod takes the same host ports, so the
    scheduler would place one per node and 300 deployments would need 600 nodes."""
    scaling = {"mode": "External", "minReplicas": 1, "maxReplicas": max_replicas}
    role = {"replicas": 1, "parallelism": {"tensor": 1}, "devicesPerNode": 1, "scaling": scaling}
    model = {
        "name": "deepseek-v2-lite",
        "path": "/models/DeepSeek-V2-Lite",
        "configMapRef": {"name": "bench-model"},
    }
    return document(
        name,
        namespace,
        {
            "model": model,
            "runtime": {"image": RUNTIME_IMAGE},
            "prefill": role,
            "decode": role,
            "router": {"policy": "round_robin"},
            "ascend": {"hostNetwork": False},
        },
    )


def rendered(cr: dict[str, Any]) -> list[dict[str, Any]]:
    """Every child's manifest, from the operator's own offline builders."""
    ns = cr["metadata"]["namespace"]
    code, manifests, message = render(cr, None, ns, [config_map(ns)])
    if code != 0:
        raise RuntimeError(f"bench CR does not render: {message}")
    return list(manifests)


def expected_children(cr: dict[str, Any]) -> set[tuple[str, str]]:
    """(kind, name) of every child, from the operator's own offline builders."""
    return {(m["kind"], m["metadata"]["name"]) for m in rendered(cr)}


class Recorder:
    """First-seen times of children and first Ready time of PDDeployments, from watches."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        self.api_client = api_client
        self.namespace = namespace
        self.children: dict[tuple[str, str], float] = {}
        self.ready: dict[str, float] = {}
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        #: One per watch, set once the API server has answered its first watch request:
        #: from then on it sends every change (a clock started earlier would count the
        #: time to connect as the operator's).
        self.connected: list[threading.Event] = []

    def start(self) -> Recorder:
        from kubernetes import client

        core, apps = client.CoreV1Api(self.api_client), client.AppsV1Api(self.api_client)
        custom = client.CustomObjectsApi(self.api_client)
        rbac = client.RbacAuthorizationV1Api(self.api_client)

        def pdbs(namespace: str, **kw: Any) -> Any:
            return custom.list_namespaced_custom_object(
                "policy", "v1", namespace, "poddisruptionbudgets", **kw
            )

        lists: dict[str, Callable[..., Any]] = {
            "ConfigMap": core.list_namespaced_config_map,
            "Service": core.list_namespaced_service,
            "ServiceAccount": core.list_namespaced_service_account,
            "Role": rbac.list_namespaced_role,
            "RoleBinding": rbac.list_namespaced_role_binding,
            "PodDisruptionBudget": pdbs,
            "StatefulSet": apps.list_namespaced_stateful_set,
            "Deployment": apps.list_namespaced_deployment,
        }
        for kind, fn in lists.items():
            self._thread(kind, lambda fn=fn, **kw: fn(self.namespace, **kw))

        def pdds(**kw: Any) -> Any:
            return custom.list_namespaced_custom_object(
                models.GROUP, models.VERSION, self.namespace, models.PLURAL, **kw
            )

        self._thread(models.KIND, pdds)

        def scalers(**kw: Any) -> Any:
            return custom.list_namespaced_custom_object(
                models.GROUP, models.VERSION, self.namespace, models.SCALER_PLURAL, **kw
            )

        self._thread(models.SCALER_KIND, scalers)
        deadline = time.monotonic() + 120
        for event in self.connected:
            if not event.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError("the recorder's watches did not connect within 120 s")
        return self

    def _thread(self, kind: str, list_fn: Callable[..., Any]) -> None:
        connected = threading.Event()
        self.connected.append(connected)
        thread = threading.Thread(target=self._watch, args=(kind, list_fn, connected), daemon=True)
        thread.start()
        self.threads.append(thread)

    def _watch(self, kind: str, list_fn: Callable[..., Any], connected: threading.Event) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        while not self.stop.is_set():
            try:
                # The watch request by hand: its answer's headers say the server watches
                # for us, before any event (the client's Watch.stream says nothing then).
                response = list_fn(watch=True, timeout_seconds=20, _preload_content=False)
                connected.set()
                for line in iter_resp_lines(response):
                    event = json.loads(line)
                    if event["type"] != "ERROR":
                        self._record(kind, event["object"], time.monotonic())
                    if self.stop.is_set():
                        response.close()
                        return
            except Exception as exc:  # a dropped watch: start again (times are first-seen)
                if not self.stop.is_set():
                    _progress(f"watch of {kind} restarted: {exc}")
                    time.sleep(0.2)

    def _record(self, kind: str, obj: Any, now: float) -> None:
        with self.cond:
            if kind == models.KIND:
                if (obj.get("status") or {}).get("phase") == "Ready":
                    self.ready.setdefault(obj["metadata"]["name"], now)
            elif (obj["metadata"].get("labels") or {}).get(LABEL_DEPLOYMENT):
                self.children.setdefault((kind, obj["metadata"]["name"]), now)
            self.cond.notify_all()

    def wait(self, done: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not done():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"gave up waiting for {what} after {timeout:.0f} s")
                self.cond.wait(min(left, 1.0))

    def all_children(self, wanted: set[tuple[str, str]]) -> float | None:
        times = [self.children.get(key) for key in wanted]
        return None if None in times else max(t for t in times if t is not None)


class Bench:
    def __init__(self, layout: dev_cluster.Layout, workdir: Path, sizes: Sizes) -> None:
        from kubernetes import config

        self.layout = layout
        self.sizes = sizes
        self.workdir = workdir
        self.api_client = config.new_client_from_config(config_file=str(layout.kubeconfig))  # type: ignore[no-untyped-call]
        self.kube = Kube(Connection.from_kubeconfig(layout.kubeconfig))
        suffix = uuid.uuid4().hex[:5]
        self.ns_one = f"bench-one-{suffix}"
        self.ns_scale = {n: f"bench-scale-{n}-{suffix}" for n in sizes.scales}
        self.ns_bare = {n: f"bench-bare-{n}-{suffix}" for n in sizes.scales}
        doc = yaml.safe_load(layout.kubeconfig.read_text())
        self.token = str(doc["users"][0]["user"]["token"])
        self.proxy: subprocess.Popen[bytes] | None = None
        self.operator: OperatorProcess | None = None

    def kubectl(self, *args: str, input: str | None = None) -> str:
        cmd = [str(kubectl_path()), "--kubeconfig", str(self.layout.kubeconfig), *args]
        done = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr}")
        return done.stdout

    def apply(self, obj: dict[str, Any]) -> None:
        """Server-side apply as a user's ``kubectl apply --server-side`` would."""
        from ascend_pd_operator.api.access import resource_for
        from ascend_pd_operator.kubeio.kube import path

        meta = obj["metadata"]
        url = path(resource_for(obj["kind"]), meta["namespace"], meta["name"])
        self.kube.request("PATCH", url, body=obj, query=[("fieldManager", "ascend-pd-bench")],
                          content_type="application/apply-patch+yaml")  # fmt: skip

    # --- set-up ----------------------------------------------------------------------------

    def start(self) -> None:
        install_crd(self.layout.kubeconfig, field_manager="bench")
        for ns in (self.ns_one, *self.ns_scale.values()):
            self.kubectl("create", "namespace", ns)
            self.apply(config_map(ns))
        state = dev_cluster.load_state(self.layout)
        assert state is not None
        # Its own process: a proxy thread here would share a GIL with the watches.
        self.proxy_url = f"http://127.0.0.1:{free_port()}"
        self.proxy = subprocess.Popen(
            [sys.executable, "-m", "ascend_pd_dev.testtools.faultproxy", "--upstream", state.server,
             "--ca-file", str(Pki(self.layout.pki).ca_crt),
             "--port", self.proxy_url.rsplit(":", 1)[1]],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=(self.workdir / "proxy.log").open("w"), start_new_session=True,
        )  # fmt: skip
        _until(lambda: self._answers(self.proxy_url + STATS_PATH), "the fault proxy", 60)
        doc = yaml.safe_load(self.layout.kubeconfig.read_text())
        doc["clusters"][0]["cluster"] = {"server": self.proxy_url}
        kubeconfig = self.workdir / "operator.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(doc))
        kubeconfig.chmod(0o600)
        args = ["--namespace", self.ns_one, "--resync-seconds", str(self.sizes.resync_seconds)]
        for ns in self.ns_scale.values():
            args += ["--namespace", ns]
        # the image's packages, not the dev venv's (kopf would import the kubernetes library)
        python = operator_python()
        self.operator = OperatorProcess(args, kubeconfig, self.workdir / "operator.log",
                                        python=python)  # fmt: skip
        _until(self.operator.healthy, "the operator's liveness endpoint", 120)

    @staticmethod
    def _answers(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def rss_mib(self) -> float:
        assert self.operator is not None
        return self.operator.rss_mib()

    def cpu(self) -> Cpu:
        """CPU seconds the API server and the operator have used so far."""
        assert self.operator is not None and self.operator.process is not None
        server = procs.running(self.layout.pid_file("kube-apiserver"))
        return Cpu(cpu_seconds(server.pid) if server else 0.0,
                   cpu_seconds(self.operator.process.pid))  # fmt: skip

    def operator_log(self) -> str:
        assert self.operator is not None
        return self.operator.log.read_text()

    def proxy_stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.proxy_url + STATS_PATH, timeout=10) as response:
            stats: dict[str, Any] = json.loads(response.read())
        return stats

    def stop(self) -> None:
        if self.operator is not None:
            self.operator.stop()
        if self.proxy is not None:
            stop_child_group(self.proxy)
        for ns in (self.ns_one, *self.ns_scale.values(), *self.ns_bare.values()):
            subprocess.run(
                [str(kubectl_path()), "--kubeconfig", str(self.layout.kubeconfig), "delete",
                 "namespace", ns, "--wait=false", "--ignore-not-found"],
                capture_output=True, check=False, timeout=120,
            )  # fmt: skip

    # --- figures ---------------------------------------------------------------------------

    def one_cr(self) -> tuple[list[float], list[float]]:
        rec = Recorder(self.api_client, self.ns_one).start()
        to_children: list[float] = []
        to_ready: list[float] = []
        try:
            for i in range(self.sizes.runs):
                cr = pddeployment(f"one-{i}", self.ns_one)
                wanted = expected_children(cr)
                children, ready = self._converge(rec, cr, wanted)
                to_children.append(children)
                to_ready.append(ready)
        finally:
            rec.stop.set()
        return to_children, to_ready

    def scaler_steps(self) -> list[float]:
        """A scaled deployment's decode scaler raised by one, ``runs`` times: seconds from
        the request that sets its spec.replicas until the new instance's StatefulSet exists."""
        rec = Recorder(self.api_client, self.ns_one).start()
        cr = pddeployment("scaled", self.ns_one, max_replicas=self.sizes.runs + 1)
        seconds: list[float] = []
        try:
            self._converge(rec, cr, expected_children(cr))
            url = (f"/apis/{models.GROUP}/{models.VERSION}/namespaces/{self.ns_one}/"
                   f"{models.SCALER_PLURAL}/scaled-decode")  # fmt: skip
            for step in range(1, self.sizes.runs + 1):
                new = ("StatefulSet", f"scaled-decode-{step}")
                t0 = time.monotonic()
                self.kube.request("PATCH", url, body={"spec": {"replicas": step + 1}},
                                  content_type="application/merge-patch+json")  # fmt: skip
                rec.wait(partial(operator.contains, rec.children, new), new[1], 60)
                seconds.append(rec.children[new] - t0)
        finally:
            rec.stop.set()
        return seconds

    def _converge(
        self, rec: Recorder, cr: dict[str, Any], wanted: set[tuple[str, str]]
    ) -> tuple[float, float]:
        name = cr["metadata"]["name"]
        t0 = time.monotonic()
        self.apply(cr)
        rec.wait(lambda: rec.all_children(wanted) is not None, f"{name} children", 60)
        rec.wait(lambda: name in rec.ready, f"{name} Ready", 120)
        return (rec.all_children(wanted) or 0) - t0, rec.ready[name] - t0

    def delete_namespace(self, ns: str) -> None:
        """Delete ``ns`` and wait until it is gone, so its objects load no later figure."""
        self.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=600s")

    def bare(self, count: int) -> tuple[float, float]:
        """The same applies the operator makes for ``count`` deployments, from a bare client
        with the operator's concurrency, through the same proxy: seconds until all exist,
        and the API server's CPU seconds meanwhile."""
        ns = self.ns_bare[count]
        self.kubectl("create", "namespace", ns)
        crs = [pddeployment(f"scale-{i:03d}", ns) for i in range(count)]
        # the operator applies each kind at its allow-list version, as rendered offline
        groups = [rendered(cr) for cr in crs]
        wanted = {(m["kind"], m["metadata"]["name"]) for g in groups for m in g}
        rec = Recorder(self.api_client, ns).start()
        try:
            cpu0, t0 = self.cpu(), time.monotonic()
            bare_client.apply_all(self.proxy_url, self.token, groups, DEFAULT_WORKERS)
            rec.wait(lambda: rec.all_children(wanted) is not None, "all bare children", 600)
            seconds = (rec.all_children(wanted) or 0) - t0
            server_cpu = self.cpu().server - cpu0.server
        finally:
            rec.stop.set()
        self.delete_namespace(ns)
        return seconds, server_cpu

    def scale(self, count: int) -> tuple[float, float, int, int, Cpu]:
        """Seconds until all children exist and until all Ready, children, and the
        operator's requests through the proxy and the CPU seconds of the API server and of
        the operator until all children existed."""
        ns = self.ns_scale[count]
        rec = Recorder(self.api_client, ns).start()
        crs = [pddeployment(f"scale-{i:03d}", ns) for i in range(count)]
        wanted: set[tuple[str, str]] = set().union(*(expected_children(cr) for cr in crs))
        names = {cr["metadata"]["name"] for cr in crs}
        try:
            before, cpu0 = self.proxy_stats(), self.cpu()
            t0 = time.monotonic()
            with ThreadPoolExecutor(10) as pool:
                list(pool.map(self.apply, crs))
            rec.wait(lambda: rec.all_children(wanted) is not None, "all children", 600)
            cpu = self.cpu() - cpu0
            after = self.proxy_stats()
            requests = after["requests"] - before["requests"] - 1  # less the stats GET
            per_cr = kinds_between(before, after, count)
            _progress(f"{count} CRs: requests per CR until all children exist: {per_cr}")
            rec.wait(lambda: names <= set(rec.ready), f"{count} Ready", 1200)
            children = (rec.all_children(wanted) or 0) - t0
            ready = max(rec.ready[n] for n in names) - t0
        finally:
            rec.stop.set()
        return children, ready, len(wanted), requests, cpu

    def idle(self) -> tuple[dict[str, int], int]:
        # Let the last status patches and the first resync after Ready pass.
        resync, idle = self.sizes.resync_seconds, self.sizes.idle_seconds
        time.sleep(2 * resync)
        before = self.proxy_stats()
        _progress(f"idle window: {idle:.0f} s, resync every {resync} s")
        time.sleep(idle)
        after = self.proxy_stats()
        _progress(f"idle window: requests by kind: {kinds_between(before, after)}")
        verbs = set(before["writes"]) | set(after["writes"])
        writes = {v: after["writes"].get(v, 0) - before["writes"].get(v, 0) for v in verbs}
        return {v: n for v, n in writes.items() if n}, after["requests"] - before["requests"]


def kinds_between(before: dict[str, Any], after: dict[str, Any], per: int = 1) -> str:
    """The proxy's requests by kind (``faultproxy.request_kind``) between two of its
    stats, most first, divided by ``per``."""
    kinds = {k: n - before["kinds"].get(k, 0) for k, n in after["kinds"].items()}
    ordered = sorted(((n, k) for k, n in kinds.items() if n), reverse=True)
    return ", ".join(f"{k} {n / per:.{2 if per > 1 else 0}f}" for n, k in ordered) or "none"


def _until(check: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(0.2)


@dataclass(frozen=True)
class Scale:
    """One scale's figures: N deployments applied at once."""

    count: int
    #: The operator, from the first apply request until all 12 N children exist (watch).
    children: float
    ready: float
    #: A bare client's same applies (``bare_client``), side by side on the same plane.
    bare: float
    rss: float
    #: The operator's API requests (through the proxy) until all children existed.
    requests: int = 0
    #: CPU seconds of the API server and of the operator until all children existed.
    cpu: Cpu = field(default_factory=lambda: Cpu(0.0, 0.0))
    #: The API server's CPU seconds during the bare client's run.
    bare_server_cpu: float = 0.0

    @property
    def vs_bare(self) -> float:
        return self.children / self.bare

    @property
    def server_cpu_vs_bare(self) -> float | None:
        """The API server's work for the operator's run over its work for the bare client's
        (None where not measured)."""
        return self.cpu.server / self.bare_server_cpu if self.bare_server_cpu > 0 else None


class Cpu(NamedTuple):
    """CPU seconds (user and system) of the API server and of the operator process."""

    server: float
    operator: float

    def __sub__(self, other: object) -> Cpu:
        assert isinstance(other, Cpu)
        return Cpu(self.server - other.server, self.operator - other.operator)


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds ``pid`` has used (``/proc/PID/stat``); 0 once gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()  # the name may hold spaces and parens
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Figures:
    """One whole measurement (a fresh operator; a fresh control plane unless given one)."""

    one_children: list[float]
    one_ready: list[float]
    scales: list[Scale]
    children_per_cr: int
    writes: dict[str, int]
    requests: int
    rss_0: float
    #: a scaler raised by one until the new instance's StatefulSet exists, per step
    scaler_steps: list[float] = field(default_factory=list)

    def at(self, count: int) -> Scale:
        (found,) = [s for s in self.scales if s.count == count]
        return found

    def rss_slope(self) -> float:
        """MiB per Ready CR: the least-squares line through (0, RSS at rest) and every scale."""
        return slope(
            [0, *(s.count for s in self.scales)], [self.rss_0, *(s.rss for s in self.scales)]
        )

    def growth(self, big: int, reference: int, bare: bool = False) -> float:
        """Per-CR time at ``big`` CRs over the per-CR time at ``reference`` CRs."""
        a, b = self.at(big), self.at(reference)
        time_a, time_b = (a.bare, b.bare) if bare else (a.children, b.children)
        return (time_a / big) / (time_b / reference)


def slope(xs: list[int], ys: list[float]) -> float:
    """The least-squares slope of ``ys`` over ``xs``."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def measure(sizes: Sizes, layout: dev_cluster.Layout, workdir: Path) -> Figures:
    """One measurement on ``layout``'s control plane; logs go to ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    bench = Bench(layout, workdir, sizes)
    scales: list[Scale] = []
    writes: dict[str, int] = {}
    requests = 0
    try:
        bench.start()
        time.sleep(3)  # the operator's start-up allocations settle before RSS at rest
        rss_0 = bench.rss_mib()
        _progress(f"one CR, {sizes.runs} runs")
        one_children, one_ready = bench.one_cr()
        _progress(f"a scaler raised by one, {sizes.runs} times")
        scaler_steps = bench.scaler_steps()
        bench.delete_namespace(bench.ns_one)
        for index, count in enumerate(sizes.scales):
            _progress(f"{count} CRs: the bare client's applies")
            bare, bare_server_cpu = bench.bare(count)
            _progress(f"{count} CRs at once (bare client: {bare:.2f} s, API server CPU "
                      f"{bare_server_cpu:.1f} s)")  # fmt: skip
            children, ready, total, requests, cpu = bench.scale(count)
            _progress(f"{count} CRs: CPU until all children exist: API server {cpu.server:.1f} "
                      f"s, operator {cpu.operator:.1f} s")  # fmt: skip
            time.sleep(sizes.resync_seconds)  # one resync with everything Ready
            scales.append(Scale(count, children, ready, bare, bench.rss_mib(), requests,
                                cpu, bare_server_cpu))  # fmt: skip
            _progress(f"{count} CRs: children {children:.2f} s (bare {bare:.2f} s), Ready "
                      f"{ready:.2f} s, RSS {rss_0:.1f} -> {scales[-1].rss:.1f} MiB")  # fmt: skip
            if count == sizes.reference:
                writes, requests = bench.idle()
            if index + 1 < len(sizes.scales):
                bench.delete_namespace(bench.ns_scale[count])
        log_text = bench.operator_log()
        if "Traceback" in log_text:
            _progress(f"the operator logged a traceback:\n{log_text[-3000:]}")
    finally:
        bench.stop()
    _progress(f"idle writes {writes or 'none'}")
    return Figures(one_children, one_ready, scales, total // sizes.scales[-1], writes,
                   requests, rss_0, scaler_steps)  # fmt: skip


def measured_row(figure: str, values: list[float | None], unit: str, digits: int) -> Row:
    """A row without a goal over the runs that measured it (none: no value)."""
    measured = [v for v in values if v is not None]
    return median_row(figure, measured, unit, digits) if measured else row(figure, None, unit)


def rows_from(runs: list[Figures], sizes: Sizes) -> list[Row]:
    """The table: each figure's median over ``runs`` with min and max; a ratio is each run's
    own (side by side in one run), then their median; the idle writes are judged by the
    worst run (every run must be quiet)."""
    n, ref, resync = sizes.runs, sizes.reference, sizes.resync_seconds
    big = sizes.scales[-1]
    per_cr = runs[0].children_per_cr
    writes = [sum(r.writes.values()) for r in runs]
    verbs = sorted({v for r in runs for v in r.writes})
    detail = ", ".join(f"{v} {sum(r.writes.get(v, 0) for r in runs)}" for v in verbs) or "none"
    worst = max(writes)
    med = statistics.median
    rows = [
        median_row(f"one CR, apply request to every child created, median of {n}",
                   [med(r.one_children) for r in runs], "s", 3),
        median_row(f"one CR, apply request to every child created, p95 of {n}",
                   [percentile(r.one_children, 0.95) for r in runs], "s", 3,
                   f"< {GOAL_ONE_P95_S:g} s", lambda v: v < GOAL_ONE_P95_S),
        median_row(f"one CR, apply request to Ready (kubelet-sim), median of {n}",
                   [med(r.one_ready) for r in runs], "s", 3),
        median_row(f"one CR, apply request to Ready (kubelet-sim), p95 of {n}",
                   [percentile(r.one_ready, 0.95) for r in runs], "s", 3),
        median_row(f"a scaler's spec.replicas + 1 to the new instance's StatefulSet, p95 of {n}",
                   [percentile(r.scaler_steps, 0.95) for r in runs], "s", 3,
                   f"< {GOAL_SCALER_P95_S:g} s", lambda v: v < GOAL_SCALER_P95_S),
    ]  # fmt: skip
    for count in sizes.scales:
        at = [r.at(count) for r in runs]
        children = per_cr * count
        op_s, bare_s = med([a.children for a in at]), med([a.bare for a in at])
        rows += [
            median_row(f"{count} CRs applied at once: operator until all {children} children "
                       "exist", [a.children for a in at], "s", 2),
            median_row(f"{count} CRs: bare client, the same {children} server-side applies "
                       f"({DEFAULT_WORKERS} threads as the operator's {DEFAULT_WORKERS} workers, "
                       "one keep-alive connection each, same proxy), until all exist",
                       [a.bare for a in at], "s", 2),
            median_row(f"operator / bare client, {count} CRs, until all children exist "
                       f"(medians {op_s:.2f} s / {bare_s:.2f} s; ratio per run)",
                       [a.vs_bare for a in at], "x", 2,
                       f"<= {GOAL_VS_BARE:g}", lambda v: v <= GOAL_VS_BARE),
            median_row(f"{count} CRs: operator API requests per CR until all children exist "
                       f"(the bare client: {per_cr})", [a.requests / count for a in at],
                       "requests", 1),
            measured_row(f"kube-apiserver CPU until all children exist, operator's run / "
                         f"bare client's run, {count} CRs (medians "
                         f"{med([a.cpu.server for a in at]):.1f} s / "
                         f"{med([a.bare_server_cpu for a in at]):.1f} s; ratio per run)",
                         [a.server_cpu_vs_bare for a in at], "x", 2),
            median_row(f"operator process CPU per CR until all children exist, {count} CRs",
                       [a.cpu.operator / count * 1e3 for a in at], "ms", 1),
            median_row(f"{count} CRs applied at once: until all Ready (kubelet-sim, "
                       f"{3 * count} pods)", [a.ready for a in at], "s", 2),
        ]  # fmt: skip
    if big != ref:
        per = [(r.at(big).children / big, r.at(ref).children / ref) for r in runs]
        bare_per = [(r.at(big).bare / big, r.at(ref).bare / ref) for r in runs]
        rows += [
            median_row(f"per-CR time at {big} CRs / at {ref} CRs, operator until all children "
                       f"exist (medians {med(a for a, _ in per) * 1e3:.0f} ms / "
                       f"{med(b for _, b in per) * 1e3:.0f} ms per CR; ratio per run)",
                       [r.growth(big, ref) for r in runs], "x", 2,
                       f"<= {GOAL_PER_CR_GROWTH:g}", lambda v: v <= GOAL_PER_CR_GROWTH),
            median_row(f"per-CR time at {big} CRs / at {ref} CRs, bare client (medians "
                       f"{med(a for a, _ in bare_per) * 1e3:.0f} ms / "
                       f"{med(b for _, b in bare_per) * 1e3:.0f} ms per CR; ratio per run)",
                       [r.growth(big, ref, bare=True) for r in runs], "x", 2),
        ]  # fmt: skip
    points = "/".join(str(c) for c in (0, *sizes.scales))
    rows += [
        row(f"operator API writes in {sizes.idle_seconds:g} s idle, {ref} Ready CRs, resync "
            f"every {resync} s, worst of {len(runs)} runs (fault proxy; all runs: {detail})",
            worst, "writes", "0", worst == 0),
        median_row("operator API requests in the same idle window (reads: resyncs happen)",
                   [r.requests for r in runs], "requests", 0),
        median_row("operator RSS at 0 CRs", [r.rss_0 for r in runs], "MiB", 1),
    ]  # fmt: skip
    for count in sizes.scales:
        goal = count == ref
        rows.append(median_row(f"operator RSS at {count} Ready CRs (both roles scaled)",
                               [r.at(count).rss for r in runs], "MiB", 1,
                               f"< {GOAL_RSS_MIB:g} MiB" if goal else "",
                               (lambda v: v < GOAL_RSS_MIB) if goal else None))  # fmt: skip
    rows.append(median_row(f"operator RSS slope per Ready CR, least squares over {points} CRs "
                           "(each run's own line)", [r.rss_slope() for r in runs], "MiB/CR", 3,
                           f"<= {GOAL_RSS_SLOPE_MIB:g} MiB/CR",
                           lambda v: v <= GOAL_RSS_SLOPE_MIB))  # fmt: skip
    return rows


def run(
    sizes: Sizes = FULL, layout: dev_cluster.Layout | None = None, workdir: Path | None = None
) -> list[Row]:
    """Every operator figure, ``sizes.repeats`` times. Without ``layout`` each measurement
    gets the bench's own control plane, started from empty (nothing a previous run left can
    skew the figures) and stopped afterwards; logs go to ``workdir``."""
    runs: list[Figures] = []
    for index in range(sizes.repeats):
        own = layout is None
        plane = layout or dev_cluster.Layout(paths.scratch_state_dir("bench"))
        if own:
            _progress(f"run {index + 1}/{sizes.repeats}: the bench control plane from empty "
                      f"({BENCH_NODES} simulated nodes)")  # fmt: skip
            dev_cluster.fresh(
                plane, nodes=BENCH_NODES, ascend_per_node=BENCH_NPUS_PER_NODE, progress=_progress
            )
        base = workdir or plane.root / "bench-run"
        try:
            runs.append(measure(sizes, plane, base / f"run-{index}" if sizes.repeats > 1 else base))
        finally:
            if own:
                dev_cluster.down(plane, _progress)
    return rows_from(runs, sizes)


if __name__ == "__main__":
    from bench.__main__ import markdown_table

    print(markdown_table(run()))
