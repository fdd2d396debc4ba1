"""What every reliability scenario test asserts of its result, shared by the scenarios on
the tier's cluster (``test_scenarios``) and those on a control plane of their own
(``test_own_control_plane``)."""

from __future__ import annotations

from collections.abc import Callable

from reliability.result import ScenarioResult

#: a scenario's ``run`` (env, release, namespace and its keyword arguments)
Scenario = Callable[..., ScenarioResult]


def assert_clean(result: ScenarioResult) -> None:
    assert result.runs > 0, result.problems
    assert result.problems == [], result.problems
    assert result.converged == result.runs, result
    assert result.lost == 0 and result.duplicated == 0, result
