"""Pure status computation and model-facts resolution."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import ascend_pd_runtime.env_contract as ec
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import parse_spec
from ascend_pd_operator.api.vocabulary import Owner
from ascend_pd_operator.builders.desired import desired_state, validate
from ascend_pd_operator.builders.model_source import (
    InspectorState,
    inspector_job,
    inspector_state,
    resolve_facts,
)
from ascend_pd_operator.decisions.findings import Findings
from ascend_pd_operator.decisions.status import compute_status, status_changed
from tests.unit.operator.findings import findings_for

OWNER = Owner("dsv3", "llm", uid="u-1", generation=2)
T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def sts(name: str, replicas: int, ready: int, generation: int = 1) -> Json:
    return {
        "metadata": {"name": name, "generation": generation},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": generation,
            "readyReplicas": ready,
            "updatedReplicas": replicas,
        },
    }


def all_children(ready: bool) -> dict[tuple[str, str], Json]:
    n = 2 if ready else 1
    return {
        ("StatefulSet", "dsv3-prefill-0"): sts("dsv3-prefill-0", 2, 2),
        ("StatefulSet", "dsv3-prefill-1"): sts("dsv3-prefill-1", 2, n),
        ("StatefulSet", "dsv3-decode-0"): sts("dsv3-decode-0", 2, 2),
        ("Deployment", "dsv3-router"): {"status": {"readyReplicas": 2}},
    }


def conditions(status: Json) -> dict[str, Json]:
    return {c["type"]: c for c in status["conditions"]}


def test_ready_status_with_layout(dsv3: Json) -> None:
    status = compute_status(findings_for(OWNER, dsv3, all_children(True), {}), T0)
    assert status["phase"] == "Ready"
    assert status["observedGeneration"] == 2
    conds = conditions(status)
    assert [c["type"] for c in status["conditions"]] == [
        "Validated", "ModelResolved", "KVLayoutCompatible", "PrefillReady", "DecodeReady",
        "RouterReady", "NPUPreflight", "Ready",
    ]  # fmt: skip
    assert all(c["status"] == "True" for c in conds.values())
    kv = status["kvLayout"]
    assert kv["totalKvLayers"] == 61 and kv["kvBufGroups"] == 2
    assert kv["prefillDraftLayers"] == 0 and kv["decodeDraftLayers"] == 1
    assert kv["prefillStages"] == [
        {"ppRank": 0, "startLayer": 0, "endLayer": 30},
        {"ppRank": 1, "startLayer": 30, "endLayer": 61},
    ]
    assert status["roles"]["prefill"] == {"replicas": 2, "effectiveReplicas": 2,
                                          "readyReplicas": 2, "ready": "2/2",
                                          "nodesPerInstance": 2}  # fmt: skip
    assert "prefill" not in status and "decode" not in status
    assert status["router"] == {"replicas": 2, "readyReplicas": 2, "ready": "2/2"}
    assert status["endpoint"] == "http://dsv3-router.llm.svc:8000"


def test_progressing_then_degraded_and_stable_times(dsv3: Json) -> None:
    first = compute_status(findings_for(OWNER, dsv3, all_children(False), {}), T0)
    assert first["phase"] == "Progressing"
    assert conditions(first)["PrefillReady"]["message"].startswith("1/2 instances ready")
    again = compute_status(findings_for(OWNER, dsv3, all_children(False), first), T1)
    assert not status_changed(first, again)  # nothing changed: no patch
    ready = compute_status(findings_for(OWNER, dsv3, all_children(True), first), T1)
    assert conditions(ready)["Validated"]["lastTransitionTime"] == T0
    assert conditions(ready)["Ready"]["lastTransitionTime"] == T1
    degraded = compute_status(findings_for(OWNER, dsv3, all_children(False), ready), T1)
    assert degraded["phase"] == "Degraded"


def test_pending_without_children(dsv3: Json) -> None:
    status = compute_status(findings_for(OWNER, dsv3, {}, {}), T0)
    assert status["phase"] == "Pending"


def test_invalid_update_keeps_the_last_applied_state(dsv3: Json) -> None:
    ready = compute_status(findings_for(OWNER, dsv3, all_children(True), {}), T0)
    broken = copy.deepcopy(dsv3)
    broken["spec"]["prefill"]["devicesPerNode"] = 6
    validation = validate(OWNER, broken["spec"])
    assert validation.spec is None
    obs = Findings(
        owner=OWNER,
        spec=None,
        validation_error=validation.error,
        children=all_children(True),
        previous=ready,
    )
    status = compute_status(obs, T1)
    assert status["phase"] == "Invalid"
    conds = conditions(status)
    assert conds["Validated"]["status"] == "False"
    assert "devicesPerNode 6" in conds["Validated"]["message"]
    assert status["kvLayout"] == ready["kvLayout"]  # still describes what runs
    assert status["roles"] == ready["roles"]
    assert conds["PrefillReady"]["status"] == "True"


def test_incompatible_layout_sets_kvlayoutcompatible_false(dsv3: Json) -> None:
    resource = copy.deepcopy(dsv3)
    resource["spec"]["model"]["config"]["numNextnPredictLayers"] = 0
    status = compute_status(findings_for(OWNER, resource, {}, {}), T0)
    assert status["phase"] == "Invalid"
    cond = conditions(status)["KVLayoutCompatible"]
    assert cond["status"] == "False" and cond["reason"] == "Incompatible"
    assert "num_nextn_predict_layers 0" in cond["message"]


def test_partition_sum_is_checked_at_reconcile(dsv3: Json) -> None:
    resource = copy.deepcopy(dsv3)
    resource["spec"]["prefill"]["layerPartition"] = [31, 31]
    status = compute_status(findings_for(OWNER, resource, {}, {}), T0)
    cond = conditions(status)["KVLayoutCompatible"]
    assert cond["reason"] == "InvalidLayout"
    assert "sums to 62 but the model has 61 layers" in cond["message"]


# --- model facts ------------------------------------------------------------------------


def no_inline(dsv3: Json) -> Any:
    resource = copy.deepcopy(dsv3)
    del resource["spec"]["model"]["config"]
    return parse_spec(resource["spec"])


def test_inspector_lifecycle(dsv3: Json) -> None:
    spec = no_inline(dsv3)
    start = resolve_facts(spec)
    assert start.start_inspector and start.reason == "InspectingModel" and start.status == "False"
    running = resolve_facts(spec, inspector=InspectorState("Running", spec.model.path))
    assert running.reason == "InspectingModel" and not running.start_inspector
    config = {"num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64}
    done = resolve_facts(spec, inspector=InspectorState("Succeeded", spec.model.path, config))
    assert done.facts is not None and done.store_config == config
    moved = resolve_facts(spec, inspector=InspectorState("Succeeded", "/models/other", config))
    assert moved.restart_inspector


def test_inspector_failure_message_is_shown(dsv3: Json) -> None:
    spec = no_inline(dsv3)
    error = "/models/DeepSeek-V3/config.json: model config file not found"
    job = inspector_job(OWNER, spec)
    job["status"] = {"failed": 1}
    pod = {
        "metadata": {"creationTimestamp": T0},
        "status": {
            "containerStatuses": [
                {"state": {"terminated": {"message": ec.encode_inspect_result(error=error)}}}
            ]
        },
    }
    state = inspector_state(job, [pod])
    assert state.phase == "Failed" and state.model_path == spec.model.path
    failed = resolve_facts(spec, inspector=state)
    assert failed.reason == "InspectionFailed" and failed.message == error


def test_inspected_config_missing_keys(dsv3: Json) -> None:
    spec = no_inline(dsv3)
    state = InspectorState("Succeeded", spec.model.path, {"kv_lora_rank": 512})
    result = resolve_facts(spec, inspector=state)
    assert result.facts is None and result.reason == "InvalidModelConfig"
    assert "missing key 'num_hidden_layers'" in result.message


def test_config_map_ref(dsv3: Json) -> None:
    resource = copy.deepcopy(dsv3)
    del resource["spec"]["model"]["config"]
    resource["spec"]["model"]["configMapRef"] = {"name": "cfg"}
    spec = parse_spec(resource["spec"])
    assert resolve_facts(spec).reason == "ConfigMapNotFound"
    assert resolve_facts(spec, user_configmap={"data": {}}).reason == "ConfigMapKeyMissing"
    bad = resolve_facts(spec, user_configmap={"data": {"config.json": "{not json"}})
    assert bad.reason == "InvalidModelConfig" and "not valid JSON" in bad.message
    good = resolve_facts(
        spec, user_configmap={"data": {"config.json": '{"num_hidden_layers": 27, '
                                       '"kv_lora_rank": 512, "qk_rope_head_dim": 64}'}}
    )  # fmt: skip
    assert good.facts is not None and good.facts.num_hidden_layers == 27


def test_stored_facts_configmap_skips_inspection(dsv3: Json) -> None:
    spec = no_inline(dsv3)
    stored = {
        "metadata": {"annotations": {"ascendpd.io/model-path": spec.model.path}},
        "data": {"config.json": '{"num_hidden_layers": 61, "kv_lora_rank": 512, '
                 '"qk_rope_head_dim": 64}'},
    }  # fmt: skip
    result = resolve_facts(spec, facts_configmap=stored)
    assert result.facts is not None and not result.start_inspector


def test_inspector_job_shape(dsv3: Json) -> None:
    spec = no_inline(dsv3)
    job = inspector_job(OWNER, spec)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["ascend-pd-runtime", "inspect"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {
        "ASCEND_PD_CONTRACT_VERSION": "1",
        "ASCEND_PD_MODEL_PATH": "/models/DeepSeek-V3",
        "ASCEND_PD_INSPECT_OUTPUT": "/dev/termination-log",
        # the inspector refuses an image whose SGLang is not the spec's
        "ASCEND_PD_SGLANG_VERSION": dsv3["spec"]["runtime"]["sglangVersion"],
    }
    assert container["terminationMessagePolicy"] == "File"
    assert container["volumeMounts"][0]["mountPath"] == "/models/DeepSeek-V3"
    assert "huawei.com/Ascend910" not in str(container["resources"])
    assert resolve_facts(spec).facts is None


def test_failed_inspection_is_retried_after_a_spec_change(dsv3: Json) -> None:
    spec = no_inline(dsv3)
    failed = InspectorState("Failed", spec.model.path, error="boom", generation=2)
    same = resolve_facts(spec, inspector=failed, generation=2)
    assert same.reason == "InspectionFailed" and not same.restart_inspector
    edited = resolve_facts(spec, inspector=failed, generation=3)
    assert edited.restart_inspector and edited.message == "boom"
    job = inspector_job(Owner("dsv3", "llm", uid="u", generation=7), spec)
    job["status"] = {"active": 1}
    assert inspector_state(job, []).generation == 7


def test_unreadable_model_makes_the_phase_invalid(dsv3: Json) -> None:
    spec = no_inline(dsv3)
    facts = resolve_facts(spec, inspector=InspectorState("Failed", spec.model.path, error="x"))
    status = compute_status(Findings(owner=OWNER, spec=spec, facts=facts), T0)
    assert status["phase"] == "Invalid"
    inspecting = resolve_facts(spec)
    status = compute_status(Findings(owner=OWNER, spec=spec, facts=inspecting), T0)
    assert status["phase"] == "Pending"


def test_inspector_job_and_facts_configmap_are_valid_kubernetes(dsv3: Json) -> None:
    import kubernetes_validate

    from ascend_pd_operator.builders.model_source import model_facts_configmap

    spec = no_inline(dsv3)
    version = kubernetes_validate.latest_version()
    for manifest in (
        inspector_job(OWNER, spec),
        model_facts_configmap(OWNER, spec, {"num_hidden_layers": 61}),
    ):
        kubernetes_validate.validate(manifest, version, strict=True)


def test_mooncake_on_mla_with_prefill_pp_is_refused_at_reconcile(dsv3: Json) -> None:
    """CEL cannot see the model when it is inspected; the layout core refuses it then."""
    resource = copy.deepcopy(dsv3)
    resource["spec"]["runtime"]["transferBackend"] = "mooncake"
    del resource["spec"]["model"]["config"]
    spec = parse_spec(resource["spec"])  # accepted: no inline facts to judge by
    config = {"num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
              "num_nextn_predict_layers": 1}  # fmt: skip
    facts = resolve_facts(spec, inspector=InspectorState("Succeeded", spec.model.path, config))
    assert facts.facts is not None
    desired = desired_state(OWNER, spec, facts.facts)
    assert not desired.ok and desired.reason == "Incompatible"
    assert "mooncake" in desired.message and not desired.children


def test_work_queue_keeps_one_entry_per_key() -> None:
    from ascend_pd_operator.wiring.handlers import WorkQueue

    queue = WorkQueue()
    for key in [("a", "x"), ("a", "x"), ("b", "y"), ("a", "x")]:
        queue.add(key)
    assert len(queue) == 2
    assert queue.get(0) == ("a", "x") and queue.get(0) == ("b", "y")
    assert queue.get(0) is None


# --- SGLang refused a pod's command line (the launcher's exit 5) --------------------------

REFUSAL = (
    "SGLang 0.5.23 refused the command line: unrecognized arguments: --foo\n--tp-size 4. "
    "Offending argument '--foo\\n--tp-size 4', from spec.prefill.extraArgs"
)


def runtime_pod(name: str, role: str, state: Json, last_state: Json | None = None) -> Json:
    return {
        "metadata": {
            "name": name,
            "labels": {"ascendpd.io/deployment": "dsv3", "ascendpd.io/role": role},
        },
        "status": {
            "containerStatuses": [{"name": "sglang", "state": state, "lastState": last_state or {}}]
        },
    }


def terminated(code: int, message: str = "") -> Json:
    return {"terminated": {"exitCode": code, "reason": "Error", "message": message}}


def test_launch_refusal_is_the_role_condition_with_pod_and_message(dsv3: Json) -> None:
    pods = [
        runtime_pod("dsv3-prefill-1-1", "prefill", terminated(ec.EXIT_ARGS_REFUSED, REFUSAL)),
        # restarted since: the refusal is in lastState
        runtime_pod(
            "dsv3-prefill-1-0",
            "prefill",
            {"waiting": {"reason": "CrashLoopBackOff"}},
            terminated(ec.EXIT_ARGS_REFUSED, REFUSAL),
        ),
        runtime_pod("dsv3-decode-0-0", "decode", {"running": {}}),
    ]
    obs = findings_for(OWNER, dsv3, all_children(ready=False), {})
    status = compute_status(dataclasses.replace(obs, pods=pods), T0)
    cond = conditions(status)["PrefillReady"]
    assert (cond["status"], cond["reason"]) == ("False", "LaunchRefused")
    assert cond["message"] == f"pod dsv3-prefill-1-0: {REFUSAL} (and 1 more pods)"
    assert conditions(status)["DecodeReady"]["reason"] == "InstancesReady"
    assert status["phase"] == "Progressing"


def test_other_exits_and_ready_roles_are_no_refusal(dsv3: Json) -> None:
    pods = [
        runtime_pod("dsv3-prefill-1-0", "prefill", terminated(ec.EXIT_ARGS_REFUSED - 2, "layout")),
        runtime_pod("dsv3-prefill-1-1", "prefill", terminated(137)),
        # a refusal on a pod of a ready role is history (e.g. from the previous revision)
        runtime_pod("dsv3-decode-0-0", "decode", {"running": {}}, terminated(5, REFUSAL)),
    ]
    obs = findings_for(OWNER, dsv3, all_children(ready=False), {})
    status = compute_status(dataclasses.replace(obs, pods=pods), T0)
    assert conditions(status)["PrefillReady"]["reason"] == "InstancesNotReady"
    assert conditions(status)["DecodeReady"]["reason"] == "InstancesReady"


def test_a_refusal_without_message_still_says_what_happened(dsv3: Json) -> None:
    pods = [runtime_pod("dsv3-prefill-1-0", "prefill", terminated(ec.EXIT_ARGS_REFUSED))]
    obs = findings_for(OWNER, dsv3, all_children(ready=False), {})
    cond = conditions(compute_status(dataclasses.replace(obs, pods=pods), T0))["PrefillReady"]
    assert (
        cond["message"]
        == "pod dsv3-prefill-1-0: SGLang's parser refused the command line (no message)"
    )
