"""The pure part of the CRD checker (``crd_server``): the default release's kube-apiserver
command line."""

from __future__ import annotations

from pathlib import Path

from ascend_pd_dev.controlplane import cluster, crd_server


def test_the_server_command_line() -> None:
    argv = crd_server.server_argv(Path("/b/kube-apiserver"), Path("/s"), cluster.Ports(1, 2, 3))
    assert argv[0] == "/b/kube-apiserver"
    assert "--etcd-servers=http://127.0.0.1:1" in argv
    assert "--secure-port=3" in argv
    assert "--bind-address=127.0.0.1" in argv
    assert "--client-ca-file=/s/pki/ca.crt" in argv
    assert "--authorization-mode=RBAC" in argv and "--anonymous-auth=false" in argv
    assert "--service-account-signing-key-file=/s/pki/service-account.key" in argv
    assert "--enable-priority-and-fairness=false" in argv
    # any namespace name: nothing looks it up
    assert "--disable-admission-plugins=NamespaceLifecycle" in argv
    assert not [a for a in argv if "=0.0.0.0" in a or "//0.0.0.0" in a]
