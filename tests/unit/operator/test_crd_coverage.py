"""Which fields an installed CRD would prune (``api.crd_coverage``): none on every copy this
tree generates, and exactly the highest missing paths on an older schema, with the ancestors
that keep unknown fields (or a typed map's values) covering what is below them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_pd_operator import __version__
from ascend_pd_operator.api import models
from ascend_pd_operator.api.crd import GENERATED_BY, KINDS, PDDEPLOYMENT, crd, openapi_schema
from ascend_pd_operator.api.crd_coverage import (
    PRESERVE,
    installed_schema,
    missing_paths,
    summary,
)
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import ANNOTATION_GENERATED_BY
from ascend_pd_operator.kubeio.crds import (
    INSTALL,
    generated_by,
    outdated_text,
    schema_gaps,
    watched_crds,
)
from ascend_pd_operator.wiring.crd_cli import COPIES

ROOT = Path(__file__).resolve().parents[3]
PDDS = f"{models.PLURAL}.{models.GROUP}"


def status_of(schema: Json) -> Json:
    status: Json = schema["properties"]["status"]
    return status


def test_every_checked_in_copy_keeps_every_path_of_its_own_schema() -> None:
    """crds/, its 1.28-and-1.29 variant and the chart's copies: the CEL they leave out does
    not matter, their paths are the operator's."""
    for rel, kind, _minor in COPIES:
        installed = yaml.safe_load((ROOT / rel).read_text())
        schema = installed_schema(installed, models.VERSION)
        assert missing_paths(openapi_schema(kind), schema) == [], rel
        assert generated_by(installed) == GENERATED_BY == f"ascend-pd {__version__}", rel


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.plural)
def test_the_generated_crd_covers_its_own_schema(kind: Any) -> None:
    resource = next(r for r in watched_crds() if r.plural == kind.plural)
    assert schema_gaps(resource, crd(kind)) == []


def test_status_roles_removed_is_named_once_not_per_field_under_it() -> None:
    wanted = openapi_schema(PDDEPLOYMENT)
    old = copy.deepcopy(wanted)
    del status_of(old)["properties"]["roles"]
    assert missing_paths(wanted, old) == ["status.roles"]


def test_a_leaf_removed_deep_down_is_named_by_its_whole_path() -> None:
    wanted = openapi_schema(PDDEPLOYMENT)
    old = copy.deepcopy(wanted)
    prefill = status_of(old)["properties"]["roles"]["properties"]["prefill"]
    del prefill["properties"]["ready"]
    del old["properties"]["spec"]["properties"]["router"]
    assert missing_paths(wanted, old) == ["spec.router", "status.roles.prefill.ready"]


def test_descriptions_defaults_and_cel_do_not_matter() -> None:
    wanted = openapi_schema(PDDEPLOYMENT)

    def bare(node: Any) -> Any:
        drop = {"description", "default", "x-kubernetes-validations"}
        if isinstance(node, dict):
            return {k: bare(v) for k, v in node.items() if k not in drop}
        return [bare(v) for v in node] if isinstance(node, list) else node

    assert missing_paths(wanted, bare(wanted)) == []


def test_an_ancestor_that_keeps_unknown_fields_covers_everything_below_it() -> None:
    wanted = openapi_schema(PDDEPLOYMENT)
    old = copy.deepcopy(wanted)
    old["properties"]["status"] = {"type": "object", PRESERVE: True}
    assert missing_paths(wanted, old) == []
    # with properties of its own: the ones it names are still checked, the rest kept
    old["properties"]["status"] = {
        "type": "object",
        PRESERVE: True,
        "properties": {"roles": {"type": "object", "properties": {}}},
    }
    gaps = missing_paths(wanted, old)
    assert gaps == ["status.roles.prefill", "status.roles.decode"]
    # false is not true
    old["properties"]["status"] = {"type": "object", PRESERVE: False}
    assert "status.roles" in missing_paths(wanted, old)


OBJ = "object"


def test_typed_maps_and_arrays() -> None:
    value = {"type": OBJ, "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}
    wanted: Json = {
        "type": OBJ,
        "properties": {
            "labels": {"type": OBJ, "additionalProperties": value},
            "list": {"type": "array", "items": value},
        },
    }
    only_a = {"type": OBJ, "properties": {"a": {"type": "string"}}}
    # the map's values by the installed map's value schema; the items by the installed items
    older: Json = {
        "type": OBJ,
        "properties": {
            "labels": {"type": OBJ, "additionalProperties": only_a},
            "list": {"type": "array", "items": only_a},
        },
    }
    assert missing_paths(wanted, older) == ["labels.*.b", "list[].b"]
    # a map whose installed schema is an object of fixed properties: every key is pruned
    fixed: Json = {
        "type": OBJ,
        "properties": {
            "labels": {"type": OBJ, "properties": {}},
            "list": {"type": "array", "items": value},
        },
    }
    assert missing_paths(wanted, fixed) == ["labels.*"]
    # values and items kept whole
    kept: Json = {
        "type": OBJ,
        "properties": {
            "labels": {"type": OBJ, "additionalProperties": {"type": OBJ, PRESERVE: True}},
            "list": {"type": "array", "items": {"type": OBJ, PRESERVE: True}},
        },
    }
    assert missing_paths(wanted, kept) == []


def test_the_served_version_missing_is_the_whole_object() -> None:
    other = crd(PDDEPLOYMENT)
    other["spec"]["versions"][0]["name"] = "v1beta9"
    assert installed_schema(other, models.VERSION) is None
    assert missing_paths(openapi_schema(PDDEPLOYMENT), None) == ["<the whole object>"]


def test_summary() -> None:
    assert summary(["a"]) == "a"
    assert summary(["a", "b", "c"]) == "a, b, c"
    assert summary(["a", "b", "c", "d", "e"]) == "a, b, c and 2 more"


def test_the_message_names_the_crd_the_paths_the_release_and_the_fix() -> None:
    gaps = ["status.roles", "status.router.ready", "spec.router", "spec.a", "spec.b"]
    text = outdated_text(PDDS, gaps, "ascend-pd 0.0.9")
    assert text == (
        f"CRD {PDDS} is older than this operator (ascend-pd {__version__}): the API server "
        "would drop 5 fields it writes or reads: status.roles, status.router.ready, "
        "spec.router and 2 more (the installed CRD was generated by ascend-pd 0.0.9); "
        f"{INSTALL}"
    )
    assert "kubectl apply --server-side -f crds/" in text
    one = outdated_text(PDDS, ["status.roles"], None)
    assert "would drop 1 field it writes or reads: status.roles (the installed CRD has no " \
        f"{ANNOTATION_GENERATED_BY} annotation); " in one  # fmt: skip


def test_the_annotation_is_read_from_the_installed_crd() -> None:
    assert generated_by(crd(PDDEPLOYMENT)) == GENERATED_BY
    bare = crd(PDDEPLOYMENT)
    del bare["metadata"]["annotations"]
    assert generated_by(bare) is None
