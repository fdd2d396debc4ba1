"""The bad-input corpus, offline through the operator's code (no cluster needed)."""

from __future__ import annotations

import re

import pytest

from reliability.bad_inputs import FIELD, POINTS, load_corpus
from reliability.offline import inspect_verdict, load_inspector_cases, offline_verdict

CASES = load_corpus()


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
    # ascend-pd render has no API server in front: "4" for an integer or "yes" for a
    # boolean must not slip through pydantic's type coercion (the API models are strict)
    verdict = offline_verdict(case)
    assert verdict.point != "accepted", case.name


@pytest.mark.parametrize("case", load_inspector_cases(), ids=lambda c: c["name"])
def test_inspector_failures_reach_model_resolved(case) -> None:
    verdict = inspect_verdict(case)
    assert verdict.point == "model"
    assert verdict.message.startswith("InspectionFailed: ")
    assert case["message"] in verdict.message
    assert re.search(r"config\.json", verdict.message)
