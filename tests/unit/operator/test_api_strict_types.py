"""The API models take no coerced types: what the CRD's schema refuses, render refuses too."""

from __future__ import annotations

import copy

import pytest

from ascend_pd_operator.api.models import SpecError, parse_spec

BASE = {
    "model": {"name": "m", "path": "/models/m", "config": {"numHiddenLayers": 27}},
    "runtime": {"image": "img"},
    "prefill": {"parallelism": {"tensor": 1}, "devicesPerNode": 1},
    "decode": {"parallelism": {"tensor": 1}, "devicesPerNode": 1},
}


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("prefill", "parallelism", "tensor"), "4", "spec.prefill.parallelism.tensor"),
        (("decode", "devicesPerNode"), True, "spec.decode.devicesPerNode"),
        (("router", "enabled"), "yes", "spec.router.enabled"),
        (("model", "config", "numHiddenLayers"), "27", "spec.model.config.numHiddenLayers"),
    ],
)
def test_a_string_or_bool_for_another_type_is_refused(path, value, field) -> None:
    spec = copy.deepcopy({**BASE, "router": {}})
    node = spec
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        parse_spec(spec)


def test_the_well_typed_spec_parses() -> None:
    assert parse_spec(BASE).prefill.parallelism.tensor == 1


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        (-1, "greater than or equal to 0 (got -1)"),
        (86401, "less than or equal to 86400 (got 86401)"),
        ("300", "a valid integer (got '300')"),
    ],
)
def test_force_delete_after_seconds_out_of_bounds_names_field_value_and_rule(value, rule) -> None:
    with pytest.raises(SpecError) as refused:
        parse_spec({**BASE, "recovery": {"forceDeleteAfterSeconds": value}})
    assert f"spec.recovery.forceDeleteAfterSeconds: Input should be {rule}" in str(refused.value)


def test_force_delete_is_off_unless_set_and_null_means_off_as_on_the_api_server() -> None:
    # the API server drops a null for a field that is not nullable, then defaults it to 0
    assert parse_spec(BASE).recovery.force_delete_after_seconds == 0
    off = parse_spec({**BASE, "recovery": {"forceDeleteAfterSeconds": None}})
    assert off.recovery.force_delete_after_seconds == 0
    on = parse_spec({**BASE, "recovery": {"forceDeleteAfterSeconds": 300}})
    assert on.recovery.force_delete_after_seconds == 300
