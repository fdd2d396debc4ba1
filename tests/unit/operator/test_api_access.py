"""The allow-list resolves every kind the operator touches to its REST path."""

from __future__ import annotations

import pytest

from ascend_pd_operator.api.access import RBAC_RULES, RESOURCES, resource_for
from ascend_pd_operator.api.vocabulary import Owner
from ascend_pd_operator.builders.desired import desired_state
from ascend_pd_operator.builders.model_source import inspector_job
from ascend_pd_operator.kubeio.kube import path


def test_paths() -> None:
    assert path(resource_for("ConfigMap"), "llm", "a") == "/api/v1/namespaces/llm/configmaps/a"
    assert path(resource_for("StatefulSet"), "llm") == "/apis/apps/v1/namespaces/llm/statefulsets"
    assert path(resource_for("PDDeployment"), None) == "/apis/ascendpd.io/v1alpha1/pddeployments"
    assert (
        path(resource_for("CustomResourceDefinition"), "ignored", "x")
        == "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x"
    )


def test_unknown_kind_names_the_allow_list() -> None:
    with pytest.raises(KeyError, match="allow-list"):
        resource_for("Secret")


def test_every_child_kind_is_allowed_with_the_verbs_apply_and_prune_need(dsv3: dict) -> None:
    from ascend_pd_operator.api.models import parse_spec
    from ascend_pd_operator.builders.model_source import resolve_facts

    resource = dict(dsv3)
    spec = parse_spec({**resource["spec"], "scheduling": {"gang": "volcano"}})
    facts = resolve_facts(spec).facts
    assert facts is not None
    owner = Owner("dsv3", "llm", uid="u")
    desired = desired_state(owner, spec, facts)
    assert desired.ok, desired.message
    kinds = {m["kind"] for m in desired.children}
    kinds.add(inspector_job(owner, spec)["kind"])
    api_versions = {m["apiVersion"] for m in desired.children} | {"batch/v1"}
    for kind in kinds:
        verbs = set(resource_for(kind).verbs)
        assert {"get", "list", "watch", "patch", "delete"} <= verbs, kind
        assert resource_for(kind).api_version in api_versions


def test_rbac_rules_cover_status() -> None:
    assert ("ascendpd.io", "pddeployments/status", ("get", "patch", "update")) in RBAC_RULES
    assert len({r.kind for r in RESOURCES}) == len(RESOURCES)
