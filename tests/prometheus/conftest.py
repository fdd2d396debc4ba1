"""The PromQL tier: the real Prometheus 2.42 (Debian's package, fetched once into
``~/.cache/ascend-pd/prometheus-2.42.0`` by ``ascend_pd_dev.controlplane.prometheus``)
judges the chart's alert rules and the dashboard's queries; helm renders them as a user's
install would."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from ascend_pd_dev.controlplane import prometheus

# --import-mode=importlib: this folder's helpers (promql_env) by their folder
sys.path.insert(0, str(Path(__file__).resolve().parent))

from promql_env import render_rule


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.prometheus)


@pytest.fixture(scope="session")
def promtool() -> Path:
    return prometheus.ensure() / "promtool"


@pytest.fixture(scope="session")
def prometheus_bin() -> Path:
    return prometheus.ensure() / "prometheus"


@pytest.fixture(scope="session")
def rule() -> dict[str, Any]:
    return render_rule()
