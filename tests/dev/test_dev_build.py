"""What every build shares (``build``): building once under a file lock, the logged steps."""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path

import pytest

from ascend_pd_dev.controlplane import build


def test_a_build_runs_once_and_its_stamp_is_written_after_it(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    calls: list[Path] = []

    def ready() -> bool:
        return (cache / "out").is_file() and build.read_info(cache).get("recipe") == 7

    def make(log: Path) -> dict[str, object]:
        calls.append(log)
        assert build.read_info(cache) == {}  # no stamp while the build runs
        (cache / "out").write_text("built")
        return {"recipe": 7}

    seen: list[str] = []
    build.build_once(cache, "the thing", ready, make, seen.append)
    assert calls == [cache / "build.log"]
    info = json.loads((cache / build.INFO_FILE).read_text())
    assert info["recipe"] == 7 and info["build_seconds"] >= 0
    assert seen[0] == f"building the thing (log: {cache / 'build.log'})"
    assert seen[-1].startswith("built the thing in ")
    build.build_once(cache, "the thing", ready, make, seen.append)
    assert len(calls) == 1  # ready: nothing to do
    build.build_once(cache, "the thing", ready, make, seen.append, rebuild=True)
    assert len(calls) == 2


def test_a_build_another_caller_finished_while_this_one_waited_is_not_repeated(
    tmp_path: Path,
) -> None:
    # not ready when asked first, ready once the lock is held: the other caller's build
    answers = iter([False, True])
    calls: list[Path] = []
    build.build_once(tmp_path, "x", lambda: next(answers), lambda log: calls.append(log) or {},
                     lambda _: None)  # fmt: skip
    assert calls == []


def test_a_failed_build_leaves_no_stamp(tmp_path: Path) -> None:
    def fail(log: Path) -> dict[str, object]:
        raise build.BuildError("the step failed")

    with pytest.raises(build.BuildError, match="the step failed"):
        build.build_once(tmp_path, "x", lambda: False, fail, lambda _: None)
    assert not (tmp_path / build.INFO_FILE).exists()
    assert build.read_info(tmp_path) == {}


def test_run_echoes_the_build_steps_and_logs_everything(tmp_path: Path) -> None:
    script = (
        "echo '+++ [1129 16:46:02] Building go targets for linux/amd64:'; "
        "echo '    cmd/kube-apiserver'; echo 'noise'; echo '    indented noise'"
    )
    seen: list[str] = []
    build.run_logged(["bash", "-c", script], tmp_path / "log", "step", echo=seen.append)
    assert seen == ["  Building go targets for linux/amd64:", "    cmd/kube-apiserver"]
    assert "indented noise" in (tmp_path / "log").read_text()


def test_a_failed_step_names_itself_its_exit_code_and_its_log(tmp_path: Path) -> None:
    with pytest.raises(build.BuildError, match=r"the step failed \(exit 3\)") as err:
        build.run_logged(["bash", "-c", "echo boom; exit 3"], tmp_path / "log", "the step")
    assert str(tmp_path / "log") in str(err.value) and "boom" in str(err.value)


def test_apt_runs_one_at_a_time_and_installs_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tiers that need etcd at once: a cold CI run failed on apt's own lock when two
    ``apt-get update`` ran side by side. The second waits, then finds etcd installed."""
    installed: set[str] = set()
    checked = threading.Barrier(2)
    runs: list[list[str]] = []
    active = [0, 0]  # now, most at once

    def missing(packages: tuple[str, ...]) -> list[str]:
        return [p for p in packages if p not in installed]

    def run(cmd: list[str], log: Path, step: str, **_: object) -> None:
        active[0] += 1
        active[1] = max(active)
        try:
            if "update" in cmd:
                # give the other caller its chance to run apt too (it must not get one)
                with contextlib.suppress(threading.BrokenBarrierError):
                    checked.wait(timeout=2)
            runs.append(cmd)
            if "install" in cmd:
                installed.update(p for p in cmd if p == "etcd-server")
        finally:
            active[0] -= 1

    monkeypatch.setattr(build, "missing_apt_packages", missing)
    monkeypatch.setattr(build, "run_logged", run)
    monkeypatch.setattr(build.os, "geteuid", lambda: 0)
    monkeypatch.setattr(build.paths, "cache_root", lambda: tmp_path)
    callers = [
        threading.Thread(target=build.ensure_apt_packages,
                         args=(tmp_path / "apt.log", lambda _m: None, ("etcd-server",)))
        for _ in range(2)
    ]  # fmt: skip
    for t in callers:
        t.start()
    for t in callers:
        t.join(timeout=60)
    assert active[1] == 1
    assert [c[-1] for c in runs if "install" in c] == ["etcd-server"]
    assert all("DPkg::Lock::Timeout=600" in c for c in runs)
