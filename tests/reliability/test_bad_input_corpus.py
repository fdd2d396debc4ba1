"""The bad-input corpus, offline through the operator's code (no cluster needed)."""

from __future__ import annotations

import re

import pytest

from reliability.bad_inputs import FIELD, POINTS, load_corpus, server_refusal_names
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


#: Refusals a 1.36 API server gave for corpus cases (CEL: the rule's message, no ``(got ...)``;
#: the schema: list indices in the path), copied from its answers
SERVER_1_36 = {
    "volume-named-as-shared-memory": 'The PDDeployment "hatch" is invalid: spec.prefill.volumes: '
    "Invalid value: may not set volume names the operator uses: model, dshm, ascend-driver, "
    "kv-layout (the model, shared memory, the driver, the KV layout)\n",
    "mount-inside-kv-layout": 'The PDDeployment "hatch" is invalid: spec.decode.volumeMounts: '
    "Invalid value: mountPath may not be at, inside or above a path the operator mounts: "
    "/dev/shm, /etc/ascend-pd/kv-layout, /dev/termination-log (shared memory, the KV layout, "
    "the launcher's termination message)\n",
    "image-pull-secret-bad-name": 'The PDDeployment "hatch" is invalid: '
    'spec.router.imagePullSecrets[0].name: Invalid value: "My Registry": '
    "spec.router.imagePullSecrets[0].name in body should match "
    "'^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$'\n",
}


def test_a_current_servers_refusal_names_the_case_in_its_own_words() -> None:
    """On a CEL-enforcing server the corpus's expected text (the operator's words) is not
    verbatim in the refusal; ``server_refusal_names`` accepts the server's form of the same
    rule and nothing else."""
    by_name = {c.name: c for c in CASES}
    for name, message in SERVER_1_36.items():
        assert server_refusal_names(by_name[name], message), name
    # another rule's refusal, or the schema's answer for another field, does not count
    assert not server_refusal_names(
        by_name["volume-named-as-shared-memory"], SERVER_1_36["mount-inside-kv-layout"]
    )
    assert not server_refusal_names(
        by_name["mount-inside-kv-layout"], SERVER_1_36["volume-named-as-shared-memory"]
    )
    assert not server_refusal_names(
        by_name["image-pull-secret-bad-name"], SERVER_1_36["volume-named-as-shared-memory"]
    )
