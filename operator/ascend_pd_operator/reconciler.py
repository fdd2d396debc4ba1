"""One level-based reconcile of one PDDeployment: read, decide (pure), apply, report.

parse → resolve model facts → build the desired children → server-side apply
them and delete children no longer desired → compute the status → patch it when
it changed. Every trigger (create, update, resume, child event, resync) runs the
same function, so a deleted or edited child is restored on the next event. A
rejected spec or an incompatible layout applies and deletes nothing: the
running children stay exactly as they were. A transient API error (``is_transient``:
a conflict, 429, 5xx, the API server unreachable) is raised before the status is
written, so it never turns a Ready deployment Degraded; the work queue retries it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import api
from .children import child_key
from .desired import Desired, desired_state, validate
from .kube import Kube, KubeError, NotFound, is_transient
from .live_cache import LiveCache
from .model_source import (
    COMPONENT_FACTS,
    COMPONENT_INSPECTOR,
    FactsResolution,
    InspectorState,
    inspector_job,
    inspector_state,
    model_facts_configmap,
    resolve_facts,
)
from .naming import (
    LABEL_DEPLOYMENT,
    LABEL_ROLE,
    MANAGED_BY,
    REASON_LAUNCH_REFUSED,
    ROLES,
    Owner,
    inspector_name,
)
from .naming import model_facts_name as facts_cm_name
from .status import Observation, compute_status, instance_ready, status_changed

log = logging.getLogger(__name__)
Json = dict[str, Any]

#: Kinds of children the operator prunes when no longer desired.
PRUNED_KINDS = ("StatefulSet", "Service", "Deployment", "ConfigMap", "PodGroup")
#: Components kept across spec changes (they cache the model inspection).
KEPT_COMPONENTS = (COMPONENT_FACTS, COMPONENT_INSPECTOR)


def _apply_error(manifest: Json, exc: KubeError) -> str:
    what = f"{manifest['kind']} {manifest['metadata']['name']}"
    if manifest["kind"] == "PodGroup" and exc.status == 404:
        return (
            f"applying {what}: scheduling.gang is volcano but the cluster has no PodGroup API "
            "(scheduling.volcano.sh/v1beta1); install Volcano or set scheduling.gang: none"
        )
    return f"applying {what}: {exc}"


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Result:
    status: Json
    applied: int
    deleted: int


class Reconciler:
    def __init__(
        self, kube: Kube, clock: Callable[[], str] = utc_now, cache: LiveCache | None = None
    ) -> None:
        self.kube = kube
        self.clock = clock
        #: Fed by the watches; without it every child is applied on every reconcile.
        self.cache = cache
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def _lock(self, key: tuple[str, str]) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    def reconcile(self, namespace: str, name: str) -> Result | None:
        with self._lock((namespace, name)):
            cr = self.kube.get(api.KIND, namespace, name)
            if cr is None or cr["metadata"].get("deletionTimestamp"):
                return None  # garbage collection removes the children
            return self._reconcile(cr)

    def _reconcile(self, cr: Json) -> Result:
        meta = cr["metadata"]
        owner = Owner(meta["name"], meta["namespace"], meta["uid"], meta.get("generation", 0))
        previous: Json = cr.get("status") or {}
        validation = validate(owner, cr.get("spec"))
        spec = validation.spec
        facts: FactsResolution | None = None
        desired: Desired | None = None
        applied = deleted = 0
        apply_error = ""
        live: dict[tuple[str, str], Json] = {}
        if spec is not None:
            facts = self._resolve_facts(owner, spec)
            if facts.facts is not None:
                desired = desired_state(owner, spec, facts.facts)
            if desired is not None and desired.ok:
                current: Json = {"kind": "stale", "metadata": {"name": "children (pruning)"}}
                try:
                    for manifest in desired.children:
                        current = manifest
                        obj = self.cache.unchanged(manifest) if self.cache is not None else None
                        if obj is None:
                            obj = self.kube.apply(manifest)
                            applied += 1
                            if self.cache is not None:
                                self.cache.applied(manifest, obj)
                        live[(obj["kind"], obj["metadata"]["name"])] = obj
                    deleted = self._prune(owner, desired)
                except KubeError as exc:
                    if is_transient(exc):
                        # A conflict, throttling or a server error says nothing about the
                        # spec: leave the status as it is and let the queue retry the key.
                        raise
                    apply_error = _apply_error(current, exc)
                    live = {}
        if not live:
            live = self._observe(owner)
        pods = self._runtime_pods(owner, live)
        status = compute_status(
            Observation(
                owner=owner,
                spec=spec,
                validation_error=validation.error,
                facts=facts,
                desired=desired,
                children=live,
                previous=previous,
                apply_error=apply_error,
                pods=pods,
            ),
            now=self.clock(),
        )
        self._events(cr, previous, status)
        if status_changed(previous, status):
            patch = dict(status)
            for key in previous:
                if key not in status and key != "kopf":
                    patch[key] = None
            # Deleted meanwhile: garbage collection does the rest.
            with contextlib.suppress(NotFound):
                self.kube.patch_status(api.KIND, owner.namespace, owner.name, patch)
        if applied or deleted:
            log.info("%s/%s: applied %d, deleted %d", owner.namespace, owner.name, applied, deleted)
        return Result(status, applied, deleted)

    # --- model facts ---------------------------------------------------------------------

    def _resolve_facts(self, owner: Owner, spec: api.PDDeploymentSpec) -> FactsResolution:
        model = spec.model
        if model.config is not None:
            return resolve_facts(spec)
        if model.config_map_ref is not None:
            cm = self.kube.get("ConfigMap", owner.namespace, model.config_map_ref.name)
            return resolve_facts(spec, user_configmap=cm)
        stored = self.kube.get("ConfigMap", owner.namespace, facts_cm_name(owner))
        job = self.kube.get("Job", owner.namespace, inspector_name(owner))
        state: InspectorState | None = None
        if job is not None:
            selector = f"{LABEL_DEPLOYMENT}={owner.name},{LABEL_ROLE}={COMPONENT_INSPECTOR}"
            pods = self.kube.list("Pod", owner.namespace, selector)
            state = inspector_state(job, pods)
        resolution = resolve_facts(
            spec, facts_configmap=stored, inspector=state, generation=owner.generation
        )
        if resolution.start_inspector:
            self.kube.apply(inspector_job(owner, spec))
        elif resolution.restart_inspector:
            self.kube.delete("Job", owner.namespace, inspector_name(owner))
            self.kube.delete("ConfigMap", owner.namespace, facts_cm_name(owner))
        elif resolution.store_config is not None:
            self.kube.apply(model_facts_configmap(owner, spec, resolution.store_config))
        return resolution

    # --- children ------------------------------------------------------------------------

    def _owned(self, owner: Owner, kind: str) -> list[Json]:
        labels = {LABEL_DEPLOYMENT: owner.name, "app.kubernetes.io/managed-by": MANAGED_BY}
        if self.cache is not None and kind in self.cache.listed_kinds:
            # A LIST per kind per reconcile dominated reconcile time at 100 deployments.
            items = self.cache.listed(kind, owner.namespace, labels)
        else:
            selector = ",".join(f"{key}={value}" for key, value in labels.items())
            items = self.kube.list(kind, owner.namespace, selector)
        return [
            item
            for item in items
            if any(
                ref.get("uid") == owner.uid for ref in item["metadata"].get("ownerReferences", [])
            )
        ]

    def _observe(self, owner: Owner) -> dict[tuple[str, str], Json]:
        live = {}
        for kind in ("StatefulSet", "Deployment"):
            for item in self._owned(owner, kind):
                live[(kind, item["metadata"]["name"])] = item
        return live

    def _runtime_pods(self, owner: Owner, live: dict[tuple[str, str], Json]) -> list[Json]:
        """The runtime pods, read only while an instance is not ready: only then can a pod
        carry a launch refusal (its termination message) the status must show. With the
        watches' cache, from it: the pod watch feeds it exactly the pods with a refusal."""
        statefulsets = [obj for (kind, _), obj in live.items() if kind == "StatefulSet"]
        if all(instance_ready(sts) for sts in statefulsets):
            return []
        if self.cache is not None:
            pods = self.cache.listed("Pod", owner.namespace, {LABEL_DEPLOYMENT: owner.name})
        else:
            pods = self.kube.list("Pod", owner.namespace, f"{LABEL_DEPLOYMENT}={owner.name}")
        return [p for p in pods if (p["metadata"].get("labels") or {}).get(LABEL_ROLE) in ROLES]

    def _prune(self, owner: Owner, desired: Desired) -> int:
        wanted = {child_key(m)[1:] for m in desired.children}
        deleted = 0
        for kind in PRUNED_KINDS:
            for item in self._owned(owner, kind):
                component = item["metadata"].get("labels", {}).get("app.kubernetes.io/component")
                if component in KEPT_COMPONENTS:
                    continue
                if (kind, item["metadata"]["name"]) not in wanted:
                    log.info("deleting %s %s/%s", kind, owner.namespace, item["metadata"]["name"])
                    self.kube.delete(kind, owner.namespace, item["metadata"]["name"])
                    deleted += 1
        return deleted

    # --- events --------------------------------------------------------------------------

    def _events(self, cr: Json, previous: Json, status: Json) -> None:
        """A Warning Event when a rule rejects the spec or the layout, or SGLang refuses a
        pod's command line (once per message)."""
        before = {c["type"]: c for c in previous.get("conditions") or []}
        for cond in status["conditions"]:
            watched = ("Validated", "KVLayoutCompatible", "ModelResolved", "Ready")
            if cond["type"] not in watched and cond["reason"] != REASON_LAUNCH_REFUSED:
                continue
            if cond["status"] != "False" or cond["reason"] in ("InspectingModel", "NotReady"):
                continue
            old = before.get(cond["type"])
            if old and old.get("message") == cond["message"] and old.get("status") == "False":
                continue
            self.event(cr, "Warning", cond["reason"], f"{cond['type']}: {cond['message']}")

    def event(self, cr: Json, type_: str, reason: str, message: str) -> None:
        meta = cr["metadata"]
        now = self.clock()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": api.API_VERSION,
                "kind": api.KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": MANAGED_BY},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.kube.create("Event", meta["namespace"], body)
        except KubeError as exc:  # an event is best effort; the condition carries the message
            log.warning("could not post event %s: %s", reason, exc)
