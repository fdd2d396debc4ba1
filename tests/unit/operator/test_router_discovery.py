"""The router discovers its workers (and so never changes with the replica counts), its
identity may only read pods, prefill pods announce their bootstrap port, and each role has
a policy/v1 PodDisruptionBudget; an API server older than the supported floor gets one
warning at start.

Expected values are written out by hand from the issue, not computed by the builders.
"""

from __future__ import annotations

import copy
import logging

import pytest

from ascend_pd_dev.controlplane import versions
from ascend_pd_operator.api.access import FLOOR_MINOR, resource_for
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import parse_spec
from ascend_pd_operator.api.vocabulary import Owner
from ascend_pd_operator.builders.desired import desired_state
from ascend_pd_operator.builders.disruption import pod_disruption_budget
from ascend_pd_operator.builders.model_source import resolve_facts
from ascend_pd_operator.kubeio.discovery import below_floor, server_minor, warn_below_floor
from ascend_pd_operator.kubeio.kube import Connection, Kube, path
from tests.json_server import serving

OWNER = Owner("dsv3", "llm", uid="0b6f8d4e-0000-4000-8000-000000000001", generation=3)
ROUTER_KINDS = ("ServiceAccount", "Role", "RoleBinding", "Service", "Deployment")


def children_of(resource: Json) -> list[Json]:
    spec = parse_spec(resource["spec"])
    facts = resolve_facts(spec).facts
    assert facts is not None
    desired = desired_state(OWNER, spec, facts)
    assert desired.ok, desired.message
    return desired.children


def named(children: list[Json], kind: str, name: str) -> Json:
    return next(c for c in children if c["kind"] == kind and c["metadata"]["name"] == name)


def router_objects(children: list[Json]) -> dict[str, Json]:
    return {k: named(children, k, "dsv3-router") for k in ROUTER_KINDS}


def scaled(resource: Json, prefill: int, decode: int) -> Json:
    out = copy.deepcopy(resource)
    out["spec"]["prefill"]["replicas"] = prefill
    out["spec"]["decode"]["replicas"] = decode
    return out


def test_scaling_never_changes_the_router(dsv3: Json) -> None:
    first = router_objects(children_of(scaled(dsv3, 1, 1)))
    for prefill, decode in ((2, 1), (3, 1), (1, 2), (3, 3), (2, 3)):
        assert router_objects(children_of(scaled(dsv3, prefill, decode))) == first, (
            prefill,
            decode,
        )


#: The example's layout fingerprint (``ascend-pd render`` of examples/deepseek-v3-pp2.yaml).
FINGERPRINT = "c22687cf0fd85d92"


def test_router_discovers_the_leaders_of_this_deployment(dsv3: Json) -> None:
    deployment = named(children_of(dsv3), "Deployment", "dsv3-router")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["args"] == [
        "--pd-disaggregation",
        "--service-discovery",
        "--service-discovery-namespace", "llm",
        "--service-discovery-port", "30000",
        "--prefill-selector",
        "ascendpd.io/deployment=dsv3", "ascendpd.io/role=prefill", "ascendpd.io/leader=true",
        f"ascendpd.io/kv-fingerprint={FINGERPRINT}",
        "--decode-selector",
        "ascendpd.io/deployment=dsv3", "ascendpd.io/role=decode", "ascendpd.io/leader=true",
        f"ascendpd.io/kv-fingerprint={FINGERPRINT}",
        "--policy", "cache_aware", "--host", "0.0.0.0", "--port", "8000",
    ]  # fmt: skip
    # the generation it routes to, on the Deployment: how the operator knows which serves
    assert deployment["metadata"]["labels"]["ascendpd.io/kv-fingerprint"] == FINGERPRINT
    # and the label it discovers by (a router of 0.1.0 has none: it used the legacy one)
    assert deployment["metadata"]["labels"]["ascendpd.io/discovery"] == "leader"
    assert "ascendpd.io/discovery" not in deployment["spec"]["template"]["metadata"]["labels"]
    # the discovery's watch authenticates as the router's own account
    assert pod["serviceAccountName"] == "dsv3-router"
    assert pod["automountServiceAccountToken"] is True


def test_router_identity_reads_pods_in_its_namespace_only(dsv3: Json) -> None:
    objs = router_objects(children_of(dsv3))
    sa, role, binding = objs["ServiceAccount"], objs["Role"], objs["RoleBinding"]
    assert sa["apiVersion"] == "v1" and sa["automountServiceAccountToken"] is False
    assert role["apiVersion"] == "rbac.authorization.k8s.io/v1"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                              "verbs": ["get", "list", "watch"]}]  # fmt: skip
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "dsv3-router"
    }  # fmt: skip
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "dsv3-router", "namespace": "llm"}
    ]
    for obj in (sa, role, binding):
        assert obj["metadata"]["namespace"] == "llm"
        assert obj["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid
    # the identity exists before the pod that uses it
    kinds = [c["kind"] for c in children_of(dsv3)]
    assert kinds.index("ServiceAccount") < kinds.index("Deployment")
    assert kinds.index("RoleBinding") < kinds.index("Deployment")


def test_prefill_pods_announce_their_bootstrap_port_where_the_router_reads_it(
    dsv3: Json,
) -> None:
    children = children_of(scaled(dsv3, 3, 1))
    for i in range(3):
        sts = named(children, "StatefulSet", f"dsv3-prefill-{i}")
        annotations = sts["spec"]["template"]["metadata"]["annotations"]
        # sglang-router 0.3.x reads exactly this annotation (no flag renames it)
        assert annotations["sglang.ai/bootstrap-port"] == str(8998 + i)
    decode = named(children, "StatefulSet", "dsv3-decode-0")
    assert "sglang.ai/bootstrap-port" not in decode["spec"]["template"]["metadata"]["annotations"]


def test_one_budget_per_role_selects_exactly_that_roles_runtime_pods(dsv3: Json) -> None:
    children = children_of(dsv3)
    budgets = {c["metadata"]["name"]: c for c in children if c["kind"] == "PodDisruptionBudget"}
    assert sorted(budgets) == ["dsv3-decode", "dsv3-prefill", "dsv3-router"]
    pod_labels = [
        (c["metadata"]["name"], c["spec"]["template"]["metadata"]["labels"])
        for c in children
        if c["kind"] in ("StatefulSet", "Deployment")
    ]
    for role in ("prefill", "decode"):
        pdb = budgets[f"dsv3-{role}"]
        assert pdb["apiVersion"] == "policy/v1"
        assert pdb["spec"]["maxUnavailable"] == 1
        assert pdb["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid
        wanted = pdb["spec"]["selector"]["matchLabels"]
        assert wanted == {"ascendpd.io/deployment": "dsv3", "ascendpd.io/role": role}
        matched = sorted(n for n, labels in pod_labels
                         if all(labels.get(k) == v for k, v in wanted.items()))  # fmt: skip
        assert matched == sorted(n for n, _ in pod_labels if n.startswith(f"dsv3-{role}-"))


def test_budget_takes_max_unavailable() -> None:
    pdb = pod_disruption_budget(OWNER, "decode", 3)
    assert pdb["apiVersion"] == "policy/v1" and pdb["spec"]["maxUnavailable"] == 3


def test_every_budget_is_policy_v1(dsv3: Json) -> None:
    budgets = [c for c in children_of(dsv3) if c["kind"] == "PodDisruptionBudget"]
    assert len(budgets) == 3 and {b["apiVersion"] for b in budgets} == {"policy/v1"}
    assert path(resource_for("PodDisruptionBudget"), "llm") == (
        "/apis/policy/v1/namespaces/llm/poddisruptionbudgets"
    )


def test_server_minor_reads_provider_builds() -> None:
    assert server_minor({"major": "1", "minor": "28"}) == 28
    assert server_minor({"major": "1", "minor": "29+"}) == 29
    assert server_minor({}) is None


def test_an_unserved_version_is_not_in_the_allow_list() -> None:
    with pytest.raises(KeyError, match="allow-list"):
        resource_for("Deployment", "apps/v1beta2")
    with pytest.raises(KeyError, match="allow-list"):
        resource_for("PodDisruptionBudget", "policy/v1beta1")


def test_the_operator_s_floor_is_the_project_s() -> None:
    assert f"1.{FLOOR_MINOR}" == versions.FLOOR


def test_only_a_server_below_the_floor_is_warned_about() -> None:
    old = {"major": "1", "minor": "27", "gitVersion": "v1.27.16"}
    warning = below_floor(old)
    assert warning is not None and "v1.27.16" in warning and "1.28" in warning
    assert below_floor({"major": "1", "minor": "28+", "gitVersion": "v1.28.15-eks"}) is None
    assert below_floor({"major": "1", "minor": "36"}) is None
    assert below_floor({}) is None


@pytest.mark.parametrize(
    ("minor", "warned"), [("27", True), ("28", False), ("36", False), (None, False)]
)
def test_the_client_asks_the_version_once_and_warns_below_the_floor(
    caplog: pytest.LogCaptureFixture, minor: str | None, warned: bool
) -> None:
    """A server answering ``/version`` (None: 404, as a proxy might) and the log."""
    paths: list[str] = []

    def answer(method: str, where: str, query: dict[str, str]) -> tuple[int, dict[str, str], Json]:
        paths.append(where)
        if minor is None:
            return 404, {}, {"kind": "Status", "code": 404, "reason": "NotFound"}
        return 200, {}, {"major": "1", "minor": minor, "gitVersion": f"v1.{minor}.3"}

    caplog.set_level(logging.DEBUG, logger="ascend_pd_operator.kubeio.discovery")
    with serving(answer) as url:
        kube = Kube(Connection.for_url(url))
        warn_below_floor(lambda where: kube.request("GET", where))
    assert paths == ["/version"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if warned:
        assert len(warnings) == 1 and f"v1.{minor}.3" in warnings[0], warnings
    else:
        assert warnings == []


def test_the_router_budget_selects_exactly_the_router_pods(dsv3: Json) -> None:
    """One router pod at a time may be evicted: with the example's two replicas a drain
    keeps one answering; the budget selects the router's pods and no runtime pod."""
    children = children_of(dsv3)
    pdb = named(children, "PodDisruptionBudget", "dsv3-router")
    assert pdb["apiVersion"] == "policy/v1" and pdb["spec"]["maxUnavailable"] == 1
    wanted = pdb["spec"]["selector"]["matchLabels"]
    assert wanted == {"ascendpd.io/deployment": "dsv3", "app.kubernetes.io/component": "router"}
    matched = sorted(
        c["metadata"]["name"] for c in children if c["kind"] in ("StatefulSet", "Deployment")
        and all(c["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in wanted.items())
    )  # fmt: skip
    assert matched == ["dsv3-router"]
    router = next(c for c in children if c["kind"] == "Deployment")
    assert router["spec"]["replicas"] == 2
    spread = router["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = spread["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term == {"labelSelector": {"matchLabels": wanted},
                    "topologyKey": "kubernetes.io/hostname"}  # fmt: skip
