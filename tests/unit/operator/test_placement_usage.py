"""The one read spec.placement adds: a LIST of every namespace's non-terminal pods, summed
per node; a refusal is told (NodeUsageUnknown), a transient failure is retried."""

from __future__ import annotations

from typing import Any

import pytest

from ascend_pd_operator.kubeio.errors import KubeError
from ascend_pd_operator.wiring.reconciler import USAGE_FIELD_SELECTOR, observe_usage

NPU = "huawei.com/Ascend910"


class Lister:
    """A Kube that answers LISTs of pods with ``pods`` (or raises ``error``)."""

    def __init__(self, pods: list[Any], error: KubeError | None = None) -> None:
        self.pods, self.error = pods, error
        self.asked: list[tuple[str, Any, str]] = []

    def list(self, kind: str, namespace: Any, selector: str = "", field_selector: str = ""):
        self.asked.append((kind, namespace, field_selector))
        if self.error is not None:
            raise self.error
        return iter(self.pods)


def pod(node: str, npus: str, deployment: str = "") -> dict[str, Any]:
    labels = {"ascendpd.io/deployment": deployment, "ascendpd.io/role": "prefill"}
    return {
        "metadata": {"name": "p", "namespace": "llm", "labels": labels if deployment else {}},
        "spec": {"nodeName": node,
                 "containers": [{"resources": {"requests": {NPU: npus}}}]},
        "status": {"phase": "Running"},
    }  # fmt: skip


def test_one_list_of_every_namespace_summed_per_node() -> None:
    kube = Lister([pod("n1", "8", "kimi"), pod("n1", "4"), pod("n2", "2"), pod("", "8")])
    usage = observe_usage(kube, NPU)  # type: ignore[arg-type]
    assert kube.asked == [("Pod", None, USAGE_FIELD_SELECTOR)]
    assert USAGE_FIELD_SELECTOR == "status.phase!=Succeeded,status.phase!=Failed"
    assert usage.npus == {"n1": 12, "n2": 2}  # a pod bound to no node holds nothing yet
    assert usage.deployments == {"n1": frozenset({"llm/kimi"})}
    assert usage.error == ""


def test_a_refused_list_is_told_and_a_transient_one_retried() -> None:
    forbidden = KubeError(403, "Forbidden", 'pods is forbidden: cannot list resource "pods"')
    usage = observe_usage(Lister([], forbidden), NPU)  # type: ignore[arg-type]
    assert usage.error.startswith("listing the pods of every namespace: 403 Forbidden")
    with pytest.raises(KubeError):
        observe_usage(Lister([], KubeError(503, "ServiceUnavailable", "later")), NPU)  # type: ignore[arg-type]
