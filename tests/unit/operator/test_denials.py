"""401/403: retried quietly while a restarted API server warms up, named once they last.

The oracles: the permission an RBAC rule would need for each request (hand-derived), a
local server answering like kube-apiserver, and kopf's own request code and log lines.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import api as kopf_api
from kopf._cogs.clients import auth as kopf_auth
from kopf._cogs.structs import credentials as kopf_credentials

from ascend_pd_operator.kubeio.backoff import Backoff
from ascend_pd_operator.kubeio.denials import Access, Denials, access_of
from ascend_pd_operator.kubeio.kube import Denied, KubeError, is_transient
from ascend_pd_operator.kubeio.supervisor import Supervisor, Unit
from ascend_pd_operator.wiring.handlers import KOPF_RETRY_BACKOFF, KopfDenials, operator_settings
from tests.json_server import serving
from tests.unit.operator.local_api import local_kube

FORBIDDEN = {"kind": "Status", "code": 403, "reason": "Forbidden",
             "message": 'statefulsets.apps "x" is forbidden: User "system:serviceaccount:op:sa" '
                        'cannot patch resource "statefulsets" in API group "apps"'}  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("method", "url", "query", "expected"),
    [
        ("GET", "/apis/apps/v1/namespaces/llm/statefulsets", None,
         Access("list", "statefulsets.apps", "llm")),
        ("GET", "/api/v1/namespaces/llm/pods", [("watch", "true")], Access("watch", "pods", "llm")),
        ("GET", "/apis/ascendpd.io/v1alpha1/pddeployments?watch=true&labelSelector=a", None,
         Access("watch", "pddeployments.ascendpd.io", "")),
        ("PATCH", "/apis/apps/v1/namespaces/llm/statefulsets/dsv3-prefill-0", None,
         Access("patch", "statefulsets.apps", "llm")),
        ("PATCH", "/apis/ascendpd.io/v1alpha1/namespaces/llm/pddeployments/dsv3/status", None,
         Access("patch", "pddeployments.ascendpd.io/status", "llm")),
        ("DELETE", "/api/v1/namespaces/llm/pods", None, Access("deletecollection", "pods", "llm")),
        ("DELETE", "/api/v1/namespaces/llm/pods/p-0", None, Access("delete", "pods", "llm")),
        ("POST", "/api/v1/namespaces/llm/events", None, Access("create", "events", "llm")),
        ("GET", "/api/v1/nodes/n1", None, Access("get", "nodes", "")),
        ("GET", "/api/v1/namespaces/llm", None, Access("get", "namespaces", "")),
        ("GET", "https://10.0.0.1:6443/apis/coordination.k8s.io/v1/namespaces/op/leases/l", None,
         Access("get", "leases.coordination.k8s.io", "op")),
    ],
)  # fmt: skip
def test_the_permission_a_request_needs(
    method: str, url: str, query: list[tuple[str, str]] | None, expected: Access
) -> None:
    assert access_of(method, url, query) == expected


def test_a_denial_is_transient_for_the_warm_up_then_a_named_fault() -> None:
    clock = Clock()
    denials = Denials(warmup=30, stale=75, clock=clock)
    need = Access("patch", "statefulsets.apps", "llm")
    assert denials.denied(need, 403, "forbidden") is False
    clock.now += 29
    assert denials.denied(need, 403, "forbidden") is False
    assert denials.faults() == []
    clock.now += 2
    assert denials.denied(need, 403, "forbidden") is True
    [fault] = denials.faults()
    assert "RBAC denies patch statefulsets.apps in namespace llm (403 for 31s" in fault
    denials.allowed(need)
    assert denials.faults() == [] and not denials.any()
    # a new streak after success starts its warm-up again
    assert denials.denied(need, 403, "forbidden") is False


def test_a_denial_nobody_reports_again_is_forgotten() -> None:
    clock = Clock()
    denials = Denials(warmup=1, clock=clock)
    need = Access("watch", "pddeployments.ascendpd.io", "llm")
    denials.denied(need, 403)
    clock.now += 2
    assert denials.denied(need, 403)
    # kopf's slowest retry (its backoff's cap and jitter) still keeps the fault named
    clock.now += KOPF_RETRY_BACKOFF.cap * (1 + KOPF_RETRY_BACKOFF.jitter)
    assert denials.denied(need, 403)
    clock.now += denials.stale - 1
    assert denials.faults()
    clock.now += 2
    assert denials.faults() == []
    # reported again after being forgotten: a new streak, warming up
    assert denials.denied(need, 403) is False


def test_a_401_names_the_credentials() -> None:
    clock = Clock()
    denials = Denials(warmup=0, clock=clock)
    denials.denied(Access("list", "pods", "llm"), 401, "Unauthorized")
    assert denials.faults()[0].startswith(
        "the API server refuses the credentials for list pods in namespace llm (401"
    )


def test_the_client_judges_each_answer() -> None:
    answers = [403, 403, 200]

    def answer(method: str, path: str, query: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        status = answers.pop(0)
        if status == 403:
            return 403, {}, FORBIDDEN
        return 200, {}, {"kind": "StatefulSet", "metadata": {"name": "x"}}

    clock = Clock()
    denials = Denials(warmup=30, clock=clock)
    manifest = {"apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": "x", "namespace": "llm"}}  # fmt: skip
    with serving(answer) as url:
        kube = local_kube(url, denials)
        with pytest.raises(Denied) as warming:
            kube.apply(manifest)
        assert warming.value.status == 403 and "cannot patch" in warming.value.message
        assert is_transient(warming.value)  # the API server may be warming up
        clock.now += 31
        with pytest.raises(Denied) as lasting:
            kube.apply(manifest)
        assert not is_transient(lasting.value)  # an RBAC fault: the status may say so
        assert isinstance(lasting.value, KubeError)
        [fault] = denials.faults()
        assert "patch statefulsets.apps in namespace llm" in fault
        kube.apply(manifest)
        assert denials.faults() == []


def test_a_unit_stalled_by_a_lasting_denial_does_not_fail_the_probe() -> None:
    clock = Clock()
    denials = Denials(warmup=0, clock=clock)
    stop = threading.Event()
    supervisor = Supervisor(
        stop,
        grace=0.0,
        blocked=lambda exc: isinstance(exc, Denied),
        faults=denials.faults,
        clock=clock,
    )
    need = Access("list", "statefulsets.apps", "llm")
    unit = Unit("resync", 10.0, clock)
    supervisor._units["resync"] = unit  # the unit's thread is not the point here
    unit.thread = threading.current_thread()
    denials.denied(need, 403)
    unit.failed(Denied(KubeError(403, "Forbidden", "no"), need, True))
    clock.now += 11
    report = supervisor.report()
    assert report["ok"] and report["problems"] == []
    assert "RBAC denies list statefulsets.apps in namespace llm" in report["faults"][0]
    # any other reason for the silence is a liveness failure as before
    unit.failed(KubeError(500, "InternalError", "etcd"))
    assert "resync: no progress" in supervisor.report()["problems"][0]


async def _kopf_request(url: str, settings: kopf.OperatorSettings, logger: logging.Logger) -> int:
    context = kopf_auth.APIContext(kopf_credentials.ConnectionInfo(server=url))
    try:
        response = await kopf_api.request(
            "GET",
            "/apis/ascendpd.io/v1alpha1/namespaces/llm/pddeployments?watch=true",
            settings=settings,
            context=context,
            logger=logger,
        )
        return response.status
    finally:
        await context.session.close()


def test_kopf_retries_a_denial_for_ever_and_its_log_is_judged() -> None:
    """kopf's own request code, with our settings: it keeps retrying a 403 past its default
    budget of 9 tries, and each failure it logs reaches ``denials``."""
    answers = [403] * 12 + [200]

    def answer(method: str, path: str, query: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        status = answers.pop(0)
        return status, {}, (FORBIDDEN if status == 403 else {"kind": "PDDeploymentList"})

    settings = operator_settings()
    assert settings.networking.error_backoffs == KOPF_RETRY_BACKOFF.endless()
    settings.networking.error_backoffs = Backoff(base=0.001, cap=0.002).endless()
    denials = Denials(warmup=0)
    logger = logging.getLogger("kopf.test-denials")
    tap = KopfDenials(denials)
    logger.addHandler(tap)
    try:
        with serving(answer) as url:
            assert asyncio.run(_kopf_request(url, settings, logger)) == 200
    finally:
        logger.removeHandler(tap)
    assert answers == []
    [fault] = denials.faults()  # kopf says nothing of its success: the fault stays until stale
    assert "RBAC denies watch pddeployments.ascendpd.io in namespace llm" in fault
    assert "cannot patch resource" in fault  # the server's own words
