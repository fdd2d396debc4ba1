"""``python -m reliability`` (``make reliability``): every scenario, one table, results.json.

Runs on the local control plane (started if needed, left as found), installs the chart
twice (one release for the single-replica scenarios, one with two replicas and leader
election), runs each scenario in a namespace of its own and prints:

    scenario  runs  converged  worst_seconds  lost  duplicated

``reliability/results.json`` holds the same rows; ``--details`` prints each scenario's
measurements. Exit 1 when any scenario did not converge or lost or duplicated anything.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from . import (
    bad_inputs,
    crash,
    deletion,
    drain_crash,
    drift,
    faults,
    ha,
    node_loss,
    outage,
    rbac_loss,
    rollout_crash,
    security,
)
from .env import Env, Release, scenario_cluster
from .result import ScenarioResult, full_report, table, write_json

RESULTS = Path(__file__).resolve().parent / "results.json"

Scenario = Callable[[Env, Release, str], ScenarioResult]


def scenarios(
    kills: int, seed: int, outage_seconds: float, force_delete_after_seconds: int
) -> dict[str, Scenario]:
    # node-loss makes nodes unreachable (and makes them whole again) and the control-plane
    # faults stop the API server or etcd: they run last, so no other scenario sees them
    return {
        "crash": lambda e, r, ns: crash.run(e, r, ns, kills=kills, seed=seed),
        "rollout-crash": rollout_crash.run,
        "drain-crash": drain_crash.run,
        "drift": drift.run,
        "bad-inputs": bad_inputs.run,
        "faults": faults.run,
        "ha": ha.run,
        "deletion": deletion.run,
        "security": security.run,
        "rbac-loss": rbac_loss.run,
        "node-loss": lambda e, r, ns: node_loss.run(
            e, r, ns, force_after=force_delete_after_seconds
        ),
        "control-plane-outage": lambda e, r, ns: outage.run(
            e, r, ns, outage_seconds=outage_seconds
        ),
        "apiserver-restarts": outage.run_restarts,
        "etcd-outage": outage.run_etcd,
    }


def _run_all(
    chosen: dict[str, Scenario], kubeconfig: Path, say: Callable[[str], None]
) -> tuple[list[ScenarioResult], Path]:
    """Every chosen scenario on the cluster behind ``kubeconfig``: results and the workdir."""
    workdir = Path(tempfile.mkdtemp(prefix="ascend-pd-reliability-"))
    env = Env(kubeconfig, workdir)
    env.install_crd()
    namespaces = {name: env.new_namespace(name) for name in chosen}
    plain = [ns for name, ns in namespaces.items() if name != "ha"]
    releases: dict[str, Release] = {}
    results: list[ScenarioResult] = []
    try:
        if plain:
            releases["plain"] = env.install_chart(plain)
        if "ha" in chosen:
            releases["ha"] = env.install_chart([namespaces["ha"]], *ha.CHART_VALUES)
        for name, scenario in chosen.items():
            release = releases["ha" if name == "ha" else "plain"]
            say(f"{name} in namespace {namespaces[name]} ...")
            started = time.monotonic()
            try:
                result = scenario(env, release, namespaces[name])
            except Exception as exc:  # a broken scenario is a failed row, not a lost table
                result = ScenarioResult(name, problems=[f"{type(exc).__name__}: {exc}"])
            say(f"{name}: {'ok' if result.ok else 'FAILED'} in {time.monotonic() - started:.0f}s")
            results.append(result)
            # its deployments hold nodes the next scenarios need (8 nodes, one pod each)
            env.delete_namespace(namespaces[name], wait=True)
    finally:
        for release in releases.values():
            env.uninstall(release)
        for ns in namespaces.values():
            env.delete_namespace(ns)
    return results, workdir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reliability", description=__doc__)
    parser.add_argument("--only", action="append", default=[], help="run only this scenario")
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs in the crash scenario")
    parser.add_argument("--seed", type=int, default=7, help="seed of the crash scenario")
    parser.add_argument(
        "--outage-seconds",
        type=float,
        default=outage.OUTAGE_SECONDS,
        help="how long control-plane-outage keeps kube-apiserver stopped",
    )
    parser.add_argument(
        "--force-delete-after-seconds",
        type=int,
        default=node_loss.FORCE_DELETE_AFTER_SECONDS,
        help="node-loss: the forced deployment's spec.recovery.forceDeleteAfterSeconds",
    )
    parser.add_argument("--details", action="store_true", help="print each scenario's details")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    # the fault proxies' own side of connections the operators drop is not news here
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)

    def say(text: str) -> None:
        print(f"reliability: {text}", file=sys.stderr, flush=True)

    every = scenarios(args.kills, args.seed, args.outage_seconds, args.force_delete_after_seconds)
    chosen = {k: v for k, v in every.items() if not args.only or k in args.only}
    with scenario_cluster(say) as kubeconfig:
        results, workdir = _run_all(chosen, kubeconfig, say)
    print(table(results))
    write_json(results, args.output)
    (workdir / "details.json").write_text(json.dumps(full_report(results), indent=2, default=str))
    for result in results:
        for problem in result.problems:
            print(f"  {result.scenario}: {problem[:500]}")
    if args.details:
        print(json.dumps(full_report(results), indent=2, default=str))
    print(f"logs and details: {workdir}")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
