"""Validate a rendered ServiceMonitor, PodMonitor or PrometheusRule against the Prometheus
Operator's CRD.

The CRDs are vendored under ``vendor/prometheus-operator`` (source and version in its
README). Their ``openAPIV3Schema`` is structural, so it is a JSON Schema; the API server
prunes or (with strict validation) refuses unknown fields, which ``additionalProperties:
false`` on every object with declared properties reproduces here.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import yaml

VENDOR = Path(__file__).resolve().parent / "vendor" / "prometheus-operator"
CRD_FILES = {
    "ServiceMonitor": VENDOR / "monitoring.coreos.com_servicemonitors.yaml",
    "PodMonitor": VENDOR / "monitoring.coreos.com_podmonitors.yaml",
    "PrometheusRule": VENDOR / "monitoring.coreos.com_prometheusrules.yaml",
}


def _python_pattern(pattern: str) -> str:
    """A Go (RE2) pattern as Python's re reads it: RE2 takes flags such as ``(?i)``
    anywhere (the PrometheusRule CRD has ``^(?i)(abort|warn)?$``), Python only first."""
    if pattern.startswith("^(?i)"):
        return "(?i)^" + pattern[len("^(?i)") :]
    return pattern


def _strict(node: Any) -> Any:
    if isinstance(node, dict):
        node = {k: _strict(v) for k, v in node.items()}
        if isinstance(node.get("pattern"), str):
            node["pattern"] = _python_pattern(node["pattern"])
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


@functools.cache
def schema(kind: str) -> dict[str, Any]:
    crd = yaml.safe_load(CRD_FILES[kind].read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    doc: dict[str, Any] = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    # metadata is the API server's ObjectMeta, not described by the CRD
    doc["properties"]["metadata"] = {"type": "object"}
    return doc


def validate(doc: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError naming the path of the first violation."""
    assert doc["apiVersion"] == "monitoring.coreos.com/v1", doc["apiVersion"]
    jsonschema.validate(doc, schema(doc["kind"]))
