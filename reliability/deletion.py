"""Deletion while the operator is down: nothing blocks it, nothing is left behind.

PDDeployments become Ready, the operator stops (SIGTERM, as a rollout would), the
PDDeployments are deleted and must be gone without the operator (no finalizer waits
for it); the operator starts again and the namespace must hold none of their
children (garbage collection through owner references) and no PDDeployment comes back.
"""

from __future__ import annotations

import time

from ascend_pd_operator.api import models

from .audit import CHILD_KINDS, audit_namespace, started_converged
from .env import Env, Release, wait_for
from .result import ScenarioResult
from .specs import pdd


def run(
    env: Env, release: Release, namespace: str, deployments: int = 3, bound_seconds: float = 120.0
) -> ScenarioResult:
    result = ScenarioResult("deletion-while-down")
    docs = [pdd(f"gone-{i}", namespace, decode=1 + i % 2) for i in range(deployments)]
    keep = pdd("kept", namespace)
    operator = release.operator([namespace], "deletion-operator")
    operator.start()
    try:
        if not started_converged(env, namespace, [*docs, keep], result, 0.5):
            return result
        result.details["stopped_cleanly"] = operator.stop()
        started = time.monotonic()
        for doc in docs:
            # --wait: kubectl returns once the object is gone; a finalizer would block it.
            done = env.kubectl("delete", "pdd", doc["metadata"]["name"], "-n", namespace,
                               "--wait=true", "--timeout=60s", check=False)  # fmt: skip
            result.record(done.returncode == 0, time.monotonic() - started,
                          f"deleting {doc['metadata']['name']}: {done.stderr.strip()}")  # fmt: skip
        operator.start()
        restarted = time.monotonic()

        def clean() -> bool:
            names = {c["metadata"]["name"] for c in env.kube.list(models.KIND, namespace)}
            return names == {"kept"} and audit_namespace(env.kube, namespace).ok

        ok, _ = wait_for(clean, bound_seconds, 0.5)
        found = audit_namespace(env.kube, namespace)
        leftovers = [
            f"{kind}/{o['metadata']['name']}"
            for kind in CHILD_KINDS
            for o in env.kube.list(kind, namespace, "ascendpd.io/deployment")
            if o["metadata"]["labels"]["ascendpd.io/deployment"].startswith("gone-")
        ]
        result.duplicated += len(leftovers) + len(found.extra)
        result.lost += len(found.missing)
        result.record(bool(ok), time.monotonic() - restarted,
                      f"after the restart: {found}; leftovers {leftovers}")  # fmt: skip
        result.details["tracebacks_in_log"] = operator.log_text().count("Traceback")
    finally:
        operator.kill()
    return result
