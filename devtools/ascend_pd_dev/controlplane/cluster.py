"""Run the dev cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the
simulated kubelet.

Every process listens on loopback only, on free ports picked at ``up`` (and reused by later
``up`` runs while still free), and is owned through a pid file under ``.dev/run``; ``down``
stops exactly those processes. ``up`` is idempotent: a healthy cluster is left as it is; while
etcd and the API server are healthy, only a missing controller manager, scheduler or kubelet-sim
is started
(kubelet-sim is also restarted when its node options changed); otherwise whatever is left is
stopped and everything starts again on the kept data and credentials.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_dev.controlplane import build, certs, procs
from ascend_pd_dev.controlplane.build import Progress
from ascend_pd_dev.kubelet_sim import knobs

#: controllers the dev cluster runs: what workloads, ownership and namespaces need, no more
CONTROLLERS = (
    "deployment",
    "replicaset",
    "statefulset",
    "job",
    "garbagecollector",
    "namespace",
    "serviceaccount",
    "serviceaccount-token",
    # not "endpoint": it refuses kubelet-sim's loopback pod IPs (422) and retried each
    # Service's Endpoints for as long as the cluster ran, the API server's busiest writes
    # the real HPA controller, scaling PDRoleScalers through their scale subresource
    "horizontalpodautoscaling",
    # claims bind to volumes (kube-scheduler keeps a pod with an unbound claim Pending), and
    # the protection finalizers the API server puts on them are removed when unused
    "persistentvolume-binder",
    "pvc-protection",
    "pv-protection",
)

#: start order; ``down`` stops in reverse
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet-sim")


class ClusterError(RuntimeError):
    """The cluster did not come up; the message names the component and its log."""


@dataclass
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    #: kube-scheduler's plain-HTTP health port (0 in a state file older than the scheduler)
    scheduler: int = 0


@dataclass
class ClusterState:
    """What ``up`` chose, kept in ``.dev/cluster.json`` for ``status`` and the next ``up``."""

    ports: Ports
    nodes: int
    ascend_per_node: int
    #: topology domains kubelet-sim spreads the nodes over (0: no domain label)
    domains: int = 0

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"


class Layout:
    """Paths under the state directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pki = root / "pki"
        self.etcd_data = root / "etcd"
        self.run = root / "run"
        self.logs = root / "logs"
        self.state = root / "cluster.json"
        self.kubeconfig = root / "kubeconfig"
        self.lock = root / ".lock"
        #: kubelet-sim's local runtimes (images whose launcher check it may run)
        self.local_runtimes = self.run / "kubelet-sim-runtimes"

    def pid_file(self, component: str) -> Path:
        return self.run / f"{component}.pid"

    def log_file(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def component_kubeconfig(self, component: str) -> Path:
        return self.pki / f"{component}.kubeconfig"


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(taken: set[int]) -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in taken:
            return port


def choose_ports(previous: Ports | None) -> Ports:
    """Reuse the previous ports where still free (stable kubeconfig), else pick free ones."""
    chosen: list[int] = []
    wanted = asdict(previous).values() if previous else [0] * len(fields(Ports))
    for port in wanted:
        if port and port not in chosen and port_free(port):
            chosen.append(port)
        else:
            chosen.append(free_port(set(chosen)))
    return Ports(*chosen)


def load_state(layout: Layout) -> ClusterState | None:
    try:
        data = json.loads(layout.state.read_text())
        return ClusterState(
            ports=Ports(**data["ports"]),
            nodes=int(data["nodes"]),
            ascend_per_node=int(data["ascend_per_node"]),
            domains=int(data.get("domains", 0)),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_state(layout: Layout, state: ClusterState) -> None:
    layout.state.write_text(json.dumps(asdict(state), indent=2) + "\n")


def kubeconfig(server: str, ca_pem: str, user: str, token: str, context: str) -> dict[str, Any]:
    """A kubeconfig with one cluster, one token user and one context."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem.encode()).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": user}}],
        "current-context": context,
    }


def etcd_argv(etcd: Path, layout: Layout, ports: Ports) -> list[str]:
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(etcd),
        "--name=ascend-pd-dev",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=ascend-pd-dev={peer}",
        "--initial-cluster-state=new",
        "--log-level=warn",
        "--logger=zap",
    ]


def apiserver_argv(binary: Path, layout: Layout, pki: certs.Pki, ports: Ports) -> list[str]:
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        "--insecure-port=0",
        f"--cert-dir={layout.pki}",
        f"--tls-cert-file={pki.serving_crt}",
        f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca_crt}",
        f"--token-auth-file={pki.tokens_csv}",
        "--authorization-mode=RBAC",
        "--anonymous-auth=false",
        f"--service-cluster-ip-range={certs.SERVICE_CIDR}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        "--allow-privileged=true",
        "--profiling=false",
        "--v=1",
    ]


def controller_manager_argv(binary: Path, layout: Layout, pki: certs.Pki) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={layout.component_kubeconfig('kube-controller-manager')}",
        f"--controllers={','.join(CONTROLLERS)}",
        "--leader-elect=false",
        "--port=0",
        "--secure-port=0",
        f"--service-account-private-key-file={pki.sa_key}",
        f"--root-ca-file={pki.ca_crt}",
        "--use-service-account-credentials=true",
        # a third of the default 15 s: tests wait on what the HPA did, never on its period
        "--horizontal-pod-autoscaler-sync-period=5s",
        "--profiling=false",
        "--v=1",
    ]


def scheduler_argv(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """The default scheduler profile, as a cluster runs it; health on a plain-HTTP loopback
    port (no serving certificate to make) and no HTTPS port, so clusters side by side never
    collide on the fixed default ports."""
    return [
        str(binary),
        f"--kubeconfig={layout.component_kubeconfig('kube-scheduler')}",
        "--leader-elect=false",
        "--address=127.0.0.1",
        f"--port={ports.scheduler}",
        "--secure-port=0",
        "--profiling=false",
        "--v=1",
    ]


def kubelet_sim_argv(
    layout: Layout, nodes: int, ascend_per_node: int, domains: int = 0
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ascend_pd_dev.kubelet_sim",
        f"--kubeconfig={layout.component_kubeconfig('kubelet-sim')}",
        f"--nodes={nodes}",
        f"--ascend-per-node={ascend_per_node}",
        f"--domains={domains}",
        f"--local-runtimes={layout.local_runtimes}",
    ]


def _ssl_context(pki: certs.Pki) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pki.ca_crt))


def api_get(
    state: ClusterState, pki: certs.Pki, path: str, user: str = "admin", timeout: float = 5.0
) -> tuple[int, bytes]:
    """GET ``path`` on the API server as ``user``; (status, body), status 0 when unreachable."""
    request = urllib.request.Request(
        state.server + path, headers={"Authorization": f"Bearer {pki.tokens()[user]}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=_ssl_context(pki)) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
    except OSError:
        return ""


def _wait(
    what: str, check: Callable[[], bool], component: str, layout: Layout, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    pid_file = layout.pid_file(component)
    while time.monotonic() < deadline:
        if check():
            return
        if procs.running(pid_file) is None:
            log = layout.log_file(component)
            raise ClusterError(
                f"{component} exited while waiting for {what}; log {log}:\n{_tail(log)}"
            )
        time.sleep(0.25)
    log = layout.log_file(component)
    raise ClusterError(
        f"timed out after {timeout:.0f}s waiting for {what}; log {log}:\n{_tail(log)}"
    )


def component_status(layout: Layout) -> dict[str, procs.PidRecord | None]:
    return {c: procs.running(layout.pid_file(c)) for c in COMPONENTS}


def healthy(layout: Layout) -> bool:
    state = load_state(layout)
    if state is None or not layout.kubeconfig.is_file():
        return False
    if any(record is None for record in component_status(layout).values()):
        return False
    status, _ = api_get(state, certs.Pki(layout.pki), "/readyz")
    return status == 200


def stop_all(layout: Layout, progress: Progress) -> list[str]:
    """Stop every component this state directory started; return the names stopped."""
    return procs.stop_all(layout.pid_file, COMPONENTS, progress)


def _write_kubeconfigs(layout: Layout, pki: certs.Pki, state: ClusterState) -> None:
    ca_pem = pki.ca_crt.read_text()
    tokens = pki.tokens()
    files = {
        layout.kubeconfig: ("admin", "ascend-pd-dev"),
        layout.component_kubeconfig("kube-controller-manager"): (
            "system:kube-controller-manager", "ascend-pd-dev"),
        layout.component_kubeconfig("kube-scheduler"): ("system:kube-scheduler", "ascend-pd-dev"),
        layout.component_kubeconfig("kubelet-sim"): ("ascend-pd:kubelet-sim", "ascend-pd-dev"),
        layout.component_kubeconfig("nobody"): ("ascend-pd:nobody", "ascend-pd-dev"),
    }  # fmt: skip
    for path, (user, context) in files.items():
        config = kubeconfig(state.server, ca_pem, user, tokens[user], context)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(config, sort_keys=False))
        tmp.chmod(0o600)
        tmp.replace(path)


def _start_kubelet_sim(
    layout: Layout, state: ClusterState, pki: certs.Pki, progress: Progress
) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    record = procs.start(
        kubelet_sim_argv(layout, state.nodes, state.ascend_per_node, state.domains),
        layout.pid_file("kubelet-sim"),
        layout.log_file("kubelet-sim"),
        env=env,
    )

    def nodes_ready() -> bool:
        status, body = api_get(
            state, pki, "/api/v1/nodes?labelSelector=ascend-pd.dev%2Fsimulated%3Dtrue"
        )
        if status != 200:
            return False
        items = json.loads(body).get("items", [])
        # nodes served by this very process (an older one may have left Ready nodes behind)
        ready = [
            n for n in items
            if (n["metadata"].get("annotations") or {}).get(knobs.OWNER)
            == str(record.pid)
            and any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in n.get("status", {}).get("conditions", []))
        ]  # fmt: skip
        return len(ready) >= state.nodes

    _wait(f"{state.nodes} simulated Ascend nodes", nodes_ready, "kubelet-sim", layout, 60)
    progress(
        f"kubelet-sim registered {state.nodes} simulated nodes "
        f"({state.ascend_per_node} huawei.com/Ascend910 each; no containers run)"
    )


def _core_healthy(layout: Layout, state: ClusterState, pki: certs.Pki) -> bool:
    """etcd and the API server of this state directory run, the API server is ready and knows
    every component's token (a cluster started before a component existed does not)."""
    for component in ("etcd", "kube-apiserver"):
        if procs.running(layout.pid_file(component)) is None:
            return False
    if not state.ports.scheduler:
        return False
    return api_get(state, pki, "/readyz", user="system:kube-scheduler")[0] == 200


def _start_controller_manager(
    layout: Layout, state: ClusterState, pki: certs.Pki, bin_dir: Path, progress: Progress
) -> None:
    progress(f"starting kube-controller-manager ({', '.join(CONTROLLERS)})")
    # the default ServiceAccount shows the controller manager works; pods need it anyway
    _start_and_wait(
        layout,
        "kube-controller-manager",
        controller_manager_argv(bin_dir / "kube-controller-manager", layout, pki),
        "the default ServiceAccount",
        lambda: api_get(state, pki, "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
        120,
    )


def scheduler_healthy(port: int) -> bool:
    """kube-scheduler on ``127.0.0.1:port`` answers ``/healthz`` with ``ok``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return bool(resp.read().strip() == b"ok")
    except (urllib.error.URLError, OSError):
        return False


def _start_scheduler(
    layout: Layout, state: ClusterState, bin_dir: Path, progress: Progress
) -> None:
    progress("starting kube-scheduler (the default profile)")
    _start_and_wait(
        layout,
        "kube-scheduler",
        scheduler_argv(bin_dir / "kube-scheduler", layout, state.ports),
        "kube-scheduler /healthz",
        lambda: scheduler_healthy(state.ports.scheduler),
        120,
    )


def _start_and_wait(
    layout: Layout,
    component: str,
    argv: list[str],
    what: str,
    ready: Callable[[], bool],
    timeout: float,
) -> None:
    """Start ``component`` (pid and log files of its name) and wait until ``ready``."""
    procs.start(argv, layout.pid_file(component), layout.log_file(component), cwd=layout.root)
    _wait(what, ready, component, layout, timeout)


def etcd_healthy(client_port: int) -> bool:
    """etcd on ``127.0.0.1:client_port`` answers its health endpoint with ``"true"``."""
    url = f"http://127.0.0.1:{client_port}/health"
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(json.loads(resp.read()).get("health") == "true")
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _start_etcd(layout: Layout, state: ClusterState, progress: Progress) -> None:
    progress(f"starting etcd on 127.0.0.1:{state.ports.etcd_client}")
    _start_and_wait(
        layout,
        "etcd",
        etcd_argv(build.etcd_binary(), layout, state.ports),
        "etcd health",
        lambda: etcd_healthy(state.ports.etcd_client),
        60,
    )


def _start_apiserver(
    layout: Layout, state: ClusterState, pki: certs.Pki, bin_dir: Path, progress: Progress
) -> None:
    progress(f"starting kube-apiserver on {state.server}")
    _start_and_wait(
        layout,
        "kube-apiserver",
        apiserver_argv(bin_dir / "kube-apiserver", layout, pki, state.ports),
        "kube-apiserver /readyz",
        lambda: api_get(state, pki, "/readyz")[0] == 200,
        120,
    )


#: Components ``stop_component`` / ``start_component`` handle (outage tests).
RESTARTABLE = ("etcd", "kube-apiserver")


def stop_component(layout: Layout, component: str) -> bool:
    """Stop one control-plane process (SIGTERM): its port refuses connections until
    ``start_component``. True when it was running."""
    if component not in RESTARTABLE:
        raise ValueError(f"component {component!r}: only {', '.join(RESTARTABLE)} can be stopped")
    with build.file_lock(layout.lock):
        return procs.stop(layout.pid_file(component))


def start_component(layout: Layout, component: str, progress: Progress = lambda _: None) -> None:
    """Start one stopped control-plane process again, on the cluster's saved ports and
    data, and wait until it is healthy (the API server: ``/readyz``)."""
    if component not in RESTARTABLE:
        raise ValueError(f"component {component!r}: only {', '.join(RESTARTABLE)} can be started")
    state = load_state(layout)
    if state is None:
        raise ClusterError(f"no cluster state in {layout.state}: run `ascend-pd dev up` first")
    with build.file_lock(layout.lock):
        if procs.running(layout.pid_file(component)) is not None:
            return
        if component == "etcd":
            _start_etcd(layout, state, progress)
        else:
            bin_dir = build.ensure_binaries(progress)
            _start_apiserver(layout, state, certs.Pki(layout.pki), bin_dir, progress)


def up(
    layout: Layout,
    nodes: int,
    ascend_per_node: int,
    progress: Progress,
    rebuild: bool = False,
    domains: int = 0,
) -> ClusterState:
    """Bring the cluster up (or leave a healthy one as it is); return its state.

    Concurrent ``up``/``down`` calls on one state directory run one at a time, so a second
    caller finds the cluster the first one started instead of restarting it.
    """
    bin_dir = build.ensure_binaries(progress, rebuild=rebuild)
    build.ensure_runtime_packages(progress)
    layout.root.mkdir(parents=True, exist_ok=True)
    with build.file_lock(layout.lock):
        return _up_locked(layout, nodes, ascend_per_node, domains, progress, rebuild, bin_dir)


def _up_locked(
    layout: Layout,
    nodes: int,
    ascend_per_node: int,
    domains: int,
    progress: Progress,
    rebuild: bool,
    bin_dir: Path,
) -> ClusterState:
    for directory in (layout.root, layout.run, layout.logs):
        directory.mkdir(parents=True, exist_ok=True)
    pki = certs.ensure_pki(layout.pki)
    previous = load_state(layout)

    if previous is not None and not rebuild and _core_healthy(layout, previous, pki):
        # etcd and the API server keep running; start whatever else is missing or changed
        state = previous
        if (state.nodes, state.ascend_per_node, state.domains) != (nodes, ascend_per_node,
                                                                   domains):  # fmt: skip
            procs.stop(layout.pid_file("kubelet-sim"))
            state.nodes, state.ascend_per_node, state.domains = nodes, ascend_per_node, domains
            save_state(layout, state)
        started = False
        if procs.running(layout.pid_file("kube-controller-manager")) is None:
            _start_controller_manager(layout, state, pki, bin_dir, progress)
            started = True
        if procs.running(layout.pid_file("kube-scheduler")) is None:
            _start_scheduler(layout, state, bin_dir, progress)
            started = True
        if procs.running(layout.pid_file("kubelet-sim")) is None:
            _start_kubelet_sim(layout, state, pki, progress)
            started = True
        if not started:
            progress(f"already up at {state.server}")
        return state

    stop_all(layout, progress)
    state = ClusterState(
        choose_ports(previous.ports if previous else None), nodes, ascend_per_node, domains
    )
    save_state(layout, state)
    _write_kubeconfigs(layout, pki, state)

    _start_etcd(layout, state, progress)
    _start_apiserver(layout, state, pki, bin_dir, progress)

    _start_controller_manager(layout, state, pki, bin_dir, progress)
    _start_scheduler(layout, state, bin_dir, progress)
    _start_kubelet_sim(layout, state, pki, progress)
    return state


def fresh(
    layout: Layout, nodes: int, ascend_per_node: int, progress: Progress, domains: int = 0
) -> ClusterState:
    """A cluster in ``layout`` that starts from empty: whatever ran there before is stopped and
    its data deleted first, so a test session, scenario or benchmark never inherits objects
    (and simulated NPUs held by them) from whatever used the directory last."""
    down(layout, progress, purge=True)
    return up(layout, nodes, ascend_per_node, progress, domains=domains)


def _live_other_sessions(sessions: Path) -> list[int]:
    pids = []
    for entry in sessions.glob("*"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        if Path(f"/proc/{entry.name}").exists():
            pids.append(int(entry.name))
        else:
            entry.unlink(missing_ok=True)
    return pids


@contextlib.contextmanager
def session(
    layout: Layout, start: Callable[[], object], stop: Callable[[], object]
) -> Iterator[None]:
    """This process's use of the cluster in ``layout``: a cluster another live process uses
    is shared, anything else is started afresh (``start``); the last process out stops a
    cluster a session started (``stop``), whichever session that was: the starter may leave
    first. Deciding and starting happen under one lock, and so does the stop: two processes
    starting together must not both start afresh (the second wiped the first's cluster
    under it)."""
    sessions = layout.run / "e2e-sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    holder = sessions / str(os.getpid())
    # a session started the cluster now in use (not a developer's ``cluster up``)
    started = layout.run / "e2e-sessions.started"
    with build.file_lock(layout.run / "e2e-sessions.lock"):
        holder.touch()
        if not (healthy(layout) and _live_other_sessions(sessions)):
            try:
                start()
            except BaseException:
                holder.unlink(missing_ok=True)
                raise
            started.touch()
    try:
        yield
    finally:
        with build.file_lock(layout.run / "e2e-sessions.lock"):
            holder.unlink(missing_ok=True)
            if started.exists() and not _live_other_sessions(sessions):
                stop()
                started.unlink(missing_ok=True)


def down(layout: Layout, progress: Progress, purge: bool = False) -> list[str]:
    """Stop this project's cluster processes; with ``purge`` also delete data and credentials."""
    if not layout.root.is_dir():
        return []
    with build.file_lock(layout.lock):
        return _down_locked(layout, progress, purge)


def _down_locked(layout: Layout, progress: Progress, purge: bool) -> list[str]:
    stopped = stop_all(layout, progress)
    if purge:
        for path in (layout.etcd_data, layout.pki, layout.logs, layout.run):
            shutil.rmtree(path, ignore_errors=True)
        for path in (layout.state, layout.kubeconfig):
            path.unlink(missing_ok=True)
    return stopped
