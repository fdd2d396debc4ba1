"""The operator's own reading of its connection settings (``kubeio.credentials``) and its
HTTP pool (``kubeio.wire``), checked against what kubectl would do with the same files and
against real TLS: a server with its own CA that demands a client certificate."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_pd_operator.kubeio import credentials as creds
from ascend_pd_operator.kubeio.credentials import Bearer, ConfigError, from_kubeconfig
from ascend_pd_operator.kubeio.kube import Connection, Kube
from ascend_pd_operator.wiring.handlers import login_info
from tests.json_server import serving


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _kubeconfig(path: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None,
                current: str = "main", **extra: Any) -> Path:  # fmt: skip
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "contexts": [
            {"name": "main", "context": {"cluster": "c", "user": "u", "namespace": "llm"}}
        ],
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://10.1.2.3:6443/"}}],
        "users": [{"name": "u", "user": user}],
        **extra,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_token_user_with_ca_data(tmp_path: Path) -> None:
    cluster = {"server": "https://10.1.2.3:6443/", "certificate-authority-data": _b64("CA")}
    got = from_kubeconfig([_kubeconfig(tmp_path / "kc", {"token": "t0k"}, cluster)])
    assert (got.server, got.ca_pem, got.token, got.namespace) == (
        "https://10.1.2.3:6443", "CA", "t0k", "llm")  # fmt: skip
    assert Bearer(got).headers() == {"Authorization": "Bearer t0k"}


def test_paths_are_relative_to_their_kubeconfig_as_kubectl_reads_them(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    for name, text in (("ca.crt", "CA"), ("u.crt", "CERT"), ("u.key", "KEY"), ("tok", "T\n")):
        (tmp_path / "pki" / name).write_text(text)
    user = {"client-certificate": "pki/u.crt", "client-key": "pki/u.key", "tokenFile": "pki/tok"}
    cluster = {"server": "https://h:1", "certificate-authority": "pki/ca.crt"}
    got = from_kubeconfig([_kubeconfig(tmp_path / "kc", user, cluster)])
    assert (got.ca_pem, got.cert_pem, got.key_pem) == ("CA", "CERT", "KEY")
    assert Bearer(got).token() == "T"  # the file's, stripped


def test_kubeconfig_files_merge_first_definition_wins(tmp_path: Path) -> None:
    first = _kubeconfig(tmp_path / "a", {"token": "from-a"}, current="")
    second = _kubeconfig(tmp_path / "b", {"token": "from-b"}, current="main")
    got = creds.from_kubeconfig(env={"KUBECONFIG": f"{first}:{tmp_path / 'none'}:{second}"})
    assert got.token == "from-a"  # the user "u" of the first file; the context of the second


def test_what_cannot_be_used_is_named(tmp_path: Path) -> None:
    gcp = {"auth-provider": {"name": "gcp", "config": {}}}
    with pytest.raises(ConfigError, match="auth-provider 'gcp' is not supported"):
        from_kubeconfig([_kubeconfig(tmp_path / "kc", gcp)])
    with pytest.raises(ConfigError, match="no context named 'other'"):
        from_kubeconfig([_kubeconfig(tmp_path / "kc", {})], context="other")
    with pytest.raises(ConfigError, match="has no server"):
        from_kubeconfig([_kubeconfig(tmp_path / "kc", {}, {"insecure-skip-tls-verify": True})])
    with pytest.raises(ConfigError, match=r"client-key .*/missing\.key"):
        from_kubeconfig([_kubeconfig(tmp_path / "kc", {"client-key": "missing.key"})])
    with pytest.raises(ConfigError, match="no API server configured"):
        creds.from_kubeconfig(env={"KUBECONFIG": str(tmp_path / "none")})


def test_in_a_pod_the_service_account_is_used_and_its_token_read_again(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("CA")
    (tmp_path / "namespace").write_text("ascend-pd-system")
    (tmp_path / "token").write_text("first")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    got = creds.in_cluster(env, tmp_path)
    assert (got.server, got.ca_pem, got.namespace) == ("https://[fd00::1]:443", "CA",
                                                       "ascend-pd-system")  # fmt: skip
    now = [0.0]
    bearer = Bearer(got, clock=lambda: now[0])
    assert bearer.token() == "first"
    (tmp_path / "token").write_text("rotated")  # the kubelet replaced it
    now[0] = creds.TOKEN_FILE_SECONDS - 1
    assert bearer.token() == "first"
    now[0] = creds.TOKEN_FILE_SECONDS
    assert bearer.token() == "rotated"


def test_an_exec_plugin_is_run_again_when_its_token_expires(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.py"
    count = tmp_path / "count"
    # A real plugin process: it reads KUBERNETES_EXEC_INFO and its env, prints a credential.
    plugin.write_text(
        textwrap.dedent(f"""
        import json, os, pathlib
        info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
        assert info["kind"] == "ExecCredential" and info["spec"]["interactive"] is False
        count = pathlib.Path({str(count)!r})
        n = int(count.read_text()) + 1 if count.exists() else 1
        count.write_text(str(n))
        print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential",
            "status": {{"token": os.environ["PREFIX"] + str(n),
                       "expirationTimestamp": os.environ["EXPIRES"]}}}}))
    """)
    )
    env = [{"name": "PREFIX", "value": "tok-"}, {"name": "EXPIRES", "value": "2999-01-01T00:00Z"}]
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                     "args": [str(plugin)], "env": env}}  # fmt: skip
    got = from_kubeconfig([_kubeconfig(tmp_path / "kc", user)])
    bearer = Bearer(got)
    assert bearer.token() == "tok-1" and bearer.token() == "tok-1"  # not expired: kept
    bearer.refresh()  # after a 401
    assert bearer.token() == "tok-2"
    expired = {"exec": {**user["exec"], "env": [{"name": "PREFIX", "value": "x-"},
               {"name": "EXPIRES", "value": "2000-01-01T00:00:00Z"}]}}  # fmt: skip
    bearer = Bearer(from_kubeconfig([_kubeconfig(tmp_path / "kc2", expired)]))
    assert bearer.token() == "x-3" and bearer.token() == "x-4"  # expired: asked again
    broken = {"exec": {"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"]}}
    with pytest.raises(ConfigError, match=r"exec plugin .* exited 3"):
        Bearer(from_kubeconfig([_kubeconfig(tmp_path / "kc3", broken)])).token()


def test_a_401_reads_the_rotated_token_and_sends_once_more(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("old")
    seen: list[dict[str, Any]] = []

    def answer(method: str, path: str, query: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        if seen[-1]["headers"].get("Authorization") != "Bearer new":
            return 401, {}, {"kind": "Status", "code": 401, "reason": "Unauthorized"}
        return 200, {}, {"kind": "ConfigMap", "metadata": {"name": "x"}}

    with serving(answer, seen=seen) as url:
        kube = Kube(Connection(creds.Credentials(server=url, source="test",
                                                 token_file=str(token))))  # fmt: skip
        assert kube.connection.bearer.token() == "old"  # read, and kept for a minute
        token.write_text("new")  # the kubelet rotated it; the server knows only the new one
        assert kube.get("ConfigMap", "ns", "x") == {"kind": "ConfigMap",
                                                    "metadata": {"name": "x"}}  # fmt: skip
    assert [s["headers"]["Authorization"] for s in seen] == ["Bearer old", "Bearer new"]


# --- TLS, for real: a CA, a server certificate for 127.0.0.1, a client certificate ----------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.crt", "-days", "2", "-subj", "/CN=test-ca", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name, subject, ext in (("server", "/CN=127.0.0.1", ["-extfile", "san.ext"]),
                               ("client", "/CN=ascend-pd/O=operators", [])):  # fmt: skip
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                 f"{name}.csr", "-subj", subject, cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", *ext, cwd=d)  # fmt: skip
    return d


@pytest.fixture
def tls_server(pki: Path) -> Iterator[tuple[str, list[str]]]:
    """An HTTPS server that demands a client certificate from our CA; it answers every GET
    with the client certificate's subject CN."""
    subjects: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            cert = self.connection.getpeercert()  # type: ignore[attr-defined]
            cn = dict(x[0] for x in cert["subject"])["commonName"]
            subjects.append(cn)
            data = json.dumps({"kind": "ConfigMap", "metadata": {"name": cn}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki / "server.crt", pki / "server.key")
    context.load_verify_locations(pki / "ca.crt")
    context.verify_mode = ssl.CERT_REQUIRED
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", subjects
    finally:
        server.shutdown()
        server.server_close()


def test_client_certificate_data_over_tls_checked_against_the_ca(
    pki: Path, tls_server: tuple[str, list[str]], tmp_path: Path
) -> None:
    url, subjects = tls_server
    cluster = {"server": url, "certificate-authority-data": _b64((pki / "ca.crt").read_text())}
    user = {"client-certificate-data": _b64((pki / "client.crt").read_text()),
            "client-key-data": _b64((pki / "client.key").read_text())}  # fmt: skip
    kube = Kube(Connection.from_kubeconfig(_kubeconfig(tmp_path / "kc", user, cluster)))
    assert kube.get("ConfigMap", "ns", "x") == {"kind": "ConfigMap",
                                                "metadata": {"name": "ascend-pd"}}  # fmt: skip
    assert subjects == ["ascend-pd"]
    # kopf is handed the same server, trust and certificate
    info = login_info(kube.connection)
    assert (info.server, info.ca_data, info.certificate_data, info.default_namespace) == (
        url, (pki / "ca.crt").read_text(), (pki / "client.crt").read_text(), "llm")  # fmt: skip


def test_a_server_certificate_from_another_ca_is_refused(
    pki: Path, tls_server: tuple[str, list[str]], tmp_path: Path
) -> None:
    import urllib3

    url, subjects = tls_server
    other = tmp_path / "other"
    other.mkdir()
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "o.key", "-out",
             "o.crt", "-days", "2", "-subj", "/CN=other-ca", cwd=other)  # fmt: skip
    cluster = {"server": url, "certificate-authority": str(other / "o.crt")}
    user = {"client-certificate": str(pki / "client.crt"), "client-key": str(pki / "client.key")}
    kube = Kube(Connection.from_kubeconfig(_kubeconfig(tmp_path / "kc", user, cluster)))
    with pytest.raises(urllib3.exceptions.MaxRetryError, match="CERTIFICATE_VERIFY_FAILED"):
        kube.get("ConfigMap", "ns", "x")
    assert subjects == []
    # insecure-skip-tls-verify, as kubectl: no check of the server's certificate
    insecure = {"server": url, "insecure-skip-tls-verify": True}
    kube = Kube(Connection.from_kubeconfig(_kubeconfig(tmp_path / "kc2", user, insecure)))
    assert kube.get("ConfigMap", "ns", "x") is not None and subjects == ["ascend-pd"]


PROGRAM = """
import sys

class NoKubernetes:
    # the operator image: the kubernetes client library is not installed
    def find_spec(self, name, path=None, target=None):
        if name == "kubernetes" or name.startswith("kubernetes."):
            raise ImportError(f"No module named {name!r}")

sys.meta_path.insert(0, NoKubernetes())
from ascend_pd_operator.wiring import cli, handlers, reconciler, run_cli
from ascend_pd_operator.kubeio import leader
from ascend_pd_operator.kubeio.kube import Connection, Kube

kube = Kube(Connection.from_kubeconfig(sys.argv[1]))
info = handlers.login_info(kube.connection)
print(info.server, info.token, "kubernetes" in sys.modules)
"""


def test_the_operator_runs_without_the_kubernetes_client_library(tmp_path: Path) -> None:
    kubeconfig = _kubeconfig(tmp_path / "kc", {"token": "t"}, {"server": "http://127.0.0.1:9"})
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(kubeconfig)],
                          capture_output=True, text=True, check=False, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["http://127.0.0.1:9", "t", "False"]
