"""Where a pod fits: the pure part of kubelet-sim's scheduler.

A pod fits a node when the node is not cordoned, the pod tolerates its NoSchedule/NoExecute
taints, matches its ``nodeSelector`` and required node affinity, breaks no required pod
anti-affinity on ``kubernetes.io/hostname``, and its requests (cpu, memory, pods,
``huawei.com/Ascend910``, any resource) fit in what the node has left. ``choose_node`` takes
the first node, by number, where it fits, or says why none does as a scheduler would.

Volumes are not looked at, except by ``claim_problem`` for the pods that ask
(``knobs.CHECK_CLAIMS``): a PersistentVolumeClaim missing or being deleted stops the pod before
any node is tried, as the 1.20 scheduler's basic checks do; binding is not simulated (an
existing claim is taken as bound).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from ascend_pd_dev.kubelet_sim.nodes import HOSTNAME_KEY, node_order
from ascend_pd_dev.kubelet_sim.objects import Obj, is_terminal

# --------------------------------------------------------------------------- resources


def parse_quantity(value: str | int | float) -> Decimal:
    """A Kubernetes quantity (``"500m"``, ``"2Gi"``, ``8``) as a Decimal of base units."""
    from kubernetes import utils

    parsed: Decimal = utils.parse_quantity(value)  # type: ignore[no-untyped-call]
    return Decimal(parsed)


def _container_requests(container: Obj) -> dict[str, Decimal]:
    """A missing request defaults to the limit, as the API server does for extended ones."""
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: parse_quantity(value) for name, value in merged.items()}


def pod_requests(pod: Obj) -> dict[str, Decimal]:
    """Effective requests: sum over containers, at least each init container's, plus one pod."""
    spec = pod.get("spec", {})
    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for name, value in _container_requests(container).items():
            total[name] = total.get(name, Decimal(0)) + value
    for container in spec.get("initContainers") or []:
        for name, value in _container_requests(container).items():
            total[name] = max(total.get(name, Decimal(0)), value)
    total["pods"] = total.get("pods", Decimal(0)) + 1
    return total


def node_used(pods: Iterable[Obj], name: str) -> dict[str, Decimal]:
    used: dict[str, Decimal] = {}
    for pod in pods:
        if pod.get("spec", {}).get("nodeName") == name and not is_terminal(pod):
            for resource, value in pod_requests(pod).items():
                used[resource] = used.get(resource, Decimal(0)) + value
    return used


# --------------------------------------------------------------------------- selection


def _match_expression(labels: Mapping[str, str], expr: Obj) -> bool:
    key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        try:
            have, want = int(labels[key]), int(values[0])
        except (KeyError, IndexError, ValueError):
            return False
        return have > want if op == "Gt" else have < want
    return False


def label_selector_matches(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector; an empty selector matches everything, a missing one nothing."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(_match_expression(labels, e) for e in selector.get("matchExpressions") or [])


def _required(affinity: Obj | None, kind: str) -> Any:
    return ((affinity or {}).get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution")


def node_selection_ok(pod: Obj, node: Obj) -> bool:
    """nodeSelector and required node affinity."""
    labels = node.get("metadata", {}).get("labels") or {}
    spec = pod.get("spec", {})
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    terms = (_required(spec.get("affinity"), "nodeAffinity") or {}).get("nodeSelectorTerms") or []
    if not terms:
        return True
    # terms are ORed, expressions within a term ANDed
    return any(
        all(_match_expression(labels, e) for e in term.get("matchExpressions") or [])
        for term in terms
    )


def _repels(term: Obj, pod: Obj, other: Obj, node_name: str) -> bool:
    """Whether ``other``, on ``node_name``, is what ``pod``'s anti-affinity ``term`` avoids."""
    meta = other.get("metadata", {})
    namespaces = term.get("namespaces") or [pod["metadata"].get("namespace", "default")]
    return (
        other.get("spec", {}).get("nodeName") == node_name
        and not is_terminal(other)
        and meta.get("uid") != pod["metadata"].get("uid")
        and meta.get("namespace") in namespaces
        and label_selector_matches(term.get("labelSelector"), meta.get("labels") or {})
    )


def anti_affinity_ok(pod: Obj, node: Obj, pods: Iterable[Obj]) -> bool:
    """Required pod anti-affinity with topology key ``kubernetes.io/hostname``."""
    terms = _required(pod.get("spec", {}).get("affinity"), "podAntiAffinity") or []
    name = node["metadata"]["name"]
    others = list(pods)
    return not any(
        _repels(term, pod, other, name)
        for term in terms
        if term.get("topologyKey") == HOSTNAME_KEY
        for other in others
    )


def tolerated(pod: Obj, taint: Obj) -> bool:
    """Whether one of the pod's tolerations matches ``taint`` (key, value, effect)."""
    for tol in pod.get("spec", {}).get("tolerations") or []:
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists":
            if not tol.get("key") or tol.get("key") == taint.get("key"):
                return True
        elif tol.get("key") == taint.get("key") and (tol.get("value") or "") == (
            taint.get("value") or ""
        ):
            return True
    return False


# --------------------------------------------------------------------------- the choice


def _untolerated(pod: Obj, node: Obj) -> list[str]:
    untolerated = [
        t for t in node.get("spec", {}).get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute") and not tolerated(pod, t)
    ]  # fmt: skip
    if not untolerated:
        return []
    taint = untolerated[0]
    return [f"node(s) had taint {{{taint.get('key')}: {taint.get('value', '')}}}, "
            "that the pod didn't tolerate"]  # fmt: skip


def _insufficient(pod: Obj, node: Obj, pods: list[Obj]) -> list[str]:
    allocatable = {
        k: parse_quantity(v) for k, v in (node.get("status", {}).get("allocatable") or {}).items()
    }
    used = node_used(pods, node["metadata"]["name"])
    return [
        f"Insufficient {resource}"
        for resource, wanted in sorted(pod_requests(pod).items())
        if wanted > 0
        and used.get(resource, Decimal(0)) + wanted > allocatable.get(resource, Decimal(0))
    ]


def unfit_reasons(pod: Obj, node: Obj, pods: list[Obj]) -> list[str]:
    """Why ``pod`` cannot go to ``node`` (empty when it fits)."""
    if node.get("spec", {}).get("unschedulable"):
        return ["node is cordoned"]
    untolerated = _untolerated(pod, node)
    if untolerated:
        return untolerated
    if not node_selection_ok(pod, node):
        return ["node(s) didn't match node selector/affinity"]
    if not anti_affinity_ok(pod, node, pods):
        return ["node(s) didn't match pod anti-affinity rules"]
    return _insufficient(pod, node, pods)


def choose_node(pod: Obj, nodes: list[Obj], pods: list[Obj]) -> tuple[str | None, str]:
    """The first node (by name order) where ``pod`` fits, or None and a scheduler-style message."""
    counts: dict[str, int] = {}
    for node in sorted(nodes, key=lambda n: node_order(n["metadata"]["name"])):
        reasons = unfit_reasons(pod, node, pods)
        if not reasons:
            return node["metadata"]["name"], ""
        for reason in reasons:
            counts[reason] = counts.get(reason, 0) + 1
    details = ", ".join(f"{n} {r}" for r, n in sorted(counts.items()))
    return None, f"0/{len(nodes)} nodes are available: {details}."


# --------------------------------------------------------------------------- claims


def claim_names(pod: Obj) -> list[str]:
    """The PersistentVolumeClaims ``pod``'s volumes name."""
    return [
        str(v["persistentVolumeClaim"].get("claimName", ""))
        for v in pod.get("spec", {}).get("volumes") or []
        if v.get("persistentVolumeClaim")
    ]


def claim_problem(pod: Obj, claims: Mapping[tuple[str, str], Obj]) -> str:
    """Why the 1.20 scheduler would not place ``pod`` for its claims (its own words, from
    ``podPassesBasicChecks``), or "" (``claims``: (namespace, name) -> the claim)."""
    namespace = pod["metadata"].get("namespace", "default")
    for name in claim_names(pod):
        claim = claims.get((namespace, name))
        if claim is None:
            return f'persistentvolumeclaim "{name}" not found'
        if claim.get("metadata", {}).get("deletionTimestamp"):
            return f'persistentvolumeclaim "{name}" is being deleted'
    return ""
