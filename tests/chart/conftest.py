"""Fixtures for the static chart tests: the cached helm binary and a `helm template` renderer.

`render(...)` runs the real helm (from the project's tool cache) on the chart in the
working tree and returns the parsed manifests; results are cached per argument set
because many tests look at the same renders.
"""

from __future__ import annotations

import copy
import functools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_pd_dev.testtools.helm import ensure_helm

# pytest runs with --import-mode=importlib, so the chart tests' helper modules
# (chart_env, pod_security) are importable only once their folder is on sys.path.
sys.path.insert(0, str(Path(__file__).parent))

from chart_env import KUBE_VERSIONS, Render, run_template


@pytest.fixture(scope="session")
def helm() -> Path:
    return ensure_helm()


@pytest.fixture(scope="session")
def render(helm: Path) -> Render:
    @functools.cache
    def cached(
        values_files: tuple[Path, ...],
        kube_version: str,
        set_values: tuple[str, ...],
        api_versions: tuple[str, ...],
    ) -> list[dict[str, Any]]:
        done = run_template(helm, values_files, kube_version, set_values, api_versions=api_versions)
        assert done.returncode == 0, done.stderr
        return [doc for doc in yaml.safe_load_all(done.stdout) if doc]

    def render_(
        values_files: Sequence[Path] = (),
        kube_version: str = KUBE_VERSIONS[-1],
        set_values: Sequence[str] = (),
        api_versions: Sequence[str] = (),
    ) -> list[dict[str, Any]]:
        # a copy: the cached manifests are shared between tests
        return copy.deepcopy(
            cached(tuple(values_files), kube_version, tuple(set_values), tuple(api_versions))
        )

    return render_
