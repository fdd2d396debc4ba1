"""An unchanged child is not applied again; any edit, deletion or new manifest is."""

from __future__ import annotations

from typing import Any

from ascend_pd_operator.kubeio.apply_records import digest, needs_apply
from ascend_pd_operator.kubeio.live_cache import LiveCache


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


def _managed() -> list[dict[str, Any]]:
    return [{"manager": "ascend-pd-operator", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]


def test_the_cache_keeps_what_the_controller_reads_and_no_more() -> None:
    """Whole children (managed fields, pod templates, layout documents) were most of the
    operator's memory at 100 deployments; readiness, rollouts and the selector check read
    only replicas, selector, metadata and status."""
    from ascend_pd_operator.decisions.rollout import Instance, router_settled
    from ascend_pd_operator.decisions.waits import instance_ready

    template = {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "x"}]}}
    sts = {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "dsv3-prefill-0", "namespace": "llm", "generation": 3,
                     "resourceVersion": "9", "labels": {"ascendpd.io/deployment": "dsv3"},
                     "ownerReferences": [{"uid": "u1"}], "managedFields": _managed()},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}}, "template": template,
                 "updateStrategy": {"type": "OnDelete"}},
        "status": {"observedGeneration": 3, "readyReplicas": 2, "updatedReplicas": 2,
                   "replicas": 2, "updateRevision": "dsv3-prefill-0-abc"},
    }  # fmt: skip
    router = {**sts, "kind": "Deployment", "metadata": {**sts["metadata"], "name": "dsv3-router"}}
    layout = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "dsv3-kv-layout", "namespace": "llm", "resourceVersion": "4",
                     "labels": {"ascendpd.io/deployment": "dsv3"}, "managedFields": _managed()},
        "data": {"kv-layout.json": "x" * 4096},
    }  # fmt: skip
    cache = LiveCache()
    for obj in (sts, router, layout):
        cache.seen(obj)
    wanted = {"ascendpd.io/deployment": "dsv3"}
    (kept_sts,) = cache.listed("StatefulSet", "llm", wanted)
    (kept_router,) = cache.listed("Deployment", "llm", wanted)
    (kept_cm,) = cache.listed("ConfigMap", "llm", wanted)
    assert kept_sts["spec"] == {"replicas": 2, "selector": {"matchLabels": {"a": "b"}}}
    assert "managedFields" not in kept_sts["metadata"] | kept_cm["metadata"]
    assert "data" not in kept_cm
    assert kept_sts["status"] == sts["status"]
    assert {k: v for k, v in sts["metadata"].items() if k != "managedFields"} == kept_sts[
        "metadata"
    ]
    # the readers agree on the kept part and the whole object
    assert instance_ready(kept_sts) and instance_ready(sts)
    kept = Instance("prefill", 0, "dsv3-prefill-0", 2, kept_sts)
    assert kept.update_revision == "dsv3-prefill-0-abc"
    assert router_settled(kept_router) and router_settled(router)
    # what we applied is still recognised as unchanged (same resourceVersion)
    cache.applied(layout, {"metadata": {"resourceVersion": "4"}})
    assert cache.unchanged(layout) is kept_cm
    # a LIST (the resync) is trimmed the same way
    cache.refresh("StatefulSet", "llm", [{k: v for k, v in sts.items() if k != "kind"}])
    assert cache.listed("StatefulSet", "llm", wanted) == [kept_sts]


def test_listing_by_owner_agrees_with_a_scan_through_any_sequence_of_events() -> None:
    """The owner index (a reconcile lists its own children without scanning everyone's)
    against a plain dict of the last state of each object, over random events: labels
    changing owner, deletions, resync LISTs."""
    import random

    from ascend_pd_operator.api.vocabulary import LABEL_DEPLOYMENT

    rng = random.Random(7)
    cache, model = LiveCache(), {}
    owners = ["a", "b", None]

    def obj(kind: str, ns: str, name: str, owner: str | None, version: int) -> dict[str, Any]:
        labels = {LABEL_DEPLOYMENT: owner} if owner else {}
        meta = {"name": name, "namespace": ns, "resourceVersion": str(version), "labels": labels}
        return {"kind": kind, "metadata": meta}

    for step in range(2000):
        kind, ns, name = rng.choice(["Service", "Pod"]), rng.choice(["x", "y"]), rng.choice("pqrs")
        action = rng.random()
        if action < 0.6:
            o = obj(kind, ns, name, rng.choice(owners), step)
            cache.seen(o)
            model[(kind, ns, name)] = o
        elif action < 0.8:
            cache.gone(kind, ns, name)
            model.pop((kind, ns, name), None)
        else:
            listed = [
                obj(kind, ns, n, rng.choice(owners), step) for n in "pqrs" if rng.random() < 0.5
            ]
            cache.refresh(kind, ns, [{k: v for k, v in o.items() if k != "kind"} for o in listed])
            for key in [k for k in model if k[:2] == (kind, ns)]:
                del model[key]
            model.update({(kind, ns, o["metadata"]["name"]): o for o in listed})
        for owner in ("a", "b"):
            got = cache.listed(kind, ns, {LABEL_DEPLOYMENT: owner})
            want = [o for k, o in model.items() if k[:2] == (kind, ns)
                    and o["metadata"]["labels"].get(LABEL_DEPLOYMENT) == owner]  # fmt: skip
            assert sorted(o["metadata"]["name"] for o in got) == sorted(
                o["metadata"]["name"] for o in want
            ), (step, owner)
        every = cache.listed(kind, ns, {})
        assert len(every) == sum(1 for k in model if k[:2] == (kind, ns)), step


def test_a_child_another_controller_only_added_to_is_not_applied_again() -> None:
    """Another controller adds ``secrets`` to each new ServiceAccount (the token controller
    once did): one more apply per deployment (100 in the 100-deployment burst) but for
    this check."""
    sa = {
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "dsv3-router", "namespace": "llm",
                     "labels": {"ascendpd.io/deployment": "dsv3"},
                     "ownerReferences": [{"uid": "u1", "kind": "PDDeployment"}]},
    }  # fmt: skip
    cache = LiveCache()
    response = {**sa, "metadata": {**sa["metadata"], "resourceVersion": "5", "uid": "s1"}}
    cache.applied(sa, response)
    cache.seen(response)
    assert cache.unchanged(sa) is not None
    added = {**response, "metadata": {**response["metadata"], "resourceVersion": "6"},
             "secrets": [{"name": "dsv3-router-token-x"}]}  # fmt: skip
    cache.seen(added)
    assert cache.unchanged(sa) is not None  # only added to: nothing to apply
    edited = {**added, "metadata": {**added["metadata"], "resourceVersion": "7",
                                    "labels": {"ascendpd.io/deployment": "other"}}}  # fmt: skip
    cache.seen(edited)
    assert cache.unchanged(sa) is None  # our label changed: apply again
    # a manifest that differs from the one applied is always applied
    cache.seen(added)
    assert cache.unchanged({**sa, "automountServiceAccountToken": False}) is None
