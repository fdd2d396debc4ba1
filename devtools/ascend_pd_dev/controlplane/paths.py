"""Where the dev cluster keeps things: the build cache (per user), the runtime state (per project).

The build cache outlives checkouts (``~/.cache/ascend-pd/k8s-<version>``); the runtime state
(certificates, etcd data, pid files, logs, the kubeconfig) lives in the project's git-ignored
``.dev/`` so two checkouts never share a cluster. ``ASCEND_PD_DEV_DIR`` moves the state.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


class UnderRoot:
    """A class attribute naming a file below the instance's ``root``: ``ca_crt =
    UnderRoot("ca.crt")`` reads as ``self.root / "ca.crt"``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Path:
        root: Path = instance.root
        return root / self.name


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ascend-pd"


def build_cache(version: str) -> Path:
    """The per-user cache of the control-plane binaries of Kubernetes ``version`` (1.x.y)."""
    return cache_root() / f"k8s-{version}"


def project_root() -> Path:
    """The checkout this package was installed from (editable install), else the cwd."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "operator").is_dir():
            return parent
    return Path.cwd()


def state_dir() -> Path:
    """The runtime state of this project's dev cluster (``.dev/``)."""
    override = os.environ.get("ASCEND_PD_DEV_DIR")
    return Path(override) if override else project_root() / ".dev"


def scratch_state_dir(purpose: str) -> Path:
    """The state of a cluster that one kind of run owns alone (``e2e``, ``reliability``,
    ``bench``): beside the user's own cluster in ``.dev/``, never shared with it, so the demo's
    objects never take the capacity a test needs and a test never deletes the user's."""
    return state_dir() / purpose


#: Names the dev cluster of one test tier (``tiers.py``): tiers that run side by side never
#: share a control plane. Unset: ``e2e``, the one a plain ``pytest`` run uses.
TEST_CLUSTER_ENV = "ASCEND_PD_TEST_CLUSTER"


def test_cluster_state_dir() -> Path:
    """The state of the dev cluster the e2e fixtures start (or reuse) for this run."""
    return scratch_state_dir(os.environ.get(TEST_CLUSTER_ENV) or "e2e")
