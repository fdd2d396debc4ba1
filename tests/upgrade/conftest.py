"""The upgrade tier (marker ``upgrade``; every test under ``tests/upgrade`` gets it).

Each test gets a fresh local control plane of its own (``plane``): an upgrade changes the
cluster-scoped CRDs, so no other test may share it, and the next parametrization installs
the old CRDs again on an empty cluster rather than over the last one's objects. Its state
directory is ``.dev/<$ASCEND_PD_TEST_CLUSTER or e2e-upgrade>``, purged afterwards.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from upgrade_steps import Plane

from ascend_pd_dev.controlplane import cluster as dev_cluster
from ascend_pd_dev.controlplane import paths

UPGRADE_DIR = Path(__file__).resolve().parent
#: nodes of 8 NPUs over 2 domains (kubelet-sim); the three deployments take 16 NPUs
#: (one a pod, on the pod network), a rollout one more instance
NODES, NPUS, DOMAINS = 4, 8, 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if UPGRADE_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.upgrade)


def _progress(message: str) -> None:
    print(f"upgrade cluster: {message}", file=sys.__stderr__, flush=True)


@pytest.fixture
def plane() -> Iterator[Plane]:
    state = os.environ.get(paths.TEST_CLUSTER_ENV) or "e2e-upgrade"
    layout = dev_cluster.Layout(paths.scratch_state_dir(state))
    dev_cluster.fresh(layout, NODES, NPUS, _progress, domains=DOMAINS)
    try:
        yield Plane(layout)
    finally:
        dev_cluster.down(layout, _progress, purge=True)
