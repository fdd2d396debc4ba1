"""Operator-made template changes wait for the user: an operator upgrade restarts nothing.

A new operator may build a different pod template for a spec nobody changed (a new label,
env var or default in a builder). Applied, it would restart every instance of every
deployment, each reloading hundreds of GB of weights. So each workload whose pods a
template change restarts (an instance's StatefulSet, the router's Deployment) records two
labels at every apply: a digest of what it was applied for (``LABEL_APPLIED_FOR``: the
PDDeployment's ``metadata.generation``, the user's trigger
``ANNOTATION_APPLY_OPERATOR_UPDATES``, and for the router the KV-layout generation it
routes to and its discovery label, which a rollout moves) and a digest of the template
applied (``LABEL_TEMPLATE_DIGEST``). Then, per workload:

- applied for other inputs than now (the user changed the spec or the trigger), or
  ``spec.rollout.operatorUpdates: Rolling``, or the same template: it is applied, and the
  rollout updates its instances within their bounds as for any spec change;
- applied for the same inputs (or, by an operator before these records, while
  ``status.observedGeneration`` still equals the generation) with another template:
  nothing the user did is the cause. The live template is read (the cache keeps none:
  ``Plan.needs_templates``, one GET per workload and resourceVersion) and compared with
  the desired one (``template_diff``); if applying would change it, the workload is not
  applied, and its role's ``updatePending`` names the fields.

Every child that restarts no pod (Services, budgets, ConfigMaps, PodGroups) is applied at
once. A change of the runtime's env contract version is marked required (the runtime image
of the new operator's release speaks only the new contract), and still waits for the user.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import (
    ANNOTATION_APPLY_OPERATOR_UPDATES,
    COMPONENT_ROUTER,
    COND_UPDATE_PENDING,
    LABEL_APPLIED_FOR,
    LABEL_ROLE,
    LABEL_TEMPLATE_DIGEST,
    REASON_OPERATOR_CHANGE_REQUIRED,
    REASON_OPERATOR_CHANGED,
    REASON_UP_TO_DATE,
    ROLES,
    Owner,
    router_name,
)
from ascend_pd_operator.decisions.template_diff import changes
from ascend_pd_runtime.env_contract import CONTRACT_VERSION

#: At most this many changed fields per role in status (the rest are counted).
LISTED_CHANGES = 12


@dataclass(frozen=True)
class Held:
    """What waits for the user, per role (``ROLES``, and ``COMPONENT_ROUTER``)."""

    #: role -> the fields an update would change (sorted, each once)
    changes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: roles whose update carries a change the runtime cannot run without
    required: frozenset[str] = frozenset()

    def summary(self) -> str:
        """The roles, in order, that wait: ``prefill,router``."""
        return ",".join(r for r in (*ROLES, COMPONENT_ROUTER) if self.changes.get(r))


def trigger(resource: Json) -> str:
    """The user's one-off trigger: the value of ``ANNOTATION_APPLY_OPERATOR_UPDATES``."""
    annotations = (resource.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(ANNOTATION_APPLY_OPERATOR_UPDATES, ""))


def stamp(owner: Owner, trigger_value: str, router_inputs: str = "") -> str:
    """The record of what a template was applied for: a digest (a label value) of the
    generation, the trigger and, for the router, what it routes by."""
    parts = [str(owner.generation), trigger_value, *([router_inputs] if router_inputs else [])]
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:16]


def _labels(obj: Json) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _required(found: Iterable[str]) -> bool:
    return any(f"env[{CONTRACT_VERSION}]" in c for c in found)


def template_digest(template: Json) -> str:
    """The digest a workload records of the template it was applied with."""
    text = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Inputs:
    """What a reconcile knows of the user's inputs (the same for every workload)."""

    owner: Owner
    #: the user's trigger (``trigger``)
    trigger: str
    #: what the router's template follows besides the spec (serving generation, discovery)
    router_inputs: str
    #: ``status.observedGeneration`` before this reconcile
    observed_generation: int
    #: ``spec.rollout.operatorUpdates`` is Rolling
    rolling: bool


@dataclass(frozen=True)
class Hold:
    """``hold``'s answer: the children to apply, what waits, what must be read first."""

    children: tuple[Json, ...]
    held: Held
    #: (kind, name) of held workloads, neither applied nor replaced
    kept: frozenset[tuple[str, str]] = frozenset()
    #: (kind, name) whose live template must be read before deciding
    needs_templates: tuple[tuple[str, str], ...] = ()


def hold(
    inputs: Inputs,
    children: Iterable[Json],
    live: Mapping[tuple[str, str], Json],
    templates: Mapping[tuple[str, str], tuple[str, Json]],
) -> Hold:
    """The children with each restarting workload's records set, less the workloads whose
    update waits for the user. ``live`` maps (kind, name) to the cached live object (no
    template); ``templates``, (kind, name) to (resourceVersion, live template) as read."""
    owner = inputs.owner
    router = router_name(owner)
    out: list[Json] = []
    found: dict[str, set[str]] = {}
    kept: set[tuple[str, str]] = set()
    needed: list[tuple[str, str]] = []
    for manifest in children:
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        is_router = kind == "Deployment" and name == router
        role = COMPONENT_ROUTER if is_router else _labels(manifest).get(LABEL_ROLE, "")
        if not is_router and not (kind == "StatefulSet" and role in ROLES):
            out.append(manifest)
            continue
        record = stamp(owner, inputs.trigger, inputs.router_inputs if is_router else "")
        digest = template_digest(manifest["spec"]["template"])
        manifest = copy.deepcopy(manifest)
        labels = manifest["metadata"].setdefault("labels", {})
        labels.update({LABEL_APPLIED_FOR: record, LABEL_TEMPLATE_DIGEST: digest})
        current = live.get((kind, name))
        diff = (
            []
            if current is None or inputs.rolling
            else _waiting(inputs, record, digest, manifest, current, templates.get((kind, name)))
        )
        if diff is None:
            needed.append((kind, name))
            kept.add((kind, name))
        elif diff:
            found.setdefault(role, set()).update(diff)
            kept.add((kind, name))
        else:
            out.append(manifest)
    held = Held(
        {role: tuple(sorted(c)) for role, c in found.items()},
        frozenset(role for role, c in found.items() if _required(c)),
    )
    return Hold(tuple(out), held, frozenset(kept), tuple(needed))


def _waiting(
    inputs: Inputs,
    record: str,
    digest: str,
    manifest: Json,
    current: Json,
    read: tuple[str, Json] | None,
) -> list[str] | None:
    """What applying ``manifest`` would change that the user did not ask for ([]: apply
    it; None: the live template must be read first)."""
    meta = current.get("metadata") or {}
    labels = meta.get("labels") or {}
    recorded = labels.get(LABEL_APPLIED_FOR)
    if recorded is None:
        owner = inputs.owner
        unchanged = inputs.observed_generation == owner.generation and not inputs.trigger
    else:
        unchanged = recorded == record
    if not unchanged or labels.get(LABEL_TEMPLATE_DIGEST) == digest:
        return []
    if read is None or read[0] != str(meta.get("resourceVersion", "")):
        return None
    found = changes(manifest["spec"]["template"], read[1])
    selector = (current.get("spec") or {}).get("selector")
    if selector and selector != manifest["spec"]["selector"]:
        found.append("selector changed")
    return found


def listed(found: tuple[str, ...]) -> list[str]:
    """``updatePending`` of a role: the first ``LISTED_CHANGES`` fields, then a count."""
    if len(found) <= LISTED_CHANGES:
        return list(found)
    return [*found[:LISTED_CHANGES], f"and {len(found) - LISTED_CHANGES} more"]


def condition(owner: Owner, held: Held) -> Json:
    """The UpdatePending condition (type, status, reason, message)."""
    if not held.summary():
        return {"type": COND_UPDATE_PENDING, "status": "False", "reason": REASON_UP_TO_DATE,
                "message": "every pod template is the one this operator builds"}  # fmt: skip
    parts = []
    for role in (*ROLES, COMPONENT_ROUTER):
        found = held.changes.get(role)
        if found:
            shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
            parts.append(f"{role}: {shown}")
    required = sorted(held.required)
    note = (f"; required by the runtime ({', '.join(required)}: its env contract version "
            "changed)" if required else "")  # fmt: skip
    return {
        "type": COND_UPDATE_PENDING,
        "status": "True",
        "reason": REASON_OPERATOR_CHANGE_REQUIRED if required else REASON_OPERATOR_CHANGED,
        "message": (
            f"this operator would change the pod templates of {'; '.join(parts)}{note}. Running "
            "pods keep theirs until the next spec change, spec.rollout.operatorUpdates: "
            f"Rolling, or kubectl annotate pdd {owner.name} --overwrite "
            f"{ANNOTATION_APPLY_OPERATOR_UPDATES}=<a new value>"
        ),
    }
