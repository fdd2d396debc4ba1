"""The PDDeployment CustomResourceDefinition, generated from the pydantic models.

The pydantic JSON schema is turned into a structural OpenAPI v3 schema: refs
inlined, ``Optional`` unwrapped (no ``anyOf`` with null), titles dropped,
free-form maps marked ``x-kubernetes-preserve-unknown-fields``, and the CEL
rules of ``rules`` attached where they apply (every supported API server runs CEL).
``k8s_minor`` leaves out the rules whose CEL an older API server prices past its
budget (``Rule.since``; the copies for 1.28 and 1.29 are ``crd_cli.COPIES``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel

from ascend_pd_operator import __version__
from ascend_pd_operator.api import models
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.rules import RULES
from ascend_pd_operator.api.rules.rule import Rule
from ascend_pd_operator.api.vocabulary import ANNOTATION_GENERATED_BY

_READY = '.status.conditions[?(@.type=="Ready")]'
#: ``kubectl get pdd``: whether it serves, each role's ready/effective instances and why not;
#: ``-o wide`` (priority 1) adds the shape, the endpoint and the Ready message, which names
#: what the first instance that is not ready waits for. A column shows one field as it is
#: (JSONPath, no arithmetic), so the status keeps ``roles.<role>.ready`` as text.
PRINTER_COLUMNS: list[Json] = [
    {"name": "Ready", "type": "string", "jsonPath": f"{_READY}.status",
     "description": "Whether every instance and the router are ready."},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Phase."},
    {"name": "Prefill", "type": "string", "jsonPath": ".status.roles.prefill.ready",
     "description": "Ready prefill instances / the instances the role runs."},
    {"name": "Decode", "type": "string", "jsonPath": ".status.roles.decode.ready",
     "description": "Ready decode instances / the instances the role runs."},
    {"name": "Reason", "type": "string", "jsonPath": f"{_READY}.reason",
     "description": "Why it is not Ready: the reason of the first condition Ready waits for."},
    {"name": "Updates", "type": "string", "jsonPath": ".status.updatePending",
     "description": "The roles whose operator-made template change waits for the user."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "PP", "type": "integer", "jsonPath": ".spec.prefill.parallelism.pipeline",
     "priority": 1, "description": "Prefill pipeline size."},
    {"name": "Layers", "type": "integer", "jsonPath": ".status.kvLayout.totalKvLayers",
     "priority": 1, "description": "Target KV layers."},
    {"name": "Router", "type": "string", "jsonPath": ".status.router.ready", "priority": 1,
     "description": "Ready router replicas / the replicas it runs."},
    {"name": "Endpoint", "type": "string", "jsonPath": ".status.endpoint", "priority": 1,
     "description": "The router's URL inside the cluster."},
    {"name": "Message", "type": "string", "jsonPath": f"{_READY}.message", "priority": 1,
     "description": "The Ready condition's message: what it waits for, and why."},
]  # fmt: skip

SCALER_PRINTER_COLUMNS: list[Json] = [
    {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas",
     "description": "Instances asked for (kubectl scale, an HPA, KEDA or the planner)."},
    {"name": "Current", "type": "integer", "jsonPath": ".status.replicas",
     "description": "Instances that exist and are not draining."},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas",
     "description": "Instances with every pod ready."},
    {"name": "Effective", "type": "integer", "jsonPath": ".status.effectiveReplicas",
     "description": "Instances the operator runs: Desired within the bounds and the ratio."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Planner", "type": "string", "jsonPath": ".status.planner.reason", "priority": 1,
     "description": "The PD planner's last decision and why (scaling.mode Planner)."},
]  # fmt: skip

_DROP = {"title", "additionalProperties", "$defs"}


def _structural(node: Any, defs: Json) -> Any:
    """Inline refs, unwrap Optional, keep only what a structural schema allows."""
    if isinstance(node, list):
        return [_structural(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if node.get("x-kubernetes-int-or-string"):
        return node  # Kubernetes' one structural anyOf (integer or string)
    if "anyOf" in node:
        variants = [v for v in node.pop("anyOf") if v.get("type") != "null"]
        if len(variants) != 1:
            raise ValueError(f"cannot express anyOf {variants} structurally")
        node.pop("default", None)  # a null default means "absent"
        node = {**variants[0], **node}
    if "$ref" in node:
        target = defs[node.pop("$ref").split("/")[-1]]
        node = {**copy.deepcopy(target), **node}
    free_form = node.get("type") == "object" and node.get("additionalProperties") is True
    typed_map = node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict)
    out: Json = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        # `default: ""` adds nothing: absent means "" to every reader of these fields.
        if key == "default" and value == "":
            continue
        if key == "properties":
            out[key] = {name: _structural(prop, defs) for name, prop in value.items()}
        else:
            out[key] = _structural(value, defs)
    if out.get("default") == {} and "properties" in out:
        out["default"] = _complete_default(out)
    if free_form:
        out["x-kubernetes-preserve-unknown-fields"] = True
    elif typed_map:
        out["additionalProperties"] = _structural(node["additionalProperties"], defs)
    return out


def _complete_default(schema: Json) -> Json:
    """The object an empty default becomes after the API server's defaulting: every property
    with a default, nested ones complete already (children are converted first).

    The API server checks a ``default`` against its node's CEL rules as written, without
    filling nested defaults in, so ``default: {}`` fails every rule that reads a defaulted
    key ("no such key"), and the CRD is refused. A complete default lets rules read any
    defaulted key unguarded, on the default as on a stored object.
    """
    return {
        name: copy.deepcopy(prop["default"])
        for name, prop in schema["properties"].items()
        if "default" in prop
    }


def cel_rules(k8s_minor: int | None = None) -> list[Rule]:
    """The rules whose CEL an API server of minor ``k8s_minor`` takes (None: every rule)."""
    return [r for r in RULES if k8s_minor is None or r.since <= k8s_minor]


def cel_minor(server_minor: int) -> int | None:
    """The ``k8s_minor`` of the CRD for a cluster of minor ``server_minor``: None (every
    rule, the shipped ``crds/``) when it takes them all."""
    return None if all(r.since <= server_minor for r in RULES) else server_minor


def _attach_rules(name: str, schema: Json, k8s_minor: int | None) -> None:
    """The CEL of the rules on object ``name``: on its schema, or on its field's."""
    for rule in (r for r in cel_rules(k8s_minor) if r.where == name):
        node = schema["properties"][rule.field] if rule.field else schema
        node.setdefault("x-kubernetes-validations", []).append(_cel(rule))


def _cel(rule: Rule) -> Json:
    return {"rule": rule.cel, "message": rule.message}


def _schema(model: type[BaseModel], with_cel: bool, k8s_minor: int | None = None) -> Json:
    raw = model.model_json_schema(by_alias=True)
    defs = raw.get("$defs", {})
    top = {k: v for k, v in raw.items() if k != "$defs"}
    if with_cel:
        for name, schema in defs.items():
            _attach_rules(name, schema, k8s_minor)
        _attach_rules(model.__name__, top, k8s_minor)
    result: Json = _structural(top, defs)
    return result


def _without_defaults(node: Any) -> Any:
    """Status is written by the operator whole; defaults there would only add noise."""
    if isinstance(node, dict):
        return {k: _without_defaults(v) for k, v in node.items() if k != "default"}
    if isinstance(node, list):
        return [_without_defaults(v) for v in node]
    return node


@dataclass(frozen=True)
class Kind:
    """One custom resource kind of the API: its names, models and what the API server adds."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    description: str
    spec: type[BaseModel]
    status: type[BaseModel]
    printer_columns: tuple[Json, ...]
    subresources: Json

    @property
    def file_stem(self) -> str:
        """The checked-in copies' name: ``crds/<group>_<plural>.yaml``."""
        return f"{models.GROUP}_{self.plural}"


PDDEPLOYMENT = Kind(
    models.KIND, models.PLURAL, models.SHORT_NAMES,
    "PDDeployment serves one model with SGLang in prefill/decode disaggregation on Ascend "
    "NPUs; the operator computes and checks the KV layout.",
    models.PDDeploymentSpec, models.PDDeploymentStatus, tuple(PRINTER_COLUMNS),
    {"status": {}},
)  # fmt: skip
PDROLESCALER = Kind(
    models.SCALER_KIND, models.SCALER_PLURAL, models.SCALER_SHORT_NAMES,
    "PDRoleScaler is the scale target of one role of a PDDeployment (<name>-<role>): the "
    "operator creates it when the role's scaling.mode is External or Planner; kubectl scale, "
    "an HPA, KEDA or the PD planner set spec.replicas, and the operator runs that many "
    "instances within the role's bounds and the P:D ratio.",
    models.PDRoleScalerSpec, models.PDRoleScalerStatus, tuple(SCALER_PRINTER_COLUMNS),
    {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    },
)  # fmt: skip
#: Every kind of the API, PDDeployment first.
KINDS = (PDDEPLOYMENT, PDROLESCALER)


def openapi_schema(kind: Kind = PDDEPLOYMENT, k8s_minor: int | None = None) -> Json:
    """The ``openAPIV3Schema`` of the served version (for minor ``k8s_minor``: ``cel_rules``)."""
    root: Json = {
        "type": "object",
        "description": kind.description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "API version."},
            "kind": {"type": "string", "description": "Kind."},
            # The API server allows nothing else here (not even a description).
            "metadata": {"type": "object"},
            "spec": _schema(kind.spec, with_cel=True, k8s_minor=k8s_minor),
            "status": _without_defaults(_schema(kind.status, with_cel=False)),
        },
    }
    if kind is PDDEPLOYMENT:
        root["x-kubernetes-validations"] = [
            _cel(r) for r in cel_rules(k8s_minor) if r.where == "root"
        ]
    return root


#: The value of ``ANNOTATION_GENERATED_BY`` on the CRDs this release generates.
GENERATED_BY = f"ascend-pd {__version__}"


def crd(kind: Kind = PDDEPLOYMENT, k8s_minor: int | None = None) -> Json:
    """The whole CustomResourceDefinition of ``kind`` (``openapi_schema``'s arguments)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{kind.plural}.{models.GROUP}",
            "annotations": {ANNOTATION_GENERATED_BY: GENERATED_BY},
        },
        "spec": {
            "group": models.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                # as listKind, from the kind (the lowercase kind: the API server's default)
                "singular": kind.kind.lower(),
                "shortNames": list(kind.short_names),
                "categories": ["all", "ascendpd"],
            },
            "versions": [
                {
                    "name": models.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": kind.subresources,
                    "additionalPrinterColumns": list(kind.printer_columns),
                    "schema": {"openAPIV3Schema": openapi_schema(kind, k8s_minor)},
                }
            ],
        },
    }


HEADER = "# Generated by `ascend-pd crd{flag}` from the pydantic models; do not edit.\n"


def crd_yaml(kind: Kind = PDDEPLOYMENT, k8s_minor: int | None = None) -> str:
    header = HEADER.format(flag="" if k8s_minor is None else f" --k8s 1.{k8s_minor}")
    return header + yaml.safe_dump(crd(kind, k8s_minor), sort_keys=False, width=100)


def all_crds_yaml(k8s_minor: int | None = None) -> str:
    """Every CRD of the API as one multi-document YAML (``kubectl apply -f -``)."""
    return "---\n".join(crd_yaml(kind, k8s_minor) for kind in KINDS)
