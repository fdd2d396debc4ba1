"""``ascend-pd --version`` and ``ascend-pd-runtime --version``: the installed distribution's
version from its package metadata, which is pyproject.toml's."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ascend_pd_operator.wiring.cli import main as operator_main
from ascend_pd_runtime import subcommands
from ascend_pd_runtime.cli import main as runtime_main

ROOT = Path(__file__).resolve().parents[2]
PROJECT_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_metadata_is_pyproject_version() -> None:
    assert importlib.metadata.version(subcommands.DISTRIBUTION) == PROJECT_VERSION
    assert subcommands.distribution_version() == PROJECT_VERSION


@pytest.mark.parametrize(
    ("main", "prog"), [(operator_main, "ascend-pd"), (runtime_main, "ascend-pd-runtime")]
)
def test_version_flag(main, prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"{prog} {PROJECT_VERSION}\n"


@pytest.mark.parametrize(
    ("module", "prog"),
    [
        ("ascend_pd_operator.wiring.cli", "ascend-pd"),
        ("ascend_pd_runtime.cli", "ascend-pd-runtime"),
    ],
)
def test_version_from_a_fresh_process(module: str, prog: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "--version"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{prog} {PROJECT_VERSION}\n"


def test_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert subcommands.distribution_version().startswith("unknown (ascend-pd is not installed")


def test_a_subcommand_still_needs_no_version(capsys: pytest.CaptureFixture[str]) -> None:
    # --version is only read when asked: a subcommand runs as before
    assert operator_main(["plan", "--model-config", "deepseek-v3", "--prefill-pp", "2"]) == 0
    assert '"total_kv_layers":61' in capsys.readouterr().out
