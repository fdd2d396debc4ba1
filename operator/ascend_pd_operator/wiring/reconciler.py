"""One level-based reconcile of one PDDeployment: observe, plan, execute.

``observe`` reads everything the reconcile needs (I/O only), ``planner.plan`` decides
(pure), ``Reconciler.execute`` carries the plan out in numbered steps:

1. the model inspector's writes, 2. the applies (and a scaled role's PDRoleScaler, created
once), 3. the prunes, 4. the instances updated or restarted, 5. the leader labels, 6. the
status patch and the scalers' status, 7. the Events.

Every trigger (create, update, resume, child event, resync) runs the same function, so a
deleted or edited child is restored on the next event. A write the API server refuses
stops the writes; the status then names the write (``applying StatefulSet x: ...``,
``deleting Service y: ...``). A transient API error (``is_transient``: a conflict, 429,
5xx, the API server unreachable) is raised before the status is written, so it never
turns a Ready deployment Degraded; the work queue retries it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ascend_pd_operator.api import models
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import (
    COMPONENT_INSPECTOR,
    DEVICE_INFO_NAMESPACE,
    LABEL_COMPONENT,
    LABEL_DEPLOYMENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    Owner,
    inspector_name,
)
from ascend_pd_operator.api.vocabulary import model_facts_name as facts_cm_name
from ascend_pd_operator.builders.volcano import PODGROUP_CRD, podgroup_subgroups
from ascend_pd_operator.decisions.device_info import device_info
from ascend_pd_operator.decisions.events import Event
from ascend_pd_operator.decisions.observation import Observation
from ascend_pd_operator.decisions.placement import Usage, usage_of
from ascend_pd_operator.decisions.planner import PRUNED_KINDS, Plan, conclude, plan
from ascend_pd_operator.decisions.recovery import DEFAULT_POLICY, RecoveryPolicy, slim_node
from ascend_pd_operator.decisions.status import merge_patch, status_changed
from ascend_pd_operator.decisions.writes import Failure, Outcome, Write
from ascend_pd_operator.kubeio.apply_records import digest
from ascend_pd_operator.kubeio.cached_reads import CachedReads
from ascend_pd_operator.kubeio.child_watch import EVENT_FIELD_SELECTOR
from ascend_pd_operator.kubeio.kept import event_owner, slim_event
from ascend_pd_operator.kubeio.kube import Kube, KubeError, NotFound, is_transient
from ascend_pd_operator.kubeio.live_cache import LiveCache

log = logging.getLogger(__name__)

#: The executor's steps, numbered as the plan orders them (log lines name them).
STEPS = {
    1: "inspector", 2: "apply", 3: "prune", 4: "update instances", 5: "routing",
    6: "status", 7: "events",
}  # fmt: skip


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Result:
    """What one reconcile did: the status it computed, how many children it applied and
    deleted, the plan it carried out and the write that failed (if one did)."""

    status: Json
    applied: int
    deleted: int
    plan: Plan | None = None
    failure: Failure | None = None

    @property
    def requeue_after(self) -> float | None:
        return self.plan.requeue_after if self.plan else None


# --- observe --------------------------------------------------------------------------


def observe(
    kube: Kube,
    cache: LiveCache | None,
    namespace: str,
    name: str,
    reads: CachedReads | None = None,
) -> Observation | None:
    """Everything a reconcile of ``namespace/name`` reads; None once it is gone or going.
    With ``reads``, the PDDeployment, its model ConfigMap and the inspector Job come from
    the watches when ``cached_reads`` trusts their copies (a GET otherwise)."""
    get = reads.get if reads is not None else kube.get
    resource = get(models.KIND, namespace, name)
    if resource is None or resource["metadata"].get("deletionTimestamp"):
        return None  # garbage collection removes the children
    return observe_resource(kube, cache, resource, get)


def observe_resource(
    kube: Kube,
    cache: LiveCache | None,
    resource: Json,
    get: Callable[[str, str, str], Json | None] | None = None,
) -> Observation:
    """The rest of the observation of an already read PDDeployment."""
    get = get or kube.get
    meta = resource["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    model = ((resource.get("spec") or {}).get("model")) or {}
    user_cm = facts_cm = job = None
    inspector_pods: list[Json] = []
    ref = model.get("configMapRef") if isinstance(model, dict) else None
    if isinstance(model, dict) and model.get("config") is not None:
        pass  # the facts are in the spec
    elif isinstance(ref, dict) and ref.get("name"):
        user_cm = get("ConfigMap", namespace, str(ref["name"]))
    else:
        owner = Owner(name, namespace)
        facts_cm = get("ConfigMap", namespace, facts_cm_name(owner))
        job = get("Job", namespace, inspector_name(owner))
        if job is not None:
            # A LIST, not the cache: the Job can report success before the pod watch has
            # delivered the pod whose termination message holds the result.
            selector = f"{LABEL_DEPLOYMENT}={name},{LABEL_COMPONENT}={COMPONENT_INSPECTOR}"
            inspector_pods = [*kube.list("Pod", namespace, selector)]
    children = {kind: _children(kube, cache, namespace, name, kind) for kind in PRUNED_KINDS}
    # The runtime pods: their templates and generations drive rollouts and routing.
    gone: list[Json] = []
    nodes: dict[str, Json] = {}
    if cache is not None:  # the pod watch keeps our pods, slimmed (kept.slim_pod)
        pods = cache.listed("Pod", namespace, {LABEL_DEPLOYMENT: name})
        gone = cache.tombstones("Pod", namespace, {LABEL_DEPLOYMENT: name})
        for node in {(p.get("spec") or {}).get("nodeName") for p in pods} - {None, ""}:
            watched = cache.listed_one("Node", "", str(node))  # the node watch's, slimmed
            if watched is not None:
                nodes[str(node)] = watched
    else:
        pods = [*kube.list("Pod", namespace, f"{LABEL_DEPLOYMENT}={name}")]
    if (resource.get("spec") or {}).get("placement"):
        # the domains to choose from: every node (the node watch keeps them all)
        if cache is not None:
            listed = cache.listed("Node", "", {})
        else:
            listed = [slim_node(n) for n in kube.list("Node", None)]
        nodes = {str(n["metadata"]["name"]): n for n in listed}
    events = _failed_creates(kube, cache, namespace, name, children["StatefulSet"])
    return Observation(
        resource=resource,
        user_configmap=user_cm,
        facts_configmap=facts_cm,
        inspector_job=job,
        inspector_pods=inspector_pods,
        children=children,
        pods=pods,
        gone_pods=gone,
        nodes=nodes,
        events=events,
        podgroup_subgroups=observe_podgroup_subgroups(kube, resource),
    )


def observe_podgroup_subgroups(kube: Kube, resource: Json) -> bool | None:
    """Whether the installed Volcano PodGroup CRD has spec.subGroupPolicy: one GET of the
    CRD (the operator's ClusterRole reads CRDs), only for a PDDeployment whose Volcano gang
    could span the deployment (gang volcano, placement scope Deployment); read each
    reconcile, so that upgrading Volcano counts from the next one. None: not asked, or no
    CRD to read (an error that is not transient is told in status.placement.gang)."""
    spec = resource.get("spec") or {}
    placement = spec.get("placement")
    if not isinstance(placement, dict) or (spec.get("scheduling") or {}).get("gang") != "volcano":
        return None
    if placement.get("scope", "Deployment") != "Deployment":
        return None
    try:
        return podgroup_subgroups(kube.get("CustomResourceDefinition", "", PODGROUP_CRD))
    except KubeError as exc:
        if is_transient(exc):
            raise
        return None


#: The pods that hold what they request: the scheduler counts every pod not yet ended.
USAGE_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"


def observe_usage(kube: Kube, resource_name: str, read_device_info: bool = False) -> Usage:
    """What the pods of every namespace hold on their nodes (``placement.usage_of``): one
    LIST, only when an instance with spec.placement is to be created. Cluster-wide pods
    ``list`` is the ClusterRole's when the operator watches every namespace; watching some,
    the chart grants it with ``placement.podsClusterWide`` (charts/ascend-pd-operator). A
    refusal is retried while it may be the API server warming up (``denials``), then told in
    PlacementFeasible (NodeUsageUnknown, and ``/healthz``'s faults name the permission); no
    instance is pinned blind.

    ``read_device_info`` (``--placement-device-info``): also the chips MindCluster reports
    bad, from one LIST of the ConfigMaps of kube-system at the same moment
    (``device_info``; the chart value ``placement.deviceInfo`` grants it). Without them (none
    there, or the LIST refused) placement counts what the nodes report, as without the flag;
    a refusal or an unreadable ConfigMap is logged, and a lasting refusal is named by
    ``/healthz``'s faults."""
    try:
        usage = usage_of(kube.list("Pod", None, field_selector=USAGE_FIELD_SELECTOR), resource_name)
    except KubeError as exc:
        if is_transient(exc):
            raise
        return Usage(error=f"listing the pods of every namespace: {exc}")
    if not read_device_info:
        return usage
    try:
        found = device_info(kube.list("ConfigMap", DEVICE_INFO_NAMESPACE), resource_name)
    except KubeError as exc:
        if is_transient(exc):
            raise
        log.warning("placement: MindCluster's device info not read (counting what the "
                    "nodes report): listing ConfigMaps in %s: %s",
                    DEVICE_INFO_NAMESPACE, exc)  # fmt: skip
        return usage
    for problem in found.problems:
        log.warning("placement: %s (its node counted as it reports itself)", problem)
    return replace(usage, devices=found.nodes)


def _failed_creates(
    kube: Kube, cache: LiveCache | None, namespace: str, name: str, statefulsets: list[Json]
) -> list[Json]:
    """The StatefulSet controller's FailedCreate Events of our instances: from the Event
    watch's cache, or without one (the audit) a LIST, only while an instance has fewer pods
    than it wants (the only time the status reads them)."""
    if cache is not None:
        return cache.listed("Event", namespace, {LABEL_DEPLOYMENT: name})
    short = any(
        int((s.get("status") or {}).get("replicas", 0) or 0)
        < int((s.get("spec") or {}).get("replicas", 0) or 0)
        for s in statefulsets
    )
    if not short:
        return []
    listed = kube.list("Event", namespace, field_selector=EVENT_FIELD_SELECTOR)
    return [slim_event(e) for e in listed if event_owner(e) == name]


def _children(
    kube: Kube, cache: LiveCache | None, namespace: str, name: str, kind: str
) -> list[Json]:
    labels = {LABEL_DEPLOYMENT: name, LABEL_MANAGED_BY: MANAGED_BY}
    if cache is not None and kind in cache.listed_kinds:
        # A LIST per kind per reconcile dominated reconcile time at 100 deployments.
        return cache.listed(kind, namespace, labels)
    return [*kube.list(kind, namespace, ",".join(f"{k}={v}" for k, v in labels.items()))]


# --- plan and execute -----------------------------------------------------------------


class ExpectedGone:
    """uids of the pods this operator deleted, for ``TTL_SECONDS`` (client-go's
    "expectations"): a reconcile that runs before the watch delivered a deletion must not
    count that instance as serving (a rollout would take down one instance too many), and
    group recovery must know which deletions were not ours. A force-deleted pod is gone at
    once: one reconcile too early would force-delete it (and post its Event) again."""

    TTL_SECONDS = 600.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: uid -> (until, force-deleted)
        self._uids: dict[str, tuple[float, bool]] = {}
        self._guard = threading.Lock()

    def add(self, uid: str, forced: bool = False) -> None:
        with self._guard:
            self._uids[uid] = (self._clock() + self.TTL_SECONDS, forced)

    def uids(self, forced_only: bool = False) -> frozenset[str]:
        with self._guard:
            now = self._clock()
            for uid in [u for u, (until, _) in self._uids.items() if until < now]:
                del self._uids[uid]
            return frozenset(u for u, (_, forced) in self._uids.items()
                             if forced or not forced_only)  # fmt: skip


class Reconciler:
    def __init__(
        self,
        kube: Kube,
        clock: Callable[[], str] = utc_now,
        cache: LiveCache | None = None,
        recovery: RecoveryPolicy = DEFAULT_POLICY,
        read_device_info: bool = False,
        reads: CachedReads | None = None,
    ) -> None:
        self.recovery = recovery
        #: The PDDeployment and its model objects from the watches (None: GET each time).
        self.reads = reads
        #: placement also reads MindCluster's device info (``observe_usage``)
        self.read_device_info = read_device_info
        self.kube = kube
        self.clock = clock
        #: Fed by the watches; without it every child is applied on every reconcile.
        self.cache = cache
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        #: Pods this operator deleted that the watch may still report as running.
        self.expected_gone = ExpectedGone()
        #: (namespace, StatefulSet) -> the digest of the pod template the API server passed
        self._checked_templates: dict[tuple[str, str], str] = {}
        #: (namespace, PDDeployment) -> the live templates of its workloads whose operator-
        #: made change waits (``Observation.templates``): each read once per version
        self._templates: dict[tuple[str, str], dict[tuple[str, str], tuple[str, Json]]] = {}
        self._locks_guard = threading.Lock()

    def _lock(self, key: tuple[str, str]) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    def reconcile(self, namespace: str, name: str) -> Result | None:
        with self._lock((namespace, name)):
            try:
                return self._reconcile(namespace, name)
            except KubeError as exc:
                if exc.status == 409 and self.reads is not None:
                    # our view may be older than the server's: the retry reads live
                    self.reads.freshness.suspect_namespace(namespace)
                raise

    def _reconcile(self, namespace: str, name: str) -> Result | None:
        observation = observe(self.kube, self.cache, namespace, name, self.reads)
        if observation is None:
            return None
        observation = replace(
            observation,
            our_deletions=self.expected_gone.uids(),
            our_force_deletions=self.expected_gone.uids(forced_only=True),
        )
        observation = replace(observation,
                              templates=self._templates.get((namespace, name), {}))  # fmt: skip
        todo = plan(observation, self.clock(), self.recovery)
        if todo.needs_usage and todo.validation.spec is not None:
            # a placement choice is due: read what the pods hold, and plan again
            usage = observe_usage(self.kube, todo.validation.spec.ascend.resource_name,
                                  self.read_device_info)  # fmt: skip
            observation = replace(observation, node_usage=usage)
            todo = plan(observation, self.clock(), self.recovery)
        if todo.needs_templates:
            # an operator-made template change may wait: compare with the live ones
            read = self._read_templates(namespace, todo.needs_templates)
            observation = replace(observation, templates={**observation.templates, **read})
            todo = plan(observation, self.clock(), self.recovery)
        self._templates[(namespace, name)] = {
            k: v for k, v in observation.templates.items() if k in todo.kept
        }
        return self.execute(todo)

    def _read_templates(
        self, namespace: str, wanted: tuple[tuple[str, str], ...]
    ) -> dict[tuple[str, str], tuple[str, Json]]:
        """(resourceVersion, pod template) of each workload of ``wanted`` (kind, name), by
        GET: the cache keeps no template."""
        out: dict[tuple[str, str], tuple[str, Json]] = {}
        for kind, name in wanted:
            obj = self.kube.get(kind, namespace, name)
            if obj is not None:
                version = str(obj["metadata"].get("resourceVersion", ""))
                out[(kind, name)] = (version, (obj.get("spec") or {}).get("template") or {})
        return out

    def execute(self, todo: Plan) -> Result:
        """Carry out ``todo`` step by step; transient API errors propagate (no status)."""
        owner = todo.observation.owner
        live: dict[tuple[str, str], Json] = {}
        applied = deleted = 0
        written: list[str] = []  # for the log line: which children a reconcile applied
        existing = frozenset(o["metadata"]["name"] for o in todo.observation.owned("StatefulSet"))
        failure: Failure | None = None
        steps = (
            (1, todo.inspector), (2, todo.applies), (3, todo.deletes),
            (4, todo.restarts), (5, todo.routing),
        )  # fmt: skip
        for step, writes in steps:
            for write in writes:
                try:
                    obj, wrote = self._write(owner.namespace, write, step == 2, existing)
                except KubeError as exc:
                    if is_transient(exc):
                        # A conflict, throttling or a server error says nothing about the
                        # spec: leave the status as it is and let the queue retry the key.
                        raise
                    failure = Failure(write, exc.status, str(exc))
                    log.warning("%s/%s: step %d (%s): %s", owner.namespace, owner.name,
                                step, STEPS[step], failure.message())  # fmt: skip
                    break
                if step == 2:
                    applied += wrote
                    if wrote:
                        written.append(f"{write.kind} {write.name}")
                    live[(write.kind, write.name)] = obj
                elif step == 3:
                    deleted += 1
            if failure is not None:
                break
        done = todo
        if applied or failure is not None:
            # Apply responses are newer than the observation; the status describes them.
            done = conclude(todo, Outcome(live=live, failure=failure))
        self._patch_status(done)  # step 6
        for write in done.scaler_status:
            try:
                self._write(owner.namespace, write, False)
            except NotFound:
                pass  # deleted meanwhile (the role turned Static): nothing to report on
            except KubeError as exc:
                if is_transient(exc):
                    raise
                # a status of ours the API server refuses is our bug: it must not stop
                # the reconcile that serves the deployment
                log.warning("%s/%s: %s: %s", owner.namespace, owner.name, write.describe(), exc)
        for event in done.events:  # step 7
            self.event(todo.observation.resource, event)
        if applied or deleted:
            log.info("%s/%s: applied %d (%s), deleted %d", owner.namespace, owner.name,
                     applied, ", ".join(written) or "-", deleted)  # fmt: skip
        return Result(done.status, applied, deleted, done, failure)

    def _write(
        self, namespace: str, write: Write, cached: bool, existing: frozenset[str] = frozenset()
    ) -> tuple[Json, int]:
        """Perform one write: (the object it left, 1 if a request was sent). ``cached``:
        skip an apply the watches' cache says would change nothing (the children's).
        ``existing``: the StatefulSets that run pods, whose new template is checked first."""
        if write.verb == "delete" and write.manifest is not None:  # a pod, by uid
            uid = str(write.manifest["metadata"]["uid"])
            log.info("%s %s/%s (uid %s)", write.describe(), namespace, write.name, uid)
            try:
                self.kube.delete(write.kind, namespace, write.name, uid,
                                 write.grace_period_seconds)  # fmt: skip
            except KubeError as exc:
                if exc.status != 409:  # 409: already replaced by a new pod; nothing to do
                    raise
            self.expected_gone.add(uid, forced=write.grace_period_seconds == 0)
            return {}, 1
        if write.verb == "restart":
            assert write.manifest is not None
            selector = write.manifest["metadata"]["labels"]
            log.info("%s %s", write.describe(), namespace)
            for uid in self.kube.delete_collection(write.kind, namespace, selector):
                self.expected_gone.add(uid)
            return {}, 1
        if write.verb == "delete":
            log.info("%s in %s", write.describe(), namespace)
            self.kube.delete(write.kind, namespace, write.name, orphan=write.orphan)
            return {}, 1
        assert write.manifest is not None
        if write.verb == "create":
            log.info("%s %s/%s", write.describe(), namespace, write.name)
            try:
                created = self.kube.create(write.kind, namespace, write.manifest)
                if self.reads is not None:
                    self.reads.wrote(write.kind, created)
                return created, 1
            except KubeError as exc:
                if exc.status != 409:  # 409: it exists; its spec is its users' now
                    raise
                return {}, 1
        if write.verb == "status":
            obj = self.kube.patch_status(write.kind, namespace, write.name,
                                         write.manifest["status"])  # fmt: skip
            return obj, 1
        if write.verb == "label":
            labels = write.manifest["metadata"]["labels"]
            log.info("labelling %s %s/%s: %s", write.kind, namespace, write.name, labels)
            with contextlib.suppress(NotFound):  # the pod went meanwhile: nothing to route
                self.kube.patch_labels(write.kind, namespace, write.name, labels)
            return {}, 1
        if cached and self.cache is not None:
            unchanged = self.cache.unchanged(write.manifest)
            if unchanged is not None:
                return unchanged, 0
        if write.kind == "StatefulSet" and write.name in existing:
            self._check_template(namespace, write.manifest)
        obj = self.kube.apply(write.manifest)
        if self.reads is not None:
            self.reads.wrote(write.kind, obj)
        if cached and self.cache is not None:
            self.cache.applied(write.manifest, obj)
        return obj, 1

    def _check_template(self, namespace: str, manifest: Json) -> None:
        """Have the API server judge the pod template an existing StatefulSet is about to
        take, before it takes it.

        The API server does not validate a StatefulSet's pod template (apps/v1 checks its
        labels and annotations only): a template Kubernetes refuses in a pod (a volume with
        two sources, a bad toleration) is stored, the rollout deletes the instance's pods
        and none is created again. A Deployment's template is validated in full, so a
        server-side dry run of a Deployment carrying it gets the verdict, with a permission
        the operator holds already; a refusal fails this apply (ApplyFailed) before any pod
        is deleted. Each template is checked once per StatefulSet."""
        key = (namespace, manifest["metadata"]["name"])
        template = manifest["spec"]["template"]
        checked = digest(template)
        if self._checked_templates.get(key) == checked:
            return
        probe = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"generateName": f"{key[1]}-check-", "namespace": namespace},
            "spec": {"replicas": 0, "selector": manifest["spec"]["selector"],
                     "template": template},
        }  # fmt: skip
        try:
            self.kube.create("Deployment", namespace, probe, dry_run=True)
        except KubeError as exc:
            if is_transient(exc):
                raise
            why = f"the API server refuses its pod template (as a Deployment's): {exc.message}"
            raise KubeError(exc.status, exc.reason, why) from exc
        self._checked_templates[key] = checked

    def _patch_status(self, done: Plan) -> None:
        owner, previous, status = done.observation.owner, done.observation.previous, done.status
        if not status_changed(previous, status):
            return
        patch = merge_patch({k: v for k, v in previous.items() if k != "kopf"}, status)
        # Deleted meanwhile: garbage collection does the rest.
        with contextlib.suppress(NotFound):
            written = self.kube.patch_status(models.KIND, owner.namespace, owner.name, patch)
            if self.reads is not None:
                # the next reconcile plans from this status, never from an older copy
                self.reads.wrote(models.KIND, written)

    def event(self, resource: Json, event: Event) -> None:
        meta = resource["metadata"]
        now = self.clock()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": models.API_VERSION,
                "kind": models.KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "type": event.type,
            "reason": event.reason,
            "message": event.message[:1024],
            "source": {"component": MANAGED_BY},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.kube.create("Event", meta["namespace"], body)
        except KubeError as exc:  # an event is best effort; the condition carries the message
            log.warning("could not post event %s: %s", event.reason, exc)
