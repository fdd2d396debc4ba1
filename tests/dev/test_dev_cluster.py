"""Pure parts of running the dev cluster: ports, command lines, kubeconfigs."""

from __future__ import annotations

import base64
import socket
from pathlib import Path

from ascend_pd_dev.controlplane import certs, cluster, commands


def test_previous_ports_are_reused_while_free_and_replaced_when_taken() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        free = cluster.free_port({taken})
        chosen = cluster.choose_ports(cluster.Ports(free, taken, 0, 0))
    assert chosen.etcd_client == free
    assert chosen.etcd_peer != taken
    assert len({chosen.etcd_client, chosen.etcd_peer, chosen.apiserver, chosen.scheduler}) == 4


def test_command_lines_bind_loopback_use_no_removed_flag_and_enforce_pod_security(
    tmp_path: Path,
) -> None:
    """1.24 removed the insecure ports: a binary of any supported release refuses
    ``--insecure-port``, ``--port`` and ``--address`` (unknown flag) and would not start."""
    layout = cluster.Layout(tmp_path)
    pki = certs.Pki(layout.pki)
    ports = cluster.Ports(2379, 2380, 6443, 10259)
    api = cluster.apiserver_argv(Path("/b/kube-apiserver"), layout, pki, ports)
    cm = cluster.controller_manager_argv(Path("/b/kcm"), layout, pki)
    scheduler = cluster.scheduler_argv(Path("/b/kube-scheduler"), layout, ports)
    removed = ("--insecure-port=", "--port=", "--address=")
    assert not [a for a in api + cm + scheduler if a.startswith(removed)]
    assert "--enable-admission-plugins=PodSecurity" in api
    assert "--authorization-mode=RBAC" in api and "--anonymous-auth=false" in api
    assert "--bind-address=127.0.0.1" in api and "--secure-port=6443" in api
    assert f"--token-auth-file={pki.tokens_csv}" in api
    assert f"--service-account-signing-key-file={pki.sa_key}" in api
    # the aggregation layer: extension API servers (KEDA's metrics adapter) trust requests
    # proxied with the front-proxy client certificate
    assert f"--requestheader-client-ca-file={pki.front_proxy_ca_crt}" in api
    assert f"--proxy-client-cert-file={pki.front_proxy_client_crt}" in api
    assert "--requestheader-allowed-names=front-proxy-client" in api
    (controllers,) = [a for a in cm if a.startswith("--controllers=")]
    assert set(controllers.split("=", 1)[1].split(",")) >= {
        "deployment", "replicaset", "statefulset", "job", "garbagecollector", "namespace",
        "serviceaccount", "serviceaccount-token",
    }  # fmt: skip
    assert "--secure-port=0" in cm
    # the scheduler's health is on its HTTPS port, on loopback, on the port the cluster chose
    assert "--secure-port=10259" in scheduler and "--bind-address=127.0.0.1" in scheduler
    assert "--leader-elect=false" in scheduler
    assert commands.scheduler_health_url(10259) == "https://127.0.0.1:10259/healthz"
    etcd = cluster.etcd_argv(Path("/usr/bin/etcd"), layout, ports)
    everything = etcd + api + cm + scheduler
    assert not [a for a in everything if "=0.0.0.0" in a or "//0.0.0.0" in a]


def test_kubeconfig_has_one_token_user_and_the_ca() -> None:
    config = cluster.kubeconfig("https://127.0.0.1:1", "PEM", "admin", "tok", "ctx")
    assert config["current-context"] == "ctx"
    assert config["users"] == [{"name": "admin", "user": {"token": "tok"}}]
    ca = config["clusters"][0]["cluster"]["certificate-authority-data"]
    assert base64.b64decode(ca) == b"PEM"


def test_state_round_trips(tmp_path: Path) -> None:
    layout = cluster.Layout(tmp_path)
    state = cluster.ClusterState(cluster.Ports(1, 2, 3, 4), 8, 8, domains=2, k8s_release="1.36")
    cluster.save_state(layout, state)
    assert cluster.load_state(layout) == state
    # a state file from before the scheduler, the domains and the releases: no scheduler
    # port, no domains, and the only release there was then
    layout.state.write_text('{"ports": {"etcd_client": 1, "etcd_peer": 2, "apiserver": 3}, '
                            '"nodes": 8, "ascend_per_node": 8}')  # fmt: skip
    assert cluster.load_state(layout) == cluster.ClusterState(
        cluster.Ports(1, 2, 3, 0), 8, 8, k8s_release="1.20"
    )
    layout.state.write_text("{")
    assert cluster.load_state(layout) is None


def test_a_new_crd_without_conditions_is_not_established_yet() -> None:
    """``make reliability`` once stopped at its start: the jsonpath filter on a new CRD's
    conditions failed ("<nil> is not array or slice") instead of waiting."""
    from ascend_pd_dev.testtools.kubectl import established

    assert not established({"status": {"conditions": None}})
    assert not established({})
    assert not established(
        {"status": {"conditions": [{"type": "NamesAccepted", "status": "True"}]}}
    )
    assert not established({"status": {"conditions": [{"type": "Established", "status": "False"}]}})
    assert established({"status": {"conditions": [{"type": "Established", "status": "True"}]}})
