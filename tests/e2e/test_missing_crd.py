"""The operator on an API server that lacks one of its CRDs (``crds.install: false``
and only the PDDeployment CRD applied, as NOTES said before issue 35): ``/healthz`` fails
naming it, the log names it in one line while the operator waits (no watch retrying a 404),
and applying the CRDs lets it start.

Marked ``local``: it deletes the PDRoleScaler CRD of the cluster, so it runs only on the
dev cluster this session owns, and installs both CRDs again at the end.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from pdd_e2e import Operator

from ascend_pd_dev.testtools.kubectl import install_crd
from ascend_pd_operator.api import models

pytestmark = [pytest.mark.local, pytest.mark.timeout(300)]

SCALERS = f"{models.SCALER_PLURAL}.{models.GROUP}"


def health(op: Operator) -> tuple[int, dict[str, Any]]:
    """/healthz's status code and report."""
    url = f"http://127.0.0.1:{op.health_port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as failed:
        return failed.code, json.loads(failed.read())
    except OSError:
        return 0, {}


def scaler_problem(op: Operator) -> str | None:
    """The /healthz problem that names the PDRoleScaler CRD, once it answers 503 with one."""
    code, report = health(op)
    named = [p for p in report.get("problems", []) if SCALERS in p] if code == 503 else []
    assert len(named) <= 1, named
    return named[0] if named else None


def test_a_missing_crd_fails_healthz_and_is_one_log_line(
    cluster: Any, kubectl: Any, namespace: str, tmp_path: Path, wait_until: Any
) -> None:
    install_crd(cluster.kubeconfig, "e2e-operator")
    kubectl("delete", "crd", SCALERS, "--wait=true")
    log = tmp_path / "operator.log"
    op = Operator(cluster.kubeconfig, namespace, log, "--debug")
    try:
        # 503 comes first for "not started yet"; the CRD is named once discovery answered
        problem = wait_until(lambda: scaler_problem(op), f"/healthz answering 503 naming {SCALERS}")
        assert "kubectl apply --server-side -f crds/" in problem, problem
        # asked again while it waits, quietly (--debug shows each check)
        wait_until(lambda: "still not installed" in log.read_text(), "a second check")
        text = log.read_text()
        named = [line for line in text.splitlines() if f"CRD {SCALERS} is not installed" in line]
        assert len(named) == 1, named
        # nothing else complains meanwhile: no watch is there to retry a 404
        loud = [line for line in text.splitlines() if " WARNING " in line or " ERROR " in line]
        assert loud == named, loud
        assert "kopf" not in text, text[-3000:]
        install_crd(cluster.kubeconfig, "e2e-operator")
        wait_until(op.healthy, "/healthz answering 200 once the CRD is served")
        assert f"CRD {SCALERS} installed now: starting" in log.read_text()
    finally:
        op.stop()
        install_crd(cluster.kubeconfig, "e2e-operator")
