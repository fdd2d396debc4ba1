"""The one local HTTP server of the tests: ``serving(answer)`` runs it while a block runs and
yields its base URL; ``answer(method, path, query)`` returns (status, headers, body). It
listens on a free port unless the caller names one, and lists each request it got in
``seen`` when the caller passes a list.

A body is sent as JSON, unless it is ``bytes`` (sent as it is) or ``Chunked`` (sent with
chunked transfer encoding, one chunk a piece, as a watch stream arrives).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

Answer = Callable[[str, str, dict[str, str]], tuple[int, dict[str, str], Any]]


@dataclass(frozen=True)
class Chunked:
    """A body sent in these pieces, with ``Transfer-Encoding: chunked``."""

    pieces: list[bytes]


@contextmanager
def serving(
    answer: Answer, port: int = 0, seen: list[dict[str, Any]] | None = None
) -> Iterator[str]:
    """The server's base URL while the block runs; ``port`` 0: a free one. ``seen`` gets
    each request as it arrives: ``method``, ``path`` (as sent), ``headers``, ``body`` (bytes)."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            sent = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if seen is not None:
                seen.append({"method": self.command, "path": self.path,
                             "headers": dict(self.headers), "body": sent})  # fmt: skip
            url = urlsplit(self.path)
            status, headers, body = answer(self.command, url.path, dict(parse_qsl(url.query)))
            if isinstance(body, Chunked):
                self.protocol_version = "HTTP/1.1"  # chunks are HTTP/1.1's
                self.send_response(status)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for piece in body.pieces:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.write(b"0\r\n\r\n")
                return
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            for key, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
