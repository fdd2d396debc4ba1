"""``ascend-pd render -f CR.yaml [--model-config config.json]``: every child, offline.

Runs the operator's own planner (``planner.plan``) with no cluster: exit 0 and the
manifests on stdout; 1 on a spec that breaks a rule or a missing/unusable model
config; 2 when the layout is incompatible. Messages go to stderr, and so do warnings
beside rendered manifests: a role whose weights do not fit its NPUs (``fit``), and a
transfer protocol that cannot carry the KV (``TransferProtocolMismatch``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_operator.api import models
from ascend_pd_operator.api.vocabulary import (
    COND_PLACEMENT_FEASIBLE,
    REASON_INVALID_LAYOUT,
    REASON_INVALID_MODEL_CONFIG,
    REASON_TRANSFER_PROTOCOL_MISMATCH,
    ROLES,
)
from ascend_pd_operator.decisions.observation import Observation
from ascend_pd_operator.decisions.planner import Plan, plan
from ascend_pd_runtime.errors import BadInput
from ascend_pd_runtime.fit import GIB, NPU_MEMORY_BYTES, FitReport, RoleParallel, check_fit
from ascend_pd_runtime.model_facts import BUNDLED_MODELS, config_path, load_model_facts

EXIT_OK, EXIT_BAD_INPUT, EXIT_INCOMPATIBLE = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--filename", required=True, help="PDDeployment YAML ('-': stdin)")
    parser.add_argument(
        "--model-config",
        help="config.json (or model directory), or a bundled model ("
        + ", ".join(BUNDLED_MODELS)
        + "); it wins over spec.model",
    )
    parser.add_argument("--namespace", help="namespace when the CR has none (default)")
    parser.add_argument(
        "--npu-memory-gib",
        type=float,
        default=NPU_MEMORY_BYTES / GIB,
        help="memory of one NPU for the fit check (64: A2's 910B, each A3 die)",
    )


def load_documents(text: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    if not any(d.get("kind") == models.KIND for d in docs):
        raise BadInput(f"no {models.KIND} found (kinds: {[d.get('kind') for d in docs]})")
    return docs


def render(
    resource: dict[str, Any],
    model_config: str | None,
    namespace: str | None,
    configmaps: list[dict[str, Any]] | None = None,
    memory_bytes: int = NPU_MEMORY_BYTES,
) -> tuple[int, list[dict[str, Any]], str]:
    """(exit code, manifests, message) for one PDDeployment: the operator's own plan for
    it, observed offline (its ConfigMaps from the same file, --model-config's facts). With
    exit 0 the message holds the notes and warnings, one a line."""
    meta = dict(resource.get("metadata") or {})
    meta["namespace"] = meta.get("namespace") or namespace or "default"
    resource = {**resource, "metadata": meta}
    name = str(meta.get("name", ""))
    # A ConfigMap applied from the same file is what the operator would read.
    ref = ((resource.get("spec") or {}).get("model") or {}).get("configMapRef") or {}
    found = [
        cm
        for cm in configmaps or []
        if cm.get("metadata", {}).get("name") == ref.get("name")
        and cm.get("metadata", {}).get("namespace", meta["namespace"]) == meta["namespace"]
    ]
    local = load_model_facts(config_path(model_config)) if model_config else None
    observation = Observation(
        resource, user_configmap=found[0] if found else None, local_facts=local
    )
    todo = plan(observation, now="")
    if todo.validation.spec is None:
        return EXIT_BAD_INPUT, [], f"{name}: invalid: {todo.validation.error}"
    facts = todo.facts
    if facts is None or facts.facts is None:
        if facts is not None and (found or facts.reason == REASON_INVALID_MODEL_CONFIG):
            return EXIT_BAD_INPUT, [], f"{name}: {facts.message}"
        return (
            EXIT_BAD_INPUT,
            [],
            f"{name}: spec.model.config is not given; pass --model-config config.json "
            "(the operator would read spec.model.configMapRef or inspect the model)",
        )
    desired = todo.desired
    if desired is None or not desired.ok:
        reason, message = (desired.reason, desired.message) if desired else ("", "")
        code = EXIT_BAD_INPUT if reason == REASON_INVALID_LAYOUT else EXIT_INCOMPATIBLE
        return code, [], f"{name}: KV layout {reason}: {message}"
    manifests = [w.manifest for w in todo.applies if w.manifest is not None]
    lines = [f"{name}: warning: {w}" for w in warnings(todo, memory_bytes)]
    placed = todo.placement
    if placed is not None and placed.blocked:
        # Offline there are no nodes: the operator chooses a domain from the cluster's.
        held = ", ".join(sorted(f"{name}-{role}-{index}" for role, index in placed.blocked))
        lines.append(
            f"{name}: note: spec.placement pins each instance to a domain of the cluster's "
            f"nodes when the operator creates it; offline none is known, so {held} "
            "are not rendered"
        )
    return EXIT_OK, manifests, "\n".join(lines)


def fit_report(todo: Plan, memory_bytes: int = NPU_MEMORY_BYTES) -> FitReport:
    """Whether the weights of the planned deployment fit its NPUs (``fit.check_fit``)."""
    spec, facts, desired = todo.validation.spec, todo.facts, todo.desired
    assert spec is not None and facts is not None and facts.facts is not None
    assert desired is not None and desired.layout is not None
    roles = {
        r: RoleParallel(spec.role(r).parallelism.tensor, spec.role(r).parallelism.data,
                        tuple(spec.role(r).extra_args))
        for r in ROLES
    }  # fmt: skip
    return check_fit(facts.facts, desired.layout, roles, memory_bytes)


def warnings(todo: Plan, memory_bytes: int = NPU_MEMORY_BYTES) -> list[str]:
    """What a rendered deployment would run into: weights that do not fit, and a transfer
    protocol the spec says cannot carry the KV (the PlacementFeasible condition it gets)."""
    out = fit_report(todo, memory_bytes).warnings() + unreserved_memory(todo)
    if todo.placement is not None and todo.placement.blocked:
        return out  # the note on the instances not rendered says it
    mismatch = (COND_PLACEMENT_FEASIBLE, "False", REASON_TRANSFER_PROTOCOL_MISMATCH)
    for cond in (todo.status or {}).get("conditions") or []:
        if (cond.get("type"), cond.get("status"), cond.get("reason")) == mismatch:
            out.append(f"{COND_PLACEMENT_FEASIBLE} {cond['reason']}: {cond['message']}")
    return out


def unreserved_memory(todo: Plan) -> list[str]:
    """A role (or the router) that opted out of the default requests and asks no memory:
    the scheduler reserves none for its pods, and they are evicted first."""
    spec = todo.validation.spec
    assert spec is not None
    parts: list[tuple[str, models.RoleSpec | models.Router]] = [(r, spec.role(r)) for r in ROLES]
    if spec.router.enabled:
        parts.append(("router", spec.router))
    return [
        f"{name} has defaultResources: false and no resources.requests.memory: no host "
        "memory is reserved for its pods, which are evicted first under memory pressure "
        "(docs/models.md)"
        for name, part in parts
        if not part.default_resources and "memory" not in part.resources.requests
    ]


def run(args: argparse.Namespace) -> int:
    try:
        text = sys.stdin.read() if args.filename == "-" else Path(args.filename).read_text()
        docs = load_documents(text)
        configmaps = [d for d in docs if d.get("kind") == "ConfigMap"]
        worst = EXIT_OK
        out: list[dict[str, Any]] = []
        for resource in (d for d in docs if d.get("kind") == models.KIND):
            if args.npu_memory_gib <= 0:
                raise BadInput(f"--npu-memory-gib {args.npu_memory_gib}: expected a size > 0")
            code, manifests, message = render(
                resource, args.model_config, args.namespace, configmaps,
                round(args.npu_memory_gib * GIB),
            )  # fmt: skip
            if message:
                # a note beside rendered manifests is no error
                print(message if code == EXIT_OK else f"error: {message}", file=sys.stderr)
            worst = max(worst, code)
            out += manifests
    except (OSError, yaml.YAMLError, BadInput) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if worst == EXIT_OK:
        print(yaml.safe_dump_all(out, sort_keys=False, width=100), end="")
    return worst
