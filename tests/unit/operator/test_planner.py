"""The planner on observations: what one reconcile writes, reports and tells, with no I/O.

Each test builds the world as ``reconciler.observe`` would read it and checks the plan:
the inspector's writes, the applies, the deletes, the status and the Warning Events.
Expected values come from the example's own numbers (61 layers, 2 prefill and 1 decode
instance, a router) and from the API's reasons, not from the planner's output.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import ascend_pd_runtime.env_contract as ec
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import parse_spec
from ascend_pd_operator.decisions.observation import Observation
from ascend_pd_operator.decisions.planner import Plan, conclude, plan
from ascend_pd_operator.decisions.writes import Failure, Outcome, Write, apply, delete

NOW = "2026-01-01T00:00:00Z"
UID = "uid-1"
#: deepseek-v3-pp2.yaml: 2 prefill and 1 decode instance, a budget per role, a router
#: (its identity before its pod).
EXAMPLE_CHILDREN = [
    ("ConfigMap", "dsv3-kv-layout"),
    ("Service", "dsv3-prefill-0"),
    ("Service", "dsv3-prefill-1"),
    ("Service", "dsv3-decode-0"),
    ("StatefulSet", "dsv3-prefill-0"),
    ("StatefulSet", "dsv3-prefill-1"),
    ("StatefulSet", "dsv3-decode-0"),
    ("PodDisruptionBudget", "dsv3-prefill"),
    ("PodDisruptionBudget", "dsv3-decode"),
    ("ServiceAccount", "dsv3-router"),
    ("Role", "dsv3-router"),
    ("RoleBinding", "dsv3-router"),
    ("Service", "dsv3-router"),
    ("Deployment", "dsv3-router"),
    ("PodDisruptionBudget", "dsv3-router"),
]


def resource(dsv3: Json, generation: int = 1) -> Json:
    cr = copy.deepcopy(dsv3)
    cr["metadata"].update(namespace="llm", uid=UID, generation=generation)
    return cr


def without_inline_config(dsv3: Json) -> tuple[Json, Json]:
    """(the resource with no spec.model.config, the HF config.json it described)."""
    cr = resource(dsv3)
    config = parse_spec(cr["spec"]).model.config
    assert config is not None
    del cr["spec"]["model"]["config"]
    return cr, config.to_config_json()


def conditions(p: Plan) -> dict[str, Json]:
    return {c["type"]: c for c in p.status["conditions"]}


def targets(writes: Any) -> list[tuple[str, str]]:
    return [(w.kind, w.name) for w in writes]


def owned(obj: Json) -> Json:
    obj = copy.deepcopy(obj)
    obj["metadata"]["ownerReferences"] = [{"uid": UID, "kind": "PDDeployment", "name": "dsv3"}]
    return obj


def no_writes(p: Plan) -> bool:
    return not (p.inspector or p.applies or p.deletes)


def test_inline_facts_plan_every_child_in_apply_order(dsv3: Json) -> None:
    p = plan(Observation(resource(dsv3)), NOW)
    assert p.inspector == () and p.deletes == ()
    assert targets(p.applies) == EXAMPLE_CHILDREN
    assert conditions(p)["ModelResolved"]["reason"] == "Inline"
    assert p.status["phase"] == "Pending"  # nothing observed yet
    assert p.events == ()


def test_inspector_success_path(dsv3: Json) -> None:
    cr, config = without_inline_config(dsv3)
    # 1. nothing known: start the inspector, create no workload
    first = plan(Observation(cr), NOW)
    assert targets(first.inspector) == [("Job", "dsv3-inspect")]
    assert first.applies == () and first.deletes == ()
    resolved = conditions(first)["ModelResolved"]
    assert (resolved["status"], resolved["reason"]) == ("False", "InspectingModel")
    assert first.status["phase"] == "Pending" and first.events == ()
    job = owned(first.inspector[0].manifest or {})
    # 2. the Job runs: wait, write nothing
    running = plan(Observation(cr, inspector_job={**job, "status": {"active": 1}}), NOW)
    assert no_writes(running)
    assert conditions(running)["ModelResolved"]["reason"] == "InspectingModel"
    # 3. the Job succeeded: store its result; the workloads follow from those facts
    pod = {
        "metadata": {"name": "dsv3-inspect-abc", "creationTimestamp": NOW},
        "status": {
            "containerStatuses": [
                {"state": {"terminated": {"message": ec.encode_inspect_result(config=config)}}}
            ]
        },
    }
    done = {**job, "status": {"succeeded": 1}}
    stored = plan(Observation(cr, inspector_job=done, inspector_pods=[pod]), NOW)
    assert targets(stored.inspector) == [("ConfigMap", "dsv3-model-facts")]
    facts_cm = stored.inspector[0].manifest or {}
    assert json.loads(facts_cm["data"][ec.MODEL_CONFIG_KEY]) == config
    assert targets(stored.applies) == EXAMPLE_CHILDREN
    # 4. the next observation reads the stored facts: no inspector write, same workloads
    after = plan(Observation(cr, facts_configmap=owned(facts_cm), inspector_job=done), NOW)
    assert after.inspector == ()
    assert targets(after.applies) == EXAMPLE_CHILDREN
    resolved = conditions(after)["ModelResolved"]
    assert (resolved["status"], resolved["reason"]) == ("True", "Inspected")
    assert "61 layers" in resolved["message"]
    # the stored facts are kept when the workloads are pruned
    children = {"ConfigMap": [owned(facts_cm)], "Job": [job]}
    assert (
        plan(Observation(cr, facts_configmap=owned(facts_cm), children=children), NOW).deletes == ()
    )


def test_inspection_failed_waits_for_a_spec_change(dsv3: Json) -> None:
    cr, _ = without_inline_config(dsv3)
    job = owned(plan(Observation(cr), NOW).inspector[0].manifest or {})
    failed = {**job, "status": {"failed": 1, "conditions": [{"reason": "DeadlineExceeded"}]}}
    same = plan(Observation(cr, inspector_job=failed), NOW)
    assert no_writes(same)
    cond = conditions(same)["ModelResolved"]
    assert (cond["reason"], cond["message"]) == ("InspectionFailed", "DeadlineExceeded")
    assert same.status["phase"] == "Invalid"
    assert [(e.type, e.reason) for e in same.events] == [("Warning", "InspectionFailed")]
    # the user edits the spec (generation 2): the inspector restarts from scratch
    edited = copy.deepcopy(cr)
    edited["metadata"]["generation"] = 2
    retry = plan(Observation(edited, inspector_job=failed), NOW)
    assert retry.inspector == (
        delete("Job", "dsv3-inspect"),
        delete("ConfigMap", "dsv3-model-facts"),
    )
    assert retry.applies == ()


def test_an_inspector_that_refuses_the_env_contract_is_env_contract_mismatch(
    dsv3: Json, tmp_path: Any, monkeypatch: Any
) -> None:
    """The Job the operator writes, run by an image that speaks another contract version:
    the inspector's real entry point exits 6 with its message, and ModelResolved says
    EnvContractMismatch (as a role's condition does for the launcher), with a Warning."""
    from ascend_pd_runtime import env_contract
    from ascend_pd_runtime.cli import main as runtime_cli

    cr, _ = without_inline_config(dsv3)
    job = owned(plan(Observation(cr), NOW).inspector[0].manifest or {})
    container = job["spec"]["template"]["spec"]["containers"][0]
    out = tmp_path / "termination-log"
    for var in container["env"]:
        monkeypatch.setenv(var["name"], var["value"])
    monkeypatch.setenv(ec.INSPECT_OUTPUT, str(out))
    monkeypatch.setattr(env_contract, "SPOKEN_CONTRACT_VERSIONS", (ec.CONTRACT + 1,))
    code = runtime_cli(container["command"][1:])
    assert code == ec.EXIT_CONTRACT_VERSION
    pod = {"metadata": {"name": "dsv3-inspect-x", "creationTimestamp": NOW},
           "status": {"phase": "Failed", "containerStatuses": [{"name": "inspect", "state": {
               "terminated": {"exitCode": code, "reason": "Error",
                              "message": out.read_text()}}}]}}  # fmt: skip
    failed = {**job, "status": {"failed": 1}}
    same = plan(Observation(cr, inspector_job=failed, inspector_pods=[pod]), NOW)
    assert no_writes(same)
    cond = conditions(same)["ModelResolved"]
    assert (cond["status"], cond["reason"]) == ("False", "EnvContractMismatch")
    assert cond["message"] == (
        f"env contract version mismatch: the operator wrote version {ec.CONTRACT} "
        f"(ASCEND_PD_CONTRACT_VERSION), this runtime image's inspector speaks version "
        f"{ec.CONTRACT + 1} (the operator is older than the image); use the runtime image of "
        "the operator's ascend-pd version, or the operator of the image's (docs/upgrade.md)"
    )
    assert same.status["phase"] == "Invalid"
    assert [(e.type, e.reason) for e in same.events] == [("Warning", "EnvContractMismatch")]
    # another failure of the inspector stays InspectionFailed
    pod["status"]["containerStatuses"][0]["state"]["terminated"].update(
        exitCode=1, message=ec.encode_inspect_result(error="config.json: not found")
    )
    other = plan(Observation(cr, inspector_job=failed, inspector_pods=[pod]), NOW)
    assert conditions(other)["ModelResolved"]["reason"] == "InspectionFailed"


def test_invalid_spec_writes_nothing_and_tells_once(dsv3: Json) -> None:
    cr = resource(dsv3)
    cr["spec"]["prefill"]["devicesPerNode"] = 6
    stale = owned({"kind": "Service", "metadata": {"name": "dsv3-prefill-7", "labels": {}}})
    p = plan(Observation(cr, children={"Service": [stale]}), NOW)
    assert no_writes(p)  # not even a prune: the running children stay
    cond = conditions(p)["Validated"]
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
    assert "devicesPerNode 6" in cond["message"]
    assert p.status["phase"] == "Invalid"
    assert [e.reason for e in p.events] == ["InvalidSpec"]
    again = copy.deepcopy(cr)
    again["status"] = p.status
    assert plan(Observation(again), NOW).events == ()  # the same message: no second Event


def configmap_ref(dsv3: Json, key: str = "config.json") -> Json:
    cr, _ = without_inline_config(dsv3)
    cr["spec"]["model"]["configMapRef"] = {"name": "dsv3-config", "key": key}
    return cr


def test_missing_configmap(dsv3: Json) -> None:
    p = plan(Observation(configmap_ref(dsv3)), NOW)
    assert no_writes(p)
    cond = conditions(p)["ModelResolved"]
    assert (cond["status"], cond["reason"]) == ("False", "ConfigMapNotFound")
    assert "ConfigMap dsv3-config key config.json not found" in cond["message"]
    assert [e.reason for e in p.events] == ["ConfigMapNotFound"]


def test_missing_key_and_invalid_model_config(dsv3: Json) -> None:
    _, config = without_inline_config(dsv3)
    cm = {"metadata": {"name": "dsv3-config"}, "data": {"other.json": json.dumps(config)}}
    missing = plan(Observation(configmap_ref(dsv3), user_configmap=cm), NOW)
    assert no_writes(missing)
    assert conditions(missing)["ModelResolved"]["reason"] == "ConfigMapKeyMissing"
    assert missing.status["phase"] == "Invalid"
    broken = {**cm, "data": {"config.json": '{"num_hidden_layers": 61,'}}
    invalid = plan(Observation(configmap_ref(dsv3), user_configmap=broken), NOW)
    assert no_writes(invalid)
    cond = conditions(invalid)["ModelResolved"]
    assert cond["reason"] == "InvalidModelConfig" and "not valid JSON" in cond["message"]
    assert [e.reason for e in invalid.events] == ["InvalidModelConfig"]
    found = plan(
        Observation(
            configmap_ref(dsv3), user_configmap={**cm, "data": {"config.json": json.dumps(config)}}
        ),
        NOW,
    )
    assert targets(found.applies) == EXAMPLE_CHILDREN


def test_incompatible_layout_writes_nothing(dsv3: Json) -> None:
    cr = resource(dsv3)
    cr["spec"]["model"]["config"]["numNextnPredictLayers"] = 0
    stale = owned({"kind": "StatefulSet", "metadata": {"name": "dsv3-prefill-0", "labels": {}}})
    p = plan(Observation(cr, children={"StatefulSet": [stale]}), NOW)
    assert no_writes(p)
    cond = conditions(p)["KVLayoutCompatible"]
    assert (cond["status"], cond["reason"]) == ("False", "Incompatible")
    assert "num_nextn_predict_layers 0" in cond["message"]
    assert p.status["phase"] == "Invalid"
    assert [e.reason for e in p.events] == ["Incompatible"]


def test_pruning_deletes_only_our_stale_children(dsv3: Json) -> None:
    def child(kind: str, name: str, component: str = "prefill") -> Json:
        labels = {"app.kubernetes.io/component": component}
        return owned({"kind": kind, "metadata": {"name": name, "labels": labels}})

    someone_elses = child("Service", "dsv3-prefill-8")
    someone_elses["metadata"]["ownerReferences"] = [{"uid": "another-uid"}]
    children = {
        "Service": [child("Service", "dsv3-prefill-0"), child("Service", "dsv3-prefill-7"),
                    someone_elses],
        "StatefulSet": [child("StatefulSet", "dsv3-decode-1", "decode")],
        "ConfigMap": [child("ConfigMap", "dsv3-model-facts", "model-facts")],
        "PodGroup": [child("PodGroup", "dsv3-prefill-0")],
    }  # fmt: skip
    p = plan(Observation(resource(dsv3), children=children), NOW)
    assert sorted(targets(p.deletes)) == [
        ("PodGroup", "dsv3-prefill-0"),  # gang scheduling is off in the example
        ("Service", "dsv3-prefill-7"),
        ("StatefulSet", "dsv3-decode-1"),
    ]
    assert all(w.verb == "delete" for w in p.deletes)


def test_a_refused_apply_is_reported_by_name(dsv3: Json) -> None:
    p = plan(Observation(resource(dsv3)), NOW)
    sts = p.applies[4]
    failed = conclude(p, Outcome(failure=Failure(sts, 422, "spec.replicas: Invalid value")))
    ready = conditions(failed)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "ApplyFailed")
    assert ready["message"] == "applying StatefulSet dsv3-prefill-0: spec.replicas: Invalid value"
    assert [(e.reason, e.message) for e in failed.events] == [
        ("ApplyFailed", f"Ready: {ready['message']}")
    ]
    gang = resource(dsv3)
    gang["spec"]["scheduling"] = {"gang": "volcano"}
    p = plan(Observation(gang), NOW)
    podgroup = next(w for w in p.applies if w.kind == "PodGroup")
    failed = conclude(p, Outcome(failure=Failure(podgroup, 404, "not found")))
    assert "the cluster has no PodGroup API" in conditions(failed)["Ready"]["message"]


def test_a_refused_prune_is_reported_as_a_prune(dsv3: Json) -> None:
    stale = owned({"kind": "StatefulSet", "metadata": {"name": "dsv3-decode-1", "labels": {}}})
    p = plan(Observation(resource(dsv3), children={"StatefulSet": [stale]}), NOW)
    assert p.deletes == (delete("StatefulSet", "dsv3-decode-1"),)
    failed = conclude(p, Outcome(failure=Failure(p.deletes[0], 403, "forbidden")))
    ready = conditions(failed)["Ready"]
    assert (ready["reason"], ready["message"]) == (
        "PruneFailed",
        "deleting StatefulSet dsv3-decode-1: forbidden",
    )


def test_apply_responses_replace_the_observed_children(dsv3: Json) -> None:
    p = plan(Observation(resource(dsv3)), NOW)
    assert p.status["phase"] == "Pending"
    live = {(w.kind, w.name): w.manifest or {} for w in p.applies}
    created = conclude(p, Outcome(live=live))
    assert created.status["phase"] == "Progressing"  # every instance exists, none ready


def runtime_pod(name: str, role: str, exit_code: int, message: str) -> Json:
    ended = {"terminated": {"exitCode": exit_code, "message": message}}
    labels = {"ascendpd.io/deployment": "dsv3", "ascendpd.io/role": role}
    return {
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "status": {"containerStatuses": [{"state": {"waiting": {}}, "lastState": ended}]},
    }


def test_launch_refused_names_the_pod_once(dsv3: Json) -> None:
    cr = resource(dsv3)
    message = "SGLang 0.5.23 refused the command line: ambiguous option: --cuda-graph-max-bs"
    pods = [
        runtime_pod("dsv3-prefill-1-0", "prefill", ec.EXIT_ARGS_REFUSED, message),
        runtime_pod("dsv3-decode-0-0", "decode", 1, "out of memory"),  # not a refusal
        runtime_pod("dsv3-inspect-x", "model-inspector", ec.EXIT_ARGS_REFUSED, "no"),
    ]
    applied = plan(Observation(cr), NOW)
    cr["status"] = conclude(
        applied, Outcome(live={(w.kind, w.name): w.manifest or {} for w in applied.applies})
    ).status
    sts = [owned(w.manifest or {}) for w in applied.applies if w.kind == "StatefulSet"]
    observed = Observation(cr, children={"StatefulSet": sts}, pods=pods)
    p = plan(observed, NOW)
    prefill, decode = conditions(p)["PrefillReady"], conditions(p)["DecodeReady"]
    assert (prefill["reason"], prefill["message"]) == (
        "LaunchRefused",
        f"pod dsv3-prefill-1-0: {message}",
    )
    assert decode["reason"] == "InstancesNotReady"
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "LaunchRefused")]
    cr["status"] = p.status
    assert plan(Observation(cr, children={"StatefulSet": sts}, pods=pods), NOW).events == ()


def test_writes_describe_themselves() -> None:
    manifest = {"kind": "Service", "metadata": {"name": "x"}}
    assert apply(manifest).describe() == "applying Service x"
    assert delete("Job", "y").describe() == "deleting Job y"


def test_a_workload_whose_selector_changed_is_replaced_not_applied(dsv3: Json) -> None:
    """A router created before the component label existed selects ``ascendpd.io/role:
    router``; the API server refuses to change a Deployment's selector, so the plan deletes
    it (the next reconcile creates it anew) instead of applying what would be refused."""
    old_router = owned({
        "kind": "Deployment",
        "metadata": {"name": "dsv3-router", "labels": {"ascendpd.io/deployment": "dsv3"}},
        "spec": {"selector": {"matchLabels": {"ascendpd.io/deployment": "dsv3",
                                              "ascendpd.io/role": "router"}}},
    })  # fmt: skip
    p = plan(Observation(resource(dsv3), children={"Deployment": [old_router]}), NOW)
    assert targets(p.deletes) == [("Deployment", "dsv3-router")]
    assert ("Deployment", "dsv3-router") not in targets(p.applies)
    assert len(p.applies) == len(EXAMPLE_CHILDREN) - 1

    # once it is gone (or when its selector is already the desired one) it is applied again
    current = copy.deepcopy(old_router)
    labels = {"ascendpd.io/deployment": "dsv3", "app.kubernetes.io/component": "router"}
    current["spec"]["selector"] = {"matchLabels": labels}
    again = plan(Observation(resource(dsv3), children={"Deployment": [current]}), NOW)
    assert again.deletes == () and ("Deployment", "dsv3-router") in targets(again.applies)


def placed_pod(name: str, node: str, terminating: bool = False) -> Json:
    """A Ready runtime pod of dsv3-prefill-0 on ``node`` (being deleted, if ``terminating``)."""
    labels = {"ascendpd.io/deployment": "dsv3", "ascendpd.io/role": "prefill",
              "ascendpd.io/instance": "0"}  # fmt: skip
    meta: Json = {"name": name, "uid": f"uid-{name}", "labels": labels,
                  "creationTimestamp": "2025-12-31T23:50:00Z"}  # fmt: skip
    if terminating:
        meta.update(deletionTimestamp="2025-12-31T23:59:30Z", deletionGracePeriodSeconds=30)
    return {"metadata": meta, "spec": {"nodeName": node},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "sglang", "restartCount": 0}]}}  # fmt: skip


def watched_node(ready: str, since: str, out_of_service: bool = False) -> Json:
    """A node as the node watch keeps it (``recovery.slim_node``)."""
    taints = [{"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute",
               "timeAdded": since}] if out_of_service else []  # fmt: skip
    return {"metadata": {"name": "x"}, "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": ready,
                                       "lastTransitionTime": since}]}}  # fmt: skip


def test_a_lost_nodes_pod_is_force_deleted_once_with_an_event_and_a_record(dsv3: Json) -> None:
    # npu-3 has been unreachable since 23:59:00, 60 s before NOW; the restart then
    # (23:59:00) left pod 1 Terminating on it; forceDeleteAfterSeconds is 60
    cr = resource(dsv3)
    cr["spec"]["recovery"] = {"forceDeleteAfterSeconds": 60}
    lost_at = "2025-12-31T23:59:00Z"
    cr["status"] = {"recovery": [{"instance": "dsv3-prefill-0", "restarts": 1,
                                  "lastRestartTime": lost_at, "windowStart": lost_at,
                                  "windowRestarts": 1}]}  # fmt: skip
    pods = [placed_pod("dsv3-prefill-0-0", "npu-1"),
            placed_pod("dsv3-prefill-0-1", "npu-3", terminating=True)]  # fmt: skip
    nodes = {"npu-1": watched_node("True", "2025-12-01T00:00:00Z"),
             "npu-3": watched_node("Unknown", lost_at)}  # fmt: skip
    ours = frozenset({"uid-dsv3-prefill-0-1"})
    p = plan(Observation(cr, pods=pods, nodes=nodes, our_deletions=ours), NOW)
    by_uid = {"metadata": {"uid": "uid-dsv3-prefill-0-1"}}
    assert p.restarts == (Write("delete", "Pod", "dsv3-prefill-0-1", by_uid, 0),)
    assert p.restarts[0].describe() == "force-deleting Pod dsv3-prefill-0-1"
    forced = [e for e in p.events if e.reason == "PodsForceDeleted"]
    assert [(e.type, e.message) for e in forced] == [(
        "Warning",
        "force-deleting pod dsv3-prefill-0-1 of instance dsv3-prefill-0: node npu-3 unreachable "
        "(Ready=Unknown) for 60 s, past spec.recovery.forceDeleteAfterSeconds (60)",
    )]  # fmt: skip
    (record,) = p.status["recovery"]
    assert record["forceDeletions"] == 1
    assert record["lastForceDeletion"] == {
        "time": NOW, "node": "npu-3", "reason": "NodeUnreachable", "goneSeconds": 60,
        "pods": ["dsv3-prefill-0-1"],
    }  # fmt: skip
    # the next reconcile, before the watch reported the pod gone: it is not deleted again
    cr["status"] = p.status
    again = Observation(cr, pods=pods, nodes=nodes, our_deletions=ours, our_force_deletions=ours)
    second = plan(again, NOW)
    assert (
        second.restarts == () and [e for e in second.events if e.reason == "PodsForceDeleted"] == []
    )


def test_an_out_of_service_node_restarts_the_instance_and_force_deletes_only_its_pod(
    dsv3: Json,
) -> None:
    cr = resource(dsv3)  # forceDeleteAfterSeconds not set: the taint is honoured anyway
    pods = [placed_pod("dsv3-prefill-0-0", "npu-1"), placed_pod("dsv3-prefill-0-1", "npu-3")]
    nodes = {"npu-1": watched_node("True", "2025-12-01T00:00:00Z"),
             "npu-3": watched_node("True", "2025-12-31T23:59:55Z", True)}  # fmt: skip
    p = plan(Observation(cr, pods=pods, nodes=nodes), NOW)
    # the whole instance in one request (by its labels), then the lost node's pod forced
    lost_uid = "uid-dsv3-prefill-0-1"
    instance = {"metadata": {"labels": {"ascendpd.io/deployment": "dsv3",
                                        "ascendpd.io/role": "prefill",
                                        "ascendpd.io/instance": "0"}}}  # fmt: skip
    assert p.restarts == (
        Write("restart", "Pod", "dsv3-prefill-0", instance),
        Write("delete", "Pod", "dsv3-prefill-0-1", {"metadata": {"uid": lost_uid}}, 0),
    )
    told = [e.reason for e in p.events if e.reason in ("InstanceRestarted", "PodsForceDeleted")]
    assert told == ["InstanceRestarted", "PodsForceDeleted"]


def _scaled_decode(dsv3: Json) -> Json:
    cr = resource(copy.deepcopy(dsv3))
    cr["spec"]["decode"]["scaling"] = {"mode": "External", "minReplicas": 1, "maxReplicas": 4}
    return cr


def test_a_scaled_role_gets_its_scaler_created_once_and_its_status_without_empty_strings(
    dsv3: Json,
) -> None:
    cr = _scaled_decode(dsv3)
    first = plan(Observation(resource=cr), NOW)
    creates = [w for w in first.applies if w.verb == "create"]
    assert [(w.kind, w.name) for w in creates] == [("PDRoleScaler", "dsv3-decode")]
    assert creates[0].manifest["spec"] == {"replicas": cr["spec"]["decode"]["replicas"]}
    # the scaler exists: never created (nor applied) again; its status is written, and an
    # empty message is left out (the API server reads "" in a merge patch as null)
    scaler = owned(copy.deepcopy(creates[0].manifest))
    scaler["metadata"]["generation"] = 1
    second = plan(Observation(resource=cr, children={"PDRoleScaler": [scaler]}), NOW)
    assert not [w for w in second.applies if w.kind == "PDRoleScaler"]
    (status,) = second.scaler_status
    assert status.verb == "status" and "" not in status.manifest["status"].values()
    assert status.manifest["status"]["selector"] == (
        "ascendpd.io/deployment=dsv3,ascendpd.io/role=decode,ascendpd.io/leader=true,"
        "!ascendpd.io/draining"
    )
    # back to Static: the scaler is pruned
    cr["spec"]["decode"].pop("scaling")
    third = plan(Observation(resource=cr, children={"PDRoleScaler": [scaler]}), NOW)
    assert ("PDRoleScaler", "dsv3-decode") in [(w.kind, w.name) for w in third.deletes]


def test_the_reconcile_never_touches_the_pd_planners_status_key(dsv3: Json) -> None:
    """The scaler's status.planner is the PD planner's: the reconcile's status write compares
    and patches only its own keys, so it neither nulls the planner's nor writes because of it."""
    cr = _scaled_decode(dsv3)
    cr["spec"]["decode"]["scaling"]["mode"] = "Planner"
    first = plan(Observation(resource=cr), NOW)
    (create,) = [w for w in first.applies if w.verb == "create"]
    scaler = owned(copy.deepcopy(create.manifest))
    scaler["metadata"]["generation"] = 1
    planner = {"lastDecision": "hold", "reason": "hold: decode-1 starting", "replicas": 2,
               "time": NOW, "metrics": {}}  # fmt: skip
    scaler["status"] = {"planner": planner}
    (write,) = plan(Observation(resource=cr, children={"PDRoleScaler": [scaler]}),
                    NOW).scaler_status  # fmt: skip
    assert "planner" not in write.manifest["status"], write.manifest
    # the reconcile's keys as it would write them, and the planner's beside them: no write
    scaler["status"] = {**write.manifest["status"], "planner": planner}
    again = plan(Observation(resource=cr, children={"PDRoleScaler": [scaler]}), NOW)
    assert again.scaler_status == ()
    # a stale message of the reconcile's own is still removed (its keys, its nulls)
    scaler["status"] = {**write.manifest["status"], "message": "old", "planner": planner}
    (cleared,) = plan(Observation(resource=cr, children={"PDRoleScaler": [scaler]}),
                      NOW).scaler_status  # fmt: skip
    assert cleared.manifest["status"] == {"message": None}
