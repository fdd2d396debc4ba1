"""What ``kubectl get pdd`` shows comes from the status: each role's ready/effective
instances as text (a printer column computes nothing), and a Ready reason that names the
cause (the first condition Ready waits for), which Ready does not repeat as an Event."""

from __future__ import annotations

import copy
import dataclasses

import pytest

import ascend_pd_runtime.env_contract as ec
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import Owner
from ascend_pd_operator.builders.desired import validate
from ascend_pd_operator.decisions.events import events
from ascend_pd_operator.decisions.findings import Findings
from ascend_pd_operator.decisions.scaling import RoleScale, ScaleDecision
from ascend_pd_operator.decisions.status import compute_status
from tests.unit.operator.findings import findings_for
from tests.unit.operator.test_status import runtime_pod, sts, terminated

OWNER = Owner("dsv3", "llm", uid="u-1", generation=2)
T0 = "2026-01-01T00:00:00Z"


def children(
    prefill_ready: int, decode_ready: int, router_ready: int = 2
) -> dict[tuple[str, str], Json]:
    """The example's instances (2 prefill, 1 decode, 2 pods each): the first
    ``prefill_ready``/``decode_ready`` of each role with every pod ready, the rest with one."""
    found: dict[tuple[str, str], Json] = {}
    for role, count, ready in (("prefill", 2, prefill_ready), ("decode", 1, decode_ready)):
        for i in range(count):
            name = f"dsv3-{role}-{i}"
            found[("StatefulSet", name)] = sts(name, 2, 2 if i < ready else 1)
    found[("Deployment", "dsv3-router")] = {"status": {"readyReplicas": router_ready}}
    return found


def ready_condition(status: Json) -> Json:
    return next(c for c in status["conditions"] if c["type"] == "Ready")


@pytest.mark.parametrize(("prefill", "decode"), [(0, 0), (1, 1), (2, 0), (2, 1)])
def test_each_role_shows_ready_of_the_instances_it_runs(
    dsv3: Json, prefill: int, decode: int
) -> None:
    assert (dsv3["spec"]["prefill"]["replicas"], dsv3["spec"]["decode"]["replicas"]) == (2, 1)
    status = compute_status(findings_for(OWNER, dsv3, children(prefill, decode), {}), T0)
    assert status["roles"]["prefill"]["ready"] == f"{prefill}/2"
    assert status["roles"]["decode"]["ready"] == f"{decode}/1"


def test_the_ready_reason_is_the_first_cause_not_not_ready(dsv3: Json) -> None:
    waiting = compute_status(findings_for(OWNER, dsv3, children(1, 1), {}), T0)
    ready = ready_condition(waiting)
    assert (ready["status"], ready["reason"]) == ("False", "InstancesNotReady")
    assert ready["message"].startswith("waiting for PrefillReady: dsv3-prefill-1 ")
    router = ready_condition(compute_status(findings_for(OWNER, dsv3, children(2, 1, 0)), T0))
    assert router["reason"] == "RouterNotReady"
    assert router["message"].startswith("waiting for RouterReady: ")
    pods = [runtime_pod("dsv3-prefill-1-0", "prefill", terminated(ec.EXIT_ARGS_REFUSED, "no"))]
    obs = dataclasses.replace(findings_for(OWNER, dsv3, children(1, 1), {}), pods=pods)
    assert ready_condition(compute_status(obs, T0))["reason"] == "LaunchRefused"
    fine = ready_condition(compute_status(findings_for(OWNER, dsv3, children(2, 1), {}), T0))
    assert (fine["status"], fine["reason"]) == ("True", "Ready")


def test_an_invalid_spec_reads_invalid_spec(dsv3: Json) -> None:
    broken = copy.deepcopy(dsv3)
    broken["spec"]["prefill"]["devicesPerNode"] = 6
    validation = validate(OWNER, broken["spec"])
    obs = Findings(owner=OWNER, spec=None, validation_error=validation.error, children={})
    ready = ready_condition(compute_status(obs, T0))
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")


def test_ready_does_not_wait_for_ratio_constrained(dsv3: Json) -> None:
    """RatioConstrained is False while the asked counts hold: no cause, never waited for."""
    spec = copy.deepcopy(dsv3)
    spec["spec"]["scaling"] = {"prefillPerDecode": {"min": "1", "max": "4"}}
    scale = ScaleDecision({"prefill": RoleScale("prefill", "Static", 2, 2),
                           "decode": RoleScale("decode", "Static", 1, 1)})  # fmt: skip
    obs = dataclasses.replace(findings_for(OWNER, spec, children(1, 1), {}), scale=scale)
    status = compute_status(obs, T0)
    ratio = next(c for c in status["conditions"] if c["type"] == "RatioConstrained")
    assert (ratio["status"], ratio["reason"]) == ("False", "WithinBounds")
    ready = ready_condition(status)
    assert ready["message"].startswith("waiting for PrefillReady: "), ready["message"]


def test_ready_posts_no_event_for_a_cause_its_condition_tells(dsv3: Json) -> None:
    broken = copy.deepcopy(dsv3)
    broken["spec"]["prefill"]["devicesPerNode"] = 6
    validation = validate(OWNER, broken["spec"])
    obs = Findings(owner=OWNER, spec=None, validation_error=validation.error, children={})
    told = events({}, compute_status(obs, T0))
    assert [(e.type, e.reason) for e in told] == [("Warning", "InvalidSpec")]
    assert told[0].message.startswith("Validated: ")
    # not ready, progress: no Event at all, as when Ready's reason was NotReady
    waiting = compute_status(findings_for(OWNER, dsv3, children(1, 1), {}), T0)
    assert events({}, waiting) == []
    # a reason of Ready's own is still told
    failed = dataclasses.replace(findings_for(OWNER, dsv3, children(2, 1), {}),
                                 write_error="applying StatefulSet x: 403",
                                 write_error_reason="ApplyFailed")  # fmt: skip
    assert [e.reason for e in events({}, compute_status(failed, T0))] == ["ApplyFailed"]


def test_a_rollout_is_progress_and_posts_no_warning() -> None:
    """Ready False for a rollout posted a Warning at every step of every rollout, and one
    after an operator upgrade whose apply moved the router's generation for a moment."""
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "ready"}
    rolling = {"type": "Ready", "status": "False", "reason": "RolloutInProgress",
               "message": "rolling out: prefill 1/2 updated, 2 serving"}  # fmt: skip
    failed = {**rolling, "reason": "ApplyFailed", "message": "applying StatefulSet x: no"}
    assert events({"conditions": [ready]}, {"conditions": [rolling]}) == []
    assert [e.reason for e in events({"conditions": [ready]}, {"conditions": [failed]})] == [
        "ApplyFailed"
    ]
