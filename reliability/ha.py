"""High availability: two operator replicas from the chart, one active by Lease, never two writers.

The chart is installed with ``replicaCount=2`` and ``leaderElection.enabled``; both
replicas run with the Deployment's own arguments (``--leader-elect``) and identities,
each through its own pass-through proxy that timestamps every write it forwards. The
standby must write nothing while the leader holds the Lease. Then:

- the leader is paused (SIGSTOP: hung, or cut off from the API server): the standby
  takes over once the lease expires, the deployment keeps converging, and when the old
  leader wakes (SIGCONT) it must stand by, alive, without a single write after the
  takeover (it is then stopped, so the next step has one standby);
- the new leader is SIGKILLed with a fresh replica as standby: the hand-over time is
  measured against the lease duration plus one resync.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

from aiohttp import web

from ascend_pd_dev.testtools.faultproxy import WRITE_METHODS, FaultPlan, FaultProxy

from .audit import wait_converged
from .env import Env, Operator, Release, wait_for
from .result import ScenarioResult
from .specs import pdd

LEASE = "ascend-pd-operator"
LEASE_SECONDS = 15  # leader.LeaderElector's default
#: the chart's values of the release this scenario runs under (``Env.install_chart``)
CHART_VALUES = ("--set", "replicaCount=2", "--set", "leaderElection.enabled=true")


class WriteLog(FaultProxy):
    """A fault-free proxy that remembers when it forwarded each write, and to where."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes: list[tuple[float, str, str]] = []

    async def _forward(self, request: web.Request, cut: bool) -> web.StreamResponse:
        if request.method in WRITE_METHODS:
            self.writes.append((time.monotonic(), request.method, request.path))
        return await super()._forward(request, cut)

    def object_writes(self, after: float = 0.0, before: float = float("inf")) -> list[str]:
        """Writes other than the Lease's own, in [after, before)."""
        return [
            f"{method} {path}"
            for at, method, path in self.writes
            if after <= at < before and "/leases" not in path
        ]


def _holder(env: Env, namespace: str) -> str:
    lease = env.get_json("-n", namespace, "lease", LEASE) or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def _replica(release: Release, env: Env, namespace: str, name: str) -> tuple[Operator, WriteLog]:
    proxy = WriteLog(release.server(), FaultPlan(), ca_file=release.ca_file()).start()
    kubeconfig = release.proxied_kubeconfig(proxy.url, f"ha-{name}")
    operator = release.operator([namespace], f"ha-{name}", kubeconfig=kubeconfig, identity=name)
    return operator, proxy


def run(
    env: Env, release: Release, namespace: str, resync_seconds: float = 5.0,
    bound_seconds: float = 120.0,
) -> ScenarioResult:  # fmt: skip
    result = ScenarioResult("leader-election")
    a, proxy_a = _replica(release, env, namespace, "replica-a")
    b, proxy_b = _replica(release, env, namespace, "replica-b")
    c, proxy_c = _replica(release, env, namespace, "replica-c")
    doc = pdd("ha", namespace)
    try:
        a.start(wait_healthy=False)
        got, _ = wait_for(lambda: _holder(env, release.namespace) == "replica-a-local", 60, 0.3)
        if not got:
            result.problems.append(f"replica-a never led: {a.log_text()[-2000:]}")
            return result
        b.start(wait_healthy=False)
        env.apply([doc])
        found, seconds = wait_converged(env.kube, namespace, bound_seconds, 0.3)
        result.record(found.ok, seconds, f"first convergence: {found}")
        standby_writes = proxy_b.object_writes()
        # -- the leader hangs -------------------------------------------------------------
        assert a.pid is not None
        os.killpg(a.pid, signal.SIGSTOP)
        paused = time.monotonic()
        took, handover = wait_for(
            lambda: _holder(env, release.namespace) == "replica-b-local", 90, 0.2
        )
        # (polled every 0.2 s: the takeover happened at most that much earlier)
        taken_at = paused + handover - 0.2
        doc["spec"]["decode"]["replicas"] = 2
        env.apply([doc])
        found, seconds = wait_converged(env.kube, namespace, bound_seconds, 0.3)
        result.record(bool(took and found.ok), time.monotonic() - paused,
                      f"after pausing the leader: holder {_holder(env, release.namespace)!r}, "
                      f"{found}")  # fmt: skip
        os.killpg(a.pid, signal.SIGCONT)
        stood_by, _ = wait_for(lambda: "; standing by" in a.log_text(), 30, 0.2)
        time.sleep(1.0)
        stale_writes = proxy_a.object_writes(after=taken_at)
        alive_after_loss = a.alive()
        a.kill()
        # -- the new leader dies ----------------------------------------------------------
        c.start(wait_healthy=False)
        time.sleep(2.0)
        b.kill()
        killed = time.monotonic()
        took_c, kill_handover = wait_for(
            lambda: _holder(env, release.namespace) == "replica-c-local", 90, 0.2
        )
        doc["spec"]["decode"]["replicas"] = 1
        env.apply([doc])
        found, _ = wait_converged(env.kube, namespace, bound_seconds, 0.3)
        result.record(bool(took_c and found.ok), time.monotonic() - killed,
                      f"after killing the leader: {found}")  # fmt: skip
        early_c = proxy_c.object_writes(before=killed)
        result.details.update(
            {
                "standby_writes_while_led": len(standby_writes),
                "old_leader_writes_after_takeover": len(stale_writes),
                "old_leader_stood_by_on_wake": bool(stood_by and alive_after_loss),
                "handover_after_pause_seconds": round(handover, 2),
                "handover_after_kill_seconds": round(kill_handover, 2),
                "lease_plus_resync_seconds": LEASE_SECONDS + resync_seconds,
                "second_standby_writes_while_led": len(early_c),
            }
        )
        for what, writes in (("standby wrote while replica-a led", standby_writes),
                             ("replica-a wrote after replica-b took over", stale_writes),
                             ("replica-c wrote while replica-b led", early_c)):  # fmt: skip
            if writes:
                result.duplicated += len(writes)
                result.problems.append(f"{what}: {writes[:5]}")
        if not (stood_by and alive_after_loss):
            result.problems.append("the paused leader did not stand by, alive, after losing "
                                   "its lease")  # fmt: skip
    finally:
        for operator in (a, b, c):
            if operator.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(operator.pid, signal.SIGCONT)
            operator.kill()
        for proxy in (proxy_a, proxy_b, proxy_c):
            proxy.stop()
    return result
