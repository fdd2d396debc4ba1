"""Crash convergence: SIGKILL the operator at seeded random moments while deployments change.

Each round restarts the operator, makes one or two seeded changes to a small fleet of
PDDeployments (create, scale prefill or decode, change the router, delete), SIGKILLs
the operator after a random delay (mid-reconcile as often as not), sometimes changes
more while it is down, starts it again and waits until the cluster is exactly the
desired state: every surviving PDDeployment Ready with exactly its children, nothing
of a deleted one left, no pod beyond a StatefulSet's replicas.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import Any

from ascend_pd_operator.api import models

from .audit import audit_namespace
from .env import Env, Operator, Release, wait_for
from .result import ScenarioResult
from .specs import pdd

Json = dict[str, Any]
#: At most this many PDDeployments at once: 6 NPUs each at most, on a shared dev cluster.
FLEET_MAX = 3
#: How long a round may take to converge once the operator is back.
BOUND_SECONDS = 120.0


def _mutate(env: Env, rng: random.Random, fleet: dict[str, Json], namespace: str) -> str:
    """One seeded change to the fleet (applied with kubectl as a user would); what it was."""
    names = sorted(fleet)
    choice = rng.choice(["create", "scale", "scale", "router", "delete"])
    if choice == "create" or len(names) < 2:
        name = f"crash-{rng.randrange(FLEET_MAX)}"
        if name in fleet:
            choice = "scale"
        else:
            fleet[name] = pdd(name, namespace, prefill=1, decode=rng.randint(1, 2))
            env.apply([fleet[name]])
            return f"create {name}"
    name = rng.choice(sorted(fleet))
    if choice == "delete" and len(fleet) > 1:
        del fleet[name]
        env.kubectl("delete", "pdd", name, "-n", namespace, "--wait=false")
        return f"delete {name}"
    spec = fleet[name]["spec"]
    if choice == "router":
        spec["router"]["policy"] = rng.choice(["round_robin", "cache_aware", "random"])
        env.apply([fleet[name]])
        return f"router {name} {spec['router']['policy']}"
    role = rng.choice(["prefill", "decode"])
    spec[role]["replicas"] = rng.randint(1, 2)
    env.apply([fleet[name]])
    return f"scale {name} {role}={spec[role]['replicas']}"


def _fleet_problems(env: Env, namespace: str, fleet: dict[str, Json]) -> tuple[int, int]:
    """(lost, duplicated) PDDeployments: ones we want that are gone, ones we deleted that stay."""
    live = {c["metadata"]["name"] for c in env.kube.list(models.KIND, namespace)}
    return len(set(fleet) - live), len(live - set(fleet))


def crash_rounds(
    operator: Operator,
    rng: random.Random,
    kills: int,
    pause: tuple[float, float],
    change: Callable[[int], None],
    converged: Callable[[], bool],
    bound_seconds: float,
    while_down: Callable[[], None] = lambda: None,
) -> Iterator[tuple[int, bool, float]]:
    """SIGKILL the running ``operator`` ``kills`` times: each round ``change(round)``, waits a
    seeded moment in ``pause`` (seconds), kills it, calls ``while_down()``, starts it again and
    waits up to ``bound_seconds`` for ``converged``; yields (round, converged, seconds from the
    restart)."""
    for round_ in range(kills):
        change(round_)
        time.sleep(rng.uniform(*pause))
        operator.kill()
        while_down()
        restarted = time.monotonic()
        operator.start()
        ok, _ = wait_for(converged, bound_seconds, 0.5)
        yield round_, bool(ok), time.monotonic() - restarted


def run(
    env: Env, release: Release, namespace: str, kills: int = 20, seed: int = 7
) -> ScenarioResult:
    result = ScenarioResult("crash-convergence")
    rng = random.Random(seed)
    fleet: dict[str, Json] = {}
    for i in range(3):
        fleet[f"crash-{i}"] = pdd(f"crash-{i}", namespace, prefill=1, decode=1)
    env.apply(list(fleet.values()))
    operator = release.operator([namespace], "crash-operator")
    history: list[str] = []
    found = None

    def converged() -> bool:
        nonlocal found
        found = audit_namespace(env.kube, namespace)
        return found.ok and _fleet_problems(env, namespace, fleet) == (0, 0)

    def change(round_: int) -> None:
        history.append(_mutate(env, rng, fleet, namespace))
        if rng.random() < 0.5:
            history.append(_mutate(env, rng, fleet, namespace))

    def while_down() -> None:
        nonlocal found
        found = None
        if rng.random() < 0.3:
            history.append(_mutate(env, rng, fleet, namespace) + " (operator down)")

    try:
        operator.start()
        rounds = crash_rounds(operator, rng, kills, (0.0, 2.5), change, converged, BOUND_SECONDS,
                              while_down)  # fmt: skip
        for round_, ok, seconds in rounds:
            lost, duplicated = _fleet_problems(env, namespace, fleet)
            if not ok and found is not None:
                result.lost += len(found.missing) + lost
                result.duplicated += len(found.extra) + duplicated
            result.record(ok, seconds, f"round {round_}: {found}" if not ok else "")
        result.details["kills"] = kills
        result.details["changes"] = len(history)
        result.details["seed"] = seed
        result.details["history"] = history
        text = operator.log_text()
        result.details["tracebacks_in_log"] = text.count("Traceback")
    finally:
        operator.kill()
    return result
