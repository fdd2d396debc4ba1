"""Where the model facts come from: the spec, a user's ConfigMap, or the inspector Job.

Pure: ``resolve_facts`` (called by ``planner.choose_facts`` only) takes what the
reconciler read from the cluster and says which facts to use, what ModelResolved should
say, and whether to start the inspector or store its result. ``inspector_job`` builds
the one-shot Job that runs ``ascend-pd-runtime inspect`` (contract in
``ascend_pd_runtime.env_contract``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import ascend_pd_runtime.env_contract as ec
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import PDDeploymentSpec
from ascend_pd_operator.api.scheduling import given
from ascend_pd_operator.api.vocabulary import (
    ANNOTATION_GENERATION,
    ANNOTATION_MODEL_PATH,
    COMPONENT_FACTS,
    COMPONENT_INSPECTOR,
    REASON_CONFIGMAP,
    REASON_CONFIGMAP_KEY_MISSING,
    REASON_CONFIGMAP_NOT_FOUND,
    REASON_ENV_CONTRACT_MISMATCH,
    REASON_INLINE,
    REASON_INSPECTED,
    REASON_INSPECTING,
    REASON_INSPECTION_FAILED,
    REASON_INVALID_MODEL_CONFIG,
    REASON_LOCAL,
    REASON_SGLANG_VERSION_MISMATCH,
    Owner,
    inspector_name,
    metadata,
    model_facts_name,
)
from ascend_pd_operator.builders.workloads import (
    model_volume,
    scheduling_fields,
    user_container_fields,
    user_pod_fields,
    user_volumes,
)
from ascend_pd_runtime.errors import ModelConfigError
from ascend_pd_runtime.model_facts import ModelFacts, parse_model_facts


@dataclass(frozen=True)
class InspectorState:
    """What the inspector Job did: running, succeeded (with config) or failed (message)."""

    phase: str  # Running | Succeeded | Failed
    model_path: str = ""
    config: Json | None = None
    error: str = ""
    generation: int = 0
    #: ModelResolved's reason for a failure: InspectionFailed, or EnvContractMismatch when
    #: the inspector refused the env contract's version, or SGLangVersionMismatch the image's
    #: SGLang (the launcher's exit codes for them: ``INSPECTOR_EXIT_REASONS``).
    reason: str = REASON_INSPECTION_FAILED


#: ModelResolved's reason for an inspector exit code (any other: InspectionFailed).
INSPECTOR_EXIT_REASONS = {
    ec.EXIT_CONTRACT_VERSION: REASON_ENV_CONTRACT_MISMATCH,
    ec.EXIT_SGLANG_VERSION: REASON_SGLANG_VERSION_MISMATCH,
}


@dataclass(frozen=True)
class FactsResolution:
    facts: ModelFacts | None
    status: str  # "True" | "False"
    reason: str
    message: str
    start_inspector: bool = False
    restart_inspector: bool = False
    store_config: Json | None = None


def resolve_facts(
    spec: PDDeploymentSpec,
    *,
    local_facts: ModelFacts | None = None,
    user_configmap: Json | None = None,
    facts_configmap: Json | None = None,
    inspector: InspectorState | None = None,
    generation: int = 0,
) -> FactsResolution:
    """Decide the model facts from the sources, in the API's order of precedence.

    ``local_facts`` (``ascend-pd render --model-config``) win over every other source.
    """
    model = spec.model
    if local_facts is not None:
        return FactsResolution(
            local_facts, "True", REASON_LOCAL, _summary(local_facts, "--model-config")
        )
    if model.config is not None:
        return _parsed(model.config.to_config_json(), "spec.model.config", REASON_INLINE)
    if model.config_map_ref is not None:
        ref = model.config_map_ref
        where = f"ConfigMap {ref.name} key {ref.key}"
        if user_configmap is None:
            return FactsResolution(
                None,
                "False",
                REASON_CONFIGMAP_NOT_FOUND,
                f"spec.model.configMapRef: {where} not found",
            )
        text = (user_configmap.get("data") or {}).get(ref.key)
        if text is None:
            return FactsResolution(
                None,
                "False",
                REASON_CONFIGMAP_KEY_MISSING,
                f"spec.model.configMapRef: {where} missing",
            )
        return _from_text(text, where, REASON_CONFIGMAP)
    stored = facts_configmap or {}
    stored_path = (stored.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_MODEL_PATH)
    text = (stored.get("data") or {}).get(ec.MODEL_CONFIG_KEY)
    if text is not None and stored_path == model.path:
        return _from_text(text, f"inspected {model.path}/config.json", REASON_INSPECTED)
    if inspector is None:
        return FactsResolution(
            None,
            "False",
            REASON_INSPECTING,
            f"starting the model inspector for {model.path}",
            start_inspector=True,
        )
    if inspector.model_path != model.path:
        return FactsResolution(
            None,
            "False",
            REASON_INSPECTING,
            f"model path changed to {model.path}; inspecting it again",
            restart_inspector=True,
        )
    if inspector.phase == "Failed":
        retry = inspector.generation != generation
        return FactsResolution(
            None, "False", inspector.reason, inspector.error, restart_inspector=retry
        )
    if inspector.phase == "Succeeded" and inspector.config is not None:
        found = _parsed(inspector.config, f"inspected {model.path}/config.json", REASON_INSPECTED)
        if found.facts is None:
            return found
        return FactsResolution(
            found.facts,
            found.status,
            found.reason,
            found.message,
            store_config=inspector.config,
        )
    return FactsResolution(
        None, "False", REASON_INSPECTING, f"the model inspector is reading {model.path}/config.json"
    )


def _from_text(text: str, where: str, reason: str) -> FactsResolution:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        return FactsResolution(
            None,
            "False",
            REASON_INVALID_MODEL_CONFIG,
            f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
        )
    return _parsed(raw, where, reason)


def _parsed(raw: Any, where: str, reason: str) -> FactsResolution:
    try:
        facts = parse_model_facts(raw, source=where)
    except ModelConfigError as exc:
        return FactsResolution(None, "False", REASON_INVALID_MODEL_CONFIG, str(exc))
    return FactsResolution(facts, "True", reason, _summary(facts, where))


def _summary(facts: ModelFacts, where: str) -> str:
    arch = facts.architecture or facts.attention.upper()
    return (
        f"{arch}: {facts.num_hidden_layers} layers, {facts.num_nextn_predict_layers} MTP, "
        f"{facts.kv_buf_groups} KV buffer groups (from {where})"
    )


def inspector_state(job: Json, pods: list[Json]) -> InspectorState:
    """Read the Job's outcome and its pod's termination message (the inspector's result)."""
    annotations = job.get("metadata", {}).get("annotations") or {}
    model_path = annotations.get(ANNOTATION_MODEL_PATH, "")
    generation = int(annotations.get(ANNOTATION_GENERATION, "0") or 0)
    status = job.get("status") or {}
    message, code = "", 0
    for pod in sorted(pods, key=lambda p: p.get("metadata", {}).get("creationTimestamp", "")):
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (cs.get("state") or {}).get("terminated") or {}
            if terminated.get("message"):
                message, code = terminated["message"], int(terminated.get("exitCode") or 0)
    if status.get("succeeded"):
        config, error = ec.decode_inspect_result(message)
        if config is not None:
            return InspectorState("Succeeded", model_path, config=config, generation=generation)
        return InspectorState("Failed", model_path, error=error, generation=generation)
    if status.get("failed"):
        if message:
            _, error = ec.decode_inspect_result(message)
        else:
            reasons = [c.get("message") or c.get("reason") for c in status.get("conditions") or []]
            error = "; ".join(r for r in reasons if r) or "the model inspector Job failed"
        reason = INSPECTOR_EXIT_REASONS.get(code, REASON_INSPECTION_FAILED)
        return InspectorState("Failed", model_path, error=error, generation=generation,
                              reason=reason)  # fmt: skip
    return InspectorState("Running", model_path, generation=generation)


def inspector_job(owner: Owner, spec: PDDeploymentSpec) -> Json:
    """One-shot Job: ``ascend-pd-runtime inspect`` with the model volume, no NPUs."""
    meta = metadata(
        owner,
        inspector_name(owner),
        COMPONENT_INSPECTOR,
        annotations={
            ANNOTATION_MODEL_PATH: spec.model.path,
            ANNOTATION_GENERATION: str(owner.generation),
        },
    )
    # the spec's SGLang version too: the inspector refuses an image with another
    env = ec.inspector_env(spec.model.path, spec.runtime.sglang_version)
    container: Json = {
        "name": "inspect",
        "image": spec.runtime.image,
        "imagePullPolicy": spec.runtime.image_pull_policy,
        "command": ["ascend-pd-runtime", "inspect"],
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "terminationMessagePath": ec.DEFAULT_INSPECT_OUTPUT,
        "terminationMessagePolicy": "File",
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"memory": "512Mi"},
        },
    }
    # It runs as a prefill pod would: prefill's pull secrets, account, priority and security
    # contexts, and its volumes (a model on a volume of the user's is read from there).
    prefill = spec.prefill
    container.update(user_container_fields(prefill))
    pod_spec: Json = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "containers": [container],
        **{k: v for k, v in scheduling_fields(spec, prefill).items() if k == "priorityClassName"},
        **user_pod_fields(prefill),
    }
    volume = model_volume(spec)
    volumes, mounts = ([volume[0]], [volume[1]]) if volume else ([], [])
    extra_volumes, extra_mounts = user_volumes(prefill)
    if volumes + extra_volumes:
        pod_spec["volumes"] = volumes + extra_volumes
    if mounts + extra_mounts:
        container["volumeMounts"] = mounts + extra_mounts
    # The model lives where prefill runs (a hostPath is only on those nodes).
    if spec.prefill.node_selector:
        pod_spec["nodeSelector"] = dict(spec.prefill.node_selector)
    if spec.prefill.tolerations:
        pod_spec["tolerations"] = [given(t) for t in spec.prefill.tolerations]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": 900,
            "template": {"metadata": {"labels": meta["labels"]}, "spec": pod_spec},
        },
    }


def model_facts_configmap(owner: Owner, spec: PDDeploymentSpec, config: Json) -> Json:
    """The inspector's result, kept so the model is inspected once per path."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(
            owner,
            model_facts_name(owner),
            COMPONENT_FACTS,
            annotations={ANNOTATION_MODEL_PATH: spec.model.path},
        ),
        "data": {ec.MODEL_CONFIG_KEY: json.dumps(config, sort_keys=True, indent=2)},
    }
