"""The liveness endpoint (``GET /healthz``): 200 while every supervised unit makes progress.

Served from a thread of its own with the standard library, so it answers even while
kopf's event loop or the API server is busy; what it answers comes from
``Supervisor.report()``: 200 and the units' state as JSON, or 503 naming each unit
that has shown no progress for longer than allowed. The kubelet restarts an operator
whose probe fails.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ascend_pd_operator.api.access import HEALTH_PATH
from ascend_pd_operator.kubeio.supervisor import Supervisor

log = logging.getLogger(__name__)


def serve(supervisor: Supervisor, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Start answering ``GET /healthz`` on ``host:port`` from a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != HEALTH_PATH:
                self.send_error(404)
                return
            report = supervisor.report()
            body = json.dumps(report).encode()
            self.send_response(200 if report["ok"] else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a probe every few seconds is not news

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="healthz", daemon=True).start()
    log.debug("serving liveness at http://%s:%d%s", host, port, HEALTH_PATH)
    return server
