"""What one reconcile found, for the status tests: ``findings_for`` builds the
``decisions.findings.Findings`` of a PDDeployment whose model facts are inline, its desired
state built as the planner builds it, next to the children, pods and Events a test wrote."""

from __future__ import annotations

from collections.abc import Iterable

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import parse_spec
from ascend_pd_operator.api.vocabulary import Owner
from ascend_pd_operator.builders.desired import desired_state
from ascend_pd_operator.builders.model_source import resolve_facts
from ascend_pd_operator.decisions.findings import Findings


def findings_for(
    owner: Owner,
    resource: Json,
    children: dict[tuple[str, str], Json],
    previous: Json | None = None,
    pods: Iterable[Json] = (),
    events: Iterable[Json] = (),
    router_pods: Iterable[Json] = (),
) -> Findings:
    spec = parse_spec(resource["spec"])
    facts = resolve_facts(spec)
    assert facts.facts is not None
    return Findings(
        owner=owner,
        spec=spec,
        facts=facts,
        desired=desired_state(owner, spec, facts.facts),
        children=children,
        previous=previous or {},
        pods=list(pods),
        events=list(events),
        router_pods=list(router_pods),
    )
