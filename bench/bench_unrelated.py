"""Operator cost beside unrelated objects: CPU seconds and RSS with and without them.

The operator should pay for its own objects only. On a control plane of its own
(``.dev/bench-unrelated``, started from empty and stopped afterwards), ``ascend-pd run`` watches
two namespaces holding ``Sizes.crs`` Ready PDDeployments and a resync every
``RESYNC_SECONDS``. Each run starts the real operator process, waits for its liveness endpoint,
keeps it running for ``Sizes.window_seconds`` and then reads, from ``/proc/<pid>``, its CPU
seconds (utime + stime since it started: the initial listing included) and its RSS.
``Sizes.runs`` runs without unrelated objects, then ``Sizes.pods`` pods and
``Sizes.configmaps`` ConfigMaps of 10 KiB are created in the same two namespaces and as many
runs more, with ``Sizes.churn_per_second`` annotation patches of those objects during each
window (``ASCEND_PD_BENCH_UNRELATED_*`` variables override the full sizes). Each figure is
the median of the runs, min and max beside it.

CPU seconds of the operator process, not wall time: the machine may be busy with other work,
which stretches wall time but does not add to the process's own CPU time. The unrelated pods
are bound to a node that does not exist, and kubelet-sim is stopped once the PDDeployments are
Ready, so neither a scheduler nor a kubelet spends the measurement on them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from ascend_pd_dev.controlplane import cluster as dev_cluster
from ascend_pd_dev.controlplane import paths, procs
from ascend_pd_dev.testtools.kubectl import install_crd, kubectl_path
from ascend_pd_dev.testtools.local_run import OperatorProcess
from ascend_pd_operator.api import models
from ascend_pd_operator.api.access import resource_for
from ascend_pd_operator.kubeio.kube import Connection, Kube, KubeError, path
from bench.bench_operator import config_map, pddeployment
from bench.rows import median_row, row, summary


def _env(name: str, default: float) -> float:
    return float(os.environ.get(f"ASCEND_PD_BENCH_UNRELATED_{name}", default))


@dataclass(frozen=True)
class Sizes:
    runs: int
    crs: int
    pods: int
    configmaps: int
    window_seconds: float
    churn_per_second: float


FULL = Sizes(
    runs=int(_env("RUNS", 3)),
    crs=int(_env("CRS", 4)),
    pods=int(_env("PODS", 5000)),
    configmaps=int(_env("CONFIGMAPS", 1000)),
    window_seconds=_env("WINDOW_SECONDS", 60),
    churn_per_second=_env("CHURN_PER_SECOND", 20),
)
#: ``python -m bench --smoke``: every step once, at sizes that prove nothing about speed
SMOKE = Sizes(runs=1, crs=1, pods=20, configmaps=10, window_seconds=2, churn_per_second=2)
CONFIGMAP_BYTES = 10 * 1024
RESYNC_SECONDS = 10
NODES = 2  # x 8 NPUs: room for the deployments of 2 NPUs each
GOAL_RATIO = 1.10
#: a node that does not exist: the pods count as scheduled and no kubelet ever runs them
NOWHERE = "bench-unrelated-no-such-node"
UNRELATED_LABEL = "bench.ascend-pd.dev/unrelated"


def _progress(message: str) -> None:
    print(f"bench_unrelated: {message}", file=sys.stderr, flush=True)


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (fields 14 and 15 of /proc/<pid>/stat), in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def unrelated_pod(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {UNRELATED_LABEL: "pod"}},
        "spec": {
            "nodeName": NOWHERE,
            "containers": [{"name": "app", "image": "registry.example.com/unrelated:1"}],
        },
    }


def unrelated_config_map(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {UNRELATED_LABEL: "cm"}},
        "data": {"blob": "x" * CONFIGMAP_BYTES},
    }


class Churn:
    """Annotation patches of unrelated objects at a bounded rate, from a thread of its own."""

    def __init__(self, kube: Kube, targets: list[tuple[str, str, str]], rate: float) -> None:
        self.kube = kube
        self.targets = targets
        self.rate = rate
        self.stop = threading.Event()
        self.patches = 0
        self.thread = threading.Thread(target=self._run, name="churn", daemon=True)

    def _run(self) -> None:
        start = time.monotonic()
        i = 0
        while self.targets and not self.stop.is_set():
            kind, ns, name = self.targets[i % len(self.targets)]
            body = {"metadata": {"annotations": {"bench.ascend-pd.dev/churn": str(i)}}}
            try:
                self.kube.request("PATCH", path(resource_for(kind), ns, name), body=body,
                                  content_type="application/merge-patch+json")  # fmt: skip
                self.patches += 1
            except (KubeError, OSError) as exc:
                _progress(f"churn patch of {kind} {ns}/{name} failed: {exc}")
            i += 1
            # bounded rate: patch i is sent no sooner than i / rate after the start
            self.stop.wait(max(0.0, start + i / self.rate - time.monotonic()))

    def __enter__(self) -> Churn:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()


class Bench:
    def __init__(self, layout: dev_cluster.Layout, sizes: Sizes) -> None:
        self.sizes = sizes
        self.layout = layout
        self.workdir = layout.root / "bench-run"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.kube = Kube(Connection.from_kubeconfig(layout.kubeconfig))
        suffix = uuid.uuid4().hex[:5]
        self.namespaces = [f"bench-unrelated-a-{suffix}", f"bench-unrelated-b-{suffix}"]
        self.targets: list[tuple[str, str, str]] = []

    def apply(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        url = path(resource_for(obj["kind"]), meta.get("namespace"), meta["name"])
        self.kube.request("PATCH", url, body=obj, query=[("fieldManager", "ascend-pd-bench")],
                          content_type="application/apply-patch+yaml")  # fmt: skip

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> bool:
        cmd = [str(kubectl_path()), "--kubeconfig", str(self.layout.kubeconfig), *args]
        done = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=300)
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr}")
        return done.returncode == 0

    def set_up(self) -> None:
        install_crd(self.layout.kubeconfig, field_manager="bench")
        for ns in self.namespaces:
            self.kubectl("create", "namespace", ns)
            # pods cannot be created before the namespace's default ServiceAccount exists
            _until(partial(self._default_account, ns), f"{ns}'s ServiceAccount", 60)
        crs = [
            pddeployment(f"ours-{i}", self.namespaces[i % 2])
            for i in range(self.sizes.crs)
        ]  # fmt: skip
        for ns in self.namespaces:
            self.apply(config_map(ns))
        for cr in crs:
            self.apply(cr)
        _progress(f"{self.sizes.crs} PDDeployments applied; waiting for Ready (kubelet-sim)")
        # the bench's own operator brings them up once; each measured run starts another
        operator = self.operator("setup")
        try:
            _until(lambda: self._all_ready(crs), f"{self.sizes.crs} PDDeployments Ready", 600, 1.0)
        finally:
            operator.stop()
        # From here on nothing needs scheduling or status: no kubelet spends the measurement.
        procs.stop(self.layout.pid_file("kubelet-sim"))
        _progress("kubelet-sim stopped; the PDDeployments stay Ready")

    def _default_account(self, namespace: str) -> bool:
        return self.kubectl("get", "serviceaccount", "default", "-n", namespace, check=False)

    def _all_ready(self, crs: list[dict[str, Any]]) -> bool:
        for cr in crs:
            got = self.kube.get(models.KIND, cr["metadata"]["namespace"], cr["metadata"]["name"])
            if ((got or {}).get("status") or {}).get("phase") != "Ready":
                return False
        return True

    def add_unrelated(self) -> None:
        started = time.monotonic()
        work: list[tuple[Callable[[str, str], dict[str, Any]], str, str]] = []
        for i in range(self.sizes.pods):
            work.append((unrelated_pod, f"unrelated-pod-{i:05d}", self.namespaces[i % 2]))
        for i in range(self.sizes.configmaps):
            work.append((unrelated_config_map, f"unrelated-cm-{i:04d}", self.namespaces[i % 2]))

        def create(item: tuple[Callable[[str, str], dict[str, Any]], str, str]) -> None:
            build, name, ns = item
            obj = build(name, ns)
            self.kube.create(obj["kind"], ns, obj)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, work))
        for build, name, ns in work:
            self.targets.append(("Pod" if build is unrelated_pod else "ConfigMap", ns, name))
        took = time.monotonic() - started
        _progress(f"created {self.sizes.pods} pods and {self.sizes.configmaps} ConfigMaps of "
                  f"{CONFIGMAP_BYTES // 1024} KiB in {took:.0f} s")  # fmt: skip

    def operator(self, label: str) -> OperatorProcess:
        args = [a for ns in self.namespaces for a in ("--namespace", ns)]
        args += ["--resync-seconds", str(RESYNC_SECONDS)]
        op = OperatorProcess(args, self.layout.kubeconfig, self.workdir / f"operator-{label}.log")
        _until(op.healthy, "the operator's liveness endpoint", 120)
        return op

    def measure(self, label: str, churn: bool) -> tuple[float, float, float]:
        """(CPU seconds since start, CPU seconds in the window, RSS MiB at its end)."""
        op = self.operator(label)
        try:
            at_healthy = cpu_seconds(op.pid)
            if churn:
                with Churn(self.kube, self.targets, self.sizes.churn_per_second) as c:
                    time.sleep(self.sizes.window_seconds)
                _progress(f"{label}: {c.patches} churn patches in the window")
            else:
                time.sleep(self.sizes.window_seconds)
            total = cpu_seconds(op.pid)
            rss = op.rss_mib()
        finally:
            op.stop()
            log = op.log.read_text()
            if "Traceback" in log:
                _progress(f"{label}: the operator logged a traceback:\n{log[-3000:]}")
        _progress(f"{label}: {total:.2f} CPU s ({total - at_healthy:.2f} s in the window), "
                  f"RSS {rss:.1f} MiB")  # fmt: skip
        return total, total - at_healthy, rss


def _until(check: Callable[[], bool], what: str, timeout: float, every: float = 0.3) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(every)


def rows_from(without: list[tuple[float, float, float]],
              with_: list[tuple[float, float, float]],
              sizes: Sizes = FULL) -> list[dict[str, Any]]:  # fmt: skip
    """Table rows from the runs' (CPU total, CPU in window, RSS) without and with objects."""
    rows: list[dict[str, Any]] = []
    setting = (f"{sizes.pods} pods + {sizes.configmaps} ConfigMaps of 10 KiB, "
               f"{sizes.churn_per_second:g} patches/s")  # fmt: skip
    for index, (figure, unit, digits) in enumerate(
        [(f"operator CPU seconds (start + {sizes.window_seconds:g} s window)", "CPU s", 2),
         (f"operator CPU seconds in the {sizes.window_seconds:g} s window", "CPU s", 2),
         ("operator RSS at the end", "MiB", 1)]
    ):  # fmt: skip
        base = [run[index] for run in without]
        loaded = [run[index] for run in with_]
        for tag, values in (("without unrelated objects", base), (setting, loaded)):
            rows.append(median_row(f"{figure}, {tag}", values, unit, digits))
        ratio = summary(loaded)[0] / summary(base)[0] if summary(base)[0] else float("inf")
        # the window alone carries no goal: a few tenths of a second make any ratio there
        goal = f"<= {GOAL_RATIO:.2f}" if index != 1 else ""
        met = ratio <= GOAL_RATIO if goal else None
        name = f"{figure}: with / without unrelated objects (medians)"
        rows.append(row(name, round(ratio, 3), "x", goal, met))
    return rows


def run(sizes: Sizes = FULL) -> list[dict[str, Any]]:
    layout = dev_cluster.Layout(paths.scratch_state_dir("bench-unrelated"))
    _progress(f"starting a control plane of its own from empty ({layout.root})")
    dev_cluster.fresh(layout, nodes=NODES, ascend_per_node=8, progress=_progress)
    try:
        bench = Bench(layout, sizes)
        bench.set_up()
        without = [bench.measure(f"without-{i}", churn=False) for i in range(sizes.runs)]
        bench.add_unrelated()
        with_ = [bench.measure(f"with-{i}", churn=True) for i in range(sizes.runs)]
        return rows_from(without, with_, sizes)
    finally:
        dev_cluster.down(layout, _progress, purge=True)


if __name__ == "__main__":
    from bench.__main__ import markdown_table

    print(markdown_table(run()))
