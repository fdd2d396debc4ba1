"""The PD planner's wiring: spec.scaling.planner as the rule's policy, a role's observation
from the objects the watches keep, the scaler writes it owns, and the loop around them
(``decisions.autoscale_view``, ``kubeio.pd_planner``) with a fake API and scraper.

The leaders' samples come from the SGLang ``/metrics`` fixtures, through the scraper's own
parser (``test_autoscale.samples``). The expected counts are worked out by hand in comments.
"""

from __future__ import annotations

import copy
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import PlannerSettings, parse_spec
from ascend_pd_operator.api.vocabulary import Owner
from ascend_pd_operator.decisions.autoscale import Leader, PlannerPolicy
from ascend_pd_operator.decisions.autoscale_view import (
    planner_policy,
    role_view,
    status_due,
    status_patch,
)
from ascend_pd_operator.kubeio.errors import KubeError
from ascend_pd_operator.kubeio.live_cache import LiveCache
from ascend_pd_operator.kubeio.metrics import PlannerCollector
from ascend_pd_operator.kubeio.pd_planner import PDPlanner

from .conftest import load_example
from .test_autoscale import samples

NS, NAME, UID = "llm", "dsv2-lite", "uid-dsv2"
OWNER = Owner(NAME, NS, UID, 1)


# --- spec.scaling.planner -> PlannerPolicy ---------------------------------------------------
def test_the_specs_defaults_are_the_rules_defaults() -> None:
    assert planner_policy(PlannerSettings()) == PlannerPolicy()


def test_every_setting_reaches_the_policy_exactly() -> None:
    settings = PlannerSettings.model_validate({
        "intervalSeconds": 5, "stabilizationWindowSeconds": 60, "tolerance": "0.05",
        "maxStepUp": 3, "prefillQueueTarget": "2.5", "decodeTokenUsageTarget": "0.85",
        "decodePreallocQueueTarget": "0.5", "ttftTargetMilliseconds": 1500,
        "itlTargetMilliseconds": 40, "latencyQuantile": "0.99",
    })  # fmt: skip
    assert planner_policy(settings) == PlannerPolicy(
        prefill_queue_target=2.5, decode_token_usage_target=0.85,
        decode_prealloc_queue_target=0.5, ttft_target_seconds=1.5, itl_target_seconds=0.04,
        latency_quantile=0.99, tolerance=0.05, max_step_up=3,
        stabilization_window_seconds=60.0, interval_seconds=5.0,
    )  # fmt: skip


# --- objects as the watches keep them ---------------------------------------------------------
def spec_doc(mode: str = "Planner", **planner: Any) -> Json:
    spec = copy.deepcopy(load_example("deepseek-v2-lite.yaml")["spec"])
    spec["decode"]["scaling"] = {"mode": mode, "minReplicas": 1, "maxReplicas": 3}
    spec["scaling"] = {"planner": {"intervalSeconds": 1, "stabilizationWindowSeconds": 5,
                                   **planner}}  # fmt: skip
    return spec


def ref(uid: str = UID) -> list[Json]:
    return [{"apiVersion": "ascendpd.io/v1alpha1", "kind": "PDDeployment", "name": NAME,
             "uid": uid, "controller": True}]  # fmt: skip


def labels(role: str, index: int, **extra: str) -> dict[str, str]:
    return {"ascendpd.io/deployment": NAME, "ascendpd.io/role": role,
            "ascendpd.io/instance": str(index), **extra}  # fmt: skip


def statefulset(role: str, index: int, uid: str = UID, **extra: str) -> Json:
    return {"kind": "StatefulSet",
            "metadata": {"name": f"{NAME}-{role}-{index}", "namespace": NS,
                         "labels": labels(role, index, **extra), "ownerReferences": ref(uid),
                         "generation": 1, "resourceVersion": "1"},
            "spec": {"replicas": 1}, "status": {"observedGeneration": 1}}  # fmt: skip


def pod(role: str, index: int, ready: bool = True, restarts: int = 0, **extra: str) -> Json:
    leader = {"ascendpd.io/leader": "true"}
    return {"kind": "Pod",
            "metadata": {"name": f"{NAME}-{role}-{index}-0", "namespace": NS, "uid": f"p{index}",
                         "labels": labels(role, index, **leader, **extra),
                         "resourceVersion": "1"},
            "spec": {"nodeName": f"node-{index}"},
            "status": {"phase": "Running", "podIP": f"127.0.1.{index + 1}",
                       "conditions": [{"type": "Ready", "status": str(ready)}],
                       "containerStatuses": [{"name": "sglang", "ready": ready,
                                              "restartCount": restarts}]}}  # fmt: skip


def scaler(replicas: int, effective: int | None = None, generation: int = 1,
           observed: int = 1, planner: Json | None = None) -> Json:  # fmt: skip
    status: Json = {"replicas": replicas, "observedGeneration": observed,
                    "effectiveReplicas": replicas if effective is None else effective}  # fmt: skip
    if planner is not None:
        status["planner"] = planner
    return {"kind": "PDRoleScaler",
            "metadata": {"name": f"{NAME}-decode", "namespace": NS, "generation": generation,
                         "resourceVersion": "7", "ownerReferences": ref(),
                         "labels": {"ascendpd.io/deployment": NAME}},
            "spec": {"replicas": replicas}, "status": status}  # fmt: skip


def test_a_roles_instances_as_the_rule_sees_them() -> None:
    spec = parse_spec(spec_doc())
    sets = [statefulset("decode", i) for i in range(4)]
    sets += [statefulset("prefill", 0), statefulset("decode", 7, uid="someone-else")]
    sets[3]["metadata"]["labels"]["ascendpd.io/draining"] = "true"
    pods = [pod("decode", 0), pod("decode", 1, ready=False), pod("decode", 2, ready=False,
            restarts=1), pod("decode", 3), pod("prefill", 0)]  # fmt: skip
    view = role_view(OWNER, spec, "decode", scaler(4), sets, pods)
    obs = view.observation
    assert (obs.role, obs.desired, obs.min_replicas, obs.max_replicas) == ("decode", 4, 1, 3)
    # decode-0 Ready; decode-1 not Ready yet and never failed: starting; decode-2 restarted:
    # failed; decode-3 draining; the prefill and the other owner's instance: not decode's
    assert obs.ready == (Leader("decode-0", None),)
    assert (obs.starting, obs.unready, obs.draining) == (("decode-1",), ("decode-2",),
                                                         ("decode-3",))  # fmt: skip
    assert obs.effective == 4
    assert view.addresses == {"decode-0": "127.0.1.1"}
    scraped = samples("decode-0.5.23.prom", usage=0.5, prealloc_queue=0, transfer_queue=0)
    assert view.with_samples({"decode-0": scraped}).ready == (Leader("decode-0", scraped),)
    assert view.with_samples({}).ready == (Leader("decode-0", None),)  # never scraped: missing


def test_a_deleted_statefulset_and_a_draining_pod_are_draining_a_gone_pod_is_starting() -> None:
    spec = parse_spec(spec_doc())
    going = statefulset("decode", 0)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pods = [pod("decode", 1, **{"ascendpd.io/draining": "true"})]
    sets = [going, statefulset("decode", 1), statefulset("decode", 2)]
    obs = role_view(OWNER, spec, "decode", scaler(3), sets, pods).observation
    assert (obs.draining, obs.starting, obs.ready) == (("decode-0", "decode-1"), ("decode-2",), ())


def test_until_the_reconcile_saw_the_scalers_count_the_count_stands_for_the_workloads() -> None:
    spec = parse_spec(spec_doc())
    sets, pods = [statefulset("decode", 0)], [pod("decode", 0)]
    # spec.replicas 2 (generation 2) while the status still says 1 for generation 1
    stale = scaler(2, effective=1, generation=2, observed=1)
    assert role_view(OWNER, spec, "decode", stale, sets, pods).observation.effective == 2
    seen = scaler(2, effective=1, generation=2, observed=2)  # the ratio bounds keep it at 1
    assert role_view(OWNER, spec, "decode", seen, sets, pods).observation.effective == 1


# --- what the planner writes ------------------------------------------------------------------
def test_the_planners_status_patch_touches_no_key_of_the_reconcile() -> None:
    old = {"replicas": 2, "readyReplicas": 2, "effectiveReplicas": 2, "selector": "x",
           "message": "m", "observedGeneration": 3,
           "planner": {"lastDecision": "hold", "reason": "r", "replicas": 2, "time": "t0",
                       "metrics": {"token_usage": "0.5", "transfer_queue": "1"}}}  # fmt: skip
    new = {"lastDecision": "up", "reason": "up", "replicas": 3, "time": "t1",
           "metrics": {"token_usage": "0.95"}}  # fmt: skip
    # only status.planner, and the metric no longer read removed
    assert status_patch(old, new) == {"planner": {
        "lastDecision": "up", "reason": "up", "replicas": 3, "time": "t1",
        "metrics": {"token_usage": "0.95", "transfer_queue": None}}}  # fmt: skip
    assert status_patch({"replicas": 1}, new) == {"planner": new}


def test_a_status_is_due_when_the_decision_changes_not_its_numbers() -> None:
    old = {"lastDecision": "hold", "replicas": 2,
           "reason": "hold: decode token usage 0.30 < target 0.70 for 3 s of 300 s"}  # fmt: skip
    same = {**old, "reason": "hold: decode token usage 0.25 < target 0.70 for 4 s of 300 s"}
    assert not status_due(old, same)
    assert status_due(old, {**old, "reason": "hold: decode-1 starting"})
    assert status_due(old, {**old, "lastDecision": "down", "replicas": 1})
    assert status_due(None, old)


# --- the loop ---------------------------------------------------------------------------------
class FakeKube:
    """Records the writes; has no list or get: the loop reads only the cache."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, Json]] = []
        self.refuse: int | None = None

    def patch(self, kind: str, namespace: str, name: str, body: Json) -> Json:
        if self.refuse is not None:
            raise KubeError(self.refuse, "Conflict", "the object has been modified")
        self.writes.append(("patch", name, body))
        return {}

    def patch_status(self, kind: str, namespace: str, name: str, status: Json) -> Json:
        self.writes.append(("status", name, status))
        return {}


class FakeScraper:
    def __init__(self) -> None:
        self.usage = 0.95
        self.asked: list[dict[str, str]] = []

    def scrape(self, leaders: dict[str, str]) -> dict[str, Any]:
        self.asked.append(dict(leaders))
        one = samples("decode-0.5.23.prom", usage=self.usage, prealloc_queue=0, transfer_queue=0)
        return dict.fromkeys(leaders, one)


@pytest.fixture
def loop() -> SimpleNamespace:
    cache = LiveCache()
    for obj in (scaler(1), statefulset("decode", 0), pod("decode", 0), statefulset("prefill", 0),
                pod("prefill", 0)):  # fmt: skip
        cache.seen(obj)
    clock = [100.0]
    kube, scraper = FakeKube(), FakeScraper()
    planner = PDPlanner(kube, cache, scraper, clock=lambda: clock[0], wall=lambda: "NOW",
                        reports=PlannerCollector())  # fmt: skip
    planner.seen(NS, NAME, UID, 1, spec_doc())
    return SimpleNamespace(planner=planner, kube=kube, scraper=scraper, cache=cache, clock=clock)


def test_the_loop_scales_up_with_a_conditional_patch_and_says_why(loop: SimpleNamespace) -> None:
    planner, kube, scraper = loop.planner, loop.kube, loop.scraper
    planner.tick()
    # one Ready decode at usage 0.95 against 0.7: ceil(1 * 0.95 / 0.7) = 2
    assert scraper.asked == [{"decode-0": "127.0.1.1"}]  # the Planner role's leaders only
    (spec, status) = kube.writes
    assert spec == ("patch", f"{NAME}-decode",
                    {"metadata": {"resourceVersion": "7"}, "spec": {"replicas": 2}})  # fmt: skip
    assert status == ("status", f"{NAME}-decode", {"planner": {
        "lastDecision": "up", "reason": "up 1->2: decode token usage 0.95 > target 0.70",
        "replicas": 2, "time": "NOW",
        "metrics": {"prealloc_queue": "0", "token_usage": "0.95", "transfer_queue": "0"},
    }})  # fmt: skip
    families = {f.name: f for f in planner.reports.collect()}
    (desired,) = families["ascend_pd_planner_desired_replicas"].samples
    assert (desired.labels["role"], desired.value) == ("decode", 2)
    # not due again before its interval (1 s)
    planner.tick()
    assert len(kube.writes) == 2


def test_the_loop_writes_its_status_only_when_the_decision_changes(loop: SimpleNamespace) -> None:
    planner, kube, scraper = loop.planner, loop.kube, loop.scraper
    scraper.usage = 0.3  # ceil(1 * 0.3 / 0.7) = 1, the count: a hold
    planner.tick()
    (only,) = kube.writes
    assert only[2]["planner"]["reason"] == ("hold: decode token usage 0.30 vs target 0.70 needs 1")
    loop.cache.seen(scaler(1, planner=only[2]["planner"]))  # the watch reports the write
    scraper.usage = 0.25
    loop.clock[0] += 1
    planner.tick()
    assert len(kube.writes) == 1, kube.writes  # the same hold, other numbers: no write


def test_a_count_someone_else_set_meanwhile_is_not_overwritten(loop: SimpleNamespace) -> None:
    planner, kube = loop.planner, loop.kube
    kube.refuse = 409
    planner.tick()
    assert kube.writes == []  # neither the count nor a status claiming it


def test_a_standby_and_a_static_role_decide_nothing(loop: SimpleNamespace) -> None:
    planner, kube, scraper = loop.planner, loop.kube, loop.scraper
    stop = threading.Event()
    one_round = SimpleNamespace(beat=stop.set)  # the unit's beat ends the loop after a round
    planner.leading = lambda: False
    planner.run(one_round, stop)
    assert kube.writes == [] and scraper.asked == []
    planner.leading = lambda: True
    stop.clear()
    planner.run(one_round, stop)  # the leader's round: it decides
    assert scraper.asked
    kube.writes.clear()
    scraper.asked.clear()
    planner.leading = lambda: True
    planner.seen(NS, NAME, UID, 2, spec_doc(mode="External"))
    planner.tick()
    assert kube.writes == [] and scraper.asked == []
    assert all(not family.samples for family in planner.reports.collect())
