"""Control-plane faults: kube-apiserver stopped, restarted twice, etcd stopped.

The real ``ascend-pd run`` serves one Ready PDDeployment on the local control plane while
one fault happens (each its own scenario and row):

- ``control-plane-outage``: kube-apiserver stopped for ``outage_seconds`` (its process
  ends: connections to its port are refused, no HTTP answer at all), then started again,
  and slow to let the operator in: it may not list or watch PDDeployments from before
  the stop until ``SLOW_RBAC_WARMUP_SECONDS`` after the restart (kopf's watch used to
  end the operator when the last of its retries met a 403);
- ``apiserver-restarts``: kube-apiserver restarted twice in a row, ``RESTART_GAP_SECONDS``
  apart (a managed upgrade rolling its replicas), each time answering 403 for a moment
  while its RBAC caches fill;
- ``etcd-outage``: etcd stopped for ``ETCD_OUTAGE_SECONDS`` under a running API server,
  which answers 500s and timeouts meanwhile.

Afterwards the resync must still run. To see that, the scenario makes drift that no
watch event reports: it removes our ``ascendpd.io/deployment`` label from the router
Service. The API server does send that MODIFIED event, but the operator's child
watches select children by that very label, so the edited object no longer matches and
the handlers never see it (nor does the cache of children). Only the periodic resync,
which lists the children afresh, can notice; the repair time is measured against the
resync interval. The same drift is made once before the fault as a control, and a scale
of the PDDeployment after it shows that kopf's watch of PDDeployments lives on.

Throughout, a sampler polls ``/healthz`` every half second: it may fail only while
recovery is impossible (from the stop of a component until it is back, plus the time a
supervised unit needs to show progress again) and must answer 200 before and after.
With ``--unhealthy-after-seconds`` shorter than the outage, it is expected to fail
during the outage. The operator process must live throughout, its log must hold no
thread that died, and the final audit must find nothing lost or duplicated.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from typing import Any
from urllib.parse import urlsplit

from ascend_pd_dev.controlplane import cluster as dev_cluster
from ascend_pd_operator.api import models
from ascend_pd_operator.api.access import HEALTH_PATH
from ascend_pd_operator.api.vocabulary import LABEL_DEPLOYMENT
from ascend_pd_operator.kubeio.supervisor import RESTART_BACKOFF

from .audit import audit_namespace
from .env import Env, Operator, Release, ScenarioError, wait_for
from .result import ScenarioResult
from .roles import revoked
from .specs import pdd

#: The issue's outage; ``make reliability`` runs it.
OUTAGE_SECONDS = 120.0
#: CI's outage. It must cross every threshold where the operator's behaviour changes, or
#: CI stays green while ``make reliability`` fails: longer than the retry budget of every
#: client in the process (kopf's default ``error_backoffs`` give up after 54 s of waits and
#: ended kopf's orchestrator; our supervisor's restart backoff tops out at 15 s), longer
#: than the RBAC warm-up window after the restart (``denials.WARMUP_SECONDS``), and longer
#: than a resync period plus ``--unhealthy-after-seconds`` (the probe must fail and heal).
#: ``tests/reliability/test_outage_thresholds.py`` holds it to that.
CI_OUTAGE_SECONDS = 75.0
#: After the outage the API server keeps refusing the operator's PDDeployment list and
#: watch this long, as an RBAC warm-up on a slow control plane would: longer than kopf's
#: default retry budget (54 s), which ended the operator when its last try met a 403.
SLOW_RBAC_WARMUP_SECONDS = 60.0
#: Two kube-apiserver restarts this far apart (the second while the first's warm-up runs).
RESTART_GAP_SECONDS = 10.0
#: etcd stopped under a running API server; longer than kopf's default retry budget too.
ETCD_OUTAGE_SECONDS = 60.0
RESYNC_SECONDS = 5.0
#: The operator's ``--unhealthy-after-seconds`` here: shorter than the outage, so the
#: probe's verdict during the outage is observable at both sizes.
UNHEALTHY_AFTER_SECONDS = 15.0


class HealthSampler:
    """Polls an operator's /healthz from a thread: (monotonic time, HTTP status, body)."""

    def __init__(self, port: int, every: float = 0.5) -> None:
        self.url = f"http://127.0.0.1:{port}{HEALTH_PATH}"
        self.every = every
        self.samples: list[tuple[float, int, dict[str, Any]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="healthz-sampler", daemon=True)

    def start(self) -> HealthSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), *self.probe()))
            self._stop.wait(self.every)

    def probe(self) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(self.url, timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            try:  # a 503 carries the report too
                return err.code, json.loads(err.read() or b"{}")
            except (OSError, ValueError):
                return err.code, {}
        except (OSError, ValueError):
            return 0, {}

    def faults(self) -> list[str] | None:
        """The faults /healthz names now; None when it did not answer (a probe that timed
        out on a busy machine says nothing about the faults, least of all that they cleared)."""
        _, body = self.probe()
        faults = body.get("faults")
        return list(faults) if isinstance(faults, list) else None

    def failing_times(self) -> list[float]:
        return [t for t, status, _ in self.samples if status != 200]


def _local_layout(env: Env) -> dev_cluster.Layout:
    # every local control plane keeps its kubeconfig at the root of its state directory
    layout = dev_cluster.Layout(env.kubeconfig.resolve().parent)
    if layout.kubeconfig.resolve() != env.kubeconfig.resolve() or not dev_cluster.load_state(
        layout
    ):
        raise ScenarioError(
            "control-plane-outage stops the local control plane's own processes: it needs "
            f"a local dev cluster, and {env.kubeconfig} is not one"
        )
    return layout


def _refused(server: str) -> bool:
    """A TCP connection to the API server's port is refused (not answered with an error)."""
    parts = urlsplit(server)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 443), 5):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def _unreported_drift(
    env: Env, namespace: str, name: str, bound_seconds: float
) -> tuple[bool, float]:
    """Remove our deployment label from the router Service; (repaired, seconds)."""
    service = f"{name}-router"
    env.kubectl("label", "-n", namespace, "service", service, f"{LABEL_DEPLOYMENT}-")
    started = time.monotonic()

    def repaired() -> bool:
        obj = env.get_json("-n", namespace, "service", service) or {"metadata": {}}
        return (obj["metadata"].get("labels") or {}).get(LABEL_DEPLOYMENT) == name

    ok, _ = wait_for(repaired, bound_seconds, 0.2)
    return bool(ok), time.monotonic() - started


def _recovery_allowance(resync_seconds: float) -> float:
    """After a component is back: the supervisor's longest restart backoff, one resync
    period until the resync beats again, and slack for a busy machine."""
    return RESTART_BACKOFF.cap + resync_seconds + 15.0


def _outage(
    operator: Operator, layout: dev_cluster.Layout, component: str, seconds: float
) -> tuple[float, float, bool]:
    """Stop ``component`` for ``seconds`` (watching the operator stay alive), start it
    again; (stopped at, back at, connections were refused). The outage begins with the
    SIGTERM: the API server stops listening at once but may take seconds to exit."""
    down = time.monotonic()
    dev_cluster.stop_component(layout, component)
    refused = component != "kube-apiserver" or _refused(
        dev_cluster.load_state(layout).server  # type: ignore[union-attr]
    )
    # the outage lasts its full length unless the operator dies meanwhile
    wait_for(lambda: not operator.alive() or time.monotonic() - down >= seconds, seconds + 5, 1.0)
    dev_cluster.start_component(layout, component)
    return down, time.monotonic(), refused


#: One fault: (operator, layout, result) -> the windows in which recovery was impossible.
Fault = Callable[[Operator, dev_cluster.Layout, ScenarioResult], list[tuple[float, float]]]


def apiserver_outage(seconds: float, refusing: Callable[[], ContextManager[None]]) -> Fault:
    """The API server stopped for ``seconds``; from before the stop until
    ``SLOW_RBAC_WARMUP_SECONDS`` after it is back, ``refusing`` holds (the operator may not
    list or watch PDDeployments), so kopf's watch reconnects into a lasting 403."""

    def fault(
        operator: Operator, layout: dev_cluster.Layout, result: ScenarioResult
    ) -> list[tuple[float, float]]:
        assert operator.process is not None
        health = HealthSampler(operator.process.health_port)
        with refusing():
            down, _, refused = _outage(operator, layout, "kube-apiserver", seconds)
            wait_for(lambda: not operator.alive(), SLOW_RBAC_WARMUP_SECONDS, 1.0)
            result.details["faults_in_slow_warmup"] = health.probe()[1].get("faults")
        result.details["apiserver_refused_connections"] = refused
        if not refused:
            result.problems.append("the stopped API server's port did not refuse connections")
        return [(down, time.monotonic())]

    return fault


def apiserver_restarts(gap: float = RESTART_GAP_SECONDS) -> Fault:
    def fault(
        operator: Operator, layout: dev_cluster.Layout, result: ScenarioResult
    ) -> list[tuple[float, float]]:
        windows = [_outage(operator, layout, "kube-apiserver", 0.0)[:2]]
        # the second restart ``gap`` after the first is back (unless the operator dies)
        wait_for(lambda: not operator.alive(), gap, 1.0)
        windows.append(_outage(operator, layout, "kube-apiserver", 0.0)[:2])
        result.details["restart_gap_seconds"] = gap
        return windows

    return fault


def etcd_outage(seconds: float = ETCD_OUTAGE_SECONDS) -> Fault:
    def fault(
        operator: Operator, layout: dev_cluster.Layout, result: ScenarioResult
    ) -> list[tuple[float, float]]:
        down, up, _ = _outage(operator, layout, "etcd", seconds)
        # Recovery is impossible until the API server serves again, not merely until etcd
        # runs: its etcd client reconnects with a backoff of its own, longer on a busy machine.
        wait_for(lambda: dev_cluster.healthy(layout), 120.0, 0.5)
        result.details["apiserver_ready_after_etcd_seconds"] = round(time.monotonic() - up, 1)
        return [(down, time.monotonic())]

    return fault


def run(
    env: Env, release: Release, namespace: str, outage_seconds: float = OUTAGE_SECONDS
) -> ScenarioResult:
    """``control-plane-outage``: kube-apiserver stopped for ``outage_seconds``, then slow to
    let the operator in."""

    def refusing() -> ContextManager[None]:
        return revoked(env, release, namespace, models.GROUP, models.PLURAL, ("list", "watch"))

    fault = apiserver_outage(outage_seconds, refusing)
    result = survive(env, release, namespace, "control-plane-outage", fault)
    result.details["outage_seconds"] = outage_seconds
    return result


def run_restarts(env: Env, release: Release, namespace: str) -> ScenarioResult:
    """``apiserver-restarts``: kube-apiserver restarted twice, ``RESTART_GAP_SECONDS`` apart."""
    return survive(env, release, namespace, "apiserver-restarts", apiserver_restarts())


def run_etcd(env: Env, release: Release, namespace: str) -> ScenarioResult:
    """``etcd-outage``: etcd stopped for ``ETCD_OUTAGE_SECONDS`` under the API server."""
    result = survive(env, release, namespace, "etcd-outage", etcd_outage())
    result.details["etcd_outage_seconds"] = ETCD_OUTAGE_SECONDS
    return result


def survive(
    env: Env,
    release: Release,
    namespace: str,
    scenario: str,
    fault: Fault,
    resync_seconds: float = RESYNC_SECONDS,
    unhealthy_after: float = UNHEALTHY_AFTER_SECONDS,
    bound_seconds: float = 180.0,
) -> ScenarioResult:
    """One Ready PDDeployment served through ``fault``: converged, repaired, unharmed."""
    result = ScenarioResult(scenario)
    layout = _local_layout(env)
    name = "outage"
    operator = release.operator(
        [namespace], scenario, resync_seconds=resync_seconds,
        extra_args=("--unhealthy-after-seconds", str(unhealthy_after)),
    )  # fmt: skip
    operator.start()
    assert operator.process is not None
    sampler = HealthSampler(operator.process.health_port).start()
    windows: list[tuple[float, float]] = []  # when recovery was impossible
    allowance = _recovery_allowance(resync_seconds)
    result.details.update(resync_seconds=resync_seconds, unhealthy_after_seconds=unhealthy_after)

    def converged(what: str, since: float) -> bool:
        return result.await_audit(lambda: audit_namespace(env.kube, namespace), what, since,
                                bound_seconds)  # fmt: skip

    try:
        env.apply([pdd(name, namespace)])
        if not converged("initial", time.monotonic()):
            return result
        ok, seconds = _unreported_drift(env, namespace, name, bound_seconds)
        result.record(ok, seconds, "drift before the fault was not repaired")
        result.details["drift_repair_before_seconds"] = round(seconds, 1)

        windows = [(down, up + allowance) for down, up in fault(operator, layout, result)]
        up = max(end for _, end in windows) - allowance
        if not operator.alive():
            result.record(False, time.monotonic() - up, "the operator exited during the fault")
            return result
        converged("after the fault", up)
        result.details["reconverged_after_seconds"] = round(time.monotonic() - up, 1)
        back, _ = wait_for(lambda: sampler.probe()[0] == 200, bound_seconds, 0.5)
        result.details["healthz_ok_after_seconds"] = round(time.monotonic() - up, 1)
        if not back:
            result.problems.append(f"/healthz still failing after the fault: "
                                   f"{sampler.probe()[1].get('problems')}")  # fmt: skip

        ok, seconds = _unreported_drift(env, namespace, name, bound_seconds)
        result.record(ok, seconds, "drift after the fault was not repaired")
        result.details["drift_repair_after_seconds"] = round(seconds, 1)
        if ok and seconds > resync_seconds + 10.0:
            result.problems.append(f"drift after the fault took {seconds:.0f}s, more than one "
                                   f"resync interval ({resync_seconds:g}s) + 10s")  # fmt: skip
        # a change of the PDDeployment itself still reaches the children
        env.apply([pdd(name, namespace, decode=2)])
        converged("a scale after the fault", time.monotonic())
        final_ok, _ = wait_for(lambda: sampler.probe()[0] == 200, bound_seconds, 0.5)
        if not final_ok:
            result.problems.append(f"/healthz failing at the end: {sampler.probe()[1]}")
        cleared, _ = wait_for(lambda: sampler.faults() == [], bound_seconds, 1.0)
        if not cleared:
            result.problems.append(f"faults named at the end: {sampler.faults()}")
        result.final_audit(audit_namespace(env.kube, namespace))
    finally:
        sampler.stop()
        _judge_health(result, sampler, windows)
        text = operator.log_text()
        result.judge_process(text, operator.alive())
        result.details["orchestrator_restarts"] = text.count("kopf's orchestrator ended")
        answered = [body for _, status, body in sampler.samples if status]
        last = answered[-1] if answered else {}
        result.details["units_at_end"] = last.get("units")
        result.details["faults_at_end"] = sampler.faults() if operator.alive() else None
        operator.kill()
        # kube-controller-manager and kubelet-sim must have ridden out the fault too;
        # bring back whatever did not, so later scenarios find the cluster whole
        dead = [c for c, r in dev_cluster.component_status(layout).items() if r is None]
        result.details["control_plane_components_restarted"] = dead
        if dead:
            state = dev_cluster.load_state(layout)
            if state is not None:
                dev_cluster.up(layout, state.nodes, state.ascend_per_node, lambda _: None)
    return result


def _judge_health(
    result: ScenarioResult, sampler: HealthSampler, windows: list[tuple[float, float]]
) -> None:
    """/healthz failed only while recovery was impossible; record when it failed."""
    failing = sampler.failing_times()
    outside = [t for t in failing if not any(start <= t <= end for start, end in windows)]
    first = windows[0][0] if windows else 0.0
    result.details["healthz_samples"] = len(sampler.samples)
    result.details["healthz_failing_samples"] = len(failing)
    first_problems = [body.get("problems") for t, status, body in sampler.samples if status != 200]
    if first_problems:
        result.details["healthz_first_failure"] = first_problems[0]
    if failing:
        result.details["healthz_failing_window_seconds"] = [
            round(min(failing) - first, 1), round(max(failing) - first, 1)
        ]  # fmt: skip
    result.details["healthz_failed_during_fault"] = bool(
        windows and any(windows[0][0] <= t <= windows[0][1] for t in failing)
    )
    if outside:
        # what the probe said then, so a failure in CI names its unit without a rerun
        when = set(outside)
        said = {str(body.get("problems") or f"HTTP {status or 'no answer'}")
                for t, status, body in sampler.samples if t in when}  # fmt: skip
        result.problems.append(
            f"/healthz failed {len(outside)} times while the control plane was up "
            f"(at {[round(t - first, 1) for t in outside[:5]]}s after the outage began; "
            f"recovery allowed until {[round(end - first, 1) for _, end in windows]}s): "
            f"{sorted(said)[:3]}"
        )
