"""Pure builders of the PD router: a Deployment running the SGLang router in PD mode, its
Service ``<name>-router``, the ServiceAccount, Role and RoleBinding it discovers workers
with, and the PodDisruptionBudget that keeps one replica up through a node drain (its
replicas spread over nodes; every replica discovers the same workers on its own).

The router finds its workers itself (sglang-router's Kubernetes service discovery): it
watches the pods of its namespace and routes to those matching its prefill or decode
selector (this PDDeployment, the role, and ``vocabulary.LABEL_LEADER``, which the operator
puts on instance leaders only) once they are Running and Ready, reading a prefill's
bootstrap port from its ``vocabulary.ANNOTATION_BOOTSTRAP_PORT``. Nothing in its arguments
depends on how many instances there are, so scaling a role never changes the router's
Deployment and never restarts it. Its ServiceAccount may only read pods, in its own
namespace. Its pod meets Pod Security ``restricted`` (``security``): non-root, nothing to
escalate, every capability dropped, seccomp ``RuntimeDefault``, a read-only root filesystem.

Its selectors also name the serving KV-layout generation (``LABEL_FINGERPRINT``), so one
router never pairs a prefill and a decode of two generations. When a new generation has a
Ready prefill and decode instance (``rollout.decide``), the Deployment is rolled to the new
selectors: the new router pod serves the new generation while the old one still serves the
old, and the Service moves over as the new pod turns Ready. The Deployment carries the
generation it routes to as a label, which is how the operator knows which one serves.

What sglang-router 0.3.0 to 0.3.2 do with a discovered pod (their ``service_discovery``):
a pod is added when it matches a selector and is Running with condition Ready, at
``http://<podIP>:--service-discovery-port``; it is removed only when it is being deleted
while it still matches (taking the label off, or the pod turning NotReady, keeps it).
"""

from __future__ import annotations

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import PDDeploymentSpec
from ascend_pd_operator.api.scheduling import given
from ascend_pd_operator.api.vocabulary import (
    COMPONENT_ROUTER,
    DISCOVERY_LEADER,
    HTTP_PORT,
    LABEL_FINGERPRINT,
    LABEL_LEADER,
    LABEL_ROUTER_DISCOVERY,
    ROLES,
    TOPOLOGY_HOSTNAME,
    Owner,
    component_selector,
    disruption_budget_name,
    metadata,
    router_name,
    selector,
)
from ascend_pd_operator.builders.resources import router_resources
from ascend_pd_operator.builders.security import (
    router_container_security,
    router_pod_security,
    router_tmp,
)
from ascend_pd_operator.builders.workloads import (
    scheduling_fields,
    user_container_fields,
    user_pod_fields,
    user_volumes,
)

RBAC_GROUP = "rbac.authorization.k8s.io"
#: The service discovery's pod watch (a list, then a watch; get for good measure).
ROUTER_POD_VERBS = ("get", "list", "watch")


def discovery_selector(
    owner: Owner, role: str, serving: str, discovery: str = LABEL_LEADER
) -> dict[str, str]:
    """The labels of the pods the router routes ``role`` requests to: the instance leaders
    of the serving generation. ``discovery``: the leader label it selects on (the legacy
    one until every leader carries the new one: ``rollout.discovery_label``)."""
    return {**selector(owner, role), discovery: "true", LABEL_FINGERPRINT: serving}


def _selector_args(labels: dict[str, str]) -> list[str]:
    # sglang-router takes ``key=value`` words after the flag (nargs="+"), one per label.
    return [f"{k}={v}" for k, v in labels.items()]


def router_args(
    owner: Owner, spec: PDDeploymentSpec, serving: str, discovery: str = LABEL_LEADER
) -> list[str]:
    """The same for every replica count: the router discovers the instances."""
    args = [
        "--pd-disaggregation",
        "--service-discovery",
        "--service-discovery-namespace", owner.namespace,
        "--service-discovery-port", str(HTTP_PORT),
    ]  # fmt: skip
    for role in ROLES:
        args += [
            f"--{role}-selector",
            *_selector_args(discovery_selector(owner, role, serving, discovery)),
        ]
    args += ["--policy", spec.router.policy, "--host", "0.0.0.0", "--port", str(spec.router.port)]
    return args


def router_deployment(
    owner: Owner, spec: PDDeploymentSpec, serving: str, discovery: str = LABEL_LEADER
) -> Json:
    name = router_name(owner)
    meta = metadata(owner, name, COMPONENT_ROUTER)
    meta["labels"] = {**meta["labels"], LABEL_FINGERPRINT: serving}
    template_labels = dict(meta["labels"])
    if discovery == LABEL_LEADER:
        # On the Deployment only (its pods need not roll for it): what its pods select on.
        meta["labels"][LABEL_ROUTER_DISCOVERY] = DISCOVERY_LEADER
    probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10}
    container: Json = {
        "name": "router",
        "image": spec.router.image or spec.runtime.image,
        "imagePullPolicy": spec.runtime.image_pull_policy,
        "command": ["python3", "-m", "sglang_router.launch_router"],
        "args": router_args(owner, spec, serving, discovery),
        "ports": [{"name": "http", "containerPort": spec.router.port, "protocol": "TCP"}],
        "readinessProbe": probe,
        "livenessProbe": {**probe, "failureThreshold": 6},
    }
    if resources := router_resources(spec):
        container["resources"] = resources
    r = spec.router
    volumes, mounts = user_volumes(r)
    # A router of a build before 9f74067 (the legacy label) keeps its exact template until
    # it rolls to the leader label (``rollout.discovery_label``): the security defaults
    # come with that one roll.
    hardened = discovery == LABEL_LEADER
    if hardened:
        tmp_volumes, tmp_mounts = router_tmp(r)
        volumes, mounts = tmp_volumes + volumes, tmp_mounts + mounts
    if mounts:
        container["volumeMounts"] = mounts
    container.update(user_container_fields(r))
    if hardened:
        container["securityContext"] = router_container_security(r)
    pod_spec: Json = {
        # The discovery's pod watch authenticates with this account's token.
        "serviceAccountName": name,
        "automountServiceAccountToken": True,
        "containers": [container],
        **{k: v for k, v in scheduling_fields(spec, r).items() if k == "priorityClassName"},
        # A serviceAccountName of the user's replaces the router's own (the operator binds
        # the router's Role to it too: router_role_binding).
        **user_pod_fields(r),
    }
    if hardened:
        pod_spec["securityContext"] = router_pod_security(r)
        # The router finds workers by its pod watch, never by the Service env vars, which
        # would only hand it every Service of the namespace.
        pod_spec["enableServiceLinks"] = False
    if volumes:
        pod_spec["volumes"] = volumes
    if r.node_selector:
        pod_spec["nodeSelector"] = dict(r.node_selector)
    if r.tolerations:
        pod_spec["tolerations"] = [given(t) for t in r.tolerations]
    pod_spec["affinity"] = router_anti_affinity(owner)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": spec.router.replicas,
            "selector": {"matchLabels": component_selector(owner, COMPONENT_ROUTER)},
            "template": {"metadata": {"labels": template_labels}, "spec": pod_spec},
        },
    }


def router_anti_affinity(owner: Owner) -> Json:
    """Router replicas on different nodes where the scheduler can: one node's drain or loss
    then leaves a replica answering. Preferred, not required, so that a cluster with fewer
    schedulable nodes than replicas still runs them all."""
    term = {
        "labelSelector": {"matchLabels": component_selector(owner, COMPONENT_ROUTER)},
        "topologyKey": TOPOLOGY_HOSTNAME,
    }
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": term}]}}  # fmt: skip


def router_disruption_budget(owner: Owner) -> Json:
    """At most one router pod evicted at a time: with two replicas or more a node drain
    keeps the endpoint answering; with one, the drain still goes on (a budget that allowed
    nothing would hold the node's maintenance for good)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(
            owner, disruption_budget_name(owner, COMPONENT_ROUTER), COMPONENT_ROUTER
        ),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": component_selector(owner, COMPONENT_ROUTER)},
        },
    }


def router_service(owner: Owner, spec: PDDeploymentSpec) -> Json:
    meta = metadata(owner, router_name(owner), COMPONENT_ROUTER)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": "ClusterIP",
            "selector": component_selector(owner, COMPONENT_ROUTER),
            "ports": [
                {"name": "http", "port": spec.router.port, "targetPort": "http", "protocol": "TCP"}
            ],
        },
    }


def router_service_account(owner: Owner) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(owner, router_name(owner), COMPONENT_ROUTER),
        # Only the router's pod needs the token (its template asks for it).
        "automountServiceAccountToken": False,
    }


def router_role(owner: Owner) -> Json:
    """Read pods in the router's namespace: all the service discovery does with the API."""
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "Role",
        "metadata": metadata(owner, router_name(owner), COMPONENT_ROUTER),
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": list(ROUTER_POD_VERBS)}],
    }


def router_role_binding(owner: Owner, spec: PDDeploymentSpec) -> Json:
    """The router's Role bound to its own ServiceAccount and to ``router.serviceAccountName``
    when one is given: the router pods run as that one, and during a switch between the two
    the old pod keeps discovering until it is gone."""
    name = router_name(owner)
    accounts = [name]
    if spec.router.service_account_name not in ("", name):
        accounts.append(spec.router.service_account_name)
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": metadata(owner, name, COMPONENT_ROUTER),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": name},
        "subjects": [
            {"kind": "ServiceAccount", "name": a, "namespace": owner.namespace} for a in accounts
        ],
    }


def router_children(
    owner: Owner,
    spec: PDDeploymentSpec,
    serving: str,
    discovery: str = LABEL_LEADER,
) -> list[Json]:
    """Everything the router needs, in apply order: its identity before its pod;
    ``serving``: the KV-layout generation it routes to; ``discovery``: the leader label."""
    return [
        router_service_account(owner),
        router_role(owner),
        router_role_binding(owner, spec),
        router_service(owner, spec),
        router_deployment(owner, spec, serving, discovery),
        router_disruption_budget(owner),
    ]
