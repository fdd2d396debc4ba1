"""The command lines of the dev cluster's processes, and where their files are (``Layout``).

The same on every release of ``versions.RELEASES`` (should one differ, it is here and nowhere
else): no insecure ports (1.24 removed ``--insecure-port``, ``--port`` and ``--address``), so
the controller manager serves nothing and kube-scheduler's health is on its HTTPS port; Pod
Security admission named explicitly, although it is a default plugin. Everything binds
loopback.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ascend_pd_dev.controlplane import certs

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
    # PodDisruptionBudgets' status (expected and healthy pods, disruptions allowed), which
    # the eviction API reads: without it every eviction of a budgeted pod is refused
    "disruption",
)
#: Pod Security admission: a default plugin from 1.25 on, named so that a change of defaults
#: cannot turn it off unnoticed. Without an admission configuration every level is
#: ``privileged``: a namespace is enforced only as its ``pod-security.kubernetes.io/*``
#: labels say, as upstream.
POD_SECURITY_PLUGIN = "PodSecurity"


@dataclass
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    #: kube-scheduler's health port (0 in a state file older than the scheduler): HTTPS, its
    #: self-signed certificate
    scheduler: int = 0


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
    """kube-apiserver: RBAC, no anonymous requests, static token users, service-account
    tokens signed with the cluster's key, the aggregation layer."""
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
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
        # the aggregation layer (kubeadm's flags): extension API servers such as KEDA's
        # metrics adapter get requests proxied with this client certificate, the user in
        # the X-Remote-* headers
        f"--requestheader-client-ca-file={pki.front_proxy_ca_crt}",
        f"--requestheader-allowed-names={certs.FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki.front_proxy_client_crt}",
        f"--proxy-client-key-file={pki.front_proxy_client_key}",
        "--profiling=false",
        "--v=1",
        f"--enable-admission-plugins={POD_SECURITY_PLUGIN}",
    ]


def controller_manager_argv(binary: Path, layout: Layout, pki: certs.Pki) -> list[str]:
    """kube-controller-manager running ``CONTROLLERS``, each with its own service account;
    it serves nothing (the dev cluster checks it by what it does)."""
    return [
        str(binary),
        f"--kubeconfig={layout.component_kubeconfig('kube-controller-manager')}",
        f"--controllers={','.join(CONTROLLERS)}",
        "--leader-elect=false",
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
    """The default scheduler profile, as a cluster runs it; health on ``ports.scheduler`` on
    loopback (HTTPS with the certificate kube-scheduler makes itself), so clusters side by
    side never collide on the fixed default port."""
    return [
        str(binary),
        f"--kubeconfig={layout.component_kubeconfig('kube-scheduler')}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        "--profiling=false",
        "--v=1",
    ]


def scheduler_health_url(port: int) -> str:
    return f"https://127.0.0.1:{port}/healthz"


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
