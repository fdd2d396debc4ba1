"""A local HTTP server answering JSON, for the unit tests of the operator's API client:
``answer(method, path, query)`` returns (status, headers, body)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from kubernetes import client

from ascend_pd_operator.kubeio import kube as kube_module
from ascend_pd_operator.kubeio.denials import Denials
from ascend_pd_operator.kubeio.kube import Kube

Answer = Callable[[str, str, dict[str, str]], tuple[int, dict[str, str], Any]]


@contextmanager
def serving(answer: Answer) -> Iterator[str]:
    """The server's base URL while the block runs."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            url = urlsplit(self.path)
            status, headers, body = answer(self.command, url.path, dict(parse_qsl(url.query)))
            data = json.dumps(body).encode()
            self.send_response(status)
            for key, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def local_kube(url: str, denials: Denials | None = None) -> Kube:
    """The operator's API client, as ``load_config`` builds it, talking to ``url`` (and
    judging 401/403 in ``denials``, a registry of its own unless given)."""
    config = client.Configuration()
    config.host = url
    return Kube(kube_module.new_client(config), denials=denials or Denials())
