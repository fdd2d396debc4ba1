"""API faults: behind the fault proxy the operator converges, honours Retry-After, logs calmly.

The operator talks to the API server only through ``faultproxy.FaultProxy`` (plain HTTP
on loopback, its own ServiceAccount token), which answers at seeded rates with 409
conflicts on writes, 429 with ``Retry-After``, 500s, slow responses, and cuts watch
streams. Meanwhile deployments are created, scaled and deleted; each change must
converge within the bound. The proxy counts how soon a client came back after a 429
(a violation is earlier than ``Retry-After``), and the log must hold no stack trace.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request

from ascend_pd_dev.testtools.faultproxy import FaultPlan, FaultProxy

from .audit import audit_namespace
from .env import Env, Release, wait_for
from .result import ScenarioResult
from .specs import pdd

PLAN = FaultPlan(
    conflict_rate=0.1,
    throttle_rate=0.1,
    retry_after_seconds=1,
    error_rate=0.05,
    slow_rate=0.1,
    slow_seconds=0.5,
    watch_cut_rate=0.3,
    watch_cut_after_seconds=2.0,
    seed=11,
)


def _stats(proxy: FaultProxy) -> dict[str, object]:
    with urllib.request.urlopen(f"{proxy.url}/__faultproxy/stats", timeout=10) as response:
        doc: dict[str, object] = json.loads(response.read())
        return doc


def run(
    env: Env,
    release: Release,
    namespace: str,
    plan: FaultPlan = PLAN,
    bound_seconds: float = 180.0,
) -> ScenarioResult:
    result = ScenarioResult("api-faults")
    # the proxy's own side of a cut or killed connection is not news here
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    proxy = FaultProxy(release.server(), plan, ca_file=release.ca_file()).start()
    kubeconfig = release.proxied_kubeconfig(proxy.url, "faults")
    operator = release.operator([namespace], "faults-operator", kubeconfig=kubeconfig)
    fleet = {f"flaky-{i}": pdd(f"flaky-{i}", namespace) for i in range(2)}
    steps: list[tuple[str, list[dict[str, object]] | None, str]] = [
        ("create two", list(fleet.values()), ""),
        ("scale decode", None, "scale"),
        ("delete one", None, "delete"),
        ("create again", None, "create"),
    ]
    try:
        operator.start(timeout=240.0)
        for what, docs, action in steps:
            if action == "scale":
                fleet["flaky-0"]["spec"]["decode"]["replicas"] = 2
                docs = [fleet["flaky-0"]]
            elif action == "delete":
                env.kubectl("delete", "pdd", "flaky-1", "-n", namespace, "--wait=false")
                fleet.pop("flaky-1")
                docs = []
            elif action == "create":
                fleet["flaky-1"] = pdd("flaky-1", namespace, decode=2)
                docs = [fleet["flaky-1"]]
            if docs:
                env.apply(docs)  # type: ignore[arg-type]
            started = time.monotonic()

            def converged() -> bool:
                live = {c["metadata"]["name"] for c in env.kube.list("PDDeployment", namespace)}
                return live == set(fleet) and audit_namespace(env.kube, namespace).ok

            ok, _ = wait_for(converged, bound_seconds, 0.5)
            found = audit_namespace(env.kube, namespace)
            if not ok:
                result.lost += len(found.missing)
                result.duplicated += len(found.extra)
            result.record(bool(ok), time.monotonic() - started, f"{what}: {found}")
        stats = _stats(proxy)
        text = operator.log_text()
        result.details["faults"] = stats["faults"]
        result.details["requests"] = stats["requests"]
        result.details["retry_after_violations"] = stats["retry_after_violations"]
        result.details["tracebacks_in_log"] = text.count("Traceback")
        result.details["log_lines"] = len(text.splitlines())
        if stats["retry_after_violations"]:
            result.problems.append(
                f"{stats['retry_after_violations']} requests came back sooner than Retry-After:"
                f" {stats['retry_after_violators']}"
            )
        if "Traceback" in text:
            result.problems.append(f"{text.count('Traceback')} stack traces in the operator log")
    finally:
        operator.kill()
        proxy.stop()
    return result
