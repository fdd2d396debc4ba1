"""Shared helpers for the operator's unit tests: example resources and CRD defaulting."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"


def load_example(name: str) -> dict[str, Any]:
    docs = list(yaml.safe_load_all((EXAMPLES / name).read_text()))
    return next(d for d in docs if d and d.get("kind") == "PDDeployment")


def apply_defaults(schema: dict[str, Any], obj: Any) -> Any:
    """Structural defaulting as the API server does it: fill absent properties that
    have a default, recurse into objects that are present (after defaulting)."""
    if not isinstance(obj, dict) or schema.get("type") != "object":
        if isinstance(obj, list) and "items" in schema:
            return [apply_defaults(schema["items"], item) for item in obj]
        return obj
    out = dict(obj)
    for name, prop in (schema.get("properties") or {}).items():
        if name not in out and "default" in prop:
            out[name] = copy.deepcopy(prop["default"])
        if name in out:
            out[name] = apply_defaults(prop, out[name])
    return out


@pytest.fixture
def dsv3() -> dict[str, Any]:
    return load_example("deepseek-v3-pp2.yaml")
