"""Every Kubernetes resource the operator uses, with the verbs it needs: the allow-list.

``kube.py`` resolves paths only through this table, so a resource missing here cannot be
touched by the operator. The chart's RBAC is written by hand; a test (with the toolbox's
``ascend_pd_dev.testtools.rbac``) compares it with ``RBAC_RULES`` both ways, so the chart grants
exactly these verbs.
kopf itself needs the PDDeployment watch, its own events and (for peering when
enabled) nothing else, since we do not enable kopf peering.
"""

from __future__ import annotations

from dataclasses import dataclass

from ascend_pd_operator.api import models


@dataclass(frozen=True)
class Resource:
    kind: str
    group: str  # "" is the core group
    version: str
    plural: str
    verbs: tuple[str, ...]
    namespaced: bool = True
    #: Needed only with spec.scheduling.gang: volcano (the Volcano CRDs may be absent).
    optional: bool = False
    subresources: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


_CHILD = ("get", "list", "watch", "create", "patch", "update", "delete")

RESOURCES: tuple[Resource, ...] = (
    Resource(
        models.KIND,
        models.GROUP,
        models.VERSION,
        models.PLURAL,
        ("get", "list", "watch", "patch", "update"),
        subresources=("status",),
    ),
    # A scaled role's scale target: created once (its spec.replicas then belongs to kubectl
    # scale, an HPA or KEDA), deleted when the role is Static again, its status written;
    # patch: the planner sets spec.replicas in Planner mode.
    Resource(
        models.SCALER_KIND,
        models.GROUP,
        models.VERSION,
        models.SCALER_PLURAL,
        ("get", "list", "watch", "create", "patch", "delete"),
        subresources=("status",),
    ),
    Resource("ConfigMap", "", "v1", "configmaps", _CHILD),
    Resource("Service", "", "v1", "services", _CHILD),
    Resource("StatefulSet", "apps", "v1", "statefulsets", _CHILD),
    Resource("Deployment", "apps", "v1", "deployments", _CHILD),
    Resource("Job", "batch", "v1", "jobs", _CHILD),
    # The router's own identity: it watches pods (service discovery). Granting that Role
    # needs no "bind" or "escalate": the operator holds every verb it grants (pods below).
    Resource("ServiceAccount", "", "v1", "serviceaccounts", _CHILD),
    Resource("Role", "rbac.authorization.k8s.io", "v1", "roles", _CHILD),
    Resource("RoleBinding", "rbac.authorization.k8s.io", "v1", "rolebindings", _CHILD),
    # One per role and one for the router.
    Resource("PodDisruptionBudget", "policy", "v1", "poddisruptionbudgets", _CHILD),
    # The inspector's result is its pod's termination message; the router's Role grants
    # get/list/watch (so the operator must hold them); delete: an instance is updated and
    # restarted by deleting its pods together, and its pods on a lost node force-deleted
    # (grace period 0); patch: the leader label on leaders, the draining label.
    Resource(
        "Pod", "", "v1", "pods", ("get", "list", "watch", "delete", "deletecollection", "patch")
    ),
    # create/patch: our Warning Events; list/watch: the StatefulSet controller's
    # FailedCreate Events (a refused pod), which the status names (``child_watch``).
    Resource("Event", "", "v1", "events", ("create", "patch", "list", "watch")),
    Resource("PodGroup", "scheduling.volcano.sh", "v1beta1", "podgroups", _CHILD, optional=True),
    # Group recovery restarts an instance whose pod's node is NotReady or out of service
    # (its taint), and times a node's loss by its Ready condition: read-only.
    Resource("Node", "", "v1", "nodes", ("get", "list", "watch"), namespaced=False),
    # kopf checks the CRD exists and lists namespaces with --all-namespaces; the reconciler
    # reads Volcano's PodGroup CRD for subGroupPolicy (placement scope Deployment); at start
    # the CRD gate (``kubeio.crds``) gets our own two CRDs to check their schemas. get on
    # every CRD covers that, so no rule restricted by resourceNames is needed beside it.
    Resource(
        "CustomResourceDefinition",
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        ("get", "list", "watch"),
        namespaced=False,
    ),
    Resource("Namespace", "", "v1", "namespaces", ("get", "list", "watch"), namespaced=False),
    # Only with ``ascend-pd run --leader-elect`` (in the operator's own namespace).
    Resource("Lease", "coordination.k8s.io", "v1", "leases", ("get", "create", "update")),
)

_BY_KIND = {r.kind: r for r in RESOURCES}

#: The oldest Kubernetes minor (1.x) the operator supports: every version in the table is
#: served from it on (docs/compatibility.md; the dev tools' ``versions.FLOOR``, which a
#: test keeps equal). An older server gets a warning at start (``kubeio.discovery``).
FLOOR_MINOR = 28


def resource_for(kind: str, api_version: str | None = None) -> Resource:
    """The allow-list's entry for ``kind``; ``api_version``, if given, must be its version."""
    try:
        res = _BY_KIND[kind]
    except KeyError:
        raise KeyError(f"{kind} is not in the operator's API allow-list (api/access.py)") from None
    if api_version is None or api_version == res.api_version:
        return res
    raise KeyError(f"{kind} {api_version} is not in the operator's API allow-list")


#: (apiGroup, resource, verbs) rows for a Role/ClusterRole, status subresources included.
RBAC_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = tuple(
    row
    for r in RESOURCES
    for row in (
        (r.group, r.plural, r.verbs),
        *((r.group, f"{r.plural}/{sub}", ("get", "patch", "update")) for sub in r.subresources),
    )
)

#: Health endpoint of ``ascend-pd run`` (liveness probe of the operator pod).
HEALTH_PATH = "/healthz"
DEFAULT_HEALTH_PORT = 8080
#: The operator's Prometheus metrics (``metrics.py``) are served on their own port.
METRICS_PATH = "/metrics"
DEFAULT_METRICS_PORT = 8081
