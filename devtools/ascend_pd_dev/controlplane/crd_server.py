"""A CRD checker: the default release's kube-apiserver (``versions.DEFAULT``) alone, with its
own etcd, for the CRD checks of ``tests/crdserver``.

It serves every built-in API but runs nothing: no controller manager, scheduler or nodes, so
it answers what the CRD alone decides (schema, defaults, CEL rules and their cost, printer
columns, ``kubectl explain``, strict field validation) on the newest Kubernetes, in a second
or two after etcd, beside or without a dev cluster. Namespaced custom resources work in any
namespace name, since the admission plugin that would look the namespace up
(NamespaceLifecycle) is off. Its binary is the dev cluster's own (``build_gomod``), built
once per release: the release table (``versions.RELEASES``) is the only list of versions.

Every process listens on loopback on free ports and is owned through a pid file under the
state directory; ``stop`` ends exactly those. Clients authenticate with a certificate in
``system:masters``, which RBAC lets through without a role.
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_dev.controlplane import build, certs, cluster, procs, versions
from ascend_pd_dev.controlplane.build import Progress
from ascend_pd_dev.controlplane.paths import UnderRoot

#: a namespaced custom resource may name any namespace: none is created, none is looked up
DISABLED_ADMISSION = ("NamespaceLifecycle",)
#: start order; ``stop`` ends them in reverse
COMPONENTS = ("etcd", "crd-server")
CLIENT_USER = "ascend-pd:crd-checker"


class CrdServerError(RuntimeError):
    """The CRD server did not come up; the message names the component and its log."""


@dataclass(frozen=True)
class CrdServer:
    """A running CRD server: where it listens and how to talk to it."""

    root: Path
    #: ``apiserver``: the CRD server's own secure port
    ports: cluster.Ports

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    kubeconfig = UnderRoot("kubeconfig")
    pki = UnderRoot("pki")

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        context.load_cert_chain(str(self.pki / "client.crt"), str(self.pki / "client.key"))
        return context

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: float = 30.0,
        accept: str = "application/json",
    ) -> tuple[int, Any]:
        """One API call as the client user; (status, decoded JSON body or text), 0 if down."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method,
            headers={"Content-Type": "application/json", "Accept": accept},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(
                request, timeout=timeout, context=self.ssl_context()
            ) as resp:
                status, raw = int(resp.status), resp.read()
        except urllib.error.HTTPError as err:
            status, raw = int(err.code), err.read()
        except (urllib.error.URLError, OSError):
            return 0, None
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")


# --- pure builders ------------------------------------------------------------------------


def server_argv(binary: Path, root: Path, ports: cluster.Ports) -> list[str]:
    """kube-apiserver on loopback: RBAC (``system:masters`` needs no role), no anonymous
    requests, the service-account flags it will not start without, no NamespaceLifecycle."""
    pki = root / "pki"
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--cert-dir={pki}",
        f"--tls-cert-file={pki / 'serving.crt'}",
        f"--tls-private-key-file={pki / 'serving.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        "--authorization-mode=RBAC",
        "--anonymous-auth=false",
        f"--service-cluster-ip-range={certs.SERVICE_CIDR}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'service-account.pub'}",
        f"--service-account-signing-key-file={pki / 'service-account.key'}",
        f"--disable-admission-plugins={','.join(DISABLED_ADMISSION)}",
        "--enable-priority-and-fairness=false",
        "--profiling=false",
        "--v=1",
    ]


def client_kubeconfig(url: str, pki: Path) -> dict[str, Any]:
    def b64(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "crd-server", "cluster": {
            "server": url, "certificate-authority-data": b64("ca.crt")}}],
        "users": [{"name": CLIENT_USER, "user": {
            "client-certificate-data": b64("client.crt"), "client-key-data": b64("client.key")}}],
        "contexts": [{"name": "crd-server", "context": {
            "cluster": "crd-server", "user": CLIENT_USER, "namespace": "default"}}],
        "current-context": "crd-server",
    }  # fmt: skip


# --- credentials --------------------------------------------------------------------------


def _openssl(*args: str) -> None:
    done = subprocess.run(
        ["openssl", *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False
    )
    if done.returncode != 0:
        raise CrdServerError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def _signed(pki: Path, name: str, subject: str, extensions: str) -> None:
    key, csr, ext = pki / f"{name}.key", pki / f"{name}.csr", pki / f"{name}.ext"
    ext.write_text(extensions)
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-sha256", "-subj", subject,
             "-keyout", str(key), "-out", str(csr))  # fmt: skip
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"),
             "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "3650", "-sha256",
             "-extfile", str(ext), "-out", str(pki / f"{name}.crt"))  # fmt: skip
    csr.unlink()
    ext.unlink()


def ensure_pki(pki: Path) -> None:
    """A CA, the serving certificate (127.0.0.1, localhost), a ``system:masters`` client and
    the service-account key pair."""
    pki.mkdir(parents=True, exist_ok=True)
    pki.chmod(0o700)
    if not (pki / "ca.crt").is_file():
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "3650",
                 "-subj", "/CN=ascend-pd-crd-server-ca", "-keyout", str(pki / "ca.key"),
                 "-out", str(pki / "ca.crt"))  # fmt: skip
        for name in ("serving", "client"):
            (pki / f"{name}.crt").unlink(missing_ok=True)
    if not (pki / "serving.crt").is_file():
        _signed(pki, "serving", "/CN=ascend-pd-crd-server",
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\n"
                "subjectAltName=DNS:localhost,IP:127.0.0.1\n")  # fmt: skip
    if not (pki / "service-account.key").is_file():
        _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                 "-out", str(pki / "service-account.key"))  # fmt: skip
        _openssl("pkey", "-in", str(pki / "service-account.key"), "-pubout",
                 "-out", str(pki / "service-account.pub"))  # fmt: skip
    if not (pki / "client.crt").is_file():
        _signed(pki, "client", f"/O=system:masters/CN={CLIENT_USER}",
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=clientAuth\n")  # fmt: skip


# --- processes ----------------------------------------------------------------------------


def _state_file(root: Path) -> Path:
    return root / "crd-server.json"


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
    except OSError:
        return ""


def _wait(what: str, check: Callable[[], bool], component: str, root: Path, timeout: float) -> None:
    layout = cluster.Layout(root)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if procs.running(layout.pid_file(component)) is None:
            log = layout.log_file(component)
            raise CrdServerError(f"{component} exited while waiting for {what}; log {log}:\n"
                                 f"{_tail(log)}")  # fmt: skip
        time.sleep(0.25)
    log = layout.log_file(component)
    raise CrdServerError(f"timed out after {timeout:.0f}s waiting for {what}; log {log}:\n"
                         f"{_tail(log)}")  # fmt: skip


def running(root: Path) -> CrdServer | None:
    """The CRD server this state directory started, when its processes still run."""
    layout = cluster.Layout(root)
    if any(procs.running(layout.pid_file(c)) is None for c in COMPONENTS):
        return None
    try:
        ports = cluster.Ports(**json.loads(_state_file(root).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return CrdServer(root, ports)


def start(root: Path, progress: Progress, fresh: bool = True) -> CrdServer:
    """Start etcd and the CRD server under ``root`` (building the server once, cached).

    ``fresh`` starts from an empty etcd data directory, so nothing of an earlier run is left,
    and stops a server this directory already runs; without it a running server is kept.
    """
    release = versions.RELEASES[versions.DEFAULT]
    binary = release.ensure_binaries(progress) / "kube-apiserver"
    build.ensure_runtime_packages(progress)
    etcd = build.etcd_binary()
    root.mkdir(parents=True, exist_ok=True)
    with build.file_lock(root / ".lock"):
        current = running(root)
        if not fresh and current is not None and current.request("GET", "/healthz")[0] == 200:
            progress(f"already up at {current.url}")
            return current
        stop_locked(root, progress)
        layout = cluster.Layout(root)
        if fresh:
            shutil.rmtree(layout.etcd_data, ignore_errors=True)
        ensure_pki(root / "pki")
        taken: set[int] = set()
        for _ in range(3):
            taken.add(cluster.free_port(taken))
        ports = cluster.Ports(*sorted(taken))
        _state_file(root).write_text(json.dumps(asdict(ports)) + "\n")
        server = CrdServer(root, ports)
        kubeconfig = root / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(client_kubeconfig(server.url, root / "pki")))
        kubeconfig.chmod(0o600)

        progress(f"starting etcd on 127.0.0.1:{ports.etcd_client}")
        procs.start(cluster.etcd_argv(etcd, layout, ports), layout.pid_file("etcd"),
                    layout.log_file("etcd"), cwd=root)  # fmt: skip
        _wait("etcd health", lambda: cluster.etcd_healthy(ports.etcd_client), "etcd", root, 60)
        progress(f"starting kube-apiserver {release.version} alone on {server.url}")
        procs.start(server_argv(binary, root, ports), layout.pid_file("crd-server"),
                    layout.log_file("crd-server"), cwd=root)  # fmt: skip

        def serving() -> bool:
            return server.request("GET", "/readyz", timeout=2)[0] == 200

        _wait("kube-apiserver's /readyz", serving, "crd-server", root, 120)
        return server


def stop(root: Path, progress: Progress) -> list[str]:
    """Stop what ``start`` started under ``root``; return the components stopped."""
    if not root.is_dir():
        return []
    with build.file_lock(root / ".lock"):
        return stop_locked(root, progress)


def stop_locked(root: Path, progress: Progress) -> list[str]:
    return procs.stop_all(cluster.Layout(root).pid_file, COMPONENTS, progress)


def server_version(server: CrdServer) -> str:
    """``gitVersion`` of the server's ``/version``."""
    status, body = server.request("GET", "/version")
    if status != 200 or not isinstance(body, dict):
        raise CrdServerError(f"GET /version answered {status}: {body}")
    return str(body["gitVersion"])
