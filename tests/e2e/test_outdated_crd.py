"""The operator on an API server whose CRDs are the recorded 0.1.0 release's (``releases.yaml``,
``git show``): older than the operator, so the API server would prune fields the operator
writes and reads (``spec.rollout.operatorUpdates``, ``status.*.updatePending``, added after
0.1.0). ``/healthz`` fails naming the CRD and its first missing path, the log says so in one
line and nothing reconciles meanwhile; applying ``crds/`` as the message says lets it start.

Until UpdatePending (issue 39) the 0.1.0 CRDs kept every path of HEAD's schema, and this
test removed ``status.roles`` from HEAD's instead; the unit tests
(``tests/unit/operator/test_crd_coverage.py``) keep that case. A release's schema never
grows, so 0.1.0's stays short of HEAD's; the test asserts it.

Marked ``local``: CRDs are cluster-scoped and the e2e tier shares one cluster, so it runs
only on the dev cluster this session owns, and installs HEAD's CRDs again at the end
(``finally``), as ``test_missing_crd.py`` does.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from pdd_e2e import Operator
from test_missing_crd import health

from ascend_pd_dev.testtools.kubectl import install_crd
from ascend_pd_operator.api import models
from ascend_pd_operator.api.crd import KINDS, crd_yaml
from ascend_pd_operator.api.crd import cel_minor as crd_cel_minor
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.kubeio.crds import INSTALL, crd_name, schema_gaps, watched_crds
from ascend_pd_operator.wiring.crd_cli import COPIES

pytestmark = [pytest.mark.local, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
RELEASE = "0.1.0"
FIELD_MANAGER = "e2e-operator"


def server_cel_minor(kubectl: Any) -> int | None:
    """``crd.cel_minor`` of the cluster's release: None, or 28 for the 1.28/1.29 CRDs."""
    server = json.loads(kubectl("version", "-o", "json").stdout)["serverVersion"]
    return crd_cel_minor(int(re.sub(r"\D.*", "", server["minor"])))


def release_crds(minor: int | None) -> dict[str, Json]:
    """The recorded release's CRDs for a server of ``minor``, by name."""
    commit = yaml.safe_load((ROOT / "releases.yaml").read_text())[RELEASE]
    found: dict[str, Json] = {}
    for rel, kind, copy_minor in COPIES:
        if rel.startswith("crds/") and copy_minor == minor:
            text = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{rel}"],
                                  capture_output=True, text=True, check=True).stdout  # fmt: skip
            found[f"{kind.plural}.{models.GROUP}"] = yaml.safe_load(text)
    assert len(found) == len(KINDS), found.keys()
    return found


def old_crds(minor: int | None) -> tuple[dict[str, Json], str, str]:
    """(the CRDs to install: the release's, the CRD the operator must name, the path it
    must name first)."""
    released = release_crds(minor)
    for resource in watched_crds():
        gaps = schema_gaps(resource, released[crd_name(resource)])
        if gaps:
            return released, crd_name(resource), gaps[0]
    raise AssertionError(f"the {RELEASE} CRDs keep every path of this tree's schema")


def replace(kubectl: Any, docs: dict[str, Json]) -> None:
    """Make each CRD exactly ``docs``'s, whoever applied it before (a PUT; a CRD update
    must name the resourceVersion it replaces)."""
    for name, doc in docs.items():
        current = json.loads(kubectl("get", "crd", name, "-o", "json").stdout)
        doc = copy.deepcopy(doc)
        doc["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        kubectl("replace", "-f", "-", input=yaml.safe_dump(doc))


def head_crds(minor: int | None) -> dict[str, Json]:
    return {f"{k.plural}.{models.GROUP}": yaml.safe_load(crd_yaml(k, minor)) for k in KINDS}


def named_problem(op: Operator, name: str) -> str | None:
    """The /healthz problem naming CRD ``name`` as outdated, once it answers 503 with one."""
    code, report = health(op)
    prefix = f"CRD {name} is older than this operator"
    named = [p for p in report.get("problems", []) if p.startswith(prefix)] if code == 503 else []
    assert len(named) <= 1, named
    return named[0] if named else None


def test_an_outdated_crd_fails_healthz_until_crds_are_applied(
    cluster: Any, kubectl: Any, namespace: str, tmp_path: Path, wait_until: Any
) -> None:
    install_crd(cluster.kubeconfig, FIELD_MANAGER)
    minor = server_cel_minor(kubectl)
    old, name, path = old_crds(minor)
    log = tmp_path / "operator.log"
    op: Operator | None = None
    try:
        replace(kubectl, old)
        op = Operator(cluster.kubeconfig, namespace, log, "--debug")
        problem = wait_until(lambda: named_problem(op, name),
                             f"/healthz answering 503 naming {name} and {path}")  # fmt: skip
        assert re.search(rf": {re.escape(path)}(,| and| \()", problem), problem
        assert INSTALL in problem, problem
        # read again while it waits, quietly
        wait_until(lambda: f"CRD {name} still lacks fields" in log.read_text(), "a second check")
        text = log.read_text()
        loud = [line for line in text.splitlines() if " WARNING " in line or " ERROR " in line]
        assert all("is older than this operator" in line for line in loud), loud
        assert len([line for line in loud if f"CRD {name} " in line]) == 1, loud
        assert problem in text
        # nothing reconciles (no status the API server would prune): kopf never started
        assert "kopf" not in text, text[-3000:]
        # the fix the message gives (the 1.28 and 1.29 folder on those releases); forced, as
        # docs/upgrade.md says for CRDs another manager wrote (here the replace above)
        folder = ROOT / "crds" if minor is None else ROOT / "crds" / "k8s-1.28-and-1.29"
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(folder))
        wait_until(op.healthy, "/healthz answering 200 once the current CRDs are applied")
        assert f"CRD {name} installed now: starting" in log.read_text()
    finally:
        if op is not None:
            op.stop()
        replace(kubectl, head_crds(minor))
        install_crd(cluster.kubeconfig, FIELD_MANAGER)
    # the tests after this one find HEAD's schemas again
    for resource in watched_crds():
        installed = json.loads(kubectl("get", "crd", crd_name(resource), "-o", "json").stdout)
        assert schema_gaps(resource, installed) == [], crd_name(resource)
