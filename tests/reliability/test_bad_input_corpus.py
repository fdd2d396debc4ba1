"""The bad-input corpus, offline through the operator's code (no cluster needed)."""

from __future__ import annotations

import re

import pytest

from reliability.bad_inputs import FIELD, POINTS, load_corpus
from reliability.offline import inspect_verdict, load_inspector_cases, offline_verdict

CASES = load_corpus()
#: pydantic's lax mode turns "4" into 4 and true into 1; the API server's schema refuses
#: them before the operator sees them, so only `ascend-pd render` offline is lax here.
COERCED_BY_PYDANTIC = {
    "tensor-string",
    "devices-per-node-bool",
    "router-enabled-string",
    "layers-string",
    "router-port-string",
}


def test_the_corpus_is_large_and_covers_every_point() -> None:
    assert len(CASES) >= 60
    assert {c.reject for c in CASES} == set(POINTS)
    assert len(load_inspector_cases()) >= 5


@pytest.mark.parametrize("case", [c for c in CASES if c.reject != "schema"], ids=lambda c: c.name)
def test_operator_refuses_it_at_the_same_point_with_the_message(case) -> None:
    verdict = offline_verdict(case)
    assert verdict.point == case.reject, verdict
    assert case.message in verdict.message
    assert FIELD.search(verdict.message), f"names no field: {verdict.message}"


@pytest.mark.parametrize("case", [c for c in CASES if c.reject == "schema"], ids=lambda c: c.name)
def test_schema_cases_are_refused_offline_too(case) -> None:
    verdict = offline_verdict(case)
    if case.name in COERCED_BY_PYDANTIC:
        assert verdict.point == "accepted"  # if this changes, drop the case from the set
    else:
        assert verdict.point != "accepted", case.name


@pytest.mark.parametrize("case", load_inspector_cases(), ids=lambda c: c["name"])
def test_inspector_failures_reach_model_resolved(case) -> None:
    verdict = inspect_verdict(case)
    assert verdict.point == "model"
    assert verdict.message.startswith("InspectionFailed: ")
    assert case["message"] in verdict.message
    assert re.search(r"config\.json", verdict.message)
