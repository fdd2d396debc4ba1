"""The real KEDA (operator and metrics adapter, built by ``controlplane.build_keda``) as local
processes against the dev cluster, installed as its chart would install it.

- KEDA's CRDs (the release's ``config/crd/bases``), server-side applied;
- the ``keda`` namespace, the operator's home (``KEDA_CLUSTER_OBJECT_NAMESPACE``, where its
  lease and secrets would live);
- the operator: it watches ScaledObjects, evaluates their triggers, creates the HPA of each,
  and serves the trigger values to the adapter over mutual TLS (gRPC);
- the adapter: an extension API server for ``external.metrics.k8s.io/v1beta1``, registered
  with an APIService. The dev cluster runs no pods, so its Service is an ``ExternalName``
  one naming ``localhost``: the aggregation layer resolves it to
  ``https://localhost:<the APIService's port>`` (an ExternalName needs no endpoints; a
  ClusterIP Service's would be loopback addresses, which the API server refuses). The
  APIService's ``caBundle`` is the CA of the certificate the adapter serves with.

One CA signs one certificate for all three TLS legs (the adapter serving the API server, the
operator serving gRPC and the adapter's gRPC client certificate), as KEDA's own cert
rotation makes one ``kedaorg-certs`` Secret for them. ``stop`` removes the APIService before
it stops the adapter (an APIService without its server breaks discovery for every client,
and namespace deletion), and then the CRDs.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from ascend_pd_dev.testtools.kubectl import kubectl_path
from ascend_pd_dev.testtools.local_run import free_port, stop_child_group

NAMESPACE = "keda"
ADAPTER_SERVICE = "keda-metrics-apiserver"
API_SERVICE = "v1beta1.external.metrics.k8s.io"
#: the names the one certificate is valid for: how the aggregation layer (the Service's DNS
#: name) and the adapter's gRPC client (loopback) reach the two servers
CERT_NAMES = ("localhost", f"{ADAPTER_SERVICE}.{NAMESPACE}.svc", "IP:127.0.0.1")
#: the CRDs the tests create objects of
ESTABLISHED = ("scaledobjects.keda.sh", "triggerauthentications.keda.sh")


class KedaError(RuntimeError):
    """KEDA did not come up; the message holds the end of the logs."""


def _openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL)  # fmt: skip
    if done.returncode != 0:
        raise KedaError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def make_certs(cert_dir: Path) -> Path:
    """``ca.crt``, ``tls.crt`` and ``tls.key`` in ``cert_dir``: the file names KEDA reads from
    its ``--cert-dir``. The certificate serves and authenticates (both TLS ends)."""
    cert_dir.mkdir(parents=True, exist_ok=True)
    ca_key = cert_dir / "ca.key"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "30",
             "-subj", "/CN=keda-dev-ca", "-keyout", str(ca_key),
             "-out", str(cert_dir / "ca.crt"))  # fmt: skip
    names = ",".join(n if n.startswith("IP:") else f"DNS:{n}" for n in CERT_NAMES)
    ext = cert_dir / "tls.ext"
    ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                   f"extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName={names}\n")  # fmt: skip
    csr = cert_dir / "tls.csr"
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-sha256", "-subj", "/CN=keda",
             "-keyout", str(cert_dir / "tls.key"), "-out", str(csr))  # fmt: skip
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(cert_dir / "ca.crt"), "-CAkey",
             str(ca_key), "-CAcreateserial", "-days", "30", "-sha256", "-extfile", str(ext),
             "-out", str(cert_dir / "tls.crt"))  # fmt: skip
    (cert_dir / "trusted").mkdir(exist_ok=True)
    (cert_dir / "trusted" / "ca.crt").write_bytes((cert_dir / "ca.crt").read_bytes())
    return cert_dir


def registration(ca_pem: bytes, port: int) -> list[dict[str, Any]]:
    """The adapter's namespace, Service and APIService (``port``: where it listens)."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": ADAPTER_SERVICE, "namespace": NAMESPACE},
         "spec": {"type": "ExternalName", "externalName": "localhost",
                  "ports": [{"name": "https", "port": port}]}},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": API_SERVICE},
         "spec": {"group": "external.metrics.k8s.io", "version": "v1beta1",
                  "groupPriorityMinimum": 100, "versionPriority": 100,
                  "caBundle": base64.b64encode(ca_pem).decode(),
                  "service": {"name": ADAPTER_SERVICE, "namespace": NAMESPACE, "port": port}}},
    ]  # fmt: skip


def operator_argv(binary: Path, cert_dir: Path, grpc_port: int, probe_port: int) -> list[str]:
    return [
        str(binary),
        # its own metrics are not what the tests read
        "--metrics-bind-address=0",
        f"--health-probe-bind-address=127.0.0.1:{probe_port}",
        f"--metrics-service-bind-address=127.0.0.1:{grpc_port}",
        f"--cert-dir={cert_dir}",
        "--enable-cert-rotation=false",
        # the CAs its scalers trust (a directory of certificates only: it reads every file)
        f"--ca-dir={cert_dir / 'trusted'}",
        "--zap-log-level=info",
    ]


def adapter_argv(binary: Path, kubeconfig: Path, cert_dir: Path, port: int, grpc_port: int,
                 metrics_port: int) -> list[str]:  # fmt: skip
    return [
        str(binary),
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        f"--tls-cert-file={cert_dir / 'tls.crt'}",
        f"--tls-private-key-file={cert_dir / 'tls.key'}",
        # delegated authentication and authorization (TokenReview, SubjectAccessReview, the
        # request-header CA from kube-system/extension-apiserver-authentication)
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--lister-kubeconfig={kubeconfig}",
        f"--metrics-service-address=localhost:{grpc_port}",
        f"--port={metrics_port}",
        "--zap-log-level=info",
    ]


class Keda:
    """KEDA from ``keda_dir`` (``build_keda.ensure_keda``) against the cluster of
    ``kubeconfig`` (its admin: KEDA's RBAC is not what a test here checks), state and logs
    in ``workdir``."""

    def __init__(self, keda_dir: Path, kubeconfig: Path, workdir: Path) -> None:
        self.keda_dir, self.kubeconfig, self.workdir = keda_dir, kubeconfig, workdir
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.adapter_port = free_port()

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        done = subprocess.run(
            [str(kubectl_path()), "--kubeconfig", str(self.kubeconfig), *args], input=input,
            capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise KedaError(f"kubectl {' '.join(args[:3])}: {done.stderr.strip()}")
        return done.stdout

    def install_crds(self) -> None:
        crds = sorted((self.keda_dir / "crds").glob("*.yaml"))
        self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=keda-dev",
                     *(a for crd in crds for a in ("-f", str(crd))))  # fmt: skip
        # read, not ``kubectl wait``: right after the apply a CRD has no conditions yet, and
        # ``kubectl wait`` fails on that ("accessor error"), as ``kubectl.install_crd`` says
        deadline = time.monotonic() + 120
        while not all(self.established(crd) for crd in ESTABLISHED):
            if time.monotonic() > deadline:
                raise KedaError(f"KEDA's CRDs not Established in 120 s: {ESTABLISHED}")
            time.sleep(0.5)

    def established(self, crd: str) -> bool:
        out = self.kubectl("get", "crd", crd, "-o", "json", check=False)
        conditions = (json.loads(out).get("status") or {}).get("conditions") or [] if out else []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    def _spawn(self, name: str, argv: list[str]) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "WATCH_NAMESPACE": "",
               "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE, "POD_NAMESPACE": NAMESPACE}  # fmt: skip
        with (self.workdir / f"{name}.log").open("wb") as out:
            self.processes[name] = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True,
            )  # fmt: skip

    def start(self, timeout: float = 300.0) -> Keda:
        """Install, start both, and wait until the API server calls the APIService
        Available (it asked the adapter's discovery through the aggregation layer)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        cert_dir = make_certs(self.workdir / "certs")
        self.install_crds()
        docs = registration((cert_dir / "ca.crt").read_bytes(), self.adapter_port)
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                            "items": docs}))  # fmt: skip
        grpc_port = free_port()
        bin_dir = self.keda_dir / "bin"
        self._spawn("operator", operator_argv(bin_dir / "operator", cert_dir, grpc_port,
                                              free_port()))  # fmt: skip
        self._spawn("adapter", adapter_argv(bin_dir / "adapter", self.kubeconfig, cert_dir,
                                            self.adapter_port, grpc_port, free_port()))  # fmt: skip
        deadline = time.monotonic() + timeout
        while not self.available():
            exited = {n: p.returncode for n, p in self.processes.items() if p.poll() is not None}
            if exited or time.monotonic() > deadline:
                why = f"exited {exited}" if exited else f"not Available in {timeout:.0f} s"
                raise KedaError(f"KEDA {why}:\n{self.logs()}")
            time.sleep(0.5)
        return self

    def available(self) -> bool:
        out = self.kubectl("get", "apiservice", API_SERVICE, "-o", "json", check=False)
        if not out:
            return False
        conditions = json.loads(out).get("status", {}).get("conditions", [])
        return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)

    def logs(self, tail: int = 3000) -> str:
        parts = []
        for name in self.processes:
            text = (self.workdir / f"{name}.log").read_text(errors="replace")
            parts.append(f"---- {name} ----\n{text[-tail:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        # first the registration: an APIService whose server is gone fails discovery
        self.kubectl("delete", "apiservice", API_SERVICE, "--ignore-not-found", check=False)
        for process in self.processes.values():
            stop_child_group(process, 20.0)
        # and the CRDs: the cluster's other tests find it as they would without KEDA
        crds = sorted((self.keda_dir / "crds").glob("*.yaml"))
        self.kubectl("delete", "--ignore-not-found", "--wait=false",
                     *(a for crd in crds for a in ("-f", str(crd))), check=False)  # fmt: skip

    def __enter__(self) -> Keda:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
