"""The reconciler against an in-memory API: unchanged children cost no request, drift does.

The fake API server keeps objects, bumps resourceVersion on every change and
metadata.generation on spec changes, as the real one does; the test feeds the
reconciler's cache with what a watch would report.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ascend_pd_operator.api import models
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.kubeio.apply_records import only_status_changed
from ascend_pd_operator.kubeio.live_cache import LiveCache
from ascend_pd_operator.wiring.handlers import WATCHED_CHILDREN
from ascend_pd_operator.wiring.reconciler import Reconciler
from reliability.specs import merged
from tests.unit.operator.newer_operator import with_a_new_pod_label

#: The kinds the operator's watches feed into the cache (pods too, slimmed).
WATCHED = tuple(WATCHED_CHILDREN)


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Json] = {}
        self.calls: list[tuple[str, str]] = []
        #: every status patch sent, by kind: what a merge patch sets and nulls
        self.status_patches: list[tuple[str, Json]] = []
        self.version = 0

    def _store(self, obj: Json, spec_changed: bool) -> Json:
        self.version += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.version)
        if "spec" in obj:
            meta["generation"] = meta.get("generation", 0) + (1 if spec_changed else 0)
        self.objects[(obj["kind"], meta["namespace"], meta["name"])] = obj
        return copy.deepcopy(obj)

    def get(self, kind: str, namespace: str, name: str) -> Json | None:
        self.calls.append(("GET", kind))
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found else None

    def list(
        self, kind: str, namespace: str | None, selector: str = "", field_selector: str = ""
    ) -> list[Json]:
        self.calls.append(("LIST", kind))
        wanted = dict(pair.split("=", 1) for pair in selector.split(",") if pair)
        fields = dict(pair.split("=", 1) for pair in field_selector.split(",") if pair)

        def field(o: Json, dotted: str) -> Any:
            for part in dotted.split("."):
                o = o.get(part) or {}
            return o

        return [
            copy.deepcopy(o)
            for (k, ns, _), o in self.objects.items()
            if k == kind
            and ns == namespace
            and all(o["metadata"].get("labels", {}).get(a) == b for a, b in wanted.items())
            and all(field(o, a) == b for a, b in fields.items())
        ]

    def apply(self, manifest: Json) -> Json:
        self.calls.append(("APPLY", manifest["kind"]))
        meta = manifest["metadata"]
        old = self.objects.get((manifest["kind"], meta["namespace"], meta["name"]))
        obj = copy.deepcopy(manifest)
        if old is not None:
            merged_meta = {**old["metadata"], **obj["metadata"]}
            merged_meta["labels"] = {**old["metadata"].get("labels", {}), **meta.get("labels", {})}
            obj = {**old, **obj, "metadata": merged_meta}
        changed = old is None or old.get("spec") != obj.get("spec")
        return self._store(obj, changed)

    def delete(self, kind: str, namespace: str, name: str, uid: str = "",
               grace_period_seconds: int | None = None, orphan: bool = False) -> None:  # fmt: skip
        self.calls.append(("DELETE", kind))
        self.objects.pop((kind, namespace, name), None)

    def patch_labels(
        self, kind: str, namespace: str, name: str, labels: dict[str, str | None]
    ) -> Json:
        self.calls.append(("LABEL", kind))
        obj = self.objects[(kind, namespace, name)]
        merged = {**obj["metadata"].get("labels", {}), **labels}
        obj["metadata"]["labels"] = {k: v for k, v in merged.items() if v is not None}
        return self._store(obj, False)

    def patch_status(self, kind: str, namespace: str, name: str, status: Json) -> Json:
        self.calls.append(("PATCH_STATUS", kind))
        self.status_patches.append((kind, copy.deepcopy(status)))
        obj = self.objects[(kind, namespace, name)]
        obj["status"] = merged(obj.get("status") or {}, status)  # as the server merges
        return self._store(obj, False)

    def create(self, kind: str, namespace: str, body: Json, dry_run: bool = False) -> Json:
        self.calls.append(("DRY-RUN" if dry_run else "CREATE", kind))  # a dry run writes nothing
        return body

    def writes(self) -> list[tuple[str, str]]:
        return [c for c in self.calls if c[0] not in ("GET", "LIST", "DRY-RUN")]


def run_workload_controllers(kube: FakeKube, ready: bool = True) -> None:
    """What the StatefulSet and Deployment controllers and the kubelets would do: create the
    missing pods of each StatefulSet from its current template (``OnDelete``: existing pods
    keep theirs), mark them ``ready``, and report status as the controllers do."""
    for (kind, ns, name), obj in list(kube.objects.items()):
        if kind == "Deployment":
            want = obj["spec"].get("replicas", 1)
            obj["status"] = {
                "observedGeneration": obj["metadata"]["generation"],
                "replicas": want,
                "readyReplicas": want if ready else 0,
                "updatedReplicas": want,
            }
            kube._store(obj, False)
        if kind != "StatefulSet":
            continue
        revision = f"{name}-{abs(hash(repr(obj['spec']['template']))) % 10**8}"
        want = obj["spec"]["replicas"]
        pods = []
        for k in range(want):
            key = ("Pod", ns, f"{name}-{k}")
            if key not in kube.objects:
                meta = obj["spec"]["template"]["metadata"]
                labels = {**meta["labels"], "controller-revision-hash": revision}
                kube._store({"kind": "Pod", "metadata": {"name": key[2], "namespace": ns,
                             "labels": labels},
                             "status": {"conditions": [
                                 {"type": "Ready", "status": "True" if ready else "False"}]}},
                            False)  # fmt: skip
            pods.append(kube.objects[key])
        updated = sum(p["metadata"]["labels"]["controller-revision-hash"] == revision for p in pods)
        ready_pods = sum(p["status"]["conditions"][0]["status"] == "True" for p in pods)
        obj["status"] = {"observedGeneration": obj["metadata"]["generation"],
                         "replicas": want, "readyReplicas": ready_pods,
                         "updatedReplicas": updated, "updateRevision": revision}  # fmt: skip
        kube._store(obj, False)


def watch_everything(kube: FakeKube, cache: LiveCache) -> None:
    for (kind, _, _), obj in kube.objects.items():
        if kind in WATCHED:
            cache.seen(copy.deepcopy(obj))


def new_world(dsv3: Json, kube: FakeKube) -> tuple[FakeKube, LiveCache, Reconciler]:
    """``dsv3`` stored in ``kube`` (namespace llm, generation 1), an empty cache, a reconciler
    over both: nothing reconciled yet."""
    cr = copy.deepcopy(dsv3)
    cr["metadata"].update(namespace="llm", uid="uid-1", generation=1)
    kube.objects[(models.KIND, "llm", cr["metadata"]["name"])] = cr
    cache = LiveCache(listed_kinds=WATCHED)
    reconciler = Reconciler(kube, clock=lambda: "2026-01-01T00:00:00Z", cache=cache)  # type: ignore[arg-type]
    return kube, cache, reconciler


@pytest.fixture
def world(dsv3: Json) -> tuple[FakeKube, LiveCache, Reconciler]:
    return new_world(dsv3, FakeKube())


def test_unchanged_children_cost_no_writes_and_no_lists(world: Any) -> None:
    kube, cache, reconciler = world
    first = reconciler.reconcile("llm", "dsv3")
    # 9 workloads, Services and the layout; 2 budgets; the router's account, Role, binding
    assert first.applied == 15 and ("PATCH_STATUS", models.KIND) in kube.writes()
    watch_everything(kube, cache)
    # controllers update a workload's status: resourceVersion moves, generation does not
    sts = kube.objects[("StatefulSet", "llm", "dsv3-prefill-0")]
    sts["status"] = {"collisionCount": 0}
    kube._store(sts, False)
    watch_everything(kube, cache)
    kube.calls.clear()
    second = reconciler.reconcile("llm", "dsv3")
    assert second.applied == 0 and second.deleted == 0
    assert kube.writes() == []
    # only PodGroups (not watched) are still listed
    assert {kind for verb, kind in kube.calls if verb == "LIST"} <= {"PodGroup"}


def test_deleted_edited_and_stale_children_are_handled(world: Any) -> None:
    kube, cache, reconciler = world
    reconciler.reconcile("llm", "dsv3")
    watch_everything(kube, cache)
    # a user deletes a Service, scales a StatefulSet and relabels the router
    kube.objects.pop(("Service", "llm", "dsv3-decode-0"))
    cache.gone("Service", "llm", "dsv3-decode-0")
    sts = kube.objects[("StatefulSet", "llm", "dsv3-decode-0")]
    nodes = sts["spec"]["replicas"]
    sts["spec"] = {**sts["spec"], "replicas": nodes + 3}
    kube._store(sts, True)
    router = kube.objects[("Deployment", "llm", "dsv3-router")]
    router["metadata"]["labels"]["app.kubernetes.io/component"] = "edited"
    kube._store(router, False)
    # and a child of an older spec is still around
    stale = copy.deepcopy(kube.objects[("Service", "llm", "dsv3-prefill-0")])
    stale["metadata"]["name"] = "dsv3-prefill-7"
    kube._store(stale, False)
    watch_everything(kube, cache)
    kube.calls.clear()
    result = reconciler.reconcile("llm", "dsv3")
    assert sorted(kube.writes()) == [
        ("APPLY", "Deployment"),
        ("APPLY", "Service"),
        ("APPLY", "StatefulSet"),
        ("DELETE", "Service"),
    ]
    assert result.applied == 3 and result.deleted == 1
    assert kube.objects[("StatefulSet", "llm", "dsv3-decode-0")]["spec"]["replicas"] == nodes


#: A role's status as operators before status.roles wrote it: status.prefill, status.decode.
EARLIER_ROLE_STATUS = {
    "replicas": 2, "effectiveReplicas": 2, "readyReplicas": 2, "nodesPerInstance": 2,
    "draining": [{"instance": "dsv3-decode-2", "since": "2025-12-31T00:00:00Z"}],
}  # fmt: skip


def deployment_patches(kube: FakeKube) -> list[Json]:
    return [patch for kind, patch in kube.status_patches if kind == models.KIND]


def test_an_upgrade_nulls_the_role_status_earlier_operators_wrote(dsv3: Json) -> None:
    """A PDDeployment whose status an earlier operator wrote has each role's at
    status.prefill and status.decode: the status patch, a merge patch, nulls them (a key it
    leaves out would stay as it was) and writes status.roles; the next reconcile has
    nothing left to patch."""
    kube, _, reconciler = new_world(dsv3, FakeKube())
    cr = kube.objects[(models.KIND, "llm", "dsv3")]
    cr["status"] = {"observedGeneration": 1, "phase": "Progressing",
                    "prefill": copy.deepcopy(EARLIER_ROLE_STATUS),
                    "decode": copy.deepcopy(EARLIER_ROLE_STATUS)}  # fmt: skip
    reconciler.reconcile("llm", "dsv3")
    [patch] = deployment_patches(kube)
    assert {key: patch.get(key, "left as it was") for key in ("prefill", "decode")} == {
        "prefill": None, "decode": None
    }  # fmt: skip
    assert set(patch["roles"]) == {"prefill", "decode"}
    stored = kube.objects[(models.KIND, "llm", "dsv3")]["status"]
    assert "prefill" not in stored and "decode" not in stored
    assert stored["roles"]["decode"]["replicas"] == dsv3["spec"]["decode"]["replicas"]
    kube.status_patches.clear()
    reconciler.reconcile("llm", "dsv3")
    assert deployment_patches(kube) == []


def test_a_status_without_the_earlier_keys_gets_no_nulls_for_them(world: Any) -> None:
    kube, _, reconciler = world
    reconciler.reconcile("llm", "dsv3")
    run_workload_controllers(kube)
    reconciler.reconcile("llm", "dsv3")
    patches = deployment_patches(kube)
    assert len(patches) == 2  # the first status, then every instance ready
    assert all("prefill" not in p and "decode" not in p for p in patches)
    # a merge patch: what changed
    assert patches[1]["roles"]["prefill"] == {"readyReplicas": 2, "ready": "2/2"}


def workload(generation: int, version: str, **labels: str) -> Json:
    return {
        "kind": "StatefulSet",
        "metadata": {
            "name": "x",
            "namespace": "llm",
            "generation": generation,
            "resourceVersion": version,
            "labels": {"app": "a", **labels},
            "annotations": {"ours": "1"},
            "ownerReferences": [{"uid": "u", "kind": models.KIND, "name": "d"}],
        },
        "spec": {"replicas": 1},
    }


def test_only_status_changed() -> None:
    desired = workload(0, "")
    del desired["metadata"]["generation"], desired["metadata"]["resourceVersion"]
    assert only_status_changed(desired, 3, workload(3, "9"))
    assert only_status_changed(desired, 3, workload(3, "9", team="mine"))  # a user's label
    assert not only_status_changed(desired, 3, workload(4, "9"))  # spec edited
    assert not only_status_changed(desired, None, workload(3, "9"))  # never applied
    assert not only_status_changed(desired, 3, workload(3, "9", app="b"))  # our label edited
    no_refs = workload(3, "9")
    no_refs["metadata"]["ownerReferences"] = []
    assert not only_status_changed(desired, 3, no_refs)
    no_annotation = workload(3, "9")
    no_annotation["metadata"]["annotations"] = {}
    assert not only_status_changed(desired, 3, no_annotation)


def test_cache_lists_by_kind_namespace_and_labels() -> None:
    cache = LiveCache(listed_kinds=["StatefulSet"])
    cache.seen(workload(1, "1"))
    other = workload(1, "2", app="b")
    other["metadata"]["name"] = "y"
    cache.seen(other)
    assert [o["metadata"]["name"] for o in cache.listed("StatefulSet", "llm", {"app": "b"})] == [
        "y"
    ]
    assert cache.listed("StatefulSet", "other", {"app": "a"}) == []
    assert cache.listed("Service", "llm", {"app": "a"}) == []


def test_a_refused_launch_reaches_the_status_and_an_event(world: Any) -> None:
    """A prefill pod whose command SGLang refused (exit 5), as the pod watch feeds it."""
    kube, cache, reconciler = world
    reconciler.reconcile("llm", "dsv3")
    watch_everything(kube, cache)
    message = "SGLang 0.5.23 refused the command line: ambiguous option: --cuda-graph-max-bs"
    ended = {"terminated": {"exitCode": 5, "message": message}}
    cache.seen(
        {
            "kind": "Pod",
            "metadata": {
                "name": "dsv3-prefill-1-0",
                "namespace": "llm",
                "labels": {"ascendpd.io/deployment": "dsv3", "ascendpd.io/role": "prefill"},
            },
            "status": {"containerStatuses": [{"state": {"waiting": {}}, "lastState": ended}]},
        }
    )
    kube.calls.clear()
    result = reconciler.reconcile("llm", "dsv3")
    cond = next(c for c in result.status["conditions"] if c["type"] == "PrefillReady")
    assert (cond["reason"], cond["message"]) == (
        "LaunchRefused",
        f"pod dsv3-prefill-1-0: {message}",
    )
    assert ("CREATE", "Event") in kube.calls
    assert {kind for verb, kind in kube.calls if verb == "LIST"} <= {"PodGroup"}
    kube.calls.clear()
    reconciler.reconcile("llm", "dsv3")  # the same refusal: no second event
    assert ("CREATE", "Event") not in kube.calls


class RefusingKube(FakeKube):
    """Refuses deletes with the given error (a 403 here, a 500 there)."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def delete(self, kind: str, namespace: str, name: str, uid: str = "",
               grace_period_seconds: int | None = None, orphan: bool = False) -> None:  # fmt: skip
        self.calls.append(("DELETE-REFUSED", kind))
        raise self.error


def stale_world(dsv3: Json, error: Exception) -> tuple[RefusingKube, Reconciler]:
    kube = RefusingKube(error)
    cr = copy.deepcopy(dsv3)
    cr["metadata"].update(namespace="llm", uid="uid-1", generation=1)
    kube.objects[(models.KIND, "llm", "dsv3")] = cr
    reconciler = Reconciler(kube, clock=lambda: "2026-01-01T00:00:00Z")  # type: ignore[arg-type]
    reconciler.reconcile("llm", "dsv3")
    stale = copy.deepcopy(kube.objects[("Service", "llm", "dsv3-prefill-0")])
    stale["metadata"]["name"] = "dsv3-prefill-7"
    kube._store(stale, False)
    kube.calls.clear()
    return kube, reconciler


def test_a_refused_prune_is_reported_as_that_delete(dsv3: Json) -> None:
    from ascend_pd_operator.kubeio.kube import KubeError

    kube, reconciler = stale_world(dsv3, KubeError(403, "Forbidden", "services is forbidden"))
    result = reconciler.reconcile("llm", "dsv3")
    ready = next(c for c in result.status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "PruneFailed"
    assert ready["message"].startswith("deleting Service dsv3-prefill-7: ")
    assert "services is forbidden" in ready["message"]
    assert ("PATCH_STATUS", models.KIND) in kube.calls and ("CREATE", "Event") in kube.calls


def test_a_transient_prune_error_leaves_the_status_alone(dsv3: Json) -> None:
    from ascend_pd_operator.kubeio.kube import KubeError

    kube, reconciler = stale_world(
        dsv3, KubeError(500, "InternalError", "etcdserver: leader changed")
    )
    with pytest.raises(KubeError):
        reconciler.reconcile("llm", "dsv3")
    assert ("PATCH_STATUS", models.KIND) not in kube.calls and ("CREATE", "Event") not in kube.calls


def test_an_operator_made_template_change_waits_reads_each_template_once_and_rolls_on_request(
    dsv3: Json, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator upgrade whose builder adds a label: the new operator (a new reconciler,
    a cold cache) applies no StatefulSet and deletes no pod, reads each instance's template
    once, and says what waits; the user's trigger applies the new templates."""
    kube, cache, reconciler = new_world(dsv3, FakeKube())
    reconciler.reconcile("llm", "dsv3")
    run_workload_controllers(kube)
    reconciler.reconcile("llm", "dsv3")  # status of the running children
    with_a_new_pod_label(monkeypatch)
    cache = LiveCache(listed_kinds=WATCHED)
    upgraded = Reconciler(kube, clock=lambda: "2026-01-01T00:00:01Z", cache=cache)  # type: ignore[arg-type]
    watch_everything(kube, cache)
    kube.calls.clear()
    upgraded.reconcile("llm", "dsv3")
    assert ("APPLY", "StatefulSet") not in kube.calls and ("DELETE", "Pod") not in kube.calls
    assert kube.calls.count(("GET", "StatefulSet")) == 3  # 2 prefill and 1 decode instance
    cr = kube.objects[(models.KIND, "llm", "dsv3")]
    assert cr["status"]["updatePending"] == "prefill,decode"
    assert cr["status"]["roles"]["decode"]["updatePending"] == [
        "metadata.labels[example.com/new] added"
    ]
    for _ in range(2):  # the first labels the leaders, which completes the rollout's status
        watch_everything(kube, cache)
        kube.calls.clear()
        upgraded.reconcile("llm", "dsv3")
        assert ("GET", "StatefulSet") not in kube.calls  # read once per resourceVersion
    assert kube.writes() == []

    cr["metadata"]["annotations"] = {"ascendpd.io/apply-operator-updates": "1"}
    watch_everything(kube, cache)
    kube.calls.clear()
    upgraded.reconcile("llm", "dsv3")
    assert kube.calls.count(("APPLY", "StatefulSet")) == 3
    sts = kube.objects[("StatefulSet", "llm", "dsv3-decode-0")]
    assert sts["spec"]["template"]["metadata"]["labels"]["example.com/new"] == "yes"
    assert "updatePending" not in kube.objects[(models.KIND, "llm", "dsv3")]["status"]
