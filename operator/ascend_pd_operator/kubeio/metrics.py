"""Every Prometheus metric the operator exports, and the small hooks that feed them.

The other modules call one hook each where something happens (a reconcile ends, a key
enters or leaves the work queue, an API request is answered, a watch reports a child);
the metric names, labels and buckets live here alone, so the dashboard and
docs/operator.md have one place to agree with. ``serve`` exposes ``REGISTRY`` on its own
port with prometheus_client (never a hand-written exposition format).

Per-PDDeployment series are produced at scrape time by ``DeploymentCollector`` from
what the reconciles and the child watches last reported (``deployment_reports``), so a
deleted PDDeployment's series vanish with it and label cardinality stays bounded by the
PDDeployments and their instances that exist now.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import ROLES, role_status
from ascend_pd_operator.kubeio.deployment_reports import Deployment, DeploymentReports, Instance

#: Every operator metric starts with this; the per-deployment ones with ``ascend_pd_``.
PREFIX = "ascend_pd_operator"

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

# --- the reconcile loop -------------------------------------------------------------------
#: ``result``: ok, gone (the PDDeployment no longer exists), conflict, transient, error.
RECONCILE_RESULTS = ("ok", "gone", "conflict", "transient", "error")
RECONCILE_DURATION = Histogram(
    f"{PREFIX}_reconcile_duration_seconds",
    "Duration of one reconcile of one PDDeployment, by result.",
    ["result"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)

# --- the work queue -----------------------------------------------------------------------
QUEUE_DEPTH = Gauge(
    f"{PREFIX}_workqueue_depth", "Keys waiting in the work queue now.", registry=REGISTRY
)
QUEUE_DELAYED = Gauge(
    f"{PREFIX}_workqueue_delayed",
    "Keys waiting for their retry backoff before they enter the queue.",
    registry=REGISTRY,
)
QUEUE_ADDS = Counter(f"{PREFIX}_workqueue_adds", "Keys put on the work queue.", registry=REGISTRY)
QUEUE_WAIT = Histogram(
    f"{PREFIX}_workqueue_wait_seconds",
    "Time a key waited in the queue before a worker took it.",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60),
    registry=REGISTRY,
)
QUEUE_RETRIES = Counter(
    f"{PREFIX}_workqueue_retries",
    "Failed reconciles queued again after their key's backoff.",
    registry=REGISTRY,
)

# --- the API server -----------------------------------------------------------------------
API_REQUESTS = Counter(
    f"{PREFIX}_api_requests",
    "Requests to the Kubernetes API by verb, kind and HTTP status code "
    '(code "error": no answer, e.g. the connection failed).',
    ["verb", "kind", "code"],
    registry=REGISTRY,
)
APPLIES = Counter(
    f"{PREFIX}_applies", "Server-side applies of children, by kind.", ["kind"], registry=REGISTRY
)
DELETES = Counter(
    f"{PREFIX}_deletes", "Deletions of children, by kind.", ["kind"], registry=REGISTRY
)


def _initialise() -> None:
    """Series for every result and every kind the operator may write, from the start: a
    rate over a series that appears only at its first event would miss that event."""
    from ascend_pd_operator.api.access import RESOURCES

    for result in RECONCILE_RESULTS:
        RECONCILE_DURATION.labels(result)
    for res in RESOURCES:
        if "patch" in res.verbs:
            APPLIES.labels(res.kind)
        if "delete" in res.verbs:
            DELETES.labels(res.kind)


_initialise()


# --- hooks --------------------------------------------------------------------------------
def observe_reconcile(result: str, seconds: float) -> None:
    RECONCILE_DURATION.labels(result).observe(seconds)


def observe_request(verb: str, kind: str, code: int | str) -> None:
    API_REQUESTS.labels(verb, kind, str(code)).inc()


def observe_write(verb: str, kind: str) -> None:
    """A child applied (``apply``) or deleted (``delete``)."""
    (APPLIES if verb == "apply" else DELETES).labels(kind).inc()


def request_verb(method: str, url: str, query: list[tuple[str, str]] | None, ctype: str) -> str:
    """The Kubernetes verb of one request (get/list/watch/create/apply/patch/delete)."""
    params = dict(query or [])
    if method == "GET":
        if params.get("watch") == "true":
            return "watch"
        return "get" if _named(url) else "list"
    if method == "PATCH":
        return "apply" if ctype == "application/apply-patch+yaml" else "patch"
    return {"POST": "create", "PUT": "update", "DELETE": "delete"}.get(method, method.lower())


def request_kind(url: str) -> str:
    """The kind a request path names (``/apis/apps/v1/namespaces/x/statefulsets/y``:
    StatefulSet), from the operator's resource table; "other" for any other path."""
    from ascend_pd_operator.api.access import RESOURCES

    plural, _ = _resource_path(url)
    return next((r.kind for r in RESOURCES if r.plural == plural), "other")


def _named(url: str) -> bool:
    return _resource_path(url)[1]


def _resource_path(url: str) -> tuple[str, bool]:
    """(plural, names one object) of ``/api/v1/...`` or ``/apis/<group>/<version>/...``."""
    parts = [p for p in url.split("?", 1)[0].split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    return (rest[0] if rest else "", len(rest) >= 2)


# --- per PDDeployment -----------------------------------------------------------------------
class DeploymentFamilies:
    """The per-PDDeployment metric families of one scrape, filled one PDDeployment at a time."""

    def __init__(self) -> None:
        labels = ["namespace", "pddeployment"]
        self.desired = GaugeMetricFamily(
            "ascend_pd_instances_desired",
            "Instances asked for, per role: the spec's replicas, or its PDRoleScaler's.",
            labels=[*labels, "role"])  # fmt: skip
        self.effective = GaugeMetricFamily(
            "ascend_pd_instances_effective",
            "Instances the operator runs, per role: the count asked for, within the "
            "prefill:decode ratio bounds.",
            labels=[*labels, "role"])  # fmt: skip
        self.draining = GaugeMetricFamily(
            "ascend_pd_instances_draining",
            "Instances draining before their removal, per role.",
            labels=[*labels, "role"])  # fmt: skip
        self.drains = CounterMetricFamily(
            "ascend_pd_drains",
            "Drains ended since the operator started, per role: outcome clean (within "
            "drainTimeoutSeconds) or forced (the kubelet ended the instance).",
            labels=[*labels, "role", "outcome"])  # fmt: skip
        self.ready = GaugeMetricFamily(
            "ascend_pd_instances_ready", "Instances with every pod ready, per role.",
            labels=[*labels, "role"])  # fmt: skip
        self.updated = GaugeMetricFamily(
            "ascend_pd_instances_updated",
            "Instances whose StatefulSet runs its current template, per role.",
            labels=[*labels, "role"])  # fmt: skip
        self.restarts = GaugeMetricFamily(
            "ascend_pd_instance_restarts",
            "Container restarts summed over the instance's current pods.",
            labels=[*labels, "role", "instance"])  # fmt: skip
        self.rollout = GaugeMetricFamily(
            "ascend_pd_rollout_in_progress",
            "1 while some instance's StatefulSet is not at its update revision.",
            labels=labels)  # fmt: skip
        self.compatible = GaugeMetricFamily(
            "ascend_pd_kv_layout_compatible",
            "1 when the prefill and decode KV layouts are compatible (KVLayoutCompatible).",
            labels=labels)  # fmt: skip
        self.info = InfoMetricFamily(
            "ascend_pd_deployment",
            "The KV layout and SGLang of a PDDeployment.",
            labels=labels)  # fmt: skip

    def __iter__(self) -> Iterator[Metric]:
        yield from (self.desired, self.effective, self.draining, self.drains, self.ready,
                    self.updated, self.restarts, self.rollout, self.compatible,
                    self.info)  # fmt: skip

    def add(self, namespace: str, name: str, dep: Deployment, mine: dict[str, Instance]) -> None:
        """One PDDeployment's series: ``dep`` as reported, ``mine`` its instances by name."""
        status = dep.status
        for role in ROLES:
            counts = role_status(status, role)
            want = int(counts.get("replicas", 0) or 0)
            self.desired.add_metric([namespace, name, role], want)
            self.effective.add_metric(
                [namespace, name, role], int(counts.get("effectiveReplicas", want) or 0)
            )
            self.draining.add_metric([namespace, name, role],
                                     len(counts.get("draining") or []))  # fmt: skip
            for (of, outcome), count in sorted(dep.drains.items()):
                if of == role:
                    self.drains.add_metric([namespace, name, role, outcome], count)
            self.ready.add_metric([namespace, name, role],
                                  int(counts.get("readyReplicas", 0) or 0))  # fmt: skip
            of_role = [(n, i) for n, i in mine.items() if i.role == role]
            self.updated.add_metric([namespace, name, role], sum(i.updated for _, i in of_role))
            for sts, inst in sorted(of_role):
                self.restarts.add_metric([namespace, name, role, sts],
                                         sum(inst.pod_restarts.values()))  # fmt: skip
        self.rollout.add_metric([namespace, name], int(any(not i.updated for i in mine.values())))
        cond: Json = next((c for c in status.get("conditions") or []
                     if c.get("type") == "KVLayoutCompatible"), {})  # fmt: skip
        self.compatible.add_metric([namespace, name], int(cond.get("status") == "True"))
        layout = status.get("kvLayout") or {}
        self.info.add_metric(
            [namespace, name],
            {
                "fingerprint": str(layout.get("fingerprint", "")),
                "total_kv_layers": str(layout.get("totalKvLayers", "")),
                "kv_buf_groups": str(layout.get("kvBufGroups", "")),
                "prefill_pp": str(len(layout.get("prefillStages") or []) or ""),
                "sglang_version": dep.sglang_version,
            },
        )


class DeploymentCollector(DeploymentReports, Collector):
    """The per-PDDeployment gauges, built from the latest reports at every scrape."""

    def collect(self) -> Iterator[Metric]:
        deployments, instances = self.snapshot()
        families = DeploymentFamilies()
        for (namespace, name), dep in sorted(deployments.items()):
            mine = {k[1]: v for k, v in instances.items()
                    if k[0] == namespace and v.deployment == name}  # fmt: skip
            families.add(namespace, name, dep, mine)
        yield from families
        yield condition_family({k: d.status for k, d in deployments.items()})


def condition_family(statuses: dict[tuple[str, str], Json]) -> GaugeMetricFamily:
    """``ascend_pd_condition``: 1 for each condition of each PDDeployment's last status,
    labelled with its type, status and reason (the operator's own verdicts, e.g.
    InstancesHealthy=False reason RestartLoop, which no other series can tell exactly)."""
    family = GaugeMetricFamily(
        "ascend_pd_condition",
        "1 for each condition of the PDDeployment's status, by type, status and reason.",
        labels=["namespace", "pddeployment", "type", "status", "reason"],
    )
    for (namespace, name), status in sorted(statuses.items()):
        for cond in status.get("conditions") or []:
            family.add_metric(
                [namespace, name, str(cond.get("type", "")), str(cond.get("status", "")),
                 str(cond.get("reason", ""))], 1)  # fmt: skip
    return family


DEPLOYMENTS = DeploymentCollector()
REGISTRY.register(DEPLOYMENTS)


# --- the PD planner -------------------------------------------------------------------------
#: The planner's decisions (``autoscale.Action``).
PLANNER_ACTIONS = ("up", "down", "hold")


class PlannerCollector(Collector):
    """The PD planner's last decision per role, and its decisions counted, built at every
    scrape from what ``decided`` last reported; a role or PDDeployment the planner no longer
    scales is ``forget``-ten, so its series vanish with it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: (namespace, pddeployment, role) -> (replicas, decisions per action, values read)
        self._roles: dict[tuple[str, str, str], tuple[int, dict[str, int], dict[str, float]]] = {}

    def decided(self, namespace: str, name: str, role: str, action: str, replicas: int,
                read: Mapping[str, float]) -> None:  # fmt: skip
        key = (namespace, name, role)
        with self._lock:
            _, counts, _ = self._roles.get(key) or (0, dict.fromkeys(PLANNER_ACTIONS, 0), {})
            counts[action] = counts.get(action, 0) + 1
            self._roles[key] = (replicas, counts, dict(read))

    def forget(self, namespace: str, name: str, role: str | None = None) -> None:
        """Drop one role's series (None: every role of the PDDeployment)."""
        with self._lock:
            for key in [k for k in self._roles if k[:2] == (namespace, name)
                        and role in (None, k[2])]:  # fmt: skip
                del self._roles[key]

    def collect(self) -> Iterator[Metric]:
        labels = ["namespace", "pddeployment", "role"]
        desired = GaugeMetricFamily(
            "ascend_pd_planner_desired_replicas",
            "The instance count the PD planner last decided on (the scaler's spec.replicas).",
            labels=labels)  # fmt: skip
        decisions = CounterMetricFamily(
            "ascend_pd_planner_decisions",
            "The PD planner's decisions, by action (up, down, hold); one per interval.",
            labels=[*labels, "action"])  # fmt: skip
        read = GaugeMetricFamily(
            "ascend_pd_planner_signal",
            "The values the PD planner last read, per Ready instance (queue, token_usage, "
            "...; latencies: the quantile in seconds).",
            labels=[*labels, "signal"])  # fmt: skip
        with self._lock:
            roles = sorted((k, (n, dict(c), dict(r))) for k, (n, c, r) in self._roles.items())
        for key, (replicas, counts, values) in roles:
            desired.add_metric(list(key), replicas)
            for action, count in counts.items():
                decisions.add_metric([*key, action], count)
            for signal, value in sorted(values.items()):
                read.add_metric([*key, signal], value)
        yield from (desired, decisions, read)


PLANNER = PlannerCollector()
REGISTRY.register(PLANNER)


def serve(port: int, host: str = "0.0.0.0") -> Any:
    """Expose ``REGISTRY`` at ``http://host:port/metrics`` from a daemon thread."""
    return start_http_server(port, addr=host, registry=REGISTRY)
