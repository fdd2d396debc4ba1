"""Fixtures of the reliability suite: the e2e suite's cluster fixtures, the chart, namespaces.

The cluster fixtures (``cluster``, ``kubectl``, ``api_client``, ``wait_until``) are the
e2e suite's own (``tests/e2e/conftest.py``), loaded from there so both suites share one
dev cluster. ``reliability_env`` installs the CRD once; ``chart`` installs the Helm
chart for a test's namespace and removes it afterwards. Every scenario runs the real
``ascend-pd run`` as the chart's ServiceAccount.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # the ``reliability`` package lives at the repository root
    sys.path.insert(0, str(REPO))

from reliability.env import Env, Release  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "ascend_pd_e2e_conftest", REPO / "tests" / "e2e" / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
_e2e = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _e2e  # its dataclass looks its module up
_spec.loader.exec_module(_e2e)

cluster = _e2e.cluster
kubectl = _e2e.kubectl
api_client = _e2e.api_client
wait_until = _e2e.wait_until
_skip_by_cluster_kind = _e2e._skip_by_cluster_kind


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "reliability: reliability and security scenarios")
    config.addinivalue_line(
        "markers", "simulated: needs kubelet-sim's simulated Ascend nodes (the dev cluster)"
    )
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)


@pytest.fixture(scope="session")
def reliability_env(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Env:
    env = Env(Path(cluster.kubeconfig), tmp_path_factory.mktemp("reliability"))
    env.install_crd()
    return env


@pytest.fixture
def scenario_namespace(reliability_env: Env, request: pytest.FixtureRequest) -> Iterator[str]:
    name = reliability_env.new_namespace(request.node.name.removeprefix("test_")[:12]
                                         .replace("_", "-").strip("-"))  # fmt: skip
    yield name
    reliability_env.delete_namespace(name)


@pytest.fixture
def chart(reliability_env: Env, scenario_namespace: str) -> Iterator[Release]:
    release = reliability_env.install_chart([scenario_namespace])
    yield release
    reliability_env.uninstall(release)
