"""Run the dev cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the
simulated kubelet.

Every process listens on loopback only, on free ports picked at ``up`` (and reused by later
``up`` runs while still free), and is owned through a pid file under ``.dev/run``; ``down``
stops exactly those processes. ``up`` is idempotent: a healthy cluster is left as it is; while
etcd and the API server are healthy, only a missing controller manager, scheduler or kubelet-sim
is started (kubelet-sim is also restarted when its node options changed); otherwise whatever
is left is stopped and everything starts again on the kept data and credentials.

The release (``versions.RELEASES``: the newest by default, the oldest for the compatibility
tier) is picked by ``versions``; what differs in running them, the command lines, is in
``commands``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_dev.controlplane import build, certs, procs, versions
from ascend_pd_dev.controlplane.build import Progress

# re-exported: callers (tests, reliability, benchmarks) know them as cluster.X
from ascend_pd_dev.controlplane.commands import (
    CONTROLLERS as CONTROLLERS,
)
from ascend_pd_dev.controlplane.commands import (
    Layout as Layout,
)
from ascend_pd_dev.controlplane.commands import (
    Ports as Ports,
)
from ascend_pd_dev.controlplane.commands import (
    apiserver_argv as apiserver_argv,
)
from ascend_pd_dev.controlplane.commands import (
    controller_manager_argv as controller_manager_argv,
)
from ascend_pd_dev.controlplane.commands import (
    etcd_argv as etcd_argv,
)
from ascend_pd_dev.controlplane.commands import (
    kubelet_sim_argv as kubelet_sim_argv,
)
from ascend_pd_dev.controlplane.commands import (
    scheduler_argv as scheduler_argv,
)
from ascend_pd_dev.controlplane.commands import (
    scheduler_health_url as scheduler_health_url,
)
from ascend_pd_dev.kubelet_sim import knobs

#: start order; ``down`` stops in reverse
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet-sim")


class ClusterError(RuntimeError):
    """The cluster did not come up; the message names the component and its log."""


@dataclass
class ClusterState:
    """What ``up`` chose, kept in ``.dev/cluster.json`` for ``status`` and the next ``up``."""

    ports: Ports
    nodes: int
    ascend_per_node: int
    #: topology domains kubelet-sim spreads the nodes over (0: no domain label)
    domains: int = 0
    #: the Kubernetes release running ("1.36"; a state file without it is from 1.20, no longer
    #: run: ``up`` replaces that cluster)
    k8s_release: str = versions.DEFAULT

    @property
    def minor(self) -> int:
        return int(self.k8s_release.split(".")[1])

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"


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
            k8s_release=str(data.get("k8s_release", "1.20")),
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
    # its port is HTTPS with a certificate it made itself: nothing to verify it by, and
    # loopback only
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    url = scheduler_health_url(port)
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:
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
            plane = versions.RELEASES.get(state.k8s_release)
            if plane is None:
                raise ClusterError(
                    f"the cluster in {layout.root} runs Kubernetes {state.k8s_release}, no "
                    "longer supported: run `up` again"
                )
            bin_dir = plane.ensure_binaries(progress, False)
            _start_apiserver(layout, state, certs.Pki(layout.pki), bin_dir, progress)


def up(
    layout: Layout,
    nodes: int,
    ascend_per_node: int,
    progress: Progress,
    rebuild: bool = False,
    domains: int = 0,
    k8s_version: str | None = None,
) -> ClusterState:
    """Bring the cluster up (or leave a healthy one as it is); return its state.

    ``k8s_version``: the release to run (``versions.selected_release``: this, else
    ``ASCEND_PD_K8S_VERSION``, else the default). A cluster of another release is stopped and
    its etcd data deleted: neither release reads all that the other stored.

    Concurrent ``up``/``down`` calls on one state directory run one at a time, so a second
    caller finds the cluster the first one started instead of restarting it.
    """
    plane = versions.control_plane(k8s_version)
    bin_dir = plane.ensure_binaries(progress, rebuild)
    build.ensure_runtime_packages(progress)
    layout.root.mkdir(parents=True, exist_ok=True)
    with build.file_lock(layout.lock):
        return _up_locked(
            layout, nodes, ascend_per_node, domains, progress, rebuild, plane.release, bin_dir
        )


def _up_locked(
    layout: Layout,
    nodes: int,
    ascend_per_node: int,
    domains: int,
    progress: Progress,
    rebuild: bool,
    release: str,
    bin_dir: Path,
) -> ClusterState:
    for directory in (layout.root, layout.run, layout.logs):
        directory.mkdir(parents=True, exist_ok=True)
    pki = certs.ensure_pki(layout.pki)
    previous = load_state(layout)
    if previous is not None and previous.k8s_release != release:
        progress(f"switching from Kubernetes {previous.k8s_release} to {release}: its etcd "
                 "data is deleted (neither release reads all that the other stored)")  # fmt: skip
        stop_all(layout, progress)
        shutil.rmtree(layout.etcd_data, ignore_errors=True)

    if (previous is not None and previous.k8s_release == release and not rebuild
            and _core_healthy(layout, previous, pki)):  # fmt: skip
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
        choose_ports(previous.ports if previous else None),
        nodes,
        ascend_per_node,
        domains,
        release,
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
    layout: Layout,
    nodes: int,
    ascend_per_node: int,
    progress: Progress,
    domains: int = 0,
    k8s_version: str | None = None,
) -> ClusterState:
    """A cluster in ``layout`` that starts from empty: whatever ran there before is stopped and
    its data deleted first, so a test session, scenario or benchmark never inherits objects
    (and simulated NPUs held by them) from whatever used the directory last."""
    down(layout, progress, purge=True)
    return up(layout, nodes, ascend_per_node, progress, domains=domains, k8s_version=k8s_version)


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
