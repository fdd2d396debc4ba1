"""``make test``'s pytest run: the test tiers side by side, then one table of their times.

The tiers share nothing that one could break for another: each that needs a Kubernetes
control plane gets one of its own (``ASCEND_PD_TEST_CLUSTER`` names its state directory),
so the e2e tests that turn a node NotReady never restart a reliability scenario's
instances. Most of a cluster tier's time is spent waiting on conditions, so running the
tiers together fills the idle cores instead of adding their times up.

The tiers partition the suite by marker (and, for the two cluster tiers, by folder), so
every test runs in exactly one; ``--check`` proves it against pytest's own collection. One
tier is declared a re-run (``Tier.rerun``): ``floor`` runs a short subset of the e2e tests
again, by node id, on the oldest supported release (``versions.FLOOR``), on a cluster of its
own; ``--check`` proves each of its tests also runs in a tier of the partition.
Each tier's output goes to ``.dev/tiers/<tier>.log``; a tier that fails prints its tail.

The tiers that need the local control plane start once their release is built: a
``prepare-<release>`` step builds each release the chosen tiers run (``ASCEND_PD_K8S_VERSION``,
else the newest, for most; the floor for ``floor``), one after the other, the newest first.
On a fresh machine each build takes 10 CPU minutes or more, 15 to 30 minutes on 2 busy cores
(docs/development.md has the numbers), and inside the first test's fixture it counted in
that test's timeout (a cold ``.ci/run`` failed the first reliability scenario so). One build
at a time: ``go build`` already keeps every core busy, two at once would only share them
(and double the memory and disk) and delay the newest release, which most tiers wait for.
The others start at once. A tier may also wait for a build of its own (``after``): the
``prometheus-e2e`` tier for ``prepare-keda`` and ``prepare-lws``, which build KEDA and the
LeaderWorkerSet manager right after the selected release (one build at a time, as above).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ascend_pd_dev.controlplane import versions
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
    #: what the interpreter runs with ``args``: pytest, but for ``prepare``
    program: tuple[str, ...] = PYTEST
    #: the Kubernetes release its cluster runs (a row of ``versions.RELEASES``); "": the one
    #: ``ASCEND_PD_K8S_VERSION`` names, else the default
    k8s_release: str = ""
    #: it re-runs tests that a tier of the partition owns (on another release): ``--check``
    #: allows its tests twice, and only those
    rerun: bool = False
    #: the builds (``BUILDS``, by name) that must have succeeded before it starts
    after: tuple[str, ...] = ()

    @property
    def release(self) -> str:
        """The release the tier's cluster runs."""
        return self.k8s_release or versions.selected_release()


#: what the floor tier runs (node ids of tests the e2e tier owns)
FLOOR_TESTS = (
    "tests/e2e/test_control_plane.py::test_api_server_answers_and_reports_its_version",
    "tests/e2e/test_control_plane.py::"
    "test_pod_security_admission_enforces_only_the_level_a_namespace_is_labelled_with",
    # server-side apply of a custom resource with a map: json-iterator's reflect2 (v1.0.2 in
    # 1.28) iterating a Go map under Go 1.26's runtime
    "tests/e2e/test_control_plane.py::"
    "test_crd_without_cel_server_side_applies_and_serves_custom_resources",
    "tests/e2e/test_chart.py::test_install_test_upgrade_uninstall",
    "tests/e2e/test_operator.py::test_example_becomes_ready_with_its_layout",
    "tests/e2e/test_operator.py::test_cross_field_invalid_spec_creates_nothing_and_says_why",
    # the one rule the CRD for 1.28 and 1.29 leaves to the operator (docs/compatibility.md)
    "tests/e2e/test_operator.py::"
    "test_annotations_over_255_kib_together_are_refused_by_the_api_server_or_the_operator",
    "tests/e2e/test_status_why.py::"
    "test_a_pod_the_api_server_refuses_is_named_from_the_statefulset_s_failed_create",
)

TIERS = (
    Tier("reliability", ("tests/reliability", f"--ignore={OWN_CONTROL_PLANE}", "-m",
                         f"e2e and {NOT_OTHERS}"), "e2e-reliability", 10),
    # the scenarios that stop their control plane (one of their own): beside the others,
    # not after them
    Tier("reliability-own", (OWN_CONTROL_PLANE, "-m", f"e2e and {NOT_OTHERS}"),
         "e2e-reliability-own", 6),
    Tier("e2e", ("tests", "--ignore=tests/reliability", "-m",
                 f"e2e and not prometheus and not peer and {NOT_OTHERS}"), "e2e", 10),
    # a real Prometheus scraping the running operator: short, so beside the e2e tier
    # rather than in it (the e2e tier is the longest); KEDA scaling a role on a Prometheus
    # query too (tests/e2e/test_keda_scaling.py), and the peer bench's smoke run against
    # the LeaderWorkerSet manager (tests/e2e/test_bench_peer_smoke.py): the tests that wait
    # for a build of their own, so the e2e tier never does
    Tier("prometheus-e2e", ("tests", "--ignore=tests/reliability", "-m",
                            f"e2e and (prometheus or peer) and {NOT_OTHERS}"), "e2e-prometheus",
         4, after=("prepare-keda", "prepare-lws")),
    # tests/e2e has a test of the sglang tier: it gets a cluster of its own too. Its SGLang
    # environments come first (minutes), the one cluster test (20 min budget) waits for
    # the build itself: the tier need not wait
    Tier("sglang", ("tests", "-m", "sglang"), "e2e-sglang", 11, needs_control_plane=False),
    Tier("unit", ("tests", "-m", "not e2e and not sglang and not crdserver and not scanner "
                           "and not release and not upgrade"),
         "e2e-unit", 5, needs_control_plane=False),
    # checkov over the chart and the examples' renders: one checkov run, beside the others;
    # and `make release VERSION=0.1.0 DRY_RUN=1` (marker release): helm, no cluster, seconds
    Tier("scanner", ("tests", "-m",
                     "(scanner or release) and not e2e and not sglang and not crdserver"),
         "e2e-scanner", 1, needs_control_plane=False),
    # the default release's kube-apiserver alone (``crd_server``), started in its session
    # fixture: it waits for that release's build like the cluster tiers
    Tier("crdserver", ("tests", "-m", "crdserver and not sglang"), "e2e-crdserver", 2),
    # the oldest supported release: the chart's CRDs with their CEL rules, the operator's
    # main path (a PDDeployment Ready, its policy/v1 budgets, its status), a CEL verdict,
    # server-side apply and Pod Security enforcement. Tests of the e2e tier, run again on a
    # cluster of its own.
    # an old commit's chart and operator upgraded to HEAD's (tests/upgrade): a fresh control
    # plane per old version, since the upgrade replaces the cluster-scoped CRDs; 3.0 min for
    # both old versions at load 11 on 2 cores (their venvs cached)
    Tier("upgrade", ("tests", "-m", f"upgrade and not e2e and not scanner and not release "
                                    f"and {NOT_OTHERS}"), "e2e-upgrade", 3),
    Tier("floor", (*FLOOR_TESTS, "-m", "e2e"), "e2e-floor", 4, k8s_release=versions.FLOOR,
         rerun=True),
)  # fmt: skip


def prepare_tier(release: str) -> Tier:
    """Builds release ``release`` of the local control plane (and the runtime packages) once,
    before the tiers that run it; a no-op with the binaries cached."""
    return Tier(f"prepare-{release}", ("--prepare", release), expected_minutes=0,
                needs_control_plane=False, program=("-m", "ascend_pd_dev.cli.tiers"),
                k8s_release=release)  # fmt: skip


#: Builds KEDA (``build_keda.ensure_keda``) for the tiers that name it in ``after``; a no-op
#: when cached.
PREPARE_KEDA = Tier("prepare-keda", ("--prepare-keda",), expected_minutes=0,
                    needs_control_plane=False,
                    program=("-m", "ascend_pd_dev.cli.tiers"))  # fmt: skip
#: Builds the LeaderWorkerSet manager (``build_lws.ensure_lws``), the peer bench's.
PREPARE_LWS = Tier("prepare-lws", ("--prepare-lws",), expected_minutes=0,
                   needs_control_plane=False,
                   program=("-m", "ascend_pd_dev.cli.tiers"))  # fmt: skip
BUILDS = (PREPARE_KEDA, PREPARE_LWS)


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


def build_control_plane(release: str | None = None) -> int:
    """Build what the cluster tiers of ``release`` (else the selected one) need, outside any
    test's timeout."""
    from ascend_pd_dev.controlplane import build

    def progress(message: str) -> None:
        print(f"prepare: {message}", flush=True)

    plane = versions.control_plane(release)
    progress(f"Kubernetes {plane.version}")
    plane.ensure_binaries(progress, False)
    build.ensure_runtime_packages(progress)
    return 0


def build_keda() -> int:
    """Build KEDA's operator and metrics adapter, outside any test's timeout."""
    from ascend_pd_dev.controlplane import build, build_keda

    try:
        build_keda.ensure_keda(lambda message: print(f"prepare-keda: {message}", flush=True))
    except build.BuildError as err:
        print(f"prepare-keda: {err}", flush=True)
        return 1
    return 0


def build_lws() -> int:
    """Build the LeaderWorkerSet manager (the peer bench's), outside any test's timeout."""
    from ascend_pd_dev.controlplane import build, build_lws

    try:
        build_lws.ensure_lws(lambda message: print(f"prepare-lws: {message}", flush=True))
    except build.BuildError as err:
        print(f"prepare-lws: {err}", flush=True)
        return 1
    return 0


def start(run: Run, extra: Sequence[str]) -> None:
    env = dict(os.environ)
    if run.tier.cluster:
        env[TEST_CLUSTER_ENV] = run.tier.cluster
    if run.tier.k8s_release:
        env[versions.K8S_VERSION_ENV] = run.tier.k8s_release
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
    tiers: Sequence[Tier],
    jobs: int,
    extra: Sequence[str],
    prepare: Callable[[str], Tier] = prepare_tier,
    extra_builds: Sequence[Tier] = BUILDS,
) -> list[Run]:
    """Run ``tiers``, ``jobs`` at once, the longest first, those that need the control plane
    once ``prepare(release)`` has built their release and those ``after`` a build once it
    has succeeded (the builds one at a time: the selected release first, then the builds
    the tiers name, then the other releases); print each as it ends and then the table."""
    ordered = sorted(tiers, key=lambda t: -t.expected_minutes)
    selected = versions.selected_release()
    releases = sorted({t.release for t in ordered if t.needs_control_plane},
                      key=lambda r: (r != selected, r))  # fmt: skip
    wanted = {name for t in ordered for name in t.after}
    named = [prepare(r) for r in releases[:1]]
    named += [b for b in extra_builds if b.name in wanted] + [prepare(r) for r in releases[1:]]
    #: build name -> its run; a tier needs ``prepare-<its release>`` and its ``after``
    builds = {t.name: Run(t, LOG_DIR / f"{t.name}.log") for t in named}

    def needs(tier: Tier) -> set[str]:
        release = {prepare(tier.release).name} if tier.needs_control_plane else set()
        return release | set(tier.after)

    def is_build(run: Run) -> bool:
        return any(run is b for b in builds.values())

    todo = [*builds.values(), *(Run(t, LOG_DIR / f"{t.name}.log") for t in ordered)]
    runs = list(todo)
    running: list[Run] = []
    #: build name -> whether it succeeded, once it ended
    built: dict[str, bool] = {}
    began = time.monotonic()

    def startable(run: Run) -> bool:
        if is_build(run):
            # one build at a time: go build already keeps every core busy
            return not any(map(is_build, running))
        return all(built.get(name, False) for name in needs(run.tier))

    while todo or running:
        while len(running) < jobs and (run := next(filter(startable, todo), None)):
            todo.remove(run)
            start(run, extra)
            running.append(run)
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
                if is_build(run):
                    built[run.tier.name] = code == 0
                    if code != 0:
                        # nothing would build it: the tiers that need it fail at once
                        for waiting in [r for r in todo if run.tier.name in needs(r.tier)]:
                            todo.remove(waiting)
                            waiting.code = code
                            print(f"tiers: {waiting.tier.name} not run: {run.tier.name} failed")
        # a tier that ended may let others start (a build, a free job): back to the top
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
    """Every test of the suite in exactly one tier of the partition; each test of a re-run
    tier (``Tier.rerun``) in one of them too."""
    everything = collected(["tests"])
    seen: dict[str, list[str]] = {}
    reruns: dict[str, set[str]] = {}
    for tier in tiers:
        found = collected(tier.args)
        if tier.rerun:
            reruns[tier.name] = found
            continue
        for test in found:
            seen.setdefault(test, []).append(tier.name)
    missing = sorted(everything - set(seen))
    twice = sorted(f"{t} ({', '.join(n)})" for t, n in seen.items() if len(n) > 1)
    # a re-run of nothing (a renamed test) or of a test no other tier runs is a mistake
    strays = sorted(f"{t} ({name})" for name, found in reruns.items() for t in found - set(seen))
    empty = sorted(name for name, found in reruns.items() if not found)
    for what, tests in (("in no tier", missing), ("in two tiers", twice),
                        ("re-run but in no tier of the partition", strays),
                        ("(re-run tiers) selecting nothing", empty)):  # fmt: skip
        if tests:
            print(f"tiers: {len(tests)} tests {what}:", *tests[:50], sep="\n  ")
    print(f"tiers: {len(everything)} tests, {len(seen)} in the tiers, "
          f"{sum(map(len, reruns.values()))} re-run")  # fmt: skip
    return 1 if missing or twice or strays or empty else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ascend_pd_dev.cli.tiers", description=__doc__)
    parser.add_argument("--jobs", type=int, default=len(TIERS),
                        help="tiers at once (default: all of them)")  # fmt: skip
    parser.add_argument("--only", action="append", choices=[t.name for t in TIERS],
                        help="run only these tiers")  # fmt: skip
    parser.add_argument("--check", action="store_true",
                        help="check that the tiers partition the suite, run nothing")  # fmt: skip
    parser.add_argument("--prepare", nargs="?", const="", default=None, metavar="RELEASE",
                        help="only build what the cluster tiers of RELEASE (default: the "
                             "selected one) need")  # fmt: skip
    parser.add_argument("--prepare-keda", action="store_true",
                        help="only build KEDA (the prometheus-e2e tier's)")  # fmt: skip
    parser.add_argument("--prepare-lws", action="store_true",
                        help="only build the LeaderWorkerSet manager (the peer bench)")  # fmt: skip
    args, extra = parser.parse_known_args(argv)
    if args.prepare is not None:
        return build_control_plane(args.prepare or None)
    if args.prepare_keda:
        return build_keda()
    if args.prepare_lws:
        return build_lws()
    tiers = [t for t in TIERS if not args.only or t.name in args.only]
    if args.check:
        return check(tiers)
    return run_tiers(tiers, max(1, args.jobs), extra)


if __name__ == "__main__":
    sys.exit(main())
