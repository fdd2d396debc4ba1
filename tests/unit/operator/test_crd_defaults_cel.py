"""Every ``default`` of the CRD satisfies the schema it defaults, CEL rules included, as written.

A current API server validates each ``default`` value against its schema node when the CRD is
created, evaluating the node's ``x-kubernetes-validations`` (and those of every nested node the
value holds) on the value exactly as written: nested defaults are not filled in first. A rule
that reads a key the default leaves out fails with "no such key", and the whole CRD is refused
(issue 15: ``speculative: default: {}`` against the speculative roles rule). cel-python plays
the API server here, on the generated CRD and on the file the chart ships.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

from ascend_pd_operator.api import crd
from ascend_pd_operator.api.json_object import Json
from tests.unit.operator.schema_nodes import schema_nodes

ROOT = Path(__file__).resolve().parents[3]
CEL_CRD_FILE = ROOT / "crds" / "ascendpd.io_pddeployments.yaml"
_ENV = celpy.Environment()


def _defaults(schema: Json, path: str) -> Iterator[tuple[str, Json]]:
    """(path, schema node) for every node that carries a ``default``."""
    for at, node in schema_nodes(schema, path, item="[*]", entry="[*]"):
        if "default" in node:
            yield at, node


def _problems(schema: Json, value: Any, path: str) -> Iterator[str]:
    """What the API server finds wrong with ``value`` under ``schema``: missing required keys,
    CEL rules that fail or cannot be evaluated, recursively into what ``value`` holds."""
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                yield f"{path}: required key {key!r} missing"
    for validation in schema.get("x-kubernetes-validations", []):
        rule = validation["rule"]
        try:
            result = _ENV.program(_ENV.compile(rule)).evaluate(celpy.json_to_cel({"self": value}))
        except celpy.CELEvalError as exc:
            result = exc
        if not isinstance(result, celpy.celtypes.BoolType):
            yield f"{path}: rule {rule!r} cannot be evaluated: {str(result)[:300]}"
        elif not result:
            yield f"{path}: rule {rule!r} is false: {validation['message']}"
    if isinstance(value, dict):
        for name, prop in (schema.get("properties") or {}).items():
            if name in value:
                yield from _problems(prop, value[name], f"{path}.{name}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from _problems(schema["items"], item, f"{path}[{i}]")


def _schemas() -> dict[str, Json]:
    shipped = yaml.safe_load(CEL_CRD_FILE.read_text())
    return {
        "generated": crd.openapi_schema(),
        CEL_CRD_FILE.name: shipped["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
    }


@pytest.mark.parametrize("source", ["generated", CEL_CRD_FILE.name])
def test_every_default_passes_the_rules_it_defaults(source: str) -> None:
    schema = _schemas()[source]
    checked = 0
    problems: list[str] = []
    for path, node in _defaults(schema, ""):
        problems.extend(_problems(node, node["default"], f"{path} default"))
        checked += 1
    assert checked > 20, f"only {checked} defaults found: the walk is broken"
    assert not problems, "\n".join(problems)


def test_the_walk_sees_a_rule_a_default_breaks() -> None:
    """The check itself: an object default that leaves out a key its rule reads is caught."""
    node = {
        "type": "object",
        "default": {},
        "properties": {"algorithm": {"type": "string", "default": "NONE"}},
        "x-kubernetes-validations": [{"rule": "self.algorithm == 'NONE'", "message": "m"}],
    }
    assert any("cannot be evaluated" in p for p in _problems(node, node["default"], "x"))
    assert not list(_problems(node, {"algorithm": "NONE"}, "x"))


def test_object_defaults_are_complete() -> None:
    """An object default holds every nested default, as the API server's defaulting of ``{}``
    would produce, so any rule may read any defaulted key."""
    schema = crd.openapi_schema()
    for path, node in _defaults(schema, ""):
        default = node["default"]
        if not isinstance(default, dict):
            continue
        for name, prop in (node.get("properties") or {}).items():
            if "default" in prop:
                assert default.get(name) == prop["default"], f"{path}.{name}"
