"""Every reliability scenario on the cluster at a CI size: converged, nothing lost or duplicated.
(Those that stop the control plane or its nodes have one of their own, in a tier of their
own: ``test_own_control_plane``.)

Each test installs the Helm chart for its own namespace and runs the real operator as
the chart's ServiceAccount (``reliability.env``); ``python -m reliability`` runs the
same scenario functions and prints the table.
"""

from __future__ import annotations

from typing import Any, Protocol

import pytest

from reliability import (
    bad_inputs,
    crash,
    deletion,
    drain_crash,
    drift,
    faults,
    ha,
    rbac_loss,
    rollout_crash,
    security,
)
from reliability.env import Env, Release
from reliability.result import ScenarioResult
from tests.reliability.scenario_checks import Scenario, assert_clean

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.reliability,
    pytest.mark.simulated,
    pytest.mark.timeout(900),
]


class RunClean(Protocol):
    """The ``run_clean`` fixture."""

    def __call__(self, scenario: Scenario, **kwargs: Any) -> ScenarioResult: ...


@pytest.fixture
def run_clean(reliability_env: Env, chart: Release, scenario_namespace: str) -> RunClean:
    """Runs a scenario (with its keyword arguments) in the test's namespace under the chart's
    operator, and asserts it clean."""

    def run(scenario: Scenario, **kwargs: Any) -> ScenarioResult:
        result = scenario(reliability_env, chart, scenario_namespace, **kwargs)
        assert_clean(result)
        return result

    return run


def test_crash_convergence(run_clean: RunClean) -> None:
    details = run_clean(crash.run, kills=20, seed=7).details
    assert details["kills"] == 20
    assert details["tracebacks_in_log"] == 0


def test_drains_resume_across_operator_crashes_and_cut_nothing(run_clean: RunClean) -> None:
    details = run_clean(drain_crash.run, kills=2).details
    assert details["drains"] >= 2 and details["deleted_marked_pods"] >= 2
    assert details["tracebacks_in_log"] == 0


def test_a_rollout_survives_operator_crashes_within_its_bounds(run_clean: RunClean) -> None:
    details = run_clean(rollout_crash.run, kills=2).details
    assert details["worst_ready_prefill"] >= 2 and details["mixed"] == []
    assert details["tracebacks_in_log"] == 0


def test_drift_is_restored_and_users_marks_stay(run_clean: RunClean) -> None:
    assert run_clean(drift.run).details["users_marks_lost"] == []


def test_bad_input_corpus_on_a_ready_deployment(run_clean: RunClean) -> None:
    assert run_clean(bad_inputs.run).runs == len(bad_inputs.load_corpus())


def test_api_faults(run_clean: RunClean) -> None:
    details = run_clean(faults.run).details
    injected: dict[str, Any] = details["faults"]
    assert injected.get("429") and injected.get("409") and injected.get("500")
    assert details["retry_after_violations"] == 0
    assert details["tracebacks_in_log"] == 0


def test_leader_election_never_two_writers(reliability_env: Env, scenario_namespace: str) -> None:
    release = reliability_env.install_chart([scenario_namespace], *ha.CHART_VALUES)
    try:
        result = ha.run(reliability_env, release, scenario_namespace)
    finally:
        reliability_env.uninstall(release)
    assert_clean(result)
    assert result.details["standby_writes_while_led"] == 0
    assert result.details["old_leader_writes_after_takeover"] == 0
    assert result.details["old_leader_stood_by_on_wake"]


def test_deletion_while_the_operator_is_down(run_clean: RunClean) -> None:
    assert run_clean(deletion.run).details["stopped_cleanly"]


def test_security(run_clean: RunClean) -> None:
    details = run_clean(security.run).details
    assert details["leaks"] == []
    assert details["pods_checked"] >= 3


def test_a_lost_permission_is_named_and_recovered(run_clean: RunClean) -> None:
    details = run_clean(rbac_loss.run).details
    assert details["healthz_failing_samples"] == 0
    assert details["threads_died_in_log"] == 0 and details["operator_alive"]
