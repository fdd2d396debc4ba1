"""``make test``'s pytest run: the test tiers side by side, then one table of their times.

The tiers share nothing that one could break for another: each that needs a Kubernetes
control plane gets one of its own (``ASCEND_PD_TEST_CLUSTER`` names its state directory),
so the e2e tests that turn a node NotReady never restart a reliability scenario's
instances. Most of a cluster tier's time is spent waiting on conditions, so running the
tiers together fills the idle cores instead of adding their times up.

The tiers partition the suite by marker (and, for the two cluster tiers, by folder), so
every test runs in exactly one; ``--check`` proves it against pytest's own collection.
Each tier's output goes to ``.dev/tiers/<tier>.log``; a tier that fails prints its tail.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ascend_pd_dev.controlplane.paths import TEST_CLUSTER_ENV, project_root

ROOT = project_root()
LOG_DIR = ROOT / ".dev" / "tiers"
NOT_OTHERS = "not sglang and not crdserver"


@dataclass(frozen=True)
class Tier:
    name: str
    args: tuple[str, ...]
    #: the dev cluster it owns, should one of its tests need one: tiers never share one
    cluster: str = ""
    #: what it costs, for the start order (longest first); from the last measured run
    expected_minutes: float = 1.0


TIERS = (
    Tier("reliability", ("tests/reliability", "-m", f"e2e and {NOT_OTHERS}"),
         "e2e-reliability", 20),
    Tier("e2e", ("tests", "--ignore=tests/reliability", "-m",
                 f"e2e and not prometheus and {NOT_OTHERS}"), "e2e", 20),
    # a real Prometheus scraping the running operator: short, so beside the e2e tier
    # rather than in it (the e2e tier is the longest)
    Tier("prometheus-e2e", ("tests", "--ignore=tests/reliability", "-m",
                            f"e2e and prometheus and {NOT_OTHERS}"), "e2e-prometheus", 1),
    # tests/e2e has a test of the sglang tier: it gets a cluster of its own too
    Tier("sglang", ("tests", "-m", "sglang"), "e2e-sglang", 20),
    Tier("unit", ("tests", "-m", "not e2e and not sglang and not crdserver"), "e2e-unit", 12),
    Tier("crdserver", ("tests", "-m", "crdserver and not sglang"), "e2e-crdserver", 2),
)  # fmt: skip


@dataclass
class Run:
    tier: Tier
    log: Path
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    seconds: float = 0.0
    #: CPU seconds (user + system) of the tier and every process it waited for: its
    #: control plane, operator and SGLang children. What the tiers' wall time is made of
    #: on a machine they share.
    cpu_seconds: float = 0.0
    code: int | None = None
    summary: str = ""
    counts: dict[str, int] = field(default_factory=dict)


def command(tier: Tier, extra: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", "pytest", *tier.args, "-p", "no:cacheprovider", *extra]


def start(run: Run, extra: Sequence[str]) -> None:
    env = dict(os.environ)
    if run.tier.cluster:
        env[TEST_CLUSTER_ENV] = run.tier.cluster
    run.log.parent.mkdir(parents=True, exist_ok=True)
    with run.log.open("wb") as out:
        run.process = subprocess.Popen(
            command(run.tier, extra), cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    run.started = time.monotonic()
    print(f"tiers: {run.tier.name} started ({' '.join(run.tier.args)})", flush=True)


#: pytest's final line: "== 3 failed, 120 passed, 2 skipped in 61.2s (0:01:01) =="
SUMMARY = re.compile(r"^=+ (.*\d+ (?:passed|failed|error|errors|skipped|deselected).*) =+$")


def finish(run: Run, code: int, cpu_seconds: float = 0.0) -> None:
    run.code, run.seconds = code, time.monotonic() - run.started
    run.cpu_seconds = cpu_seconds
    lines = run.log.read_text(errors="replace").splitlines()
    run.summary = next((m.group(1) for m in map(SUMMARY.match, reversed(lines)) if m), "")
    for count, what in re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected)",
                                  run.summary):  # fmt: skip
        run.counts[what.rstrip("s") if what.startswith("error") else what] = int(count)
    # pytest exits 5 when a tier selects no test: nothing of that kind exists
    ok = code in (0, 5)
    verdict = "ok" if ok else f"FAILED (exit {code})"
    print(f"tiers: {run.tier.name} {verdict} in {run.seconds / 60:.1f} min "
          f"({run.cpu_seconds / 60:.1f} CPU min): {run.summary}", flush=True)  # fmt: skip
    if not ok:
        tail = lines[-200:]
        print(f"---- the last {len(tail)} lines of {run.log} ----", *tail, "----", sep="\n")


def table(runs: Sequence[Run], wall: float) -> str:
    rows = [
        "| tier | passed | failed | skipped | minutes | CPU minutes | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        failed = run.counts.get("failed", 0) + run.counts.get("error", 0)
        verdict = "ok" if run.code in (0, 5) else f"FAILED (exit {run.code})"
        passed, skipped = run.counts.get("passed", 0), run.counts.get("skipped", 0)
        minutes, cpu = run.seconds / 60, run.cpu_seconds / 60
        rows.append(f"| {run.tier.name} | {passed} | {failed} | {skipped} | "
                    f"{minutes:.1f} | {cpu:.1f} | {verdict} |")  # fmt: skip
    busy = sum(r.seconds for r in runs)
    cpu = sum(r.cpu_seconds for r in runs)
    rows.append(f"\nwall {wall / 60:.1f} min for {busy / 60:.1f} min of tiers "
                f"({busy / wall if wall else 0:.1f}x side by side) and {cpu / 60:.1f} CPU min "
                f"({cpu / wall if wall else 0:.2f} cores busy on average)")  # fmt: skip
    return "\n".join(rows)


def run_tiers(tiers: Sequence[Tier], jobs: int, extra: Sequence[str]) -> int:
    runs = run_all(tiers, jobs, extra)
    return 0 if all(r.code in (0, 5) for r in runs) else 1


def run_all(tiers: Sequence[Tier], jobs: int, extra: Sequence[str]) -> list[Run]:
    """Run ``tiers``, ``jobs`` at once, the longest first; print each as it ends and then
    the table."""
    todo = [
        Run(t, LOG_DIR / f"{t.name}.log") for t in sorted(tiers, key=lambda t: -t.expected_minutes)
    ]
    runs = list(todo)
    running: list[Run] = []
    began = time.monotonic()
    while todo or running:
        while todo and len(running) < jobs:
            run = todo.pop(0)
            start(run, extra)
            running.append(run)
        for run in list(running):
            assert run.process is not None
            # wait4, not poll: its rusage is the CPU the tier and its reaped children used
            pid, status, usage = os.wait4(run.process.pid, os.WNOHANG)
            if pid:
                run.process.returncode = code = os.waitstatus_to_exitcode(status)
                running.remove(run)
                finish(run, code, usage.ru_utime + usage.ru_stime)
        if running:
            # each tier is a child process: wait for any of them, not for a fixed time
            with contextlib.suppress(ChildProcessError):
                os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
    print("\n" + table([r for r in runs if r.process is not None], time.monotonic() - began))
    return runs


def collected(args: Sequence[str]) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args, "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if done.returncode not in (0, 5):
        raise SystemExit(f"collecting {' '.join(args)} failed:\n{done.stdout[-3000:]}")
    return {line for line in done.stdout.splitlines() if "::" in line}


def check(tiers: Sequence[Tier]) -> int:
    """Every test of the suite in exactly one tier."""
    everything = collected(["tests"])
    seen: dict[str, list[str]] = {}
    for tier in tiers:
        for test in collected(tier.args):
            seen.setdefault(test, []).append(tier.name)
    missing = sorted(everything - set(seen))
    twice = sorted(f"{t} ({', '.join(n)})" for t, n in seen.items() if len(n) > 1)
    for what, tests in (("in no tier", missing), ("in two tiers", twice)):
        if tests:
            print(f"tiers: {len(tests)} tests {what}:", *tests[:50], sep="\n  ")
    print(f"tiers: {len(everything)} tests, {len(seen)} in the tiers")
    return 1 if missing or twice else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ascend_pd_dev.cli.tiers", description=__doc__)
    parser.add_argument("--jobs", type=int, default=len(TIERS),
                        help="tiers at once (default: all of them)")  # fmt: skip
    parser.add_argument("--only", action="append", choices=[t.name for t in TIERS],
                        help="run only these tiers")  # fmt: skip
    parser.add_argument("--check", action="store_true",
                        help="check that the tiers partition the suite, run nothing")  # fmt: skip
    args, extra = parser.parse_known_args(argv)
    tiers = [t for t in TIERS if not args.only or t.name in args.only]
    if args.check:
        return check(tiers)
    return run_tiers(tiers, max(1, args.jobs), extra)


if __name__ == "__main__":
    sys.exit(main())
