"""``make test``'s pytest run: the test tiers side by side, then one table of their times.

The tiers share nothing that one could break for another: each that needs a Kubernetes
control plane gets one of its own (``ASCEND_PD_TEST_CLUSTER`` names its state directory),
so the e2e tests that turn a node NotReady never restart a reliability scenario's
instances. Most of a cluster tier's time is spent waiting on conditions, so running the
tiers together fills the idle cores instead of adding their times up.

The tiers partition the suite by marker (and, for the two cluster tiers, by folder), so
every test runs in exactly one; ``--check`` proves it against pytest's own collection.
Each tier's output goes to ``.dev/tiers/<tier>.log``; a tier that fails prints its tail.

The tiers that need the local control plane start once ``prepare`` has built it (the
release ``ASCEND_PD_K8S_VERSION`` names, else 1.36): on a fresh machine that build takes
10 CPU minutes, 15 to 30 minutes on 2 busy cores (1.36; 1.20's took 11 to 14), and inside
the first test's fixture it counted in that test's timeout (a cold ``.ci/run`` failed the
first reliability scenario so). The others start at once.
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
OWN_CONTROL_PLANE = "tests/reliability/test_own_control_plane.py"


PYTEST = ("-m", "pytest")


@dataclass(frozen=True)
class Tier:
    name: str
    args: tuple[str, ...]
    #: the dev cluster it owns, should one of its tests need one: tiers never share one
    cluster: str = ""
    #: what it costs, for the start order (longest first); from the last measured run
    expected_minutes: float = 1.0
    #: it starts once ``prepare`` has built the control plane: a cold build (15 to 30 min on
    #: 2 busy cores for 1.36) inside a test's fixture would count in that test's timeout
    needs_control_plane: bool = True
    #: what the interpreter runs with ``args``: pytest, but for ``PREPARE``
    program: tuple[str, ...] = PYTEST


TIERS = (
    Tier("reliability", ("tests/reliability", f"--ignore={OWN_CONTROL_PLANE}", "-m",
                         f"e2e and {NOT_OTHERS}"), "e2e-reliability", 10),
    # the scenarios that stop their control plane (one of their own): beside the others,
    # not after them
    Tier("reliability-own", (OWN_CONTROL_PLANE, "-m", f"e2e and {NOT_OTHERS}"),
         "e2e-reliability-own", 6),
    Tier("e2e", ("tests", "--ignore=tests/reliability", "-m",
                 f"e2e and not prometheus and {NOT_OTHERS}"), "e2e", 10),
    # a real Prometheus scraping the running operator: short, so beside the e2e tier
    # rather than in it (the e2e tier is the longest)
    Tier("prometheus-e2e", ("tests", "--ignore=tests/reliability", "-m",
                            f"e2e and prometheus and {NOT_OTHERS}"), "e2e-prometheus", 1),
    # tests/e2e has a test of the sglang tier: it gets a cluster of its own too. Its SGLang
    # environments come first (minutes), the one cluster test (20 min budget) waits for
    # the build itself: the tier need not wait
    Tier("sglang", ("tests", "-m", "sglang"), "e2e-sglang", 11, needs_control_plane=False),
    Tier("unit", ("tests", "-m", "not e2e and not sglang and not crdserver and not scanner"),
         "e2e-unit", 5, needs_control_plane=False),
    # checkov over the chart and the examples' renders: one checkov run, beside the others
    Tier("scanner", ("tests", "-m", "scanner and not e2e and not sglang and not crdserver"),
         "e2e-scanner", 1, needs_control_plane=False),
    # the CRD server is a binary of its own, built in its session fixture
    Tier("crdserver", ("tests", "-m", "crdserver and not sglang"), "e2e-crdserver", 2,
         needs_control_plane=False),
)  # fmt: skip
#: Builds the local control plane (``build.ensure_binaries``, the runtime packages) once,
#: before the tiers that need it; a no-op with the binaries cached.
PREPARE = Tier("prepare", ("--prepare",), expected_minutes=0, needs_control_plane=False,
               program=("-m", "ascend_pd_dev.cli.tiers"))  # fmt: skip


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
    if tier.program != PYTEST:
        return [sys.executable, *tier.program, *tier.args]
    # the slowest tests at the end of each tier's log: where its time goes
    return [sys.executable, *PYTEST, *tier.args, "-p", "no:cacheprovider", "--durations=15",
            *extra]  # fmt: skip


def build_control_plane() -> int:
    """Build what the cluster tiers need, outside any test's timeout."""
    from ascend_pd_dev.controlplane import build, versions

    def progress(message: str) -> None:
        print(f"prepare: {message}", flush=True)

    plane = versions.control_plane()
    progress(f"Kubernetes {plane.version} ({versions.K8S_VERSION_ENV} or the default "
             f"{versions.DEFAULT})")  # fmt: skip
    plane.ensure_binaries(progress, False)
    build.ensure_runtime_packages(progress)
    return 0


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


def run_all(
    tiers: Sequence[Tier], jobs: int, extra: Sequence[str], prepare: Tier = PREPARE
) -> list[Run]:
    """Run ``tiers``, ``jobs`` at once, the longest first, those that need the control plane
    once ``prepare`` has built it; print each as it ends and then the table."""
    ordered = sorted(tiers, key=lambda t: -t.expected_minutes)
    if any(t.needs_control_plane for t in ordered):
        ordered.insert(0, prepare)
    todo = [Run(t, LOG_DIR / f"{t.name}.log") for t in ordered]
    runs = list(todo)
    running: list[Run] = []
    prepare_run: Run | None = None
    prepared = False
    began = time.monotonic()
    while todo or running:
        ready = [r for r in todo if not r.tier.needs_control_plane or prepared]
        while ready and len(running) < jobs:
            run = ready.pop(0)
            todo.remove(run)
            start(run, extra)
            running.append(run)
            if run.tier is prepare:
                prepare_run = run
        reaped = False
        for run in list(running):
            assert run.process is not None
            # wait4, not poll: its rusage is the CPU the tier and its reaped children used
            pid, status, usage = os.wait4(run.process.pid, os.WNOHANG)
            if pid:
                reaped = True
                run.process.returncode = code = os.waitstatus_to_exitcode(status)
                running.remove(run)
                finish(run, code, usage.ru_utime + usage.ru_stime)
                if run is prepare_run:
                    prepared = code == 0
                    if not prepared:
                        # nothing would build it: the tiers that need it fail at once
                        for waiting in [r for r in todo if r.tier.needs_control_plane]:
                            todo.remove(waiting)
                            waiting.code = code
                            print(f"tiers: {waiting.tier.name} not run: prepare failed")
        # a tier that ended may let others start (the build, a free job): back to the top
        if running and not reaped:
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
    parser.add_argument("--prepare", action="store_true",
                        help="only build what the cluster tiers need")  # fmt: skip
    args, extra = parser.parse_known_args(argv)
    if args.prepare:
        return build_control_plane()
    tiers = [t for t in TIERS if not args.only or t.name in args.only]
    if args.check:
        return check(tiers)
    return run_tiers(tiers, max(1, args.jobs), extra)


if __name__ == "__main__":
    sys.exit(main())
