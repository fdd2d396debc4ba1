"""Drift: every kind of child deleted or edited by hand is restored; users' extra labels stay.

A Ready PDDeployment's children get users' own labels and annotations first (fields
the operator does not manage). Then, one at a time, each kind of child is deleted and
edited on a field the operator does manage; each time the namespace must return to
exactly the desired state, and the seconds it took are compared with the resync
interval. Finally edits and a spec change make the operator re-apply every child, and the
users' labels and annotations must all still be there (server-side apply owns only
its own fields).
"""

from __future__ import annotations

import json
import time

from .audit import started_converged, wait_converged
from .env import Env, Release
from .result import ScenarioResult
from .specs import pdd

USER_LABEL = ("team.example.com/owner", "ml-platform")
USER_ANNOTATION = ("example.com/ticket", "OPS-1234")
RESYNC_SECONDS = 5.0
#: How long the namespace may take to return to the desired state after each drift.
BOUND_SECONDS = 120.0


def _drifts(name: str) -> list[tuple[str, list[str]]]:
    sts, svc, cm, router = (
        f"{name}-decode-0",
        f"{name}-prefill-0",
        f"{name}-kv-layout",
        (f"{name}-router"),
    )
    merge = ["--type", "merge", "-p"]
    return [
        ("delete ConfigMap kv-layout", ["delete", "configmap", cm]),
        ("edit ConfigMap kv-layout data",
         ["patch", "configmap", cm, *merge, json.dumps({"data": {"plan.json": "{}"}})]),
        ("delete headless Service", ["delete", "service", svc]),
        # (a port's number is its list key: a changed one is a user's new port to SSA)
        ("edit Service selector", ["patch", "service", svc, *merge,
                                   json.dumps({"spec": {"selector": {"ascendpd.io/role": "x"}}})]),
        ("delete StatefulSet", ["delete", "statefulset", sts]),
        ("scale StatefulSet", ["scale", "statefulset", sts, "--replicas=3"]),
        ("edit StatefulSet env", ["patch", "statefulset", sts, "-p", json.dumps(
            {"spec": {"template": {"spec": {"containers": [
                {"name": "sglang", "env": [{"name": "ASCEND_PD_TP_SIZE", "value": "9"}]}]}}}})]),
        ("edit StatefulSet labels we manage",
         ["label", "statefulset", sts, "--overwrite", "ascendpd.io/role=prefill"]),
        ("delete router Deployment", ["delete", "deployment", router]),
        ("edit router Deployment replicas",
         ["patch", "deployment", router, *merge, json.dumps({"spec": {"replicas": 4}})]),
        ("delete router Service", ["delete", "service", router]),
    ]  # fmt: skip


def _marked(name: str) -> list[tuple[str, str]]:
    """One child of each kind, to carry the users' label and annotation."""
    return [("statefulset", f"{name}-decode-0"), ("service", f"{name}-prefill-0"),
            ("configmap", f"{name}-kv-layout"), ("deployment", f"{name}-router")]  # fmt: skip


def _user_marks(env: Env, namespace: str, name: str) -> list[str]:
    """Children missing the users' label or annotation."""
    missing = []
    for kind, child in _marked(name):
        obj = env.get_json("-n", namespace, kind, child) or {"metadata": {}}
        labels = obj["metadata"].get("labels") or {}
        annotations = obj["metadata"].get("annotations") or {}
        if labels.get(USER_LABEL[0]) != USER_LABEL[1]:
            missing.append(f"{kind}/{child} label")
        if annotations.get(USER_ANNOTATION[0]) != USER_ANNOTATION[1]:
            missing.append(f"{kind}/{child} annotation")
    return missing


def run(env: Env, release: Release, namespace: str) -> ScenarioResult:
    result = ScenarioResult("drift")
    name = "drift"
    doc = pdd(name, namespace, decode=1)
    operator = release.operator([namespace], "drift-operator", resync_seconds=RESYNC_SECONDS)
    operator.start()
    try:
        if not started_converged(env, namespace, [doc], result, 0.5):
            return result
        for kind, child in _marked(name):
            env.kubectl("label", "-n", namespace, kind, child, "=".join(USER_LABEL))
            env.kubectl("annotate", "-n", namespace, kind, child, "=".join(USER_ANNOTATION))
        within = 0
        for what, args in _drifts(name):
            env.kubectl(*args, "-n", namespace)
            started = time.monotonic()
            found, seconds = wait_converged(env.kube, namespace, BOUND_SECONDS, 0.2)
            within += int(found.ok and seconds <= RESYNC_SECONDS)
            result.record(found.ok, time.monotonic() - started, f"{what}: {found}")
        result.details["restored_within_resync"] = f"{within}/{len(_drifts(name))}"
        result.details["resync_seconds"] = RESYNC_SECONDS
        # Deleted children come back without the users' marks (they were on the old
        # object): re-mark, then make the operator re-apply every kind of child (edits of
        # its fields, a spec change) and check the marks are still there.
        for kind, child in _marked(name):
            env.kubectl("label", "-n", namespace, "--overwrite", kind, child,
                        "=".join(USER_LABEL))  # fmt: skip
            env.kubectl("annotate", "-n", namespace, "--overwrite", kind, child,
                        "=".join(USER_ANNOTATION))  # fmt: skip
        for what, args in _drifts(name):
            if what.startswith("edit"):
                env.kubectl(*args, "-n", namespace)
        doc["spec"]["router"]["policy"] = "cache_aware"
        doc["spec"]["prefill"]["extraArgs"] = ["--mem-fraction-static=0.8"]
        doc["spec"]["decode"]["extraArgs"] = ["--mem-fraction-static=0.8"]
        env.apply([doc])
        started = time.monotonic()
        found, _ = wait_converged(env.kube, namespace, BOUND_SECONDS, 0.3)
        marks = _user_marks(env, namespace, name)
        result.record(found.ok and not marks, time.monotonic() - started,
                      f"after re-apply: {found}; users' marks "
                      f"lost: {marks}")  # fmt: skip
        result.lost += len(marks)
        result.details["users_marks_lost"] = marks
    finally:
        operator.kill()
    return result
