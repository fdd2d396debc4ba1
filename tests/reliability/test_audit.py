"""The audit's comparison of a desired child with the live object (pure, no cluster)."""

from __future__ import annotations

from reliability.audit import covers
from reliability.result import ScenarioResult, table


def test_desired_fields_must_be_present_with_their_values() -> None:
    desired = {"replicas": 2, "template": {"env": [{"name": "A", "value": "1"}]}}
    live = {"replicas": 2, "revisionHistoryLimit": 10,
            "template": {"env": [{"name": "A", "value": "1"}]}}  # fmt: skip
    assert covers(desired, live)
    assert not covers(desired, {**live, "replicas": 3})
    assert not covers(desired, {"replicas": 2})


def test_lists_must_match_in_length() -> None:
    assert not covers([{"port": 80}], [{"port": 80}, {"port": 1234}])
    assert not covers([{"port": 80}, {"port": 81}], [{"port": 80}])


def test_empty_values_equal_absent_and_quantities_equal_strings() -> None:
    # the API server drops "" / {} (omitempty) and stores quantities as strings
    assert covers({"env": [{"name": "X", "value": ""}]}, {"env": [{"name": "X"}]})
    assert covers(
        {"limits": {"huawei.com/Ascend910": 2}}, {"limits": {"huawei.com/Ascend910": "2"}}
    )
    assert not covers({"env": [{"name": "X", "value": "1"}]}, {"env": [{"name": "X"}]})


def test_a_false_the_api_server_drops_equals_absent() -> None:
    """A pod template on the pod network: the API server drops ``hostNetwork: false``
    (omitempty), and the audit waited for it to appear until the scenario's bound."""
    desired = {"template": {"spec": {"hostNetwork": False, "dnsPolicy": "ClusterFirst"}}}
    assert covers(desired, {"template": {"spec": {"dnsPolicy": "ClusterFirst"}}})
    assert not covers(desired, {"template": {"spec": {"hostNetwork": True,
                                                      "dnsPolicy": "ClusterFirst"}}})  # fmt: skip


def test_result_rows_and_table() -> None:
    result = ScenarioResult("drift")
    result.record(True, 1.234)
    result.record(False, 3.0, "StatefulSet/x missing")
    assert result.row() == {"scenario": "drift", "verdict": "FAILED", "runs": 2,
                            "converged": 1, "worst_seconds": 3.0, "lost": 0,
                            "duplicated": 0}  # fmt: skip
    assert not result.ok
    lines = table([result]).splitlines()
    assert lines[0].split() == ["scenario", "verdict", "runs", "converged", "worst_seconds",
                                "lost", "duplicated"]  # fmt: skip
    assert lines[1].split() == ["drift", "FAILED", "2", "1", "3.0", "0", "0"]


def test_a_row_never_reads_better_than_its_verdict() -> None:
    """The outage run whose operator exited still read "2 runs, 2 converged, 0 lost"."""
    result = ScenarioResult("control-plane-outage")
    result.record(True, 10.0)
    result.record(True, 12.0)
    result.problems.append("the operator process exited")
    assert table([result]).splitlines()[1].split()[:2] == ["control-plane-outage", "FAILED"]
