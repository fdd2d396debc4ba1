"""Volcano's PodGroup CRD (``fixtures/volcano``, as Volcano publishes it) as a validator of
the PodGroups the operator makes, for the tests that check them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.structural_schema import strict

Json = dict[str, Any]
FIXTURES = Path(__file__).parent / "fixtures" / "volcano"
#: The latest release's: networkTopology and subGroupPolicy.
CURRENT = "podgroups-v1.15.1.yaml"
#: The last release's without subGroupPolicy (networkTopology only).
WITHOUT_SUBGROUPS = "podgroups-v1.13.3.yaml"


def crd(name: str) -> Json:
    doc = yaml.safe_load((FIXTURES / name).read_text())
    assert isinstance(doc, dict)
    return doc


def validator(name: str) -> jsonschema.Draft4Validator:
    """A validator of ``name``'s served v1beta1 schema (OpenAPI v3's schema object is JSON
    Schema draft 4's, with nullable and the x-kubernetes extensions, which it ignores)."""
    (version,) = [v for v in crd(name)["spec"]["versions"] if v["name"] == "v1beta1"]
    return jsonschema.Draft4Validator(strict(version["schema"]["openAPIV3Schema"]))


def errors(name: str, manifest: Json) -> list[str]:
    found = validator(name).iter_errors(manifest)
    return sorted(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in found)
