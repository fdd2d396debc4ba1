"""The connection to the API server: a urllib3 pool with the operator's TLS trust and
credentials (``credentials``), and one HTTP exchange over it, counted.

``Connection`` leaves throttling to ``sender`` (urllib3 is told not to retry a 429 itself)
and names the operator's component in the User-Agent; ``with_pool`` gives the watches a
pool of their own with the same credentials. ``Wire.send`` sends one request and counts it
in ``metrics`` by verb, kind and status code ("error": no answer); it neither retries
(except once after a 401, with the credentials read again: a rotated token) nor reads the
answer.
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import urllib3

from ascend_pd_operator.kubeio import metrics
from ascend_pd_operator.kubeio.credentials import Bearer, Credentials, from_environment
from ascend_pd_operator.kubeio.credentials import from_kubeconfig as _from_kubeconfig

Query = list[tuple[str, str]]
Response = urllib3.BaseHTTPResponse

#: (connect, read) seconds: a request to an API server that vanished mid-call fails
#: instead of blocking its worker forever.
REQUEST_TIMEOUT = (10.0, 60.0)
USER_AGENT = "ascend-pd-operator"
#: urllib3's default retries, except that a 429 or 503 with Retry-After comes back to us:
#: urllib3 would retry a GET on its own and, after its last try, raise a MaxRetryError that
#: hides the Retry-After from the work queue, which then retried sooner than asked.
RETRIES = urllib3.Retry(total=3, respect_retry_after_header=False)
#: Connections kept for the reconciler: its workers, the resync, the planner and the
#: elector each hold one at a time; beyond the pool urllib3 opens (and closes) extra ones.
POOL_SIZE = 10


def ssl_context(credentials: Credentials, client_cert: tuple[str, str] | None) -> ssl.SSLContext:
    """Trust ``credentials``' CA (else the system's), present the client certificate."""
    context = ssl.create_default_context(cadata=credentials.ca_pem or None)
    if client_cert:
        with _pem_files(*client_cert) as (cert, key):
            context.load_cert_chain(certfile=cert, keyfile=key)
    if credentials.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


@contextlib.contextmanager
def _pem_files(*texts: str) -> Iterator[list[str]]:
    """``texts`` in private files that last as long as the block: ``ssl`` loads a
    certificate chain only from files."""
    with tempfile.TemporaryDirectory(prefix="ascend-pd-tls-") as directory:
        paths = []
        for index, text in enumerate(texts):
            path = Path(directory) / f"{index}.pem"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
            paths.append(str(path))
        yield paths


class Connection:
    """A pool of connections to one API server, with its credentials."""

    def __init__(
        self,
        credentials: Credentials,
        pool_size: int = POOL_SIZE,
        component: str = "reconciler",
        bearer: Bearer | None = None,
    ) -> None:
        self.credentials = credentials
        self.bearer = bearer or Bearer(credentials)
        self.component = component
        self.user_agent = f"{USER_AGENT} ({component})"
        self.retries = RETRIES
        self.pool_size = pool_size
        options: dict[str, Any] = {"maxsize": pool_size, "retries": RETRIES}
        if credentials.server.startswith("https:"):
            if credentials.exec_plugin is not None:
                self.bearer.token()  # a plugin may answer with a client certificate
            cert = (credentials.cert_pem, credentials.key_pem)
            pair = cert if all(cert) else self.bearer.exec_cert
            options["ssl_context"] = ssl_context(credentials, pair)  # type: ignore[arg-type]
            if credentials.insecure:
                options.update(cert_reqs="CERT_NONE", assert_hostname=False)
            if credentials.tls_server_name:
                options["server_hostname"] = credentials.tls_server_name
        self.http = urllib3.PoolManager(**options)

    @classmethod
    def from_environment(cls) -> Connection:
        """The pod's service account when running in a pod, else ``$KUBECONFIG`` /
        ``~/.kube/config``."""
        return cls(from_environment())

    @classmethod
    def from_kubeconfig(
        cls, path: str | os.PathLike[str], context: str | None = None
    ) -> Connection:
        return cls(_from_kubeconfig([path], context))

    @classmethod
    def for_url(cls, url: str) -> Connection:
        """A server that needs no credentials (a test's plain-HTTP server)."""
        return cls(Credentials.for_url(url))

    def with_pool(self, streams: int, component: str) -> Connection:
        """The same server and credentials on a pool of ``streams`` (+2) connections of
        its own, for long-lived watches: urllib3 would discard connections beyond its
        pool's size, and a watch holds its connection for minutes."""
        return Connection(self.credentials, streams + 2, component, self.bearer)

    def request(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: dict[str, str],
        timeout: tuple[float, float],
    ) -> Response:
        """One request; the answer's body is not read yet."""
        headers = {**headers, "User-Agent": self.user_agent, **self.bearer.headers()}
        return self.http.request(
            method,
            self.credentials.server + url,
            body=body,
            headers=headers,
            timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
            preload_content=False,
            redirect=False,
        )

    def close(self) -> None:
        self.http.clear()


class Wire:
    """One request at a time over ``connection``, each one counted."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def send(
        self,
        method: str,
        url: str,
        query: Query | None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: tuple[float, float] | None = None,
    ) -> Response:
        """One request; the response's body is not read yet (``.stream`` or ``.data``)."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
            if not isinstance(body, bytes):
                body = json.dumps(body, separators=(",", ":")).encode()
        target = f"{url}?{urlencode(query)}" if query else url
        verb = metrics.request_verb(method, url, query, content_type)
        kind = metrics.request_kind(url)
        timeout = timeout or REQUEST_TIMEOUT

        def once() -> Response:
            try:
                answer = self.connection.request(method, target, body, headers, timeout)
            except Exception:
                metrics.observe_request(verb, kind, "error")
                raise
            metrics.observe_request(verb, kind, answer.status)
            return answer

        response = once()
        if response.status == 401 and self.connection.bearer.refreshes:
            # The kubelet rotated our token (or a plugin's expired early): read it again.
            response.drain_conn()
            response.release_conn()
            self.connection.bearer.refresh()
            response = once()
        return response
