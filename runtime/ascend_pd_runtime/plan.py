"""The plan: the KV layout of a deployment as the JSON document everyone shares.

``ascend-pd plan`` prints it, the operator stores it in the ``<name>-kv-layout``
ConfigMap and summarises it in status, and the launcher compares it with what
it computes from the model inside the pod. ``layout_fingerprint`` identifies a
layout (not the transfers or problems) so two sides can compare it cheaply.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .layout import KVLayout, RoleLayout, StageLayout

PlanDict = dict[str, Any]


def plan_document(layout: KVLayout, include_transfers: bool = True) -> PlanDict:
    """The ``ascend-pd plan`` JSON (see the README for the contract)."""
    facts = layout.facts
    prefill_stages = []
    for stage in layout.prefill.stages:
        entry: dict[str, Any] = _stage_dict(stage)
        if include_transfers:
            entry["transfers"] = (
                [list(p) for p in layout.transfers(stage)] if layout.compatible else []
            )
        prefill_stages.append(entry)
    doc: PlanDict = {
        "model": {
            "architecture": facts.architecture,
            "attention": facts.attention,
            "num_hidden_layers": facts.num_hidden_layers,
            "num_nextn_predict_layers": facts.num_nextn_predict_layers,
            "kv_buf_groups": facts.kv_buf_groups,
        },
        "total_kv_layers": facts.total_kv_layers,
        "prefill": _role_dict(layout.prefill, prefill_stages),
        "decode": _role_dict(layout.decode, [_stage_dict(s) for s in layout.decode.stages]),
        "compatible": layout.compatible,
        "problems": list(layout.problems),
    }
    doc["fingerprint"] = _fingerprint(doc)
    return doc


def layout_fingerprint(layout: KVLayout) -> str:
    """The layout's identity (the plan document's ``fingerprint``): the one definition the
    operator's pods, status and the launcher's check share."""
    return _fingerprint(plan_document(layout, include_transfers=False))


def _fingerprint(doc: PlanDict) -> str:
    """Short hash of what both sides must agree on: model shape, roles and stage ranges."""
    essence = {
        "attention": doc["model"]["attention"],
        "total_kv_layers": doc["total_kv_layers"],
        "kv_buf_groups": doc["model"]["kv_buf_groups"],
        "num_nextn_predict_layers": doc["model"]["num_nextn_predict_layers"],
        "roles": {
            role: {
                "pp": doc[role]["pp"],
                "draft_layers": doc[role]["draft_layers"],
                "stages": [[s["start_layer"], s["end_layer"]] for s in doc[role]["stages"]],
            }
            for role in ("prefill", "decode")
        },
    }
    canonical = json.dumps(essence, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _role_dict(role: RoleLayout, stages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"pp": role.pp, "draft_layers": role.draft_layers, "stages": stages}


def _stage_dict(stage: StageLayout) -> dict[str, Any]:
    return {
        "pp_rank": stage.pp_rank,
        "start_layer": stage.start_layer,
        "end_layer": stage.end_layer,
        "kv_pointer_count": stage.kv_pointer_count,
    }


def plan_table(doc: PlanDict) -> str:
    """The plan for people: model, stages with layer ranges and counts, problems."""
    m = doc["model"]
    lines = [
        f"model        {m['architecture'] or '?'} ({m['attention'].upper()}), "
        f"{m['num_hidden_layers']} layers + {m['num_nextn_predict_layers']} MTP, "
        f"{m['kv_buf_groups']} KV buffer groups",
        f"total_kv_layers {doc['total_kv_layers']}   fingerprint {doc['fingerprint']}",
        "",
        f"{'ROLE':<8} {'PP RANK':>7} {'LAYERS':>12} {'DRAFT':>5} {'KV PTRS':>7} {'SENDS':>6}",
    ]
    for role in ("prefill", "decode"):
        last = doc[role]["pp"] - 1
        for s in doc[role]["stages"]:
            draft = doc[role]["draft_layers"] if s["pp_rank"] == last else 0
            sends = str(len(s["transfers"])) if "transfers" in s else "-"
            layers = f"[{s['start_layer']}, {s['end_layer']})"
            lines.append(
                f"{role:<8} {s['pp_rank']:>7} {layers:>12} {draft:>5} "
                f"{s['kv_pointer_count']:>7} {sends:>6}"
            )
    lines.append("")
    if doc["compatible"]:
        lines.append("compatible: yes")
    else:
        lines.append("compatible: NO")
        lines.extend(f"  - {p}" for p in doc["problems"])
    return "\n".join(lines)
