"""``rbac-loss``: the operator's ServiceAccount loses a permission, then gets it back.

Someone edits the chart's Role in the watched namespace and drops ``list``, ``watch`` and
``patch`` on StatefulSets, then the PDDeployment is scaled (a new decode instance needs a
StatefulSet applied). The operator must stay up and keep retrying; once the denials have
outlasted the API server's warm-up window (``denials.WARMUP_SECONDS``) its log and
``/healthz`` name the verb, resource and namespace refused, and the probe stays 200 all
along, although the resync (which lists StatefulSets) makes no progress: a restart cannot
grant a permission, so failing the probe would only make a crash loop. When the Role is
restored, the scale completes, the faults clear, and nothing is lost or duplicated.
"""

from __future__ import annotations

import time
from typing import Any

from .audit import audit_namespace
from .env import Env, Release, wait_for
from .outage import RESYNC_SECONDS, UNHEALTHY_AFTER_SECONDS, HealthSampler
from .result import ScenarioResult
from .roles import revoked
from .specs import pdd

#: What the edited Role no longer grants on StatefulSets.
REVOKED = ("list", "watch", "patch")


def run(env: Env, release: Release, namespace: str, bound_seconds: float = 240.0) -> ScenarioResult:
    result = ScenarioResult("rbac-loss")
    name = "rbac"
    operator = release.operator(
        [namespace], "rbac-loss", resync_seconds=RESYNC_SECONDS,
        extra_args=("--unhealthy-after-seconds", str(UNHEALTHY_AFTER_SECONDS)),
    )  # fmt: skip
    operator.start()
    assert operator.process is not None
    sampler = HealthSampler(operator.process.health_port).start()
    expected = [f"RBAC denies {verb} statefulsets.apps in namespace {namespace}"
                for verb in ("patch", "list")]  # fmt: skip

    def converged(what: str, since: float) -> bool:
        return result.await_audit(lambda: audit_namespace(env.kube, namespace), what, since,
                                bound_seconds)  # fmt: skip

    def named(texts: list[str]) -> bool:
        faults = " ".join(sampler.probe()[1].get("faults") or [])
        log = operator.log_text()
        return all(t in faults and t in log for t in texts)

    def resync() -> dict[str, Any]:
        return dict((sampler.probe()[1].get("units") or {}).get("resync") or {})

    try:
        env.apply([pdd(name, namespace)])
        if not converged("initial", time.monotonic()):
            return result
        with revoked(env, release, namespace, "apps", "statefulsets", REVOKED):
            started = time.monotonic()
            env.apply([pdd(name, namespace, decode=2)])
            ok, seconds = wait_for(lambda: named(expected), bound_seconds, 1.0)
            result.record(bool(ok), seconds, f"the missing permissions were not named: "
                          f"{sampler.probe()[1].get('faults')}")  # fmt: skip
            result.details["named_after_seconds"] = round(seconds, 1)
            # the resync (it lists StatefulSets) stalls past its period + the probe's
            # grace, where any other stall would fail the probe
            limit = RESYNC_SECONDS + UNHEALTHY_AFTER_SECONDS + 5
            stalled, _ = wait_for(lambda: resync().get("secondsSinceProgress", 0) > limit,
                                  bound_seconds, 1.0)  # fmt: skip
            result.record(bool(stalled), time.monotonic() - started,
                          f"the resync never stalled without permission: {resync()}")  # fmt: skip
            result.details["resync_during_loss"] = resync()
            status = env.get_json("-n", namespace, "pddeployment", name) or {}
            conditions = (status.get("status") or {}).get("conditions") or []
            result.details["ready_condition_during_loss"] = next(
                (c for c in conditions if c.get("type") == "Ready"), None
            )
        restored = time.monotonic()
        converged("after the Role was restored", restored)
        result.details["converged_after_restore_seconds"] = round(time.monotonic() - restored, 1)
        cleared, seconds = wait_for(lambda: sampler.faults() == [], bound_seconds, 1.0)
        result.record(bool(cleared), seconds, f"faults still named after the Role was restored: "
                      f"{sampler.faults()}")  # fmt: skip
        result.final_audit(audit_namespace(env.kube, namespace))
    finally:
        sampler.stop()
        failing = sampler.failing_times()
        result.details["healthz_samples"] = len(sampler.samples)
        result.details["healthz_failing_samples"] = len(failing)
        if failing:
            first = next(body for _, code, body in sampler.samples if code != 200)
            result.problems.append(f"/healthz failed {len(failing)} times; a lost permission "
                                   f"must be named, not fail the probe: {first}")  # fmt: skip
        result.judge_process(operator.log_text(), operator.alive())
        operator.kill()
    return result
