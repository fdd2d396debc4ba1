"""An image whose SGLang is not the spec's version, as the PDDeployment's status tells it.

The runtime's real entry points run on the env the operator writes (the prefill
StatefulSet's container, the inspector Job's), with an interpreter whose ``sglang``
metadata says another version (``fake_sglang``); their exit code and termination message,
put where a kubelet puts them, must give ``SGLangVersionMismatch`` naming both versions on
``PrefillReady`` (the launcher) or ``ModelResolved`` (the inspector), and a Warning Event.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import ascend_pd_runtime.env_contract as ec
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.decisions.events import events as planned_events
from ascend_pd_operator.decisions.observation import Observation
from ascend_pd_operator.decisions.planner import plan
from ascend_pd_runtime.cli import main as runtime_cli
from tests.unit.operator.test_planner import (
    NOW,
    conditions,
    no_writes,
    owned,
    resource,
    without_inline_config,
)
from tests.unit.operator.test_status_why import cond, pod, prefill_0_not_ready, status_of
from tests.unit.runtime.fake_sglang import fake_python

SPEC_VERSION = "0.5.20"
IMAGE_VERSION = "0.5.23"


def run_container(
    container: Json, extra_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, python: str
) -> int:
    """The container's command, in-process, with its literal env and ``extra_env``."""
    for key in [k for k in os.environ if k.startswith(ec.PREFIX)]:
        monkeypatch.delenv(key)
    for var in container["env"]:
        if "value" in var:
            monkeypatch.setenv(var["name"], var["value"])
    for key, value in extra_env.items():
        monkeypatch.setenv(key, value)
    command = [*container["command"], *(container.get("args") or [])]
    assert command[0] == "ascend-pd-runtime"
    return runtime_cli([*command[1:], "--python", python])


def test_a_launcher_refusing_the_image_s_sglang_is_its_own_reason_and_event(
    dsv3: Json, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsv3["spec"]["runtime"]["sglangVersion"] = SPEC_VERSION
    sts = next(w.manifest for w in plan(Observation(resource(dsv3)), NOW).applies
               if w.kind == "StatefulSet" and w.name == "dsv3-prefill-0")  # fmt: skip
    assert sts is not None
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    termination = tmp_path / "termination-log"
    python = fake_python(tmp_path / "image", IMAGE_VERSION)
    extra = {ec.POD_NAME: "dsv3-prefill-0-0", ec.TERMINATION_LOG: str(termination)}
    code = run_container(container, extra, monkeypatch, python)
    assert code == ec.EXIT_SGLANG_VERSION
    message = termination.read_text()

    last = {"exitCode": code, "reason": "Error", "message": message}
    children, pods = prefill_0_not_ready(
        pod("dsv3-prefill-0-0", state={"waiting": {"reason": "CrashLoopBackOff"}}, last=last),
        pod("dsv3-prefill-0-1", state={"waiting": {"reason": "CrashLoopBackOff"}}, last=last),
    )
    status = status_of(dsv3, children, pods)
    prefill = cond(status, "PrefillReady")
    assert (prefill["status"], prefill["reason"]) == ("False", "SGLangVersionMismatch")
    assert prefill["message"].startswith(
        f"pod dsv3-prefill-0-0: SGLang version mismatch: spec.runtime.sglangVersion is "
        f"{SPEC_VERSION} (ASCEND_PD_SGLANG_VERSION), but this image's SGLang is "
        f"{IMAGE_VERSION} ({python})"
    )
    assert prefill["message"].endswith(" (and 1 more pods)")
    assert cond(status, "Ready")["message"].startswith(
        "waiting for PrefillReady: pod dsv3-prefill-0-0: SGLang version mismatch"
    )
    posted = planned_events({}, status)
    assert [(e.type, e.reason) for e in posted] == [("Warning", "SGLangVersionMismatch")]
    assert posted[0].message == f"PrefillReady: {prefill['message']}"
    assert planned_events(status, status) == []  # once per message


def test_an_inspector_refusing_the_image_s_sglang_is_sglang_version_mismatch(
    dsv3: Json, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsv3["spec"]["runtime"]["sglangVersion"] = SPEC_VERSION
    cr, _ = without_inline_config(dsv3)
    job = owned(plan(Observation(cr), NOW).inspector[0].manifest or {})
    (container,) = job["spec"]["template"]["spec"]["containers"]
    model = Path(next(v["value"] for v in container["env"] if v["name"] == ec.MODEL_PATH))
    assert model.is_absolute()
    out = tmp_path / "termination-log"
    python = fake_python(tmp_path / "image", IMAGE_VERSION)
    # the model is not there: the version is refused before it is looked for
    code = run_container(container, {ec.INSPECT_OUTPUT: str(out)}, monkeypatch, python)
    assert code == ec.EXIT_SGLANG_VERSION

    def failed_pod(code: int, message: str) -> Json:
        ended = {"exitCode": code, "reason": "Error", "message": message}
        return {"metadata": {"name": "dsv3-inspect-x", "creationTimestamp": NOW},
                "status": {"phase": "Failed", "containerStatuses": [
                    {"name": "inspect", "state": {"terminated": ended}}]}}  # fmt: skip

    failed: dict[str, Any] = {**job, "status": {"failed": 1}}
    inspector_pods = [failed_pod(code, out.read_text())]
    refused = plan(Observation(cr, inspector_job=failed, inspector_pods=inspector_pods), NOW)
    assert no_writes(refused)
    model_resolved = conditions(refused)["ModelResolved"]
    assert (model_resolved["status"], model_resolved["reason"]) == (
        "False",
        "SGLangVersionMismatch",
    )
    assert model_resolved["message"].startswith(
        f"SGLang version mismatch: spec.runtime.sglangVersion is {SPEC_VERSION} "
        f"(ASCEND_PD_SGLANG_VERSION), but this image's SGLang is {IMAGE_VERSION} ({python})"
    )
    assert refused.status["phase"] == "Invalid"
    assert [(e.type, e.reason) for e in refused.events] == [("Warning", "SGLangVersionMismatch")]
    # the fix is a spec change (the version, or the image): the inspector runs again
    edited = resource(cr, generation=2)
    retry = plan(Observation(edited, inspector_job=failed, inspector_pods=inspector_pods), NOW)
    assert [(w.verb, w.kind) for w in retry.inspector] == [("delete", "Job"),
                                                           ("delete", "ConfigMap")]  # fmt: skip


def test_another_sglang_is_told_before_a_parser_s_refusal(dsv3: Json) -> None:
    """One pod's launcher refused the image's SGLang, another's parser refused a flag (that
    SGLang's parser): the version is the cause to fix first."""
    version = (
        "SGLang version mismatch: spec.runtime.sglangVersion is 0.5.20 "
        "(ASCEND_PD_SGLANG_VERSION), but this image's SGLang is 0.5.23 (python3); ..."
    )
    refusal = (
        "SGLang 0.5.20 refused the command line: ambiguous option: --cuda-graph-max-bs "
        "could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"
    )
    crash = {"waiting": {"reason": "CrashLoopBackOff"}}
    children, pods = prefill_0_not_ready(
        pod("dsv3-prefill-0-0", state=crash,
            last={"exitCode": 5, "reason": "Error", "message": refusal}),
        pod("dsv3-prefill-0-1", state=crash,
            last={"exitCode": 8, "reason": "Error", "message": version}),
    )  # fmt: skip
    prefill = cond(status_of(dsv3, children, pods), "PrefillReady")
    assert (prefill["reason"], prefill["message"]) == (
        "SGLangVersionMismatch",
        f"pod dsv3-prefill-0-1: {version}",
    )
