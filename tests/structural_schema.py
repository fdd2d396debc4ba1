"""A CRD's structural ``openAPIV3Schema`` as a strict JSON Schema, for the tests that check
manifests against a vendored CRD (the chart's monitoring objects, Volcano's PodGroups).

The API server prunes a field a structural schema does not declare, or (``kubectl apply
--validate=strict``, fieldValidation=Strict) refuses it; ``strict`` reproduces the refusal
with ``additionalProperties: false`` on every object that lists its properties and does not
keep unknown fields. Imported as ``tests.structural_schema`` (the repository is on pytest's
``pythonpath``).
"""

from __future__ import annotations

from typing import Any


def python_pattern(pattern: str) -> str:
    """A Go (RE2) pattern as Python's re reads it: RE2 takes flags such as ``(?i)``
    anywhere (the PrometheusRule CRD has ``^(?i)(abort|warn)?$``), Python only first."""
    if pattern.startswith("^(?i)"):
        return "(?i)^" + pattern[len("^(?i)") :]
    return pattern


def strict(node: Any) -> Any:
    """A copy of the schema ``node`` with every object that lists its properties closed to
    others and every ``pattern`` as Python's re reads it."""
    if isinstance(node, list):
        return [strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items()}
    if isinstance(out.get("pattern"), str):
        out["pattern"] = python_pattern(out["pattern"])
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out
