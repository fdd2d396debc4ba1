"""The chart's RBAC is exactly the operator's API allow-list (access.py), per mode.

Every rule the chart renders is flattened to (apiGroup, resource, verb) and compared
with what the allow-list says the code uses in that mode: a grant missing from the chart
is a 403 at runtime, an extra one is privilege nobody uses. No wildcards anywhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from chart_env import CHART, CI_VALUES, KUBE_VERSIONS, NAMESPACE, RELEASE, Render

from ascend_pd_dev.testtools.rbac import (
    Grant,
    RBACError,
    grants_by_role,
    grants_from_rules,
    local_operator_command,
)
from ascend_pd_operator.api import access
from ascend_pd_operator.decisions.planner import PRUNED_KINDS

FULLNAME = f"{RELEASE}-ascend-pd-operator"
#: cluster-scoped reads kopf makes in every mode (its discovery)
#: Cluster-scoped reads in every mode: kopf's discovery, and the nodes group recovery reads.
CLUSTER_READS = {"namespaces", "customresourcedefinitions", "nodes"}
LEADER_ELECTION_ONLY = {"leases"}


def allowed(*, cluster_scoped: bool, gang: bool, leases: bool = False) -> set[Grant]:
    """The grants the allow-list asks for in one mode (subresources with their resource)."""
    wanted = {
        res.plural
        for res in access.RESOURCES
        if (gang or not res.optional)
        and (res.plural in LEADER_ELECTION_ONLY) == leases
        and (cluster_scoped or res.namespaced)
    }
    grants = {
        (group, resource, verb)
        for group, resource, verbs in access.RBAC_RULES
        if resource.split("/")[0] in wanted
        for verb in verbs
    }
    if not gang:
        # the reconciler lists every kind it prunes on each pass, gang scheduling or not
        grants |= {
            (res.group, res.plural, "list")
            for res in access.RESOURCES
            if res.optional and res.kind in PRUNED_KINDS
        }
    return grants


def test_allow_list_is_fully_classified() -> None:
    # a new cluster-scoped resource in the allow-list must be placed in a mode here
    cluster = {r.plural for r in access.RESOURCES if not r.namespaced}
    assert cluster == CLUSTER_READS
    assert {r.plural for r in access.RESOURCES if r.optional} == {"podgroups"}


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
@pytest.mark.parametrize("gang", [False, True])
def test_all_namespaces_cluster_role_is_the_allow_list(
    render: Render, kube: str, gang: bool
) -> None:
    sets = [f"gangScheduling.enabled={str(gang).lower()}"]
    roles = grants_by_role(render([], kube, sets))
    operator = roles.pop(f"ClusterRole/-/{FULLNAME}")
    assert operator == allowed(cluster_scoped=True, gang=gang)
    # what is left is the helm test's own Role
    assert set(roles) == {f"Role/{NAMESPACE}/{FULLNAME}-test"}


def test_namespaced_roles_are_the_namespaced_allow_list(render: Render) -> None:
    values = CHART / "ci" / "namespaced-values.yaml"
    roles = grants_by_role(render([values]))
    discovery = roles.pop(f"ClusterRole/-/{FULLNAME}-discovery")
    assert discovery == allowed(cluster_scoped=True, gang=False) - allowed(
        cluster_scoped=False, gang=False
    )
    assert {g[1] for g in discovery} == CLUSTER_READS
    for key, grants in roles.items():
        if key.endswith("-test"):
            continue
        assert key.startswith("Role/team-"), key
        assert grants == allowed(cluster_scoped=False, gang=False), key


def test_placement_may_list_pods_cluster_wide_only_when_asked(render: Render) -> None:
    """spec.placement's one LIST of every namespace's pods: the ClusterRole has it when
    every namespace is watched; watching some, placement.podsClusterWide adds list (and
    nothing else) to the discovery ClusterRole."""
    values = CHART / "ci" / "namespaced-values.yaml"
    plain = grants_by_role(render([values]))[f"ClusterRole/-/{FULLNAME}-discovery"]
    asked = grants_by_role(render([values], set_values=["placement.podsClusterWide=true"]))
    assert asked.pop(f"ClusterRole/-/{FULLNAME}-discovery") - plain == {("", "pods", "list")}
    everywhere = grants_by_role(render(set_values=["placement.podsClusterWide=true"]))
    assert everywhere[f"ClusterRole/-/{FULLNAME}"] == allowed(cluster_scoped=True, gang=False)


def test_device_info_lists_configmaps_of_kube_system_only_when_asked(render: Render) -> None:
    """placement.deviceInfo: the operator runs with --placement-device-info and, watching
    some namespaces, a Role in kube-system grants list on ConfigMaps and nothing else (the
    device plugin's mindx-dl-deviceinfo-<node>); watching every namespace the ClusterRole
    has it already. Off (the default): neither the flag nor the Role."""
    values = CHART / "ci" / "namespaced-values.yaml"

    def args(manifests: list[dict]) -> list[str]:
        (deployment,) = [m for m in manifests if m["kind"] == "Deployment"]
        return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])

    plain = render([values])
    assert "--placement-device-info" not in args(plain)
    assert not any(k.startswith("Role/kube-system/") for k in grants_by_role(plain))
    asked = render([values], set_values=["placement.deviceInfo=true"])
    assert "--placement-device-info" in args(asked)
    roles = grants_by_role(asked)
    assert roles.pop(f"Role/kube-system/{FULLNAME}-device-info") == {("", "configmaps", "list")}
    assert roles == grants_by_role(plain)  # nothing else changed
    (binding,) = [m for m in asked if m["kind"] == "RoleBinding"
                  and m["metadata"]["namespace"] == "kube-system"]  # fmt: skip
    assert binding["roleRef"]["name"] == f"{FULLNAME}-device-info"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
    ]
    everywhere = render(set_values=["placement.deviceInfo=true"])
    assert "--placement-device-info" in args(everywhere)
    roles = grants_by_role(everywhere)
    assert ("", "configmaps", "list") in roles[f"ClusterRole/-/{FULLNAME}"]
    assert not any(k.startswith("Role/kube-system/") for k in roles)
    assert roles == grants_by_role(render())


def test_leader_election_grants_leases_in_the_release_namespace_only(render: Render) -> None:
    roles = grants_by_role(render(set_values=["leaderElection.enabled=true", "replicaCount=2"]))
    lease_role = roles.pop(f"Role/{NAMESPACE}/{FULLNAME}-leader-election")
    assert lease_role == allowed(cluster_scoped=False, gang=False, leases=True) - allowed(
        cluster_scoped=False, gang=False
    )
    assert lease_role == {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")}
    assert not any(g[1] == "leases" for grants in roles.values() for g in grants)


@pytest.mark.parametrize("values", CI_VALUES, ids=[p.stem for p in CI_VALUES])
def test_every_grant_is_in_the_allow_list(render: Render, values: Path) -> None:
    everything = allowed(cluster_scoped=True, gang=True, leases=True) | allowed(
        cluster_scoped=True, gang=True
    )
    for key, grants in grants_by_role(render([values])).items():
        if key.endswith("-test"):
            continue
        assert grants <= everything, (key, grants - everything)


def test_rbac_check_refuses_wildcards_and_names() -> None:
    ok = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}
    assert grants_from_rules([ok]) == {("", "pods", "get")}
    for field, bad in (
        ("verbs", ["*"]),
        ("resources", ["*"]),
        ("apiGroups", ["*"]),
        ("resourceNames", ["x"]),
        ("nonResourceURLs", ["/metrics"]),
        ("verbs", []),
    ):
        with pytest.raises(RBACError, match=field):
            grants_from_rules([{**ok, field: bad}])


def test_local_operator_command_is_the_pods(render: Render) -> None:
    values = CHART / "ci" / "namespaced-values.yaml"
    (deployment,) = [d for d in render([values]) if d["kind"] == "Deployment"]
    argv, env = local_operator_command(deployment, 18080, 18081)
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    own = args[[a.split("=")[0] for a in args].index("--metrics-port") + 1 :]
    assert own[0].startswith("--workers=")  # the chart's flags after the ports
    assert argv == ["run", "--namespace=team-a", "--namespace=team-b", "--health-port=18080",
                    "--metrics-port=18081", *own]  # fmt: skip
    assert env == {"POD_NAMESPACE": NAMESPACE, "POD_NAME": f"{FULLNAME}-local"}
