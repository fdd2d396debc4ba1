"""An unchanged child is not applied again; any edit, deletion or new manifest is."""

from __future__ import annotations

from typing import Any

from ascend_pd_operator.live_cache import LiveCache, digest, needs_apply


def manifest(replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "dsv3-prefill-0", "namespace": "llm"},
        "spec": {"replicas": replicas},
    }


def live(version: str, replicas: int = 2) -> dict[str, Any]:
    obj = manifest(replicas)
    obj["metadata"]["resourceVersion"] = version
    obj["status"] = {"readyReplicas": 1}
    return obj


def test_needs_apply_rule() -> None:
    d = digest(manifest())
    assert needs_apply(d, None, "5")  # never applied
    assert needs_apply(d, (d, "5"), None)  # not (or no longer) watched
    assert not needs_apply(d, (d, "5"), "5")
    assert needs_apply(d, (d, "5"), "6")  # changed since
    assert needs_apply(digest(manifest(3)), (d, "5"), "5")  # new desired state


def test_cache_skips_only_what_is_unchanged() -> None:
    cache = LiveCache()
    assert cache.unchanged(manifest()) is None  # nothing known: apply
    cache.applied(manifest(), live("5"))
    assert cache.unchanged(manifest()) is None  # applied, but not seen by the watch yet
    cache.seen(live("5"))
    assert cache.unchanged(manifest()) == live("5")  # stands in for the apply response
    assert cache.unchanged(manifest(3)) is None  # the spec changed
    cache.seen(live("7", replicas=5))  # someone edited it
    assert cache.unchanged(manifest()) is None
    cache.applied(manifest(), live("8"))
    cache.seen(live("8"))
    assert cache.unchanged(manifest()) is not None
    cache.gone("StatefulSet", "llm", "dsv3-prefill-0")  # deleted: restore it
    assert cache.unchanged(manifest()) is None


def test_deleted_children_are_forgotten_entirely() -> None:
    cache = LiveCache()
    for i in range(50):
        m = manifest()
        m["metadata"]["name"] = f"child-{i}"
        response = live("5")
        response["metadata"]["name"] = f"child-{i}"
        cache.applied(m, response)
        cache.seen(response)
    assert cache.records() > 0
    for i in range(50):
        cache.gone("StatefulSet", "llm", f"child-{i}")
    assert cache.records() == 0
