"""Validate a rendered ServiceMonitor, PodMonitor or PrometheusRule against the Prometheus
Operator's CRD.

The CRDs are vendored under ``vendor/prometheus-operator`` (source and version in its
README). Their ``openAPIV3Schema`` is structural, so it is a JSON Schema; the API server
prunes or (with strict validation) refuses unknown fields, which ``additionalProperties:
false`` on every object with declared properties reproduces here
(``tests.structural_schema``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.structural_schema import strict

VENDOR = Path(__file__).resolve().parent / "vendor" / "prometheus-operator"
CRD_FILES = {
    "ServiceMonitor": VENDOR / "monitoring.coreos.com_servicemonitors.yaml",
    "PodMonitor": VENDOR / "monitoring.coreos.com_podmonitors.yaml",
    "PrometheusRule": VENDOR / "monitoring.coreos.com_prometheusrules.yaml",
}


@functools.cache
def schema(kind: str) -> dict[str, Any]:
    crd = yaml.safe_load(CRD_FILES[kind].read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    doc: dict[str, Any] = strict(version["schema"]["openAPIV3Schema"])
    # metadata is the API server's ObjectMeta, not described by the CRD
    doc["properties"]["metadata"] = {"type": "object"}
    return doc


def validate(doc: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError naming the path of the first violation."""
    assert doc["apiVersion"] == "monitoring.coreos.com/v1", doc["apiVersion"]
    jsonschema.validate(doc, schema(doc["kind"]))
