"""The generated CRDs: checked-in copies are current, the schemas are structural and
documented, the printer columns are the API's, ``--k8s 1.28`` leaves out the rules 1.28
and 1.29 refuse, and the
PDRoleScaler serves the scale subresource at the paths its model has."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from ascend_pd_operator.api import models
from ascend_pd_operator.api.crd import (
    KINDS,
    PDROLESCALER,
    Kind,
    all_crds_yaml,
    cel_minor,
    cel_rules,
    crd,
    crd_yaml,
    openapi_schema,
)
from ascend_pd_operator.api.rules import RULES
from ascend_pd_operator.api.rules.limits import SIZED_MAP_MINOR
from ascend_pd_operator.wiring.cli import main as cli_main
from ascend_pd_operator.wiring.crd_cli import COPIES
from ascend_pd_runtime import env_contract as ec
from tests.unit.operator.schema_nodes import schema_nodes

from .conftest import ROOT


@pytest.mark.parametrize(("rel", "kind", "minor"), COPIES)
def test_checked_in_copy_is_current(rel: str, kind: Kind, minor: int | None) -> None:
    path = ROOT / rel
    assert path.exists(), f"{rel} is missing: run `ascend-pd crd --write`"
    expected = crd_yaml(kind, minor)
    assert path.read_text() == expected, f"{rel} is stale: run `ascend-pd crd --write`"


def test_crds_dir_holds_one_top_level_yaml_per_kind() -> None:
    assert sorted(p.name for p in (ROOT / "crds").glob("*.yaml")) == [
        "ascendpd.io_pddeployments.yaml",
        "ascendpd.io_pdrolescalers.yaml",
    ]


def test_cli_prints_every_crd(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["crd"]) == 0
    out = capsys.readouterr().out
    assert out == all_crds_yaml()
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(out)] == [
        "pddeployments.ascendpd.io",
        "pdrolescalers.ascendpd.io",
    ]
    assert cli_main(["crd", "--k8s", "1.28"]) == 0
    assert capsys.readouterr().out == all_crds_yaml(28)
    assert cli_main(["crd", "--k8s", "1.30"]) == 0
    assert capsys.readouterr().out == all_crds_yaml()


def test_the_older_cel_crd_leaves_out_exactly_the_rules_older_servers_refuse() -> None:
    """1.28 and 1.29 price a list built by map() as unbounded (``SIZED_MAP_MINOR``): their
    CRD lacks the rules marked so, and only those; 1.30 on takes every rule."""
    later = [r for r in RULES if r.since > 28]
    assert later and all(r.since == SIZED_MAP_MINOR for r in later)
    assert cel_rules(28) == [r for r in RULES if r not in later]
    assert cel_rules(29) == cel_rules(28)
    assert cel_rules(None) == list(RULES)
    assert (cel_minor(28), cel_minor(29), cel_minor(30), cel_minor(36)) == (28, 29, None, None)
    older, full = _rules_in(crd(k8s_minor=28)), _rules_in(crd())
    assert [r for r in full if r not in {x.cel for x in later}] == older
    for rule in later:
        assert "map(" in rule.cel  # why 1.28 refuses it
        assert rule.cel in full


def _rules_in(node: Any) -> list[str]:
    if isinstance(node, list):
        return [r for item in node for r in _rules_in(item)]
    if not isinstance(node, dict):
        return []
    own = [v["rule"] for v in node.get("x-kubernetes-validations", [])]
    return own + [
        r for k, v in node.items() if k != "x-kubernetes-validations" for r in _rules_in(v)
    ]


def test_the_scaler_serves_the_scale_subresource() -> None:
    version = crd(PDROLESCALER)["spec"]["versions"][0]
    scale = version["subresources"]["scale"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    # each path names a field of the schema (the API server reads and writes them)
    assert scale["specReplicasPath"] == ".spec.replicas"
    assert schema["spec"]["properties"]["replicas"]["type"] == "integer"
    assert scale["statusReplicasPath"] == ".status.replicas"
    assert schema["status"]["properties"]["replicas"]["type"] == "integer"
    assert scale["labelSelectorPath"] == ".status.selector"
    assert schema["status"]["properties"]["selector"]["type"] == "string"
    assert crd(PDROLESCALER)["spec"]["names"]["shortNames"] == ["pdrs"]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
@pytest.mark.parametrize("minor", [None, 28])
def test_schema_is_structural(minor: int | None, kind: Kind) -> None:
    for path, node in schema_nodes(openapi_schema(kind, minor)):
        if node.get("x-kubernetes-int-or-string"):
            # the one exception structural schemas allow (a quantity): no type, this anyOf
            assert "type" not in node, path
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            continue
        assert "type" in node, f"{path} has no type"
        for banned in ("anyOf", "oneOf", "allOf", "$ref", "nullable", "title", "uniqueItems"):
            assert banned not in node, f"{path} has {banned}"
        if "properties" in node:
            assert node.get("additionalProperties") in (None,), f"{path}: properties + additional"
        if node.get("type") == "object" and "properties" not in node:
            free = node.get("x-kubernetes-preserve-unknown-fields") or node.get(
                "additionalProperties"
            )
            assert free or path == ".metadata", f"{path}: object without properties"


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_every_field_has_a_description(kind: Kind) -> None:
    schema = openapi_schema(kind=kind)
    for top in ("spec", "status"):
        for path, node in schema_nodes(schema["properties"][top], top):
            if path.endswith("[]") or path.endswith("{}"):
                continue
            assert node.get("description"), f"{path} has no description"


@pytest.mark.parametrize("minor", [None, 28])
def test_every_variant_carries_cel(minor: int | None) -> None:
    assert yaml.safe_dump(crd(k8s_minor=minor)).count("x-kubernetes-validations") >= 6


@pytest.mark.parametrize("minor", [None, 28])
def test_the_transfer_protocol_is_an_enum_on_every_server(minor: int | None) -> None:
    # the schema's own enum, not a rule: `kubectl explain` shows the values
    ascend = openapi_schema(k8s_minor=minor)["properties"]["spec"]["properties"]["ascend"]
    protocol = ascend["properties"]["transferProtocol"]
    assert (protocol["enum"], protocol["default"]) == (list(ec.TRANSFER_PROTOCOLS), "sdma")
    assert ec.TRANSFER_PROTOCOLS == ("sdma", "device_rdma")


def test_names_and_printer_columns() -> None:
    spec = crd()["spec"]
    assert spec["names"]["plural"] == "pddeployments"
    assert spec["names"]["shortNames"] == ["pdd"]
    assert spec["group"] == models.GROUP
    version = spec["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = version["additionalPrinterColumns"]
    shown = [c["name"].upper() for c in columns if not c.get("priority")]
    assert shown == ["READY", "PHASE", "PREFILL", "DECODE", "REASON", "UPDATES", "AGE"]
    wide = [c["name"].upper() for c in columns if c.get("priority")]
    assert wide == ["PP", "LAYERS", "ROUTER", "ENDPOINT", "MESSAGE"]  # -o wide, after AGE


#: What the API server accepts in a printer column, 1.28 and 1.36 alike (apiextensions'
#: ``ValidateCustomResourceColumnDefinition``: a name, a type and format of these sets, a
#: ``.``-rooted JSONPath; kubectl's table reads ``priority`` as an int32).
COLUMN_TYPES = {"integer", "number", "string", "boolean", "date"}
COLUMN_FORMATS = {"int32", "int64", "float", "double", "byte", "date", "date-time", "password"}
#: The OpenAPI types a column of each type prints (the server leaves other values blank).
SHOWS = {"integer": {"integer"}, "number": {"number", "integer"}, "string": {"string"},
         "boolean": {"boolean"}, "date": {"string"}}  # fmt: skip
STEP = re.compile(r'\.(\w+)(?:\[\?\(@\.(\w+)=="[^"]*"\)\])?')


def _field(schema: dict[str, Any], json_path: str) -> dict[str, Any]:
    """The schema node ``json_path`` reads: ``.a.b``, where a list filter ``[?(@.k=="v")]``
    steps into the list's items, whose key ``k`` must be a field."""
    steps = list(STEP.finditer(json_path))
    assert "".join(m.group(0) for m in steps) == json_path, f"{json_path}: not a simple path"
    node = schema
    for step in steps:
        name, key = step.groups()
        if name == "metadata":
            return {"type": "object"}  # the API server's own fields (creationTimestamp)
        assert name in node.get("properties", {}), f"{json_path}: no field {name!r}"
        node = node["properties"][name]
        if key:
            assert node["type"] == "array", f"{json_path}: {name} is no list"
            node = node["items"]
            assert key in node["properties"], f"{json_path}: no key {key!r}"
    return node


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_printer_columns_are_valid_and_read_fields_of_the_schema(kind: Kind) -> None:
    version = crd(kind)["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    columns = version["additionalPrinterColumns"]
    assert len({c["name"].lower() for c in columns}) == len(columns)  # one header each
    for column in columns:
        assert column["name"] and column["type"] in COLUMN_TYPES, column
        assert column.get("format", "int64") in COLUMN_FORMATS, column
        assert isinstance(column.get("priority", 0), int) and column.get("priority", 0) >= 0
        assert column["jsonPath"].startswith("."), column
        node = _field(schema, column["jsonPath"])
        if column["jsonPath"] != ".metadata.creationTimestamp":
            assert node["type"] in SHOWS[column["type"]], (column, node["type"])
            assert column.get("description"), column


def test_api_field_names_are_the_contract() -> None:
    spec = openapi_schema()["properties"]["spec"]["properties"]
    assert set(spec) == {
        "model", "runtime", "speculative", "prefill", "decode", "router", "ascend", "scheduling",
        "rollout", "recovery", "scaling", "preflight", "placement",
    }  # fmt: skip
    assert set(spec["placement"]["properties"]) == {
        "topologyKey", "scope", "mode", "exclusive", "domains", "highestTierAllowed",
    }  # fmt: skip
    assert spec["placement"]["required"] == ["topologyKey"]
    assert "default" not in spec["placement"]  # as preflight: no pod template changes
    assert set(spec["preflight"]["properties"]) == {
        "devices", "hccnConf", "links", "leader", "store", "networkTimeoutSeconds",
    }  # fmt: skip
    # no default: a spec without it stays without it on the server (its pods unchanged)
    assert "default" not in spec["preflight"]
    assert "default" not in spec["ascend"]["properties"]["hcclConnectTimeoutSeconds"]
    assert set(spec["rollout"]["properties"]) == {
        "maxUnavailable", "maxSurge", "roleOrder", "operatorUpdates",
    }  # fmt: skip
    assert set(spec["recovery"]["properties"]) == {"forceDeleteAfterSeconds"}
    role = spec["prefill"]["properties"]
    for name in ("replicas", "parallelism", "layerPartition", "devicesPerNode", "resources",
                 "nodeSelector", "tolerations", "affinity", "env", "extraArgs"):  # fmt: skip
        assert name in role
    assert set(spec["prefill"]["properties"]["parallelism"]["properties"]) == {
        "tensor", "pipeline", "data"
    }  # fmt: skip
    status = openapi_schema()["properties"]["status"]["properties"]
    assert set(status["kvLayout"]["properties"]) >= {
        "totalKvLayers", "kvBufGroups", "prefillDraftLayers", "decodeDraftLayers",
        "prefillStages", "fingerprint",
    }  # fmt: skip
    assert set(status) >= {"observedGeneration", "phase", "conditions", "kvLayout", "roles",
                           "router", "endpoint"}  # fmt: skip
    # each role's status lives at status.roles.<role> only
    assert not set(status) & {"prefill", "decode"}
    assert set(status["roles"]["properties"]) == {"prefill", "decode"}
    assert set(status["roles"]["properties"]["decode"]["properties"]) >= {
        "replicas", "effectiveReplicas", "readyReplicas", "draining",
    }  # fmt: skip
