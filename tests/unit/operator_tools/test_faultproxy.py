"""The fault proxy forwards faithfully and injects each fault kind at its rate."""

from __future__ import annotations

import asyncio
import threading

import pytest
import requests
from aiohttp import web

from ascend_pd_dev.testtools.faultproxy import FaultPlan, FaultProxy, request_kind

#: a list as large as the CRDs of a cluster with KEDA's installed (its ScaledJob CRD is 0.67 MB)
BIG = {"kind": "CustomResourceDefinitionList", "items": [{"i": i, "pad": "x" * 1000}
                                                         for i in range(700)]}  # fmt: skip


@pytest.fixture(scope="module")
def upstream():
    async def get(request):
        return web.json_response({"kind": "Pod", "path": request.path_qs})

    async def patch(request):
        return web.json_response({"patched": (await request.json())})

    async def create(request):
        if "token" in request.query:
            return web.json_response({"authorization": request.headers.get("Authorization")})
        return web.json_response({"contentType": request.headers.get("Content-Type")})

    async def watch(request):
        response = web.StreamResponse()
        await response.prepare(request)
        for i in range(40):
            await response.write(b'{"type":"ADDED","i":%d}\n' % i)
            await asyncio.sleep(0.05)
        return response

    async def big(request):
        # the API server gzips a large answer (over 128 KiB) for a client that accepts it
        response = web.json_response(BIG)
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            response.enable_compression(web.ContentCoding.gzip)
        return response

    ready = threading.Event()
    holder = {}

    def main():
        loop = asyncio.new_event_loop()
        app = web.Application()

        async def pods(request):
            return await (watch(request) if request.query.get("watch") else get(request))

        app.router.add_get("/api/v1/pods", pods)
        app.router.add_get("/apis/big", big)
        app.router.add_patch("/api/v1/pods/x", patch)
        app.router.add_post("/api/v1/pods", create)
        runner = web.AppRunner(app)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        holder["url"] = f"http://127.0.0.1:{runner.addresses[0][1]}"
        ready.set()
        loop.run_forever()

    threading.Thread(target=main, daemon=True).start()
    ready.wait(5)
    return holder["url"]


def test_forwards_reads_writes_and_counts_writes(upstream):
    proxy = FaultProxy(upstream).start()
    try:
        assert requests.get(proxy.url + "/api/v1/pods?limit=1", timeout=5).json()["path"] == (
            "/api/v1/pods?limit=1"
        )
        assert requests.patch(proxy.url + "/api/v1/pods/x", json={"a": 1}, timeout=5).json() == {
            "patched": {"a": 1}
        }
        stats = requests.get(proxy.url + "/__faultproxy/stats", timeout=5).json()
        assert stats["writes"] == {"PATCH": 1}
        assert stats["requests"] == 2
        assert stats["kinds"] == {"LIST pods": 1, "PATCH pods": 1}
    finally:
        proxy.stop()


def test_injects_conflicts_only_on_writes(upstream):
    proxy = FaultProxy(upstream, FaultPlan(conflict_rate=1.0)).start()
    try:
        assert requests.get(proxy.url + "/api/v1/pods", timeout=5).status_code == 200
        response = requests.patch(proxy.url + "/api/v1/pods/x", json={}, timeout=5)
        assert response.status_code == 409
        assert response.json()["reason"] == "Conflict"
    finally:
        proxy.stop()


def test_another_request_to_the_same_path_is_not_a_retry(upstream):
    proxy = FaultProxy(upstream, FaultPlan(throttle_rate=1.0, retry_after_seconds=1)).start()
    try:
        assert requests.get(proxy.url + "/api/v1/pods?limit=1", timeout=5).status_code == 429
        requests.get(proxy.url + "/api/v1/pods?watch=true", timeout=5)  # a watch, not a retry
        stats = requests.get(proxy.url + "/__faultproxy/stats", timeout=5).json()
        assert stats["retry_after_violations"] == 0
    finally:
        proxy.stop()


def test_throttles_with_retry_after_and_measures_the_gap(upstream):
    proxy = FaultProxy(upstream, FaultPlan(throttle_rate=1.0, retry_after_seconds=1)).start()
    try:
        first = requests.get(proxy.url + "/api/v1/pods", timeout=5)
        assert first.status_code == 429
        assert first.headers["Retry-After"] == "1"
        requests.get(proxy.url + "/api/v1/pods", timeout=5)  # too soon: a violation
        stats = requests.get(proxy.url + "/__faultproxy/stats", timeout=5).json()
        assert stats["retry_after_violations"] == 1
        assert stats["faults"]["429"] == 2
    finally:
        proxy.stop()


def test_rates_are_seeded_and_roughly_honoured(upstream):
    def statuses(seed):
        proxy = FaultProxy(upstream, FaultPlan(error_rate=0.3, seed=seed)).start()
        try:
            return [
                requests.get(proxy.url + "/api/v1/pods", timeout=5).status_code for _ in range(60)
            ]
        finally:
            proxy.stop()

    first = statuses(7)
    assert first == statuses(7)
    assert 5 <= first.count(500) <= 35


def test_cuts_watch_streams(upstream):
    proxy = FaultProxy(upstream, FaultPlan(watch_cut_rate=1.0, watch_cut_after_seconds=0.3)).start()
    try:
        body = b""
        # a cut is a dropped connection, not a clean end of the stream
        url = proxy.url + "/api/v1/pods?watch=true"
        with (
            pytest.raises(requests.exceptions.ChunkedEncodingError),
            requests.get(url, timeout=10, stream=True) as r,
        ):
            for chunk in r.iter_content(chunk_size=None):
                body += chunk
        assert 0 < body.count(b"ADDED") < 40  # the upstream would send 40 events
        stats = requests.get(proxy.url + "/__faultproxy/stats", timeout=5).json()
        assert stats["faults"]["watch_cut"] == 1
    finally:
        proxy.stop()


def test_adds_no_content_type_the_client_did_not_send(upstream):
    # the Kubernetes client creates some objects without Content-Type; the API server
    # reads that as JSON, but refuses application/octet-stream with 415
    proxy = FaultProxy(upstream).start()
    try:
        sent = requests.Request("POST", proxy.url + "/api/v1/pods", data=b"{}").prepare()
        assert "Content-Type" not in sent.headers
        with requests.Session() as session:
            assert session.send(sent, timeout=5).json() == {"contentType": None}
        typed = requests.post(proxy.url + "/api/v1/pods", json={}, timeout=5)
        assert typed.json() == {"contentType": "application/json"}
    finally:
        proxy.stop()


def test_refuses_non_loopback():
    with pytest.raises(ValueError, match="loopback only"):
        FaultProxy("http://127.0.0.1:1", listen_host="0.0.0.0")


def test_counts_watch_requests_by_path_and_label_selector(upstream):
    proxy = FaultProxy(upstream).start()
    try:
        for query in ("watch=true&labelSelector=app%3Dx", "watch=true", "labelSelector=app"):
            with requests.get(f"{proxy.url}/api/v1/pods?{query}", timeout=10, stream=True) as r:
                r.raw.read()
        stats = requests.get(proxy.url + "/__faultproxy/stats", timeout=5).json()
        # the list (no watch=true) is not a watch
        assert stats["watches"] == {"/api/v1/pods labelSelector=app=x": 1,
                                    "/api/v1/pods labelSelector=": 1}  # fmt: skip
    finally:
        proxy.stop()


@pytest.mark.parametrize(
    ("method", "path", "watch", "kind"),
    [
        ("PATCH", "/apis/apps/v1/namespaces/ns/statefulsets/web", False, "PATCH statefulsets"),
        ("GET", "/api/v1/namespaces/ns/configmaps/model", False, "GET configmaps"),
        (
            "PATCH",
            "/apis/ascendpd.io/v1alpha1/namespaces/ns/pddeployments/x/status",
            False,
            "PATCH pddeployments/status",
        ),
        ("GET", "/api/v1/pods", True, "WATCH pods"),
        (
            "GET",
            "/apis/ascendpd.io/v1alpha1/namespaces/n/pddeployments",
            False,
            "LIST pddeployments",
        ),
        ("GET", "/api/v1/nodes", False, "LIST nodes"),
        ("GET", "/api/v1/nodes/n1", False, "GET nodes"),
        ("DELETE", "/api/v1/namespaces/ns", False, "DELETE namespaces"),
        ("GET", "/version", False, "GET /version"),
    ],
)
def test_requests_are_counted_per_verb_and_resource(method, path, watch, kind):
    assert request_kind(method, path, watch) == kind


def test_a_compressed_answer_reaches_the_client_as_compressed(upstream):
    # the proxy forwards the body as the API server sent it (gzip), so it must say so: once
    # dropped, Content-Encoding left kopf reading gzip as JSON ("can't decode byte 0x8b")
    proxy = FaultProxy(upstream).start()
    try:
        answer = requests.get(proxy.url + "/apis/big", headers={"Accept-Encoding": "gzip"},
                              timeout=10)  # fmt: skip
        assert answer.headers.get("Content-Encoding") == "gzip"
        assert answer.json() == BIG
    finally:
        proxy.stop()


def test_a_token_is_added_only_to_requests_without_credentials(upstream):
    # client-go sends none over plain HTTP: the LWS manager behind the bench's proxy
    proxy = FaultProxy(upstream, token="t0k").start()
    try:
        bare = requests.post(proxy.url + "/api/v1/pods?token=1", json={}, timeout=5).json()
        assert bare["authorization"] == "Bearer t0k"
        own = requests.post(proxy.url + "/api/v1/pods?token=1", json={},
                            headers={"Authorization": "Bearer mine"}, timeout=5).json()  # fmt: skip
        assert own["authorization"] == "Bearer mine"
    finally:
        proxy.stop()
    plain = FaultProxy(upstream).start()
    try:
        assert requests.post(plain.url + "/api/v1/pods?token=1", json={}, timeout=5).json()[
            "authorization"] is None  # fmt: skip
    finally:
        plain.stop()
