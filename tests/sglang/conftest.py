"""Session-wide SGLang environments: each version is patched once per test session."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The suite runs with --import-mode=importlib: make the harness modules importable.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import sglang_harness as harness
from release_checks import ReleaseChecks


@pytest.fixture(scope="session")
def sglang_envs() -> Iterator[harness.Envs]:
    root = harness.workdir()
    try:
        yield harness.Envs(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def release_checks(sglang_envs: harness.Envs) -> ReleaseChecks:
    """Every registered check of a release, run in one interpreter per release and mode."""
    return ReleaseChecks(sglang_envs)


@pytest.fixture(params=harness.VERSIONS)
def env(request: pytest.FixtureRequest, sglang_envs: harness.Envs) -> harness.SGLangEnv:
    """Each listed SGLang release's environment (a test per release)."""
    return sglang_envs.get(request.param)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """What the SGLang tests measured (e.g. argvs parsed per release), in the test log."""
    if harness.SUMMARY:
        terminalreporter.section("SGLang tier summary")
        for line in harness.SUMMARY:
            terminalreporter.write_line(line)
