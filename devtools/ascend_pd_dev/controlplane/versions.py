"""Which Kubernetes the dev cluster runs: the one place that picks it.

Two releases can be built here: 1.36 (the newest patch, from Go modules: ``build_gomod``) and
1.20 (Debian's source package: ``build``), kept for its compatibility tier. The choice is, in
order: an explicit value (``ascend-pd-dev cluster up --k8s-version``), the environment
(``ASCEND_PD_K8S_VERSION``, which test tiers, the demo and the benchmarks inherit), the
default.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ascend_pd_dev.controlplane import build, build_gomod
from ascend_pd_dev.controlplane.build import Progress

#: the environment variable that selects the release (``1.20`` or ``1.36``)
K8S_VERSION_ENV = "ASCEND_PD_K8S_VERSION"
DEFAULT = "1.36"


class VersionError(ValueError):
    """An unknown release was asked for; the message names where it came from."""


@dataclass(frozen=True)
class ControlPlane:
    """One buildable release: its binaries' recipe and what differs in running it."""

    #: "1.36": what ``--k8s-version`` and the environment variable name
    release: str
    #: the full version the binaries report ("1.36.3")
    version: str
    ensure_binaries: Callable[[Progress, bool], Path]
    binaries_ready: Callable[[], bool]
    bin_dir: Callable[[], Path]
    #: how long its first build takes ("25-35 minutes on 2 cores")
    usually: str

    @property
    def minor(self) -> int:
        return int(self.release.split(".")[1])


CONTROL_PLANES: dict[str, ControlPlane] = {
    "1.36": ControlPlane("1.36", build_gomod.VERSION, build_gomod.ensure_binaries,
                         build_gomod.binaries_ready, build_gomod.bin_dir, build_gomod.USUALLY),
    "1.20": ControlPlane("1.20", build.VERSION, build.ensure_binaries, build.binaries_ready,
                         build.bin_dir, build.USUALLY),
}  # fmt: skip


def selected_release(explicit: str | None = None) -> str:
    """The release asked for (see the module docstring), checked against what can be built."""
    if explicit:
        value, source = explicit, "--k8s-version"
    elif os.environ.get(K8S_VERSION_ENV):
        value, source = os.environ[K8S_VERSION_ENV], K8S_VERSION_ENV
    else:
        return DEFAULT
    release = value.strip().lstrip("v")
    if release not in CONTROL_PLANES:
        raise VersionError(
            f"{source}={value!r}: the dev cluster runs Kubernetes "
            f"{' or '.join(sorted(CONTROL_PLANES))}"
        )
    return release


def control_plane(explicit: str | None = None) -> ControlPlane:
    """The release to run (``selected_release``) and how to build it."""
    return CONTROL_PLANES[selected_release(explicit)]
