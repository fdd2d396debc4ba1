"""The test tiers partition the suite: every test, whatever its markers and folder, runs in
exactly one tier (but for the declared re-run tier, whose tests another tier owns). Judged by
pytest's own marker-expression evaluator."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

from ascend_pd_dev.cli.tiers import FLOOR_TESTS, TIERS, Run, Tier, run_all, table
from ascend_pd_dev.controlplane import versions

MARKERS = ("e2e", "sglang", "crdserver", "prometheus", "scanner", "release", "upgrade")


def _selects(tier: Tier, markers: set[str], folder: str) -> bool:
    args = list(tier.args)
    expression = args[args.index("-m") + 1]
    paths = [a for a in args if not a.startswith("-") and a != expression]
    ignored = [a.split("=", 1)[1] for a in args if a.startswith("--ignore=")]
    in_paths = any(folder == p or folder.startswith(p + "/") for p in paths)
    if not in_paths or any(folder == i or folder.startswith(i + "/") for i in ignored):
        return False
    return Expression.compile(expression).evaluate(lambda name, **_: name in markers)


def test_every_test_runs_in_exactly_one_tier() -> None:
    for folder in (
        "tests/unit",
        "tests/e2e",
        "tests/reliability",
        "tests/reliability/test_own_control_plane.py",
        "tests/sglang",
        "tests/chart",
        "tests/prometheus",
        "tests/scanner",
        "tests/release",
        "tests/upgrade",
    ):
        for flags in itertools.product((False, True), repeat=len(MARKERS)):
            markers = {m for m, on in zip(MARKERS, flags, strict=True) if on}
            chosen = [t.name for t in TIERS if not t.rerun and _selects(t, markers, folder)]
            assert len(chosen) == 1, (folder, sorted(markers), chosen)


def test_the_floor_tier_re_runs_e2e_tests_on_the_oldest_release() -> None:
    (floor,) = [t for t in TIERS if t.rerun]
    assert floor.k8s_release == versions.FLOOR != versions.DEFAULT
    # by node id, each in a file the e2e tier owns; --check proves they exist
    owners = [t for t in TIERS if not t.rerun]
    for node in FLOOR_TESTS:
        path = node.split("::")[0]
        assert [t.name for t in owners if _selects(t, {"e2e"}, path)] == ["e2e"], node


def test_no_two_tiers_share_a_cluster() -> None:
    # two sessions on one dev cluster: one's node faults restart the other's instances
    clusters = [t.cluster for t in TIERS]
    assert all(clusters) and len(clusters) == len(set(clusters))


def test_the_table_counts_each_tier(tmp_path: Path) -> None:
    run = Run(Tier("unit", ("tests",)), tmp_path / "unit.log", seconds=120.0, code=1,
              cpu_seconds=90.0, counts={"passed": 3, "failed": 1, "error": 1})  # fmt: skip
    text = table([run], 60.0)
    assert "| unit | 3 | 2 | 0 | 2.0 | 1.5 | FAILED (exit 1) |" in text
    assert "2.0x side by side" in text
    assert "1.5 CPU min (1.50 cores busy on average)" in text


def test_a_tier_counts_the_cpu_of_the_processes_it_started(tmp_path: Path) -> None:
    # a tier's test starts a process that burns CPU, as a tier starts its control plane
    burn = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass\n"
    test = tmp_path / "test_burn.py"
    test.write_text(
        "import subprocess, sys\n"
        "def test_burn():\n"
        f"    subprocess.run([sys.executable, '-c', {burn!r}], check=True)\n"
    )
    probe = Tier("cpu-probe", (str(test), "--rootdir", str(tmp_path)), needs_control_plane=False)
    (run,) = run_all([probe], 1, [])
    assert run.code == 0
    assert run.counts == {"passed": 1}
    # the child's second of CPU, besides pytest's own start
    assert run.cpu_seconds >= 1.0


def _probe_test(path: Path, body: str) -> Path:
    path.write_text(f"from pathlib import Path\ndef test_probe():\n    {body}\n")
    return path


def test_the_cluster_tiers_start_once_the_control_plane_is_built(tmp_path: Path) -> None:
    built = tmp_path / "built"
    # the build takes a while; a cluster tier started before it ended would find no file
    build = Tier("prepare", ("-c", f"import time, pathlib; time.sleep(1); "
                             f"pathlib.Path({str(built)!r}).touch()"),
                 needs_control_plane=False, program=())  # fmt: skip
    cluster = _probe_test(tmp_path / "test_cluster.py", f"assert Path({str(built)!r}).exists()")
    runs = run_all(
        [Tier("cluster-probe", (str(cluster), "--rootdir", str(tmp_path)))],
        2,
        [],
        prepare=lambda _: build,
    )
    assert [(r.tier.name, r.code, r.counts.get("passed")) for r in runs] == [
        ("prepare", 0, None), ("cluster-probe", 0, 1)
    ]  # fmt: skip


def test_a_failed_build_fails_the_cluster_tiers_and_runs_the_others(tmp_path: Path) -> None:
    build = Tier("prepare", ("-c", "raise SystemExit(3)"), needs_control_plane=False,
                 program=())  # fmt: skip
    test = _probe_test(tmp_path / "test_any.py", "assert True")
    args = (str(test), "--rootdir", str(tmp_path))
    runs = run_all([Tier("cluster-probe", args),
                    Tier("plain-probe", args, needs_control_plane=False)], 1, [],
                   prepare=lambda _: build)  # fmt: skip
    codes = {r.tier.name: (r.code, r.process is not None) for r in runs}
    assert codes == {"prepare": (3, True), "cluster-probe": (3, False), "plain-probe": (0, True)}


def test_a_cluster_tier_starts_when_the_build_ends_not_when_another_tier_does(
    tmp_path: Path,
) -> None:
    started = tmp_path / "cluster-started"
    build = Tier("prepare", ("-c", "pass"), needs_control_plane=False, program=())
    # the other tier runs until the cluster tier has started (or gives up after 60 s)
    waiting = _probe_test(
        tmp_path / "test_waiting.py",
        "import time\n    end = time.monotonic() + 60\n"
        f"    while not Path({str(started)!r}).exists() and time.monotonic() < end:\n"
        "        time.sleep(0.1)\n"
        f"    assert Path({str(started)!r}).exists()",
    )
    cluster = _probe_test(tmp_path / "test_cluster.py", f"Path({str(started)!r}).touch()")
    runs = run_all([Tier("waiting-probe", (str(waiting), "--rootdir", str(tmp_path)),
                         needs_control_plane=False),
                    Tier("cluster-probe", (str(cluster), "--rootdir", str(tmp_path)))],
                   3, [], prepare=lambda _: build)  # fmt: skip
    assert {r.tier.name: r.code for r in runs} == {
        "prepare": 0, "waiting-probe": 0, "cluster-probe": 0
    }  # fmt: skip


def test_a_tier_after_a_build_starts_once_it_succeeded_and_not_when_it_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(versions.K8S_VERSION_ENV, raising=False)
    built = tmp_path / "keda-built"

    def prepare(release: str) -> Tier:
        return Tier(f"prepare-{release}", ("-c", "pass"), needs_control_plane=False,
                    program=(), k8s_release=release)  # fmt: skip

    first = f"prepare-{versions.DEFAULT}"
    # the tier's own build takes a while; started before it ended, the tier finds no file
    keda = Tier("prepare-keda", ("-c", f"import time, pathlib; time.sleep(1); "
                                 f"pathlib.Path({str(built)!r}).touch()"), program=())  # fmt: skip
    test = _probe_test(tmp_path / "test_keda.py", f"assert Path({str(built)!r}).exists()")
    args = (str(test), "--rootdir", str(tmp_path))
    runs = run_all([Tier("keda-probe", args, after=("prepare-keda",))], 3, [], prepare=prepare,
                   extra_builds=[keda])  # fmt: skip
    assert [(r.tier.name, r.code) for r in runs] == [
        (first, 0), ("prepare-keda", 0), ("keda-probe", 0)
    ]  # fmt: skip
    # a tier names no build: the build is not run
    runs = run_all([Tier("plain-probe", args, needs_control_plane=False)], 3, [],
                   prepare=prepare, extra_builds=[keda])  # fmt: skip
    assert [r.tier.name for r in runs] == ["plain-probe"]
    failing = Tier("prepare-keda", ("-c", "raise SystemExit(4)"), program=())
    runs = run_all([Tier("keda-probe", args, after=("prepare-keda",)),
                    Tier("cluster-probe", (str(_probe_test(tmp_path / "test_ok.py", "pass")),
                                           "--rootdir", str(tmp_path)))],
                   3, [], prepare=prepare, extra_builds=[failing])  # fmt: skip
    codes = {r.tier.name: (r.code, r.process is not None) for r in runs}
    assert codes == {first: (0, True), "prepare-keda": (4, True),
                     "keda-probe": (4, False), "cluster-probe": (0, True)}  # fmt: skip


def test_each_release_is_built_once_one_build_at_a_time_before_its_tiers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(versions.K8S_VERSION_ENV, raising=False)
    journal = tmp_path / "journal"

    def build(release: str) -> Tier:
        # a build that another one overlapping would interleave with
        script = (f"import pathlib; j = pathlib.Path({str(journal)!r}); "
                  f"j.open('a').write('start {release}\\n'); "
                  f"import time; end = time.monotonic() + 0.5\n"
                  f"while time.monotonic() < end: pass\n"
                  f"j.open('a').write('end {release}\\n')")  # fmt: skip
        return Tier(f"prepare-{release}", ("-c", script), needs_control_plane=False, program=())

    def probe(name: str, release: str) -> Tier:
        test = _probe_test(tmp_path / f"test_{name}.py",
                           f"assert 'end {release or versions.DEFAULT}' in "
                           f"Path({str(journal)!r}).read_text()")  # fmt: skip
        return Tier(name, (str(test), "--rootdir", str(tmp_path)), k8s_release=release)

    runs = run_all([probe("newest", ""), probe("oldest", versions.FLOOR)], 4, [], prepare=build)
    assert {r.tier.name: r.code for r in runs} == {
        f"prepare-{versions.DEFAULT}": 0, f"prepare-{versions.FLOOR}": 0, "newest": 0, "oldest": 0
    }  # fmt: skip
    assert journal.read_text().split("\n")[:-1] == [
        f"start {versions.DEFAULT}", f"end {versions.DEFAULT}",
        f"start {versions.FLOOR}", f"end {versions.FLOOR}",
    ]  # fmt: skip
