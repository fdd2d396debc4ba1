"""Where the API server is and who the operator is to it: read once from the pod's service
account or a kubeconfig, the same reading for our HTTP pool (``wire``) and kopf's login.

The kubernetes client library is not used for this: importing it costs the operator about
10 MiB of memory for a few hundred lines of configuration reading. What is read:

- in a pod: ``KUBERNETES_SERVICE_HOST``/``_PORT``, the service account's CA and token (the
  kubelet rotates the token file, so it is re-read, see ``Bearer``);
- else ``$KUBECONFIG`` (files joined by ``:``, the first definition of a name wins, as
  kubectl merges them) or ``~/.kube/config``: the current (or given) context's server,
  ``certificate-authority(-data)``, ``insecure-skip-tls-verify``, ``tls-server-name``, and
  its user's ``token``/``tokenFile``, client certificate and key (paths or data),
  ``username``/``password`` or an ``exec`` plugin (``client.authentication.k8s.io``).

Anything else a kubeconfig may ask for (``auth-provider``, a proxy) is refused by name, so
a user learns at start-up what to change instead of getting 401s.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_operator.api.json_object import Json

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: How old a token read from a file may get before it is read again (client-go: 1 min);
#: the kubelet replaces a projected token well before it expires.
TOKEN_FILE_SECONDS = 60.0
#: An exec plugin's token is fetched again this long before the expiry it states.
EXEC_EXPIRY_MARGIN = dt.timedelta(seconds=30)
EXEC_TIMEOUT_SECONDS = 60.0


class ConfigError(Exception):
    """The connection settings cannot be used; the message names the file and the field."""


@dataclasses.dataclass(frozen=True)
class ExecPlugin:
    """A kubeconfig user's ``exec``: the command that prints an ExecCredential."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = "client.authentication.k8s.io/v1"


@dataclasses.dataclass(frozen=True)
class Credentials:
    """One API server and how to authenticate to it; PEM text, never paths, so nothing
    depends on a file that may vanish after start-up (except a token file: rotated)."""

    server: str
    source: str
    ca_pem: str | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    cert_pem: str | None = None
    key_pem: str | None = None
    username: str | None = None
    password: str | None = None
    token: str | None = None
    token_file: str | None = None
    exec_plugin: ExecPlugin | None = None
    namespace: str | None = None

    @classmethod
    def for_url(cls, url: str) -> Credentials:
        """A server that needs no credentials (a test's plain-HTTP server)."""
        return cls(server=url.rstrip("/"), source=f"the URL {url}")


def from_environment(env: Mapping[str, str] | None = None) -> Credentials:
    """The pod's service account when running in a pod, else the kubeconfig."""
    env = os.environ if env is None else env
    if env.get("KUBERNETES_SERVICE_HOST") and (SERVICE_ACCOUNT_DIR / "token").is_file():
        return in_cluster(env)
    return from_kubeconfig(env=env)


def in_cluster(env: Mapping[str, str], sa_dir: Path = SERVICE_ACCOUNT_DIR) -> Credentials:
    host = env.get("KUBERNETES_SERVICE_HOST", "")
    port = env.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ConfigError("in-cluster: KUBERNETES_SERVICE_HOST is not set")
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    ca = sa_dir / "ca.crt"
    namespace = sa_dir / "namespace"
    return Credentials(
        server=f"https://{host}:{port}",
        source=f"the pod's service account ({sa_dir})",
        ca_pem=_read(ca, "in-cluster", "ca.crt"),
        token_file=str(sa_dir / "token"),
        namespace=namespace.read_text().strip() if namespace.is_file() else None,
    )


def kubeconfig_paths(env: Mapping[str, str]) -> list[Path]:
    """``$KUBECONFIG``'s files in order (empty entries skipped), else ``~/.kube/config``."""
    listed = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    return [Path(p).expanduser() for p in listed] or [Path("~/.kube/config").expanduser()]


def from_kubeconfig(
    paths: Sequence[str | os.PathLike[str]] | None = None,
    context: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Credentials:
    """The credentials of ``context`` (default: the current context) in the kubeconfig
    files ``paths`` (default: ``$KUBECONFIG`` or ``~/.kube/config``)."""
    files = [Path(p) for p in paths] if paths else kubeconfig_paths(env or os.environ)
    docs = []
    for path in files:
        if not path.is_file():
            continue
        doc = yaml.safe_load(path.read_text()) or {}
        if not isinstance(doc, dict):
            raise ConfigError(f"kubeconfig {path}: not a mapping")
        docs.append((path, doc))
    if not docs:
        raise ConfigError(
            "no API server configured: not in a pod (no KUBERNETES_SERVICE_HOST and service "
            f"account token) and no kubeconfig at {os.pathsep.join(map(str, files))}"
        )
    return resolve(docs, context)


def resolve(docs: Sequence[tuple[Path, Json]], context: str | None = None) -> Credentials:
    """The credentials ``docs`` (kubeconfig documents with the file each came from) give
    for ``context``: merged by name, the first file's definition winning, as kubectl does."""
    name = context or next((str(d["current-context"]) for _, d in docs
                            if d.get("current-context")), "")  # fmt: skip
    where = " ".join(str(path) for path, _ in docs)
    if not name:
        raise ConfigError(f"kubeconfig {where}: no current-context and none given")
    ctx, _ = _named(docs, "contexts", "context", name, where)
    cluster_name, user_name = str(ctx.get("cluster", "")), str(ctx.get("user", ""))
    cluster, cluster_file = _named(docs, "clusters", "cluster", cluster_name, where)
    user, user_file = (_named(docs, "users", "user", user_name, where)
                       if user_name else ({}, docs[0][0]))  # fmt: skip
    source = f"kubeconfig {where}, context {name}"
    for field in ("proxy-url",):
        if cluster.get(field):
            raise ConfigError(f"{source}: cluster {cluster_name}: {field} is not supported")
    if user.get("auth-provider"):
        provider = (user["auth-provider"] or {}).get("name", "")
        raise ConfigError(
            f"{source}: user {user_name}: auth-provider {provider!r} is not supported; "
            "use an exec plugin, a token or a client certificate"
        )
    server = str(cluster.get("server", "")).rstrip("/")
    if not server:
        raise ConfigError(f"{source}: cluster {cluster_name} has no server")
    base = cluster_file.parent
    user_base = user_file.parent
    token_file = user.get("tokenFile")
    return Credentials(
        server=server,
        source=source,
        ca_pem=_pem(cluster, "certificate-authority", base, source),
        insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
        tls_server_name=cluster.get("tls-server-name") or None,
        cert_pem=_pem(user, "client-certificate", user_base, source),
        key_pem=_pem(user, "client-key", user_base, source),
        username=user.get("username") or None,
        password=user.get("password") or None,
        token=user.get("token") or None,
        token_file=str(user_base / token_file) if token_file else None,
        exec_plugin=_exec(user.get("exec"), user_base, source, user_name),
        namespace=ctx.get("namespace") or None,
    )


def _named(
    docs: Sequence[tuple[Path, Json]], section: str, key: str, name: str, where: str
) -> tuple[Json, Path]:
    for path, doc in docs:
        for entry in doc.get(section) or []:
            if entry.get("name") == name:
                return dict(entry.get(key) or {}), path
    raise ConfigError(f"kubeconfig {where}: no {key} named {name!r} in {section}")


def _pem(section: Json, field: str, base: Path, source: str) -> str | None:
    """``field``-data (base64) or ``field`` (a path, relative to its kubeconfig)."""
    data = section.get(f"{field}-data")
    if data:
        try:
            return base64.b64decode(data).decode()
        except (ValueError, UnicodeDecodeError):
            raise ConfigError(f"{source}: {field}-data is not base64 of a PEM text") from None
    path = section.get(field)
    return _read(base / path, source, field) if path else None


def _read(path: Path, source: str, field: str) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise ConfigError(f"{source}: {field} {path}: {error.strerror}") from None


def _exec(spec: Json | None, base: Path, source: str, user: str) -> ExecPlugin | None:
    if not spec:
        return None
    command = str(spec.get("command") or "")
    if not command:
        raise ConfigError(f"{source}: user {user}: exec has no command")
    if os.sep in command and not os.path.isabs(command):
        command = str(base / command)  # relative to the kubeconfig, as kubectl resolves it
    env = tuple((str(e["name"]), str(e.get("value", ""))) for e in spec.get("env") or [])
    return ExecPlugin(
        command=command,
        args=tuple(str(a) for a in spec.get("args") or []),
        env=env,
        api_version=str(spec.get("apiVersion") or ExecPlugin.api_version),
    )


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


class Bearer:
    """The Authorization header to send now: a fixed token, basic auth, a token file read
    again once it is ``TOKEN_FILE_SECONDS`` old, or an exec plugin's token, fetched again
    before it expires. ``refresh`` (after a 401) forces the next read. Thread-safe."""

    def __init__(
        self,
        credentials: Credentials,
        clock: Callable[[], float] = time.monotonic,
        run: Runner = subprocess.run,
    ) -> None:
        self.credentials = credentials
        self._clock = clock
        self._run = run
        self._lock = threading.Lock()
        self._token: str | None = None
        self._read_at = 0.0
        self._expires: dt.datetime | None = None
        #: An exec plugin's client certificate and key, when it gives those.
        self.exec_cert: tuple[str, str] | None = None

    @property
    def refreshes(self) -> bool:
        """Whether a 401 can be answered by reading the credentials again."""
        return bool(self.credentials.token_file or self.credentials.exec_plugin)

    def headers(self) -> dict[str, str]:
        creds = self.credentials
        if creds.token:
            return {"Authorization": f"Bearer {creds.token}"}
        if creds.token_file or creds.exec_plugin:
            token = self.token()
            return {"Authorization": f"Bearer {token}"} if token else {}
        if creds.username is not None:
            pair = f"{creds.username}:{creds.password or ''}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
        return {}

    def token(self) -> str | None:
        """The current token (fixed, from the file, or from the plugin)."""
        creds = self.credentials
        if creds.token:
            return creds.token
        with self._lock:
            if self._stale():
                self._token = self._fetch()
                self._read_at = self._clock()
            return self._token

    def refresh(self) -> None:
        with self._lock:
            self._read_at = float("-inf")
            self._expires = None

    def _stale(self) -> bool:
        if self._token is None or self._read_at == float("-inf"):
            return True
        if self.credentials.exec_plugin is not None:
            now = dt.datetime.now(dt.UTC)
            return self._expires is not None and now >= self._expires - EXEC_EXPIRY_MARGIN
        return self._clock() - self._read_at >= TOKEN_FILE_SECONDS

    def _fetch(self) -> str | None:
        creds = self.credentials
        if creds.token_file:
            return _read(Path(creds.token_file), creds.source, "token file").strip()
        assert creds.exec_plugin is not None
        status = run_exec(creds.exec_plugin, creds.source, self._run)
        self._expires = _timestamp(status.get("expirationTimestamp"))
        if status.get("clientCertificateData") and status.get("clientKeyData"):
            self.exec_cert = (str(status["clientCertificateData"]),
                              str(status["clientKeyData"]))  # fmt: skip
        token = status.get("token")
        return str(token) if token else None


def run_exec(plugin: ExecPlugin, source: str, run: Runner = subprocess.run) -> Json:
    """Run ``plugin`` and return its ExecCredential's ``status``."""
    info = {"apiVersion": plugin.api_version, "kind": "ExecCredential",
            "spec": {"interactive": False}}  # fmt: skip
    env = dict(os.environ, **dict(plugin.env), KUBERNETES_EXEC_INFO=json.dumps(info))
    what = f"{source}: exec plugin {plugin.command}"
    try:
        done = run([plugin.command, *plugin.args], env=env, capture_output=True, text=True,
                   timeout=EXEC_TIMEOUT_SECONDS, stdin=subprocess.DEVNULL)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ConfigError(f"{what}: {error}") from None
    if done.returncode != 0:
        raise ConfigError(f"{what} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    try:
        doc: Any = json.loads(done.stdout)
        status: Json = doc["status"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"{what}: its output is not an ExecCredential with a status") from None
    return status


def _timestamp(value: object) -> dt.datetime | None:
    if not value:
        return None
    try:
        stamp = dt.datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC)
