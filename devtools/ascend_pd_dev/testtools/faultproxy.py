"""A fault-injecting proxy between the operator and the API server (a test tool, loopback only).

It forwards every request to the real kube-apiserver and, at seeded rates,
answers instead with 409 Conflict (writes only), 429 Too Many Requests with
``Retry-After``, 500, delays a request, cuts a watch stream mid-flight, or severs the
client after one chosen request (every later one refused, as if it died). It
counts what passed through (writes per verb, faults, how soon a client came
back after a 429, watch requests per path and label selector) so reliability
scenarios, tests and the idle-cost benchmark read their numbers from one place
(``GET /__faultproxy/stats``).

The operator talks plain HTTP to the proxy on 127.0.0.1 and forwards its own
bearer token; the proxy talks TLS to the API server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import ssl
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Not forwarded: they describe one connection. Content-Encoding is: the body passes as sent
#: (``auto_decompress=False``), so a gzipped answer (the API server gzips those over 128 KiB,
#: e.g. a CRD list with KEDA's) must still say it is gzipped.
HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "host"})
STATS_PATH = "/__faultproxy/stats"
CONFIG_PATH = "/__faultproxy/config"


@dataclass
class FaultPlan:
    """Per-request probabilities (0..1) of each fault; ``seed`` makes a run reproducible."""

    conflict_rate: float = 0.0
    throttle_rate: float = 0.0
    retry_after_seconds: int = 1
    error_rate: float = 0.0
    slow_rate: float = 0.0
    slow_seconds: float = 0.5
    watch_cut_rate: float = 0.0
    watch_cut_after_seconds: float = 2.0
    #: A regular expression over "METHOD path": the first request it matches still passes,
    #: and every request after it is answered 503, as if the client had died right after
    #: sending it (a kill at the worst moment). "" never severs.
    sever_after: str = ""
    seed: int = 0


@dataclass
class Stats:
    requests: int = 0
    writes: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    #: seconds between a 429 and the same client's next request to the same path
    retry_gaps: list[float] = field(default_factory=list)
    retry_after_violations: int = 0
    #: "METHOD path?query after N s" of each request that came back too soon (the culprit)
    retry_after_violators: list[str] = field(default_factory=list)
    #: watch requests per "path labelSelector=...[ fieldSelector=...]" (which watches a
    #: client asks for)
    watches: Counter[str] = field(default_factory=Counter)
    #: "METHOD path?query" of the request after which the proxy severed ("" until then)
    severed_after: str = ""
    #: requests per "VERB resource[/subresource]" (``request_kind``): what a client asks for
    kinds: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "writes": dict(self.writes),
            "write_total": sum(self.writes.values()),
            "faults": dict(self.faults),
            "retry_gaps": self.retry_gaps[-100:],
            "retry_after_violations": self.retry_after_violations,
            "retry_after_violators": self.retry_after_violators[-20:],
            "watches": dict(self.watches),
            "severed_after": self.severed_after,
            "kinds": dict(self.kinds),
        }


def request_kind(method: str, path: str, watch: bool = False) -> str:
    """``VERB resource[/subresource]`` of an API path: ``PATCH statefulsets``, ``GET
    pddeployments/status``, ``LIST configmaps``, ``WATCH pods``; the names and namespace
    left out, so counts add up per kind of request."""
    parts = [p for p in path.split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:] if parts[:1] == ["apis"] else []
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return f"{method} {path}"
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    if watch:
        return f"WATCH {resource}"
    # a GET without a name reads the collection: counted apart from the GETs of one object
    return f"{'LIST' if method == 'GET' and len(rest) == 1 else method} {resource}"


class FaultProxy:
    """Run with ``start()`` (a background thread) or ``serve_forever()``."""

    def __init__(
        self,
        upstream: str,
        plan: FaultPlan | None = None,
        ca_file: str | None = None,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        token: str = "",
    ) -> None:
        if listen_host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"the fault proxy listens on loopback only, not {listen_host!r}")
        self.upstream = upstream.rstrip("/")
        self.plan = plan or FaultPlan()
        self.rng = random.Random(self.plan.seed)
        self.stats = Stats()
        self.ssl_context = ssl.create_default_context(cafile=ca_file) if ca_file else False
        self.listen_host = listen_host
        self.listen_port = listen_port
        #: a bearer token for requests that carry no Authorization: client-go sends no
        #: credentials over plain HTTP (clientcmd reads a user's only for a TLS transport),
        #: so a Go client behind this proxy has none of its own
        self.token = token
        self._throttled: dict[str, float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://{self.listen_host}:{self.listen_port}"

    def _roll(self, rate: float) -> bool:
        return rate > 0 and self.rng.random() < rate

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.path == STATS_PATH:
            return web.json_response(self.stats.as_dict())
        if request.path == CONFIG_PATH and request.method == "PUT":
            self.plan = FaultPlan(**{**asdict(self.plan), **(await request.json())})
            self.stats.severed_after = ""
            return web.json_response(asdict(self.plan))
        self.stats.requests += 1
        if self.stats.severed_after:
            self.stats.faults["severed"] += 1
            return _status(503, "ServiceUnavailable", "injected: severed after "
                           f"{self.stats.severed_after}")  # fmt: skip
        if self.plan.sever_after and re.fullmatch(
            self.plan.sever_after, f"{request.method} {request.path}"
        ):
            # set before forwarding: nothing the client sends after this one gets through
            self.stats.severed_after = f"{request.method} {request.path_qs}"
        # The same request again (query included): a LIST and a WATCH of one path are two.
        # The same client (token and User-Agent) asking again: two parts of one process may
        # send the same request independently, and only one of them was told to wait.
        token, agent = request.headers.get("Authorization", ""), request.headers.get("User-Agent")
        who = f"{token[-12:]} {agent}"
        key = f"{who} {request.method} {request.path_qs}"
        throttled_at = self._throttled.pop(key, None)
        if throttled_at is not None:
            gap = time.monotonic() - throttled_at
            self.stats.retry_gaps.append(round(gap, 3))
            if gap < self.plan.retry_after_seconds * 0.9:
                self.stats.retry_after_violations += 1
                self.stats.retry_after_violators.append(
                    f"{request.method} {request.path_qs} after {gap:.3f} s"
                )
        is_watch = request.query.get("watch") in ("true", "1")
        is_write = request.method in WRITE_METHODS
        self.stats.kinds[request_kind(request.method, request.path, is_watch)] += 1
        if is_watch:
            selector = request.query.get("labelSelector", "")
            fields = request.query.get("fieldSelector", "")
            also = f" fieldSelector={fields}" if fields else ""
            self.stats.watches[f"{request.path} labelSelector={selector}{also}"] += 1
        if is_write and self._roll(self.plan.conflict_rate):
            self.stats.faults["409"] += 1
            return _status(409, "Conflict", "injected conflict: the object has been modified")
        if self._roll(self.plan.throttle_rate):
            self.stats.faults["429"] += 1
            self._throttled[key] = time.monotonic()
            response = _status(429, "TooManyRequests", "injected throttling")
            response.headers["Retry-After"] = str(self.plan.retry_after_seconds)
            return response
        if self._roll(self.plan.error_rate):
            self.stats.faults["500"] += 1
            return _status(500, "InternalError", "injected server error")
        if self._roll(self.plan.slow_rate):
            self.stats.faults["slow"] += 1
            await asyncio.sleep(self.plan.slow_seconds)
        if is_write:
            self.stats.writes[request.method] += 1
        return await self._forward(request, cut=is_watch and self._roll(self.plan.watch_cut_rate))

    async def _forward(self, request: web.Request, cut: bool) -> web.StreamResponse:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        if self.token and "Authorization" not in request.headers:
            headers["Authorization"] = f"Bearer {self.token}"
        body = await request.read()
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=body or None,
            ssl=self.ssl_context,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
            auto_decompress=False,
            # The Kubernetes client may send a body without Content-Type (the API server
            # reads it as JSON); aiohttp would add application/octet-stream, a 415 upstream.
            skip_auto_headers=("Content-Type",),
        ) as upstream:
            response = web.StreamResponse(status=upstream.status)
            for name, value in upstream.headers.items():
                if name.lower() not in HOP_HEADERS:
                    response.headers[name] = value
            await response.prepare(request)
            deadline = time.monotonic() + self.plan.watch_cut_after_seconds if cut else None
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
                if deadline is not None and time.monotonic() >= deadline:
                    self.stats.faults["watch_cut"] += 1
                    # A dropped connection: no final chunk, so the client sees an incomplete
                    # payload (a clean end would pass a half line off as a whole stream).
                    if request.transport is not None:
                        request.transport.close()
                    return response
            await response.write_eof()
            return response

    async def _start_async(self) -> None:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.listen_host, self.listen_port)
        await site.start()
        self.listen_port = int(self._runner.addresses[0][1])

    def start(self) -> FaultProxy:
        """Serve from a daemon thread; returns once listening."""

        def main() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._start_async())
            self._ready.set()
            self._loop.run_forever()

        threading.Thread(target=main, name="fault-proxy", daemon=True).start()
        if not self._ready.wait(10):
            raise RuntimeError("the fault proxy did not start within 10 s")
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return

        async def shutdown() -> None:
            if self._runner is not None:
                await self._runner.cleanup()
            if self._session is not None:
                await self._session.close()
            loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), loop)

    def serve_forever(self) -> None:
        self.start()
        print(f"fault proxy on {self.url} -> {self.upstream}", flush=True)
        threading.Event().wait()


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.Response(status=code, text=json.dumps(body), content_type="application/json")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--upstream", required=True, help="https://127.0.0.1:<apiserver port>")
    parser.add_argument("--ca-file", help="CA that signed the API server's certificate")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token-file", help="bearer token for requests that carry none")
    for name, value in asdict(FaultPlan()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = parser.parse_args(argv)
    plan = FaultPlan(**{name: getattr(args, name) for name in asdict(FaultPlan())})
    token = Path(args.token_file).read_text().strip() if args.token_file else ""
    FaultProxy(args.upstream, plan, ca_file=args.ca_file, listen_port=args.port,
               token=token).serve_forever()  # fmt: skip


if __name__ == "__main__":
    main()
