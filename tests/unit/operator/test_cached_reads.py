"""Reads from the watches, and the guards that keep the reconcile off an old object.

The pure parts (``Freshness``, ``Store``, ``Terms``) and the reconciler over the in-memory
API of ``test_reconcile_writes``: at rest a reconcile reads nothing it can take from the
watches; the first read after a start, a new term as leader or a conflict is live; a
watch event older than our own status patch never brings the old status back.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ascend_pd_operator.api import models
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.kubeio.cached_reads import (
    CachedReads,
    Freshness,
    Store,
    Terms,
    from_watches,
)
from ascend_pd_operator.kubeio.errors import KubeError
from ascend_pd_operator.kubeio.live_cache import LiveCache
from ascend_pd_operator.wiring.handlers import resync_once
from tests.unit.operator.test_reconcile_writes import FakeKube, new_world, watch_everything

KEY = (models.KIND, "llm", "dsv3")


def pdd(version: str, status: Json | None = None) -> Json:
    meta = {"name": "dsv3", "namespace": "llm", "resourceVersion": version}
    return {"kind": models.KIND, "metadata": meta, "status": status or {}}


# --- the pure parts -------------------------------------------------------------------


def test_a_copy_is_trusted_only_after_a_live_read_and_never_below_the_floor() -> None:
    fresh = Freshness()
    assert not fresh.trusts(KEY, pdd("5")), "the first read after a start must be live"
    fresh.read_live(KEY, pdd("5"))
    assert fresh.trusts(KEY, pdd("5")) and fresh.trusts(KEY, pdd("6"))
    fresh.raise_floor(KEY, pdd("7"))  # our status patch was answered at 7
    assert not fresh.trusts(KEY, pdd("6")), "a copy older than our own write"
    assert fresh.trusts(KEY, pdd("7"))
    assert not fresh.trusts(KEY, None), "absent from the cache: a GET says"
    assert not fresh.trusts(KEY, pdd("not-a-number")), "no order: read live"


def test_a_new_term_and_a_conflict_make_the_next_read_live() -> None:
    fresh = Freshness()
    fresh.read_live(KEY, pdd("5"))
    fresh.new_term()
    assert not fresh.trusts(KEY, pdd("5"))
    fresh.read_live(KEY, pdd("5"))
    fresh.suspect_namespace("other")
    assert fresh.trusts(KEY, pdd("5"))
    fresh.suspect_namespace("llm")
    assert not fresh.trusts(KEY, pdd("5"))


def test_terms_start_a_new_term_each_time_leading_begins() -> None:
    fresh, leading = Freshness(), [False]
    terms = Terms(lambda: leading[0], fresh)
    assert not terms()
    leading[0] = True
    assert terms()
    fresh.read_live(KEY, pdd("5"))
    assert terms() and fresh.trusts(KEY, pdd("5")), "still the same term"
    leading[0] = False
    assert not terms()
    leading[0] = True
    assert terms() and not fresh.trusts(KEY, pdd("5")), "led again: read live first"


def test_the_store_refuses_copies_older_than_the_one_it_holds_or_than_a_deletion() -> None:
    store = Store()
    assert store.offer(pdd("7", {"phase": "Ready"}))
    assert not store.offer(pdd("6", {"phase": "Pending"}))  # a lagging watch event
    assert store.get(KEY) == pdd("7", {"phase": "Ready"})
    store.deleted(pdd("9"))
    assert not store.offer(pdd("8")) and store.get(KEY) is None
    assert store.offer(pdd("10")), "created again"


def test_only_model_facts_configmaps_are_served_from_the_children_cache() -> None:
    cache = LiveCache()
    labels = {"ascendpd.io/deployment": "dsv3", "app.kubernetes.io/component": "model-facts"}
    facts: Json = {"kind": "ConfigMap", "data": {"config.json": "{}"},
             "metadata": {"name": "dsv3-model-facts", "namespace": "llm",
                          "resourceVersion": "3", "labels": labels}}  # fmt: skip
    layout = copy.deepcopy(facts)
    layout["metadata"].update(name="dsv3-layout", labels={"ascendpd.io/deployment": "dsv3"})
    cache.seen(facts)
    cache.seen(layout)
    gets: list[tuple[str, str, str]] = []
    reads = from_watches(lambda *key: gets.append(key) or None, cache)  # type: ignore[func-returns-value]
    reads.freshness.read_live(("ConfigMap", "llm", "dsv3-model-facts"), None)
    reads.freshness.read_live(("ConfigMap", "llm", "dsv3-layout"), None)
    assert reads.get("ConfigMap", "llm", "dsv3-model-facts") == facts, "kept whole"
    assert reads.get("ConfigMap", "llm", "dsv3-layout") is None and gets, (
        "a ConfigMap kept without its data is never served"
    )


# --- the reconciler over them ---------------------------------------------------------


@pytest.fixture
def cached_world(dsv3: Json) -> tuple[FakeKube, LiveCache, Any, CachedReads]:
    kube, cache, reconciler = new_world(dsv3, FakeKube())
    reads = from_watches(kube.get, cache)
    reconciler.reads = reads
    return kube, cache, reconciler, reads


def settle(kube: FakeKube, cache: LiveCache, reconciler: Any, reads: CachedReads) -> None:
    """Reconcile until the writes stop, the watches reporting everything in between."""
    for _ in range(5):
        kube.calls.clear()
        reconciler.reconcile("llm", "dsv3")
        watch_everything(kube, cache)
        reads.seen(copy.deepcopy(kube.objects[KEY]))
        if not kube.writes():
            return
    raise AssertionError(f"never settled: {kube.writes()}")


def gets(kube: FakeKube) -> list[str]:
    return [kind for verb, kind in kube.calls if verb == "GET"]


def test_at_rest_a_reconcile_reads_the_pddeployment_from_the_watch(cached_world: Any) -> None:
    kube, cache, reconciler, reads = cached_world
    reconciler.reconcile("llm", "dsv3")
    assert gets(kube).count(models.KIND) == 1, "the first reconcile reads live"
    settle(kube, cache, reconciler, reads)
    kube.calls.clear()
    for _ in range(3):  # three resyncs
        assert reconciler.reconcile("llm", "dsv3") is not None
    assert models.KIND not in gets(kube) and kube.writes() == []
    floors = {key[0] for key in reads.freshness._floor}
    assert floors <= {models.KIND, "ConfigMap", "Job"}, "floors of kinds nothing reads"


def test_a_watch_lagging_behind_our_status_patch_never_brings_the_old_status_back(
    cached_world: Any,
) -> None:
    kube, cache, reconciler, reads = cached_world
    before = kube._store(kube.objects[KEY], False)  # as the watch reports it: no status yet
    reads.seen(copy.deepcopy(before))
    reconciler.reconcile("llm", "dsv3")  # writes children and the status
    watch_everything(kube, cache)
    written = copy.deepcopy(kube.objects[KEY])
    assert written["status"] and int(written["metadata"]["resourceVersion"]) > int(
        before["metadata"]["resourceVersion"]
    )
    reads.seen(copy.deepcopy(before))  # the watch delivers the old copy late
    kube.calls.clear()
    result = reconciler.reconcile("llm", "dsv3")
    assert result is not None and models.KIND not in gets(kube)
    previous = result.plan.observation.previous
    assert previous == written["status"], "planned from an older status than ours"
    assert ("PATCH_STATUS", models.KIND) not in kube.writes(), "status written again"


def test_a_copy_older_than_our_write_is_read_live(cached_world: Any) -> None:
    kube, cache, reconciler, reads = cached_world
    settle(kube, cache, reconciler, reads)
    # the store lost our answer (a LIST replaced it): only the floor knows it
    reads.store = Store()
    stale = copy.deepcopy(kube.objects[KEY])
    stale["metadata"]["resourceVersion"] = "1"
    stale["status"] = {}
    reads.seen(stale)
    kube.calls.clear()
    reconciler.reconcile("llm", "dsv3")
    assert gets(kube).count(models.KIND) == 1
    assert ("PATCH_STATUS", models.KIND) not in kube.writes()


def test_a_conflict_and_a_new_term_make_the_next_reconcile_read_live(cached_world: Any) -> None:
    kube, cache, reconciler, reads = cached_world
    settle(kube, cache, reconciler, reads)
    reads.freshness.new_term()
    kube.calls.clear()
    reconciler.reconcile("llm", "dsv3")
    assert gets(kube).count(models.KIND) == 1, "a new leader reads live first"

    # a child drifts, and its apply is answered 409 once
    kube.objects.pop(("Service", "llm", "dsv3-decode-0"))
    cache.gone("Service", "llm", "dsv3-decode-0")
    apply = kube.apply

    def conflicting(manifest: Json) -> Json:
        kube.apply = apply
        raise KubeError(409, "Conflict", "the object has been modified")

    kube.apply = conflicting
    with pytest.raises(KubeError):
        reconciler.reconcile("llm", "dsv3")
    kube.calls.clear()
    reconciler.reconcile("llm", "dsv3")
    assert gets(kube).count(models.KIND) == 1, "after a conflict the retry reads live"
    assert ("APPLY", "Service") in kube.writes()


def test_the_resync_list_refreshes_the_store_but_never_with_an_older_copy() -> None:
    class Listing:
        def __init__(self, items: list[Json]) -> None:
            self.items = items

        def list(self, kind: str, namespace: str | None, selector: str = "") -> list[Json]:
            return copy.deepcopy(self.items) if kind == models.KIND else []

    queued: list[tuple[str, str]] = []

    class Queue:
        def add(self, key: tuple[str, str]) -> None:
            queued.append(key)

    listed = {k: v for k, v in pdd("6", {"phase": "Pending"}).items() if k != "kind"}
    reads = CachedReads(lambda *key: None)
    reads.wrote(models.KIND, pdd("7", {"phase": "Ready"}))  # our status patch's answer
    resync_once(Queue(), Listing([listed]), ["llm"], None, reads)
    assert queued == [("llm", "dsv3")]
    assert reads.store.get(KEY) == pdd("7", {"phase": "Ready"}), "an older LIST won"
    listed["metadata"]["resourceVersion"] = "8"
    resync_once(Queue(), Listing([listed]), ["llm"], None, reads)
    assert reads.store.get(KEY) == {**listed, "kind": models.KIND}
