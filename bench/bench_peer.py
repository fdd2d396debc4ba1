"""The operator beside a peer controller on the same API server: LeaderWorkerSet (LWS).

A bare client (``bare_client``) watches nothing and reads nothing, so it is a floor, not a
fair limit. LWS (``sigs.k8s.io/lws``, controller-runtime) is a real controller doing
comparable work: it watches what it creates, server-side applies a StatefulSet per group,
keeps a headless Service and a ControllerRevision, and writes its status. Its manager is
built from the Go module proxy (``build_lws``) and runs out of cluster, beside the bench's
control plane, with no admission webhook registered (nothing defaults its objects, so
``leaderworkerset`` writes every field the webhook would) and leader election off (the
bench's operator runs without it too).

For each N of ``scales``, in one run on one control plane (``BENCH_NODES`` kubelet-sim
nodes), one after the other:

1. the peer: for each of N bench deployments (``bench_operator.pddeployment``), one LWS
   per instance (prefill and decode: ``replicas`` 1, ``size`` = the instance's nodes, the
   pod template the operator renders for it), applied at once; until all their children
   exist (watch events), the API server's CPU meanwhile (``/proc``), and the manager's
   requests (through a fault proxy of its own, every fault rate zero);
2. the bare client's same applies as the operator's (the floor);
3. the operator: N PDDeployments at once, the same figures (``bench_operator.Bench``).

Only one controller runs at a time: the LWS manager watches pods and StatefulSets in every
namespace, so beside the operator it would make the API server encode the operator's pod
events for it too. At ``reference`` N each controller gets an idle window once its
deployments are Ready: requests per minute per deployment, at the operator's resync.
The ratios are ours / the peer's, each run's own.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_dev.controlplane import build_lws, paths, procs
from ascend_pd_dev.controlplane import cluster as dev_cluster
from ascend_pd_dev.controlplane.certs import Pki
from ascend_pd_dev.testtools.faultproxy import STATS_PATH
from ascend_pd_dev.testtools.local_run import free_port, stop_child_group
from bench import bench_operator
from bench.bench_operator import Bench, Recorder, Sizes, cpu_seconds, rendered
from bench.rows import Row, median_row, row

GROUP, VERSION, PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
#: the label LWS puts on every object it creates (its ``SetNameLabelKey``)
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
#: what owns LWS's children: the LWS, or (a worker StatefulSet) its group's leader pod
OWNERS = {"LeaderWorkerSet", "Pod"}
#: ours / the peer's
GOAL_TIME = 1.2
GOAL_SERVER_CPU = 1.0
GOAL_IDLE = 1.0

FULL = Sizes(runs=0, scales=(10, 100), resync_seconds=10,
             idle_seconds=float(os.environ.get("ASCEND_PD_BENCH_IDLE_SECONDS", "120")),
             repeats=1)  # fmt: skip
#: The test suite's smoke run (on the e2e cluster): every code path, no meaningful figure.
SMOKE = Sizes(runs=0, scales=(2,), resync_seconds=1, idle_seconds=2.0, repeats=1)


def _progress(message: str) -> None:
    print(f"bench_peer: {message}", file=sys.stderr, flush=True)


def leaderworkersets(cr: dict[str, Any]) -> list[dict[str, Any]]:
    """One LWS per instance of the bench deployment ``cr``: the StatefulSets the operator
    renders for it, as groups of ``size`` = their replicas (the instance's nodes) with
    their pod template. Every field LWS's defaulting webhook sets is written here."""
    out = []
    for sts in (m for m in rendered(cr) if m["kind"] == "StatefulSet"):
        meta, spec = sts["metadata"], sts["spec"]
        template = {
            **spec["template"],
            "metadata": {
                **spec["template"]["metadata"],
                # what LWS's pod webhook (not registered here) writes on a leader pod: its
                # group's index, which the controller's status reads; one group per LWS
                "labels": {"app.kubernetes.io/name": "lws-peer", GROUP_INDEX: "0"},
            },
        }
        out.append({
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "LeaderWorkerSet",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "spec": {
                "replicas": 1,
                "startupPolicy": "LeaderCreated",
                "leaderWorkerTemplate": {"size": spec["replicas"], "workerTemplate": template,
                                         "restartPolicy": "RecreateGroupOnPodRestart"},
                "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": {
                    "maxUnavailable": 1, "maxSurge": 0, "partition": 0}},
                "networkConfig": {"subdomainPolicy": "Shared"},
            },
        })  # fmt: skip
    return out


def expected_children(lws: list[dict[str, Any]]) -> int:
    """What LWS creates for ``lws``: per object a leader StatefulSet, a headless Service and
    a ControllerRevision, and a worker StatefulSet per group of more than one pod."""
    workers = sum(int(o["spec"]["replicas"]) for o in lws
                  if o["spec"]["leaderWorkerTemplate"]["size"] > 1)  # fmt: skip
    return 3 * len(lws) + workers


class PeerRecorder(Recorder):
    """First-seen times of LWS's children (by its name label) and first Ready of each LWS."""

    def start(self) -> PeerRecorder:
        from kubernetes import client

        apps, core = client.AppsV1Api(self.api_client), client.CoreV1Api(self.api_client)
        custom = client.CustomObjectsApi(self.api_client)
        ns, sel = self.namespace, LWS_NAME
        self._thread("StatefulSet", lambda **kw: apps.list_namespaced_stateful_set(
            ns, label_selector=sel, **kw))  # fmt: skip
        self._thread("Service", lambda **kw: core.list_namespaced_service(
            ns, label_selector=sel, **kw))  # fmt: skip
        self._thread("ControllerRevision", lambda **kw: apps.list_namespaced_controller_revision(
            ns, label_selector=sel, **kw))  # fmt: skip
        self._thread("LeaderWorkerSet", lambda **kw: custom.list_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, **kw))  # fmt: skip
        deadline = time.monotonic() + 120
        for event in self.connected:
            if not event.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError("the peer recorder's watches did not connect within 120 s")
        return self

    def _record(self, kind: str, obj: Any, now: float) -> None:
        with self.cond:
            if kind == "LeaderWorkerSet":
                status, spec = obj.get("status") or {}, obj.get("spec") or {}
                if status.get("readyReplicas", 0) >= spec.get("replicas", 1):
                    self.ready.setdefault(obj["metadata"]["name"], now)
            elif {o["kind"] for o in obj["metadata"].get("ownerReferences") or []} & OWNERS:
                # owned, not only labelled: the StatefulSet controller's own revisions of a
                # leader StatefulSet carry its pods' labels, LWS's name among them
                self.children.setdefault((kind, obj["metadata"]["name"]), now)
            self.cond.notify_all()


class LwsManager:
    """The LWS manager as a local process: its kubeconfig pointed at a fault proxy of its
    own (which counts its requests), webhooks and internal cert management off."""

    def __init__(self, layout: dev_cluster.Layout, workdir: Path) -> None:
        self.workdir = workdir
        state = dev_cluster.load_state(layout)
        assert state is not None
        self.proxy_url = f"http://127.0.0.1:{free_port()}"
        doc = yaml.safe_load(layout.kubeconfig.read_text())
        # client-go sends no credentials over plain HTTP: the proxy adds the admin token
        token = workdir / "lws.token"
        token.write_text(str(doc["users"][0]["user"]["token"]))
        token.chmod(0o600)
        self.proxy = subprocess.Popen(
            [sys.executable, "-m", "ascend_pd_dev.testtools.faultproxy", "--upstream",
             state.server, "--ca-file", str(Pki(layout.pki).ca_crt),
             "--port", self.proxy_url.rsplit(":", 1)[1], "--token-file", str(token)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=(workdir / "lws-proxy.log").open("w"), start_new_session=True,
        )  # fmt: skip
        bench_operator._until(lambda: Bench._answers(self.proxy_url + STATS_PATH),
                              "the peer's fault proxy", 60)  # fmt: skip
        doc["clusters"][0]["cluster"] = {"server": self.proxy_url}
        kubeconfig = workdir / "lws.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(doc))
        kubeconfig.chmod(0o600)
        self.health = f"127.0.0.1:{free_port()}"
        config = workdir / "lws-config.yaml"
        # metrics off, a health port of its own; the webhook server is never started: with
        # ENABLE_WEBHOOKS=false nothing registers a webhook with it
        config.write_text(yaml.safe_dump({
            "apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": self.health},
            "webhook": {"port": free_port(), "certDir": str(workdir / "lws-certs")},
        }))  # fmt: skip
        self.log = workdir / "lws-manager.log"
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "ENABLE_WEBHOOKS": "false"}
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [str(build_lws.binary()), f"--config={config}"], env=env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        # both controllers' caches synced: from then on an apply is the only wait
        bench_operator._until(self._started, "the LWS manager's controllers to start", 300)

    def _started(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"the LWS manager exited:\n{self.log.read_text()[-4000:]}")
        return self.log.read_text().count("Starting workers") >= 2

    def errors(self) -> int:
        return self.log.read_text().count("Reconciler error")

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.proxy_url + STATS_PATH, timeout=10) as response:
            stats: dict[str, Any] = json.loads(response.read())
        return stats

    def stop(self) -> None:
        stop_child_group(self.process)
        stop_child_group(self.proxy)


@dataclass(frozen=True)
class Side:
    """One controller's figures at one N."""

    children: int
    seconds: float
    server_cpu: float
    requests: int
    #: requests in the idle window (reference N only; None elsewhere)
    idle_requests: int | None = None
    #: the peer's "Reconciler error" log lines while measured (its namespace's teardown,
    #: which it meets with errors, excluded)
    errors: int = 0

    @property
    def cpu_per_child(self) -> float:
        return self.server_cpu / self.children

    @property
    def requests_per_child(self) -> float:
        return self.requests / self.children


@dataclass(frozen=True)
class Point:
    count: int
    ours: Side
    peer: Side
    bare: Side


def server_cpu(layout: dev_cluster.Layout) -> float:
    server = procs.running(layout.pid_file("kube-apiserver"))
    return cpu_seconds(server.pid) if server else 0.0


def apply_lws(bench: Bench, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    url = f"/apis/{GROUP}/{VERSION}/namespaces/{meta['namespace']}/{PLURAL}/{meta['name']}"
    bench.kube.request("PATCH", url, body=obj, query=[("fieldManager", "ascend-pd-bench")],
                       content_type="application/apply-patch+yaml")  # fmt: skip


def peer_side(bench: Bench, lws: LwsManager, count: int, idle: bool) -> Side:
    ns = f"bench-peer-{count}-{uuid.uuid4().hex[:5]}"
    bench.kubectl("create", "namespace", ns)
    crs = [bench_operator.pddeployment(f"scale-{i:03d}", ns) for i in range(count)]
    objs = [o for cr in crs for o in leaderworkersets(cr)]
    wanted = expected_children(objs)
    rec = PeerRecorder(bench.api_client, ns).start()
    errors = lws.errors()
    try:
        before, cpu0, t0 = lws.stats(), server_cpu(bench.layout), time.monotonic()
        with ThreadPoolExecutor(10) as pool:
            list(pool.map(lambda o: apply_lws(bench, o), objs))
        try:
            rec.wait(lambda: len(rec.children) >= wanted, f"{wanted} LWS children", 600)
        except TimeoutError as err:
            seen = collections.Counter(kind for kind, _ in rec.children)
            raise TimeoutError(f"{err}; seen by kind: {dict(seen)}") from err
        cpu = server_cpu(bench.layout) - cpu0
        after = lws.stats()
        seconds = max(rec.children.values()) - t0
        children = len(rec.children)
        requests = after["requests"] - before["requests"]  # the proxy counts no stats GET
        _progress(f"{count} deployments, peer: {children} children in {seconds:.2f} s, "
                  f"API server CPU {cpu:.1f} s, requests by kind: "
                  f"{bench_operator.kinds_between(before, after)}")  # fmt: skip
        idle_requests = None
        if idle:
            names = {o["metadata"]["name"] for o in objs}
            rec.wait(lambda: names <= set(rec.ready), f"{len(names)} LWS Ready", 900)
            idle_requests = idle_window(bench.sizes, lws.stats, "peer")
        errors = lws.errors() - errors
    finally:
        rec.stop.set()
    bench.delete_namespace(ns)
    return Side(children, seconds, cpu, requests, idle_requests, errors)


def idle_window(sizes: Sizes, stats: Any, who: str) -> int:
    """Requests through a proxy in ``sizes.idle_seconds`` after two resyncs at rest."""
    time.sleep(2 * sizes.resync_seconds)  # the last status writes after Ready pass
    before = stats()
    time.sleep(sizes.idle_seconds)
    after = stats()
    _progress(f"idle window, {who}: {bench_operator.kinds_between(before, after)}")
    return int(after["requests"] - before["requests"])


def established(bench: Bench) -> bool:
    crd = bench.kube.request(
        "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{PLURAL}.{GROUP}"
    )
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def measure(sizes: Sizes, layout: dev_cluster.Layout, workdir: Path) -> list[Point]:
    workdir.mkdir(parents=True, exist_ok=True)
    bench = Bench(layout, workdir, sizes)
    peers: dict[int, Side] = {}
    bench.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=bench",
                  "-f", str(build_lws.crd_dir()))  # fmt: skip
    # the whole object: ``kubectl wait`` fails while a new CRD has no conditions yet
    bench_operator._until(lambda: established(bench), "the LeaderWorkerSet CRD", 120)
    lws = LwsManager(layout, workdir)
    try:
        for count in sizes.scales:
            _progress(f"{count} deployments: the LWS peer ({2 * count} LeaderWorkerSets)")
            peers[count] = peer_side(bench, lws, count, count == sizes.reference)
    finally:
        lws.stop()
    log = lws.log.read_text()
    points = []
    try:
        bench.start()
        for count in sizes.scales:
            _progress(f"{count} deployments: the bare client, then the operator")
            bare_s, bare_cpu = bench.bare(count)
            children, _ready, total, requests, cpu = bench.scale(count)
            idle = None
            if count == sizes.reference:
                _writes, idle = bench.idle()
            bench.delete_namespace(bench.ns_scale[count])
            ours = Side(total, children, cpu.server, requests, idle)
            points.append(Point(count, ours, peers[count], Side(total, bare_s, bare_cpu, total)))
            _progress(f"{count} deployments: ours {children:.2f} s / peer "
                      f"{peers[count].seconds:.2f} s / bare {bare_s:.2f} s")  # fmt: skip
    finally:
        bench.stop()
    if "panic:" in log or "Observed a panic" in log:
        raise RuntimeError(f"the LWS manager panicked:\n{log[-3000:]}")
    return points


def ratio_row(name: str, ours: float, peer: float, unit: str, digits: int, goal: float | None,
              ) -> Row:  # fmt: skip
    """ours / peer with both values in the name; a peer figure of zero has no ratio (and
    misses a goal unless ours is zero too)."""
    text = f"{name} (ours {ours:.{digits}f} / peer {peer:.{digits}f} {unit})"
    value = round(ours / peer, 2) if peer > 0 else (1.0 if ours == 0 else None)
    if goal is None:
        return row(text, value, "x")
    return row(text, value, "x", f"<= {goal:g}", value is not None and value <= goal)


def rows_from(points: list[Point], sizes: Sizes) -> list[Row]:
    rows: list[Row] = []
    for p in points:
        n, o, q, b = p.count, p.ours, p.peer, p.bare
        rows += [
            ratio_row(f"{n} deployments: operator / LWS peer, until every child exists "
                      f"({o.children} / {q.children} children)", o.seconds, q.seconds, "s", 2,
                      GOAL_TIME),
            ratio_row(f"{n} deployments: kube-apiserver CPU per child, operator / LWS peer",
                      o.cpu_per_child * 1e3, q.cpu_per_child * 1e3, "ms", 1, GOAL_SERVER_CPU),
            ratio_row(f"{n} deployments: API requests per child, operator / LWS peer",
                      o.requests_per_child, q.requests_per_child, "requests", 2, None),
            median_row(f"{n} deployments: floor, bare client's applies until every child "
                       f"exists ({b.children} children)", [b.seconds], "s", 2),
            median_row(f"{n} deployments: floor, kube-apiserver CPU per child, bare client",
                       [b.cpu_per_child * 1e3], "ms", 1),
            row(f"{n} deployments: the LWS manager's reconcile errors while measured", q.errors,
                "errors"),
        ]  # fmt: skip
        if o.idle_requests is not None and q.idle_requests is not None:
            minutes = sizes.idle_seconds / 60
            ours_rate = o.idle_requests / minutes / n
            peer_rate = q.idle_requests / minutes / n
            rows.append(ratio_row(
                f"{n} Ready deployments at rest, {sizes.idle_seconds:g} s: API requests per "
                f"minute per deployment, operator (resync every {sizes.resync_seconds} s) / "
                f"LWS peer", ours_rate, peer_rate, "requests/min", 2, GOAL_IDLE))  # fmt: skip
    return rows


def run(
    sizes: Sizes = FULL, layout: dev_cluster.Layout | None = None, workdir: Path | None = None
) -> list[Row]:
    """The peer rows; the LWS manager is built first if it is not (``build_lws``). Without
    ``layout`` the run gets the bench's own control plane, started from empty and stopped
    afterwards."""
    build_lws.ensure_lws(_progress)
    own = layout is None
    plane = layout or dev_cluster.Layout(paths.scratch_state_dir("bench"))
    if own:
        _progress(f"the bench control plane from empty ({bench_operator.BENCH_NODES} nodes)")
        dev_cluster.fresh(plane, nodes=bench_operator.BENCH_NODES,
                          ascend_per_node=bench_operator.BENCH_NPUS_PER_NODE,
                          progress=_progress)  # fmt: skip
    try:
        points = measure(replace(sizes, runs=0), plane, workdir or plane.root / "bench-peer")
    finally:
        if own:
            dev_cluster.down(plane, _progress)
    return rows_from(points, sizes)


if __name__ == "__main__":
    from bench.__main__ import markdown_table

    print(markdown_table(run()))
