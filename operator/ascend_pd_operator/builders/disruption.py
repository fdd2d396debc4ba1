"""Pure builders of the PodDisruptionBudgets that bound voluntary disruptions (a node drain,
an eviction) per role, as the rollout bounds updates.

One budget per role selects that role's runtime pods of this PDDeployment, with
``maxUnavailable`` the rollout's maxUnavailable for the role (at least 1). A budget counts pods, not
instances, and Kubernetes has no way to make a group of pods one unit: with
``maxUnavailable: N`` a drain evicts at most N pods of the role while the others are
available. One pod down takes its whole instance down (and the group recovery restarts
all of that instance's pods, so they are all NotReady until it is back), so at most N
instances of the role are down through evictions. A multi-node instance counts for more
than one pod once it is down (its other pods are NotReady too and use up the budget), which
holds further evictions of the role until it is Ready again. Drains are therefore
serialised pod by pod: conservative, as far as Kubernetes allows. Involuntary disruptions
(a node failing) are bounded by no budget.
"""

from __future__ import annotations

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import Owner, disruption_budget_name, metadata, selector

KIND = "PodDisruptionBudget"
#: A budget always lets a drain take one pod of a role: a surge-only rollout
#: (``maxUnavailable: 0``) must not block node maintenance for good.
MIN_DRAIN_UNAVAILABLE = 1


def pod_disruption_budget(owner: Owner, role: str, max_unavailable: int) -> Json:
    """The budget of ``role``'s runtime pods: at most ``max_unavailable`` evicted at once
    (pods; see the module docstring for what that means for instances)."""
    return {
        "apiVersion": "policy/v1",
        "kind": KIND,
        "metadata": metadata(owner, disruption_budget_name(owner, role), role),
        "spec": {
            "maxUnavailable": max_unavailable,
            "selector": {"matchLabels": selector(owner, role)},
        },
    }
