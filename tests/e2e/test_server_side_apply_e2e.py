"""Server-side apply on the current API server, as docs/operator.md describes it.

- every child is written by the operator's field manager (``ascend-pd-operator``) with
  operation ``Apply``: ``managedFields`` says so, and owns the fields it sets;
- ``managedFields`` stays bounded across repeated reconciles that re-apply a child (drift
  repaired again and again, spec changes back and forth): one entry per manager, the same
  size after the tenth round as after the second;
- a conflict with another manager is settled the way the operator documents (it applies
  with ``force``): a user's ``kubectl apply --server-side`` of a field the operator owns is
  refused by the API server with a conflict naming the operator; with
  ``--force-conflicts`` (or a plain update such as ``kubectl edit`` or ``patch``) the
  user takes the field, and the operator's next apply takes it back; a field only the user
  sets (a label of theirs) is left to them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from pdd_e2e import Operator, apply, example, status

from ascend_pd_operator.api.vocabulary import FIELD_MANAGER

pytestmark = [pytest.mark.simulated, pytest.mark.timeout(900)]

NAME = "dsv2-lite"
USER = "e2e-user"
STS = f"{NAME}-decode-0"
ROUTER = f"{NAME}-router"


@pytest.fixture
def ready(kubectl: Any, namespace: str, operator: Operator, wait_until: Any) -> None:
    kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=privileged",
            "--overwrite")  # fmt: skip
    apply(kubectl, example("deepseek-v2-lite.yaml", namespace))
    wait_until(lambda: status(kubectl, namespace, NAME).get("phase") == "Ready", "Ready",
               timeout=300)  # fmt: skip


def get(kubectl: Any, namespace: str, *what: str) -> dict[str, Any] | None:
    """``kubectl get -o json`` with ``managedFields`` (kubectl leaves them out otherwise)."""
    done = kubectl("get", *what, "-n", namespace, "-o", "json", "--show-managed-fields",
                   check=False)  # fmt: skip
    return json.loads(done.stdout) if done.returncode == 0 else None


def _managed(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(obj["metadata"].get("managedFields") or [])


def _owns(entry: dict[str, Any], *path: str) -> bool:
    """Whether a managedFields entry's fieldsV1 holds ``path`` (``f:spec``, ``f:replicas``)."""
    node: Any = entry.get("fieldsV1") or {}
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def _ours(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in _managed(obj) if e["manager"] == FIELD_MANAGER]


def test_every_child_is_applied_by_the_operator_s_field_manager(
    kubectl: Any, namespace: str, ready: None
) -> None:
    kinds = "statefulsets,services,deployments,configmaps,serviceaccounts,roles,rolebindings"
    items = (get(kubectl, namespace, kinds) or {})["items"]
    children = [i for i in items
                if any(r.get("kind") == "PDDeployment"
                       for r in i["metadata"].get("ownerReferences") or [])]  # fmt: skip
    kinds_seen = {i["kind"] for i in children}
    assert {"StatefulSet", "Service", "Deployment", "ConfigMap", "ServiceAccount", "Role",
            "RoleBinding"} <= kinds_seen, kinds_seen  # fmt: skip
    for child in children:
        where = f"{child['kind']}/{child['metadata']['name']}"
        ours = _ours(child)
        assert [(e["operation"], e.get("subresource", "")) for e in ours] == [("Apply", "")], (
            where, _managed(child))  # fmt: skip
        assert _owns(ours[0], "f:metadata", "f:ownerReferences"), where
        assert _owns(ours[0], "f:metadata", "f:labels", "f:app.kubernetes.io/component"), where
    sts = next(c for c in children if c["metadata"]["name"] == STS)
    assert _owns(_ours(sts)[0], "f:spec", "f:replicas")
    assert _owns(_ours(sts)[0], "f:spec", "f:template", "f:spec", "f:containers")


def _managed_after_restore(kubectl: Any, namespace: str, wait_until: Any) -> list[Any]:
    """Scale the StatefulSet away from what the operator applies and wait until the
    operator's apply has taken the field back; its managedFields then."""
    kubectl("scale", "statefulset", STS, "-n", namespace, "--replicas=2")

    def restored() -> list[Any] | None:
        sts = get(kubectl, namespace, "statefulset", STS) or {}
        managed = _managed(sts)
        settled = sts.get("spec", {}).get("replicas") == 1 and not any(
            _owns(e, "f:spec", "f:replicas") for e in managed if e["manager"] != FIELD_MANAGER
        )
        return managed if settled else None

    result: list[Any] = wait_until(restored, "the operator taking spec.replicas back")
    return result


def test_managed_fields_stay_bounded_across_repeated_reconciles(
    kubectl: Any, namespace: str, ready: None, wait_until: Any
) -> None:
    sizes, managers, ours = [], [], []
    for _ in range(10):
        managed = _managed_after_restore(kubectl, namespace, wait_until)
        sizes.append(len(json.dumps(managed)))
        managers.append(sorted((e["manager"], e["operation"], e.get("subresource", ""))
                               for e in managed))  # fmt: skip
        ours.append([e["fieldsV1"] for e in managed if e["manager"] == FIELD_MANAGER])
    # one entry per manager, the same managers every round (kubectl's scale entry is gone
    # each time the operator takes spec.replicas back), and the operator's the same fields
    assert all(m == managers[0] for m in managers), managers
    assert len(managers[-1]) == len(set(managers[-1])), managers[-1]
    assert all(o == ours[0] for o in ours) and len(ours[0]) == 1, ours
    # the controllers' status entries follow the status they last wrote: no growth
    assert max(sizes[5:]) <= max(sizes[:5]), sizes
    # spec changes back and forth: each rolls the router's args; its entries stay one each
    router_sizes = []
    for policy in ["random", "round_robin"] * 3:
        body = json.dumps({"spec": {"router": {"policy": policy}}})
        kubectl("patch", "pdd", NAME, "-n", namespace, "--type", "merge", "-p", body)

        def applied(policy: str = policy) -> dict[str, Any] | None:
            router = get(kubectl, namespace, "deployment", ROUTER) or {}
            args = router["spec"]["template"]["spec"]["containers"][0]["args"]
            return router if args[args.index("--policy") + 1] == policy else None

        router = wait_until(applied, f"the router applied with --policy {policy}")
        entries = [(e["manager"], e["operation"], e.get("subresource", ""))
                   for e in _managed(router)]  # fmt: skip
        assert len(entries) == len(set(entries)), entries
        router_sizes.append(len(entries))
    assert len(set(router_sizes)) == 1, router_sizes


def _user_apply(kubectl: Any, namespace: str, doc: dict[str, Any], *extra: str) -> Any:
    return kubectl("apply", "--server-side", f"--field-manager={USER}", "-n", namespace,
                   *extra, "-f", "-", input=yaml.safe_dump(doc), check=False)  # fmt: skip


def test_a_conflicting_field_is_refused_without_force_and_taken_back_after_it(
    kubectl: Any, namespace: str, ready: None, wait_until: Any
) -> None:
    partial = {"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": STS, "namespace": namespace},
               "spec": {"replicas": 3}}  # fmt: skip
    refused = _user_apply(kubectl, namespace, partial)
    assert refused.returncode != 0
    assert "conflict" in refused.stderr.lower(), refused.stderr
    assert f'conflict with "{FIELD_MANAGER}"' in refused.stderr, refused.stderr
    assert ".spec.replicas" in refused.stderr, refused.stderr
    assert (get(kubectl, namespace, "statefulset", STS) or {})["spec"]["replicas"] == 1

    # forced: the user takes the field, and a label of their own with it
    partial["metadata"]["labels"] = {"team": "inference"}
    taken = _user_apply(kubectl, namespace, partial, "--force-conflicts")
    assert taken.returncode == 0, taken.stderr

    def taken_back() -> dict[str, Any] | None:
        sts = get(kubectl, namespace, "statefulset", STS) or {}
        by = {e["manager"]: e for e in _managed(sts)}
        ours = _owns(by.get(FIELD_MANAGER, {}), "f:spec", "f:replicas")
        theirs = _owns(by.get(USER, {}), "f:spec", "f:replicas")
        return sts if sts["spec"]["replicas"] == 1 and ours and not theirs else None

    sts = wait_until(taken_back, "the operator taking spec.replicas back from the user")
    by = {e["manager"]: e for e in _managed(sts)}
    # the user's own label is theirs, and kept
    assert sts["metadata"]["labels"]["team"] == "inference"
    assert _owns(by[USER], "f:metadata", "f:labels", "f:team"), by[USER]
    assert not _owns(by[FIELD_MANAGER], "f:metadata", "f:labels", "f:team")


def test_an_update_of_an_operator_field_is_taken_back(
    kubectl: Any, namespace: str, ready: None, wait_until: Any
) -> None:
    """A plain update (``kubectl edit``, ``patch``, ``replace``: operation Update) never
    conflicts: the user's manager takes the field; the operator's next apply takes it
    back."""
    router = get(kubectl, namespace, "deployment", ROUTER) or {}
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    edited = [*args[: args.index("--policy") + 1], "cache_aware",
              *args[args.index("--policy") + 2 :]]  # fmt: skip
    patch = [{"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": edited}]
    kubectl("patch", "deployment", ROUTER, "-n", namespace, "--type", "json",
            f"--field-manager={USER}", "-p", json.dumps(patch))  # fmt: skip

    def restored() -> dict[str, Any] | None:
        now = get(kubectl, namespace, "deployment", ROUTER) or {}
        back = now["spec"]["template"]["spec"]["containers"][0]["args"] == args
        users = [e for e in _managed(now) if e["manager"] == USER]
        return (
            now
            if back
            and not any(_owns(e, "f:spec", "f:template", "f:spec", "f:containers") for e in users)
            else None
        )

    now = wait_until(restored, "the router's args restored by the operator's apply")
    assert int(now["metadata"]["generation"]) > int(router["metadata"]["generation"])
