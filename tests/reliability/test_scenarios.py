"""Every reliability scenario on the cluster at a CI size: converged, nothing lost or duplicated.

Each test installs the Helm chart for its own namespace and runs the real operator as
the chart's ServiceAccount (``reliability.env``); ``python -m reliability`` runs the
same scenario functions and prints the table.
"""

from __future__ import annotations

from typing import Any

import pytest

from reliability import bad_inputs, crash, deletion, drift, faults, ha, security
from reliability.env import Env, Release
from reliability.result import ScenarioResult

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.reliability,
    pytest.mark.simulated,
    pytest.mark.timeout(900),
]


def assert_clean(result: ScenarioResult) -> None:
    assert result.runs > 0
    assert result.problems == []
    assert result.converged == result.runs, result
    assert result.lost == 0 and result.duplicated == 0, result


def test_crash_convergence(reliability_env: Env, chart: Release, scenario_namespace: str) -> None:
    result = crash.run(reliability_env, chart, scenario_namespace, kills=20, seed=7)
    assert_clean(result)
    assert result.details["kills"] == 20
    assert result.details["tracebacks_in_log"] == 0


def test_drift_is_restored_and_users_marks_stay(
    reliability_env: Env, chart: Release, scenario_namespace: str
) -> None:
    result = drift.run(reliability_env, chart, scenario_namespace)
    assert_clean(result)
    assert result.details["users_marks_lost"] == []


def test_bad_input_corpus_on_a_ready_deployment(
    reliability_env: Env, chart: Release, scenario_namespace: str
) -> None:
    result = bad_inputs.run(reliability_env, chart, scenario_namespace)
    assert_clean(result)
    assert result.runs == len(bad_inputs.load_corpus())


def test_api_faults(reliability_env: Env, chart: Release, scenario_namespace: str) -> None:
    result = faults.run(reliability_env, chart, scenario_namespace)
    assert_clean(result)
    injected: dict[str, Any] = result.details["faults"]
    assert injected.get("429") and injected.get("409") and injected.get("500")
    assert result.details["retry_after_violations"] == 0
    assert result.details["tracebacks_in_log"] == 0


def test_leader_election_never_two_writers(reliability_env: Env, scenario_namespace: str) -> None:
    release = reliability_env.install_chart(
        [scenario_namespace], "--set", "replicaCount=2", "--set", "leaderElection.enabled=true"
    )
    try:
        result = ha.run(reliability_env, release, scenario_namespace)
    finally:
        reliability_env.uninstall(release)
    assert_clean(result)
    assert result.details["standby_writes_while_led"] == 0
    assert result.details["old_leader_writes_after_takeover"] == 0
    assert result.details["old_leader_exited_on_wake"]


def test_deletion_while_the_operator_is_down(
    reliability_env: Env, chart: Release, scenario_namespace: str
) -> None:
    result = deletion.run(reliability_env, chart, scenario_namespace)
    assert_clean(result)
    assert result.details["stopped_cleanly"]


def test_security(reliability_env: Env, chart: Release, scenario_namespace: str) -> None:
    result = security.run(reliability_env, chart, scenario_namespace)
    assert_clean(result)
    assert result.details["leaks"] == []
    assert result.details["pods_checked"] >= 3
