"""``Kube.list`` walks the API server's chunked LIST (limit + continue) and yields
every object once, in order, one page held at a time."""

from __future__ import annotations

from typing import Any

from tests.json_server import serving
from tests.unit.operator.local_api import local_kube as _kube


def test_every_page_is_fetched_with_its_continue_token() -> None:
    objects = [{"metadata": {"name": f"s{i}"}} for i in range(7)]
    asked: list[dict[str, str]] = []

    def answer(method: str, path: str, query: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        asked.append(query)
        assert (method, path) == ("GET", "/apis/apps/v1/namespaces/llm/statefulsets")
        start, limit = int(query.get("continue") or 0), int(query["limit"])
        rest = str(start + limit) if start + limit < len(objects) else ""
        version = "42" if start == 0 else "43"  # only the first page's counts
        meta = {"continue": rest, "resourceVersion": version}
        return 200, {}, {"metadata": meta, "items": objects[start : start + limit]}

    with serving(answer) as url:
        kube = _kube(url)
        got = kube.list("StatefulSet", "llm", "ascendpd.io/deployment")
        got.page_size = 3
        assert [o["metadata"]["name"] for o in got] == [f"s{i}" for i in range(7)]
        assert got.resource_version == "42"  # the first page's
    assert [q.get("continue") for q in asked] == [None, "3", "6"]
    assert {(q["limit"], q["labelSelector"]) for q in asked} == {("3", "ascendpd.io/deployment")}


def test_a_kind_the_server_does_not_serve_lists_nothing() -> None:
    def answer(method: str, path: str, query: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        return 404, {}, {"kind": "Status", "code": 404, "reason": "NotFound"}

    with serving(answer) as url:
        assert list(_kube(url).list("PodGroup", "llm")) == []
