"""What every build shares (``build``): building once under a file lock, the logged steps."""

from __future__ import annotations

import json
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
