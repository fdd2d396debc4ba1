"""The reliability scenarios that stop the control plane or make its nodes unreachable, on
a local control plane of their own (``reliability-outage``): an API server outage, its
restarts, an etcd outage, node loss. ``make test`` runs them as a tier of their own, beside
the other scenarios rather than after them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from reliability import node_loss, outage
from reliability.env import Env, scenario_cluster
from reliability.result import ScenarioResult
from tests.reliability.scenario_checks import Scenario, assert_clean

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.reliability,
    pytest.mark.simulated,
    pytest.mark.timeout(900),
]


@pytest.fixture(scope="module")
def own_control_plane(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """A local control plane of these tests' own: stopping the API server or etcd of the
    suite's shared cluster, or making its nodes unreachable, would break every other test
    (and any other pytest session)."""
    if cluster.layout is None:
        pytest.skip("stops the local control plane's own processes (ascend-pd-dev cluster up)")
    with scenario_cluster(state="reliability-outage") as kubeconfig:
        env = Env(kubeconfig, tmp_path_factory.mktemp("outage"))
        env.install_crd()
        yield env


def _run_own(env: Env, name: str, scenario: Scenario) -> ScenarioResult:
    """``scenario`` in a new namespace ``name-…`` under a chart of its own on ``env``,
    both removed afterwards; asserted clean."""
    namespace = env.new_namespace(name)
    release = env.install_chart([namespace])
    try:
        result = scenario(env, release, namespace)
    finally:
        env.uninstall(release)
        env.delete_namespace(namespace, wait=True)
    assert_clean(result)
    return result


def _survive(env: Env, scenario: Scenario) -> ScenarioResult:
    result = _run_own(env, "outage", scenario)
    details = result.details
    assert details["threads_died_in_log"] == 0 and details["operator_alive"]
    units = details["units_at_end"]
    assert all(unit["alive"] for unit in units.values())
    assert details["drift_repair_after_seconds"] <= details["resync_seconds"] + 10
    assert details["faults_at_end"] == []
    return result


def test_control_plane_outage(own_control_plane: Env) -> None:
    """kube-apiserver stopped for the CI size of the outage (``outage.CI_OUTAGE_SECONDS``,
    beyond every retry budget and the RBAC warm-up; ``make reliability`` runs 120 s)."""
    result = _survive(
        own_control_plane,
        lambda e, r, ns: outage.run(e, r, ns, outage_seconds=outage.CI_OUTAGE_SECONDS),
    )
    details = result.details
    assert details["apiserver_refused_connections"]
    # kopf's watch reconnected into the slow RBAC warm-up, which lasted into a named fault
    assert any(
        "pddeployments.ascendpd.io in namespace" in f for f in details["faults_in_slow_warmup"]
    )
    # the outage outlasts a resync period + --unhealthy-after-seconds: the probe said so
    assert details["healthz_failed_during_fault"]
    units = details["units_at_end"]
    assert units["resync"]["restarts"] >= 1 and units["resync"]["failing"] == 0


def test_apiserver_restarted_twice(own_control_plane: Env) -> None:
    result = _survive(own_control_plane, outage.run_restarts)
    assert result.details["restart_gap_seconds"] == outage.RESTART_GAP_SECONDS


def test_etcd_outage(own_control_plane: Env) -> None:
    result = _survive(own_control_plane, outage.run_etcd)
    assert result.details["etcd_outage_seconds"] == outage.ETCD_OUTAGE_SECONDS


def test_node_loss(own_control_plane: Env) -> None:
    """Nodes made unreachable, with and without ``forceDeleteAfterSeconds`` (the CI timer,
    ``node_loss.CI_FORCE_DELETE_AFTER_SECONDS``, still expires), then one taken out of
    service; every node is whole again afterwards."""
    timer = node_loss.CI_FORCE_DELETE_AFTER_SECONDS
    result = _run_own(
        own_control_plane,
        "node-loss",
        lambda e, r, ns: node_loss.run(e, r, ns, force_after=timer),
    )
    details = result.details
    print(f"node-loss: {details}")
    forced = details["forced_record"]
    assert forced["node"] == details["forced_node"] and forced["reason"] == "NodeUnreachable"
    assert forced["goneSeconds"] >= timer
    # kept (no field) stayed down past the timer; the taint was honoured well within it
    assert details["kept_down_while_lost_seconds"] >= timer + node_loss.HOLD_SECONDS
    assert details["out_of_service_force_deleted_seconds"] < timer
    assert details["out_of_service_record"]["reason"] == "NodeOutOfService"
    assert details["threads_died_in_log"] == 0 and details["operator_alive"]
