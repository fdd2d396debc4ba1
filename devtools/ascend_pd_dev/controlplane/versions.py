"""Which Kubernetes the dev cluster runs: the release table, and the one place that picks a row.

Every release the project supports and tests is a row of ``RELEASES``, built from Go modules
(``build_gomod``): the newest (``DEFAULT``, what the test tiers, the demo and the CRD checks
run) and the oldest (``FLOOR``, the one the compatibility tier runs and the docs and charts
state as the minimum: ``tests/unit/test_docs_drift.py`` holds them to it). The choice is, in
order: an explicit value (``ascend-pd-dev cluster up --k8s-version``), the environment
(``ASCEND_PD_K8S_VERSION``, which test tiers, the demo and the benchmarks inherit), the
default.
"""

from __future__ import annotations

import os

from ascend_pd_dev.controlplane.build_gomod import Release

#: the environment variable that selects the release (``1.28`` or ``1.36``)
K8S_VERSION_ENV = "ASCEND_PD_K8S_VERSION"

RELEASES: dict[str, Release] = {
    r.release: r
    for r in (
        Release("1.36", "1.36.3", "10 CPU minutes: 15-30 minutes on 2 busy cores"),
        Release("1.28", "1.28.15", "10 CPU minutes: 15-30 minutes on 2 busy cores"),
    )
}
#: the newest: what everything runs unless told otherwise
DEFAULT = max(RELEASES, key=lambda r: RELEASES[r].minor)
#: the oldest Kubernetes the project supports ("We target clusters >= FLOOR")
FLOOR = min(RELEASES, key=lambda r: RELEASES[r].minor)


class VersionError(ValueError):
    """An unknown release was asked for; the message names where it came from."""


def selected_release(explicit: str | None = None) -> str:
    """The release asked for (see the module docstring), checked against what can be built."""
    if explicit:
        value, source = explicit, "--k8s-version"
    elif os.environ.get(K8S_VERSION_ENV):
        value, source = os.environ[K8S_VERSION_ENV], K8S_VERSION_ENV
    else:
        return DEFAULT
    release = value.strip().lstrip("v")
    if release not in RELEASES:
        raise VersionError(
            f"{source}={value!r}: the dev cluster runs Kubernetes {' or '.join(sorted(RELEASES))}"
        )
    return release


def control_plane(explicit: str | None = None) -> Release:
    """The release to run (``selected_release``) and how to build it."""
    return RELEASES[selected_release(explicit)]
