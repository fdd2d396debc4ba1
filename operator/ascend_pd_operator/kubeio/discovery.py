"""The API server's Kubernetes release, read once at start from ``/version``.

Every kind is addressed at its version in ``access.RESOURCES``, which every supported
server serves. A server older than ``access.FLOOR_MINOR`` gets one warning naming both
releases: the operator still runs (a provider's build may serve what it needs), but what
fails there is outside what is tested.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ascend_pd_operator.api.access import FLOOR_MINOR
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.kubeio.errors import KubeError

log = logging.getLogger(__name__)


def server_minor(version: Json) -> int | None:
    """The minor version of a ``/version`` answer: "28" and "29+" (some providers' builds)
    give 28 and 29; None when it says nothing usable."""
    digits = "".join(c for c in str(version.get("minor", "")) if c.isdigit())
    return int(digits) if digits else None


def below_floor(version: Json) -> str | None:
    """The warning for a server older than the supported floor; None for a supported one or
    one whose ``/version`` says no minor."""
    minor = server_minor(version)
    if minor is None or str(version.get("major", "")) != "1" or minor >= FLOOR_MINOR:
        return None
    release = version.get("gitVersion") or f"1.{minor}"
    return (
        f"the API server runs Kubernetes {release}, older than 1.{FLOOR_MINOR}, the oldest "
        "release this operator supports (docs/compatibility.md): it runs anyway, untested"
    )


def warn_below_floor(get: Callable[[str], Json]) -> None:
    """Ask ``/version`` once (``get``: a GET of a path) and log ``below_floor``'s warning;
    a failed ask is a debug line (the watches report a server they cannot reach)."""
    try:
        version = get("/version")
    except KubeError as exc:
        log.debug("GET /version: %s", exc)
        return
    warning = below_floor(version)
    if warning:
        log.warning(warning)
