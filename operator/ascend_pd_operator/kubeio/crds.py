"""Are the CRDs the operator watches installed? Asked of discovery before anything starts.

Without this, a kind the API server does not serve shows up as its watch failing with 404
and retried for ever, a warning each time, and ``/healthz`` failing only after the unit's
grace, naming a 404. So ``ascend-pd run`` first reads the discovery document of each API
group version of its own kinds (``GET /apis/<group>/<version>``, which every authenticated
user may read): a CRD missing is one error line naming it and how to install it, and
``/healthz`` fails at once naming it (``CrdGate.problems``, a supervisor condition). Nothing
else starts until every one is served: discovery is asked again quietly every
``RECHECK_SECONDS`` (the kubelet restarts the pod meanwhile, as its probe fails). When
discovery itself cannot be read, the gate opens: the watches report what is wrong.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from ascend_pd_operator.api.access import RESOURCES, Resource
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import GROUP
from ascend_pd_operator.kubeio.errors import NotFound

log = logging.getLogger(__name__)

#: How often the gate asks discovery again while a CRD is missing.
RECHECK_SECONDS = 5.0
#: What installs them, in the repository and with the chart.
INSTALL = (
    "install both CRDs: kubectl apply --server-side -f crds/ (crds/k8s-1.28-and-1.29/ on "
    "Kubernetes 1.28 and 1.29), or the chart with crds.install=true"
)


def watched_crds() -> tuple[Resource, ...]:
    """The operator's own kinds: it watches each, so each CRD must be installed (Volcano's
    PodGroups, another group's, are optional)."""
    return tuple(r for r in RESOURCES if r.group == GROUP)


def crd_name(resource: Resource) -> str:
    """``<plural>.<group>``, the CRD's name."""
    return f"{resource.plural}.{resource.group}"


def missing_crds(
    served: Mapping[str, Json | None], wanted: tuple[Resource, ...] | None = None
) -> list[str]:
    """The CRDs of ``wanted`` (default: ``watched_crds``) that discovery does not serve.
    ``served`` maps each API group version (``ascendpd.io/v1alpha1``) to its discovery
    document, an ``APIResourceList``, or None when the server does not serve it (404)."""
    missing = []
    for resource in wanted if wanted is not None else watched_crds():
        document = served.get(resource.api_version) or {}
        names = {str(r.get("name", "")) for r in document.get("resources") or []}
        if resource.plural not in names:
            missing.append(crd_name(resource))
    return missing


def missing_text(missing: list[str]) -> str:
    """The one line that names the missing CRDs and how to install them."""
    which = ", ".join(missing)
    return f"CRD {which} {'is' if len(missing) == 1 else 'are'} not installed: {INSTALL}"


class CrdGate:
    """The check ``ascend-pd run`` waits on; ``get`` is a GET of a path (``Kube.request``)."""

    def __init__(self, get: Callable[[str], Json]) -> None:
        self._get = get
        #: The CRDs missing at the last check (empty: none, or not checked yet).
        self.missing: list[str] = []

    def read(self) -> list[str]:
        """Ask discovery once; the CRDs missing."""
        served: dict[str, Json | None] = {}
        for api_version in sorted({r.api_version for r in watched_crds()}):
            try:
                served[api_version] = self._get(f"/apis/{api_version}")
            except NotFound:
                served[api_version] = None
        return missing_crds(served)

    def problems(self) -> list[str]:
        """Why the operator is not live, for ``/healthz`` (empty: every CRD is served)."""
        missing = list(self.missing)
        return [missing_text(missing)] if missing else []

    def wait(self, stop: threading.Event, recheck: float = RECHECK_SECONDS) -> bool:
        """Return once every CRD is served (True) or ``stop`` is set (False); the missing
        ones are logged once per change, never per check."""
        told: list[str] = []
        while not stop.is_set():
            try:
                missing = self.read()
            except Exception as exc:  # discovery unanswered: the watches will say why
                log.warning("could not check that the CRDs are installed (%s: %s); starting "
                            "anyway", type(exc).__name__, exc)  # fmt: skip
                self.missing = []
                return True
            self.missing = missing
            if not missing:
                if told:
                    log.info("CRD %s installed now: starting", ", ".join(told))
                return True
            if missing != told:
                log.error("%s; /healthz fails until then", missing_text(missing))
                told = missing
            else:
                log.debug("CRD %s still not installed", ", ".join(missing))
            if stop.wait(recheck):
                return False
        return False
