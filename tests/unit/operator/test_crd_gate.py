"""A CRD the operator watches that is not installed: decided from discovery, named in one
log line (not one per check), and failing /healthz with its name until it is served. A CRD
that is served but older than the operator (its schema would prune fields the operator
writes): the same, naming the fields; a CRD the operator may not read: one warning, and
the gate opens."""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request

import pytest

from ascend_pd_operator.api import models
from ascend_pd_operator.api.crd import KINDS, PDDEPLOYMENT, crd
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.kubeio import health
from ascend_pd_operator.kubeio.crds import (
    CRD_PATH,
    CrdGate,
    crd_name,
    missing_crds,
    watched_crds,
)
from ascend_pd_operator.kubeio.denials import Access
from ascend_pd_operator.kubeio.errors import Denied, KubeError, NotFound
from ascend_pd_operator.kubeio.supervisor import Supervisor

GROUP_VERSION = f"{models.GROUP}/{models.VERSION}"
#: Every CRD the API generates (``ascend-pd crd``): the operator watches each.
EVERY_CRD = sorted(f"{kind.plural}.{models.GROUP}" for kind in KINDS)
SCALERS = f"{models.SCALER_PLURAL}.{models.GROUP}"
PDDS = f"{models.PLURAL}.{models.GROUP}"


def discovery(*plurals: str) -> Json:
    """An APIResourceList as the API server serves it for the group version."""
    resources = []
    for plural in plurals:
        resources += [{"name": plural, "namespaced": True, "kind": "X", "verbs": ["get"]},
                      {"name": f"{plural}/status", "namespaced": True, "kind": "X"}]  # fmt: skip
    return {"kind": "APIResourceList", "groupVersion": GROUP_VERSION, "resources": resources}


def test_the_gate_checks_every_crd_of_the_api() -> None:
    assert sorted(crd_name(r) for r in watched_crds()) == EVERY_CRD


def test_the_decision() -> None:
    every = discovery(models.PLURAL, models.SCALER_PLURAL)
    assert missing_crds({GROUP_VERSION: every}) == []
    # the scaler's CRD not applied (the crds.install=false path of NOTES before issue 35)
    assert missing_crds({GROUP_VERSION: discovery(models.PLURAL)}) == [SCALERS]
    # "pdrolescalers/status" alone is a subresource, not the resource
    status_only = {"resources": [{"name": f"{models.SCALER_PLURAL}/status"}]}
    assert missing_crds({GROUP_VERSION: {**discovery(models.PLURAL), **status_only}}) == [
        f"{models.PLURAL}.{models.GROUP}", SCALERS]  # fmt: skip
    # no CRD of the group at all: the group version is not served (404)
    assert missing_crds({GROUP_VERSION: None}) == EVERY_CRD
    assert missing_crds({}) == EVERY_CRD


def without_status_roles() -> Json:
    """The PDDeployment CRD as an older release had it: no ``status.roles``."""
    old = crd(PDDEPLOYMENT)
    version = old["spec"]["versions"][0]
    del version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["roles"]
    del old["metadata"]["annotations"]
    return old


class Discovery:
    """``GET /apis/<group>/<version>`` of a server whose served documents a test changes,
    and ``GET`` of each CRD (``crds``: name -> the object, or an exception to raise; by
    default the CRDs this tree generates). Each discovery call is counted and released on
    ``asked``, each CRD read on ``read``."""

    def __init__(self, document: Json | None, crds: dict[str, Json | Exception] | None = None):
        self.document = document
        self.crds: dict[str, Json | Exception] = {
            f"{kind.plural}.{models.GROUP}": crd(kind) for kind in KINDS
        }
        self.crds.update(crds or {})
        self.asked = threading.Semaphore(0)
        self.read = threading.Semaphore(0)

    def __call__(self, url: str) -> Json:
        if url.startswith(f"{CRD_PATH}/"):
            found = self.crds.get(url.removeprefix(f"{CRD_PATH}/"))
            self.read.release()
            if isinstance(found, Exception):
                raise found
            if found is None:
                raise NotFound(404, "NotFound", "customresourcedefinitions not found")
            return found
        assert url == f"/apis/{GROUP_VERSION}"
        document = self.document
        self.asked.release()
        if document is None:
            raise NotFound(404, "NotFound", "the server could not find the requested resource")
        return document


def test_a_missing_crd_is_one_log_line_then_the_gate_opens_once_it_is_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    served = Discovery(discovery(models.PLURAL))
    gate = CrdGate(served)
    stop = threading.Event()
    opened: list[bool] = []
    caplog.set_level(logging.DEBUG, logger="ascend_pd_operator.kubeio.crds")
    waiter = threading.Thread(target=lambda: opened.append(gate.wait(stop, recheck=0.01)))
    waiter.start()
    try:
        for _ in range(4):  # asked again and again while it is missing
            assert served.asked.acquire(timeout=10)
        assert gate.missing == [SCALERS]
        served.document = discovery(models.PLURAL, models.SCALER_PLURAL)
        waiter.join(timeout=10)
        assert opened == [True]
    finally:
        stop.set()
        waiter.join(timeout=10)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"CRD {SCALERS} is not installed: ")
    assert "kubectl apply --server-side -f crds/" in errors[0]
    assert gate.missing == [] and gate.problems() == []


def test_a_stop_while_waiting_ends_the_wait() -> None:
    served = Discovery(None)
    stop = threading.Event()
    opened: list[bool] = []
    waiter = threading.Thread(target=lambda: opened.append(CrdGate(served).wait(stop, 60.0)))
    waiter.start()
    assert served.asked.acquire(timeout=10)
    stop.set()
    waiter.join(timeout=10)
    assert opened == [False]


def test_discovery_unanswered_opens_the_gate(caplog: pytest.LogCaptureFixture) -> None:
    def refused(url: str) -> Json:
        raise ConnectionRefusedError("no API server")

    gate = CrdGate(refused)
    assert gate.wait(threading.Event(), recheck=60.0) is True
    assert gate.problems() == []
    assert "could not check that the CRDs are installed" in caplog.text


def test_healthz_fails_naming_the_missing_crd_until_it_is_served() -> None:
    served = Discovery(None)  # no CRD of the group at all
    gate = CrdGate(served)
    gate.missing = gate.read()
    stop = threading.Event()
    server = health.serve(Supervisor(stop, conditions=gate.problems), 0, host="127.0.0.1")
    url = f"http://127.0.0.1:{server.server_address[1]}/healthz"
    try:
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(url, timeout=10)
        assert failed.value.code == 503
        report = json.loads(failed.value.read())
        assert report["ok"] is False
        (problem,) = report["problems"]
        for name in EVERY_CRD:
            assert name in problem
        served.document = discovery(models.PLURAL, models.SCALER_PLURAL)
        gate.missing = gate.read()
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert answer.status == 200
    finally:
        server.shutdown()
        server.server_close()
        stop.set()


def test_an_outdated_crd_is_one_log_line_and_fails_healthz_until_it_is_current(
    caplog: pytest.LogCaptureFixture,
) -> None:
    served = Discovery(discovery(models.PLURAL, models.SCALER_PLURAL),
                       {PDDS: without_status_roles()})  # fmt: skip
    gate = CrdGate(served)
    stop = threading.Event()
    opened: list[bool] = []
    caplog.set_level(logging.DEBUG, logger="ascend_pd_operator.kubeio.crds")
    server = health.serve(Supervisor(stop, conditions=gate.problems), 0, host="127.0.0.1")
    url = f"http://127.0.0.1:{server.server_address[1]}/healthz"
    waiter = threading.Thread(target=lambda: opened.append(gate.wait(stop, recheck=0.01)))
    waiter.start()
    try:
        for _ in range(8):  # both CRDs read again and again while one is outdated
            assert served.read.acquire(timeout=10)
        assert opened == [] and list(gate.outdated) == [PDDS]
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(url, timeout=10)
        assert failed.value.code == 503
        (problem,) = json.loads(failed.value.read())["problems"]
        assert problem.startswith(f"CRD {PDDS} is older than this operator"), problem
        assert "status.roles (the installed CRD has no ascendpd.io/generated-by annotation)" \
            in problem  # fmt: skip
        served.crds[PDDS] = crd(PDDEPLOYMENT)
        waiter.join(timeout=10)
        assert opened == [True]
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert answer.status == 200
    finally:
        stop.set()
        waiter.join(timeout=10)
        server.shutdown()
        server.server_close()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert errors == [f"{problem}; /healthz fails until then"], errors
    assert f"CRD {PDDS} still lacks fields" in caplog.text
    assert f"CRD {PDDS} installed now: starting" in caplog.text


def test_a_crd_the_operator_may_not_read_is_one_warning_and_the_gate_opens(
    caplog: pytest.LogCaptureFixture,
) -> None:
    forbidden = KubeError(403, "Forbidden", "customresourcedefinitions is forbidden: ...")
    access = Access("get", "customresourcedefinitions.apiextensions.k8s.io")
    refused = {name: Denied(forbidden, access, False) for name in EVERY_CRD}
    gate = CrdGate(Discovery(discovery(models.PLURAL, models.SCALER_PLURAL), refused))
    assert gate.wait(threading.Event(), recheck=60.0) is True
    assert gate.problems() == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 2, warnings
    for name, warning in zip(EVERY_CRD, sorted(warnings), strict=True):
        assert warning.startswith(f"could not check that CRD {name} keeps every field"), warning
        assert "starting anyway" in warning


def test_a_crd_deleted_after_discovery_served_it_is_missing() -> None:
    served = Discovery(discovery(models.PLURAL, models.SCALER_PLURAL))
    del served.crds[SCALERS]
    assert CrdGate(served).check() == ([SCALERS], {})
