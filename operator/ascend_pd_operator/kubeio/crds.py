"""Are the CRDs the operator watches installed, and do they keep every field it uses? Asked
before anything starts.

Without this, a kind the API server does not serve shows up as its watch failing with 404
and retried for ever, a warning each time, and ``/healthz`` failing only after the unit's
grace, naming a 404. So ``ascend-pd run`` first reads the discovery document of each API
group version of its own kinds (``GET /apis/<group>/<version>``, which every authenticated
user may read): a CRD missing is one error line naming it and how to install it, and
``/healthz`` fails at once naming it (``CrdGate.problems``, a supervisor condition).

A CRD that is served but older than the operator is worse: the API server prunes every field
its schema lacks, so status the operator writes (``status.roles`` for one) is silently
dropped. So once discovery serves them, the gate reads each CRD
(``GET .../customresourcedefinitions/<plural>.<group>``) and compares its schema with the one
this operator generates (``api.crd_coverage``): a path it would prune is one error line
naming the CRD, the first paths, the release that generated the installed CRD, and how to
install the current one, and ``/healthz`` fails naming it too.

Nothing else starts until both checks pass: they are asked again quietly every
``RECHECK_SECONDS`` (the kubelet restarts the pod meanwhile, as its probe fails). When
discovery itself cannot be read, or reading a CRD is refused (RBAC trimmed by an
administrator), the gate opens with a warning: the watches report what is wrong.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from functools import cache

from ascend_pd_operator.api.access import RESOURCES, Resource
from ascend_pd_operator.api.crd import GENERATED_BY, KINDS, openapi_schema
from ascend_pd_operator.api.crd_coverage import installed_schema, missing_paths, summary
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import ANNOTATION_GENERATED_BY, GROUP, VERSION
from ascend_pd_operator.kubeio.errors import Denied, NotFound

log = logging.getLogger(__name__)

#: How often the gate checks again while a CRD is missing or older than the operator.
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


#: Where one CRD is read (``<plural>.<group>`` appended).
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
#: How many of a CRD's missing paths its message names (then how many more).
SHOWN_PATHS = 3


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


@cache
def _wanted_schema(plural: str) -> Json:
    """The served version's schema this operator generates for ``plural`` (CEL left aside:
    only the paths matter, and they are the same for every Kubernetes release)."""
    return openapi_schema(next(k for k in KINDS if k.plural == plural))


def schema_gaps(resource: Resource, crd: Json) -> list[str]:
    """The paths of ``resource``'s schema that installed CRD object ``crd`` would prune."""
    return missing_paths(_wanted_schema(resource.plural), installed_schema(crd, VERSION))


def generated_by(crd: Json) -> str | None:
    """The release that generated the installed CRD (None: it does not say)."""
    annotations = (crd.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(ANNOTATION_GENERATED_BY)
    return str(value) if value else None


def outdated_text(name: str, gaps: list[str], made_by: str | None) -> str:
    """The one line that names a CRD older than the operator and how to install its own."""
    count = f"{len(gaps)} field{'' if len(gaps) == 1 else 's'}"
    source = (f"the installed CRD was generated by {made_by}" if made_by
              else f"the installed CRD has no {ANNOTATION_GENERATED_BY} annotation")  # fmt: skip
    return (
        f"CRD {name} is older than this operator ({GENERATED_BY}): the API server would "
        f"drop {count} it writes or reads: {summary(gaps, SHOWN_PATHS)} ({source}); {INSTALL}"
    )


class CrdGate:
    """The check ``ascend-pd run`` waits on; ``get`` is a GET of a path (``Kube.request``)."""

    def __init__(self, get: Callable[[str], Json]) -> None:
        self._get = get
        #: The CRDs missing at the last check (empty: none, or not checked yet).
        self.missing: list[str] = []
        #: The CRDs whose schema would prune fields at the last check: name -> its line.
        self.outdated: dict[str, str] = {}
        #: The CRDs whose read was refused, warned about once.
        self._unreadable: set[str] = set()

    def read(self) -> list[str]:
        """Ask discovery once; the CRDs missing."""
        served: dict[str, Json | None] = {}
        for api_version in sorted({r.api_version for r in watched_crds()}):
            try:
                served[api_version] = self._get(f"/apis/{api_version}")
            except NotFound:
                served[api_version] = None
        return missing_crds(served)

    def read_schemas(self) -> tuple[list[str], dict[str, str]]:
        """Read each CRD once: (those gone since discovery served them, the line of each
        CRD that would prune fields). A refused read is a warning, and that CRD is taken as it
        is: an administrator may grant less than the chart does, and the operator ran
        without this check before."""
        gone: list[str] = []
        outdated: dict[str, str] = {}
        for resource in watched_crds():
            name = crd_name(resource)
            try:
                crd = self._get(f"{CRD_PATH}/{name}")
            except NotFound:
                gone.append(name)
                continue
            except Denied as denied:
                if name in self._unreadable:
                    continue
                self._unreadable.add(name)
                log.warning("could not check that CRD %s keeps every field this operator "
                            "writes (get customresourcedefinitions %s: %s); starting anyway",
                            name, name, denied.message)  # fmt: skip
                continue
            gaps = schema_gaps(resource, crd)
            if gaps:
                outdated[name] = outdated_text(name, gaps, generated_by(crd))
        return gone, outdated

    def check(self) -> tuple[list[str], dict[str, str]]:
        """(the CRDs missing, the line of each outdated CRD): the schemas are read once
        discovery serves every CRD."""
        missing = self.read()
        if missing:
            return missing, {}
        return self.read_schemas()

    def problems(self) -> list[str]:
        """Why the operator is not live, for ``/healthz`` (empty: every CRD is served and
        keeps every field)."""
        missing = list(self.missing)
        return ([missing_text(missing)] if missing else []) + list(self.outdated.values())

    def wait(self, stop: threading.Event, recheck: float = RECHECK_SECONDS) -> bool:
        """Return once every CRD is served and current (True) or ``stop`` is set (False);
        what is wrong is logged once per change, never per check."""
        told: list[str] = []
        named: list[str] = []  # the CRDs told about
        while not stop.is_set():
            try:
                missing, outdated = self.check()
            except Exception as exc:  # discovery unanswered: the watches will say why
                log.warning("could not check that the CRDs are installed (%s: %s); starting "
                            "anyway", type(exc).__name__, exc)  # fmt: skip
                self.missing, self.outdated = [], {}
                return True
            self.missing, self.outdated = missing, outdated
            problems = self.problems()
            if not problems:
                if named:
                    log.info("CRD %s installed now: starting", ", ".join(named))
                return True
            named += [n for n in [*missing, *outdated] if n not in named]
            if problems != told:
                for line in problems:
                    if line not in told:
                        log.error("%s; /healthz fails until then", line)
                told = problems
            elif missing:
                log.debug("CRD %s still not installed", ", ".join(missing))
            else:
                log.debug("CRD %s still lacks fields", ", ".join(outdated))
            if stop.wait(recheck):
                return False
        return False
