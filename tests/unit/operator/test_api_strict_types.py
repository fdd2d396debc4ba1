"""The API models take no coerced types: what the CRD's schema refuses, render refuses too."""

from __future__ import annotations

import copy

import pytest

from ascend_pd_operator.api import SpecError, parse_spec

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
