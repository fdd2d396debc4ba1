"""Rollouts across operator crashes: SIGKILL the operator at seeded moments of a rollout.

One PDDeployment with three two-node prefill instances and ``maxUnavailable: 1`` (pods turn
Ready two seconds after they start, through kubelet-sim). Each round changes the runtime
image, SIGKILLs the operator a seeded while into the rollout, starts it again and waits for
the rollout to complete. A sampler (``rollout_watch.Sampler``) reads the pods every 200 ms
throughout: fewer than two Ready prefill instances, or an instance with Ready pods of two
templates, at any sample is a problem.
"""

from __future__ import annotations

import random
from typing import Any

from ascend_pd_dev.kubelet_sim.knobs import READY_AFTER

from .crash import crash_rounds
from .env import Env, Release, wait_for
from .result import ScenarioResult
from .rollout_watch import Sampler
from .specs import pdd

Json = dict[str, Any]
PREFILL = 3
MAX_UNAVAILABLE = 1
SEED = 11
#: How long the first rollout, and each round's, may take to complete.
BOUND_SECONDS = 180.0


def _complete(env: Env, namespace: str, name: str) -> bool:
    cr = env.get_json("pdd", name, "-n", namespace) or {}
    st = cr.get("status") or {}
    return bool(
        st.get("observedGeneration") == cr.get("metadata", {}).get("generation")
        and st.get("phase") == "Ready"
        and (st.get("rollout") or {}).get("phase") == "Complete"
    )


def run(env: Env, release: Release, namespace: str, kills: int = 3) -> ScenarioResult:
    result = ScenarioResult("rollout-crash")
    rng = random.Random(SEED)
    doc = pdd("rolling", namespace, prefill=PREFILL, decode=1)
    for role in ("prefill", "decode"):
        doc["spec"][role]["podAnnotations"] = {READY_AFTER: "2"}
    doc["spec"]["rollout"] = {"maxUnavailable": MAX_UNAVAILABLE}
    operator = release.operator([namespace], "rollout-crash-operator")
    worst = PREFILL
    mixed: list[str] = []

    def change(round_: int) -> None:
        doc["spec"]["runtime"]["image"] = f"registry.example.com/ascend-pd-runtime:0.{round_ + 2}.0"
        env.apply([doc])

    def complete() -> bool:
        return _complete(env, namespace, "rolling")

    try:
        operator.start()
        env.apply([doc])
        wait_for(complete, BOUND_SECONDS, 0.5)
        with Sampler(env.api_client, namespace, "rolling", {"prefill": 2, "decode": 1}) as s:
            # each kill at a seeded moment inside the rollout
            rounds = crash_rounds(operator, rng, kills, (0.5, 4.0), change, complete, BOUND_SECONDS)
            for round_, ok, seconds in rounds:
                result.record(ok, seconds, f"round {round_}")
        worst = min((x.ready["prefill"] for x in s.samples), default=0)
        mixed = sorted({m for x in s.samples for m in x.mixed})
        if worst < PREFILL - MAX_UNAVAILABLE:
            result.problems.append(f"prefill Ready instances fell to {worst} of {PREFILL}")
        if mixed:
            result.problems.append(f"instances with Ready pods of two templates: {mixed}")
        if s.errors:
            result.problems.append(f"sampler errors: {s.errors[:3]}")
        result.details.update(kills=kills, seed=SEED, samples=len(s.samples),
                              worst_ready_prefill=worst, mixed=mixed)  # fmt: skip
        result.details["tracebacks_in_log"] = operator.log_text().count("Traceback")
    finally:
        operator.kill()
    return result
