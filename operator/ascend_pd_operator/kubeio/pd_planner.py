"""The built-in PD planner's loop (``scaling.mode: Planner``): a supervised unit of the operator.

The rule is ``decisions.autoscale``'s and the view it judges is ``decisions.autoscale_view``'s;
this is the I/O around them. Every tick (``TICK_SECONDS``) the loop takes the PDDeployments
with a Planner role whose interval (``spec.scaling.planner.intervalSeconds``) is due, and for
each:

1. reads the role's PDRoleScaler and the deployment's StatefulSets and runtime pods from the
   cache the child watches fill: no request, whatever the interval;
2. scrapes the Ready leaders' ``/metrics`` (``LeaderMetrics``, every role of the deployment
   at once; a failed scrape is "missing", the rule holds);
3. decides each role (``autoscale.decide``), keeping each role's ``RoleState`` in memory;
4. writes the scaler's ``spec.replicas`` when the count changes, as a merge patch conditional
   on the scaler's resourceVersion (a count someone else set since, an HPA or ``kubectl
   scale``, is never overwritten: 409, and the next interval reads theirs), and the scaler's
   ``status.planner`` when the decision changes (``autoscale_view.status_due``), never its
   other status keys (the reconcile's). The reconcile then applies the ratio bounds and
   runs the instances, as for any other writer of the scaler.

The specs come from kopf's PDDeployment watch (``seen``, ``gone``; ``wiring.handlers``):
a spec is parsed once per generation and kept only while a role is in Planner mode. Only the
replica that leads decides (``leading``); a standby keeps no state. The state is memory
only: an operator restart, or another replica taking the lead, starts every scale-down
window over (``autoscale.RoleState``), which delays a scale-down by at most one window and
never causes one.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import PDDeploymentSpec, Role, SpecError, parse_spec
from ascend_pd_operator.api.vocabulary import (
    LABEL_DEPLOYMENT,
    ROLES,
    SCALER_KIND,
    Owner,
    scaler_name,
)
from ascend_pd_operator.decisions.autoscale import PlannerPolicy, RoleDecision, RoleState, decide
from ascend_pd_operator.decisions.autoscale_view import (
    STATUS_KEY,
    planner_policy,
    planner_roles,
    planner_status,
    role_view,
    status_due,
    status_patch,
)
from ascend_pd_operator.kubeio import metrics
from ascend_pd_operator.kubeio.errors import KubeError, NotFound
from ascend_pd_operator.kubeio.live_cache import LiveCache
from ascend_pd_operator.kubeio.supervisor import Unit

log = logging.getLogger(__name__)
Key = tuple[str, str]

#: How often the loop looks for a due PDDeployment: the finest interval it keeps.
TICK_SECONDS = 1.0
#: The supervised unit's period: it beats every tick and after each PDDeployment, and one
#: PDDeployment's scrape lasts at most the scraper's timeout.
PERIOD_SECONDS = 30.0


class Scraper(Protocol):
    """``LeaderMetrics`` as the loop uses it (a fake in tests)."""

    def scrape(self, leaders: Mapping[str, str]) -> Mapping[str, Any]: ...


class Writer(Protocol):
    """The ``Kube`` verbs the loop uses."""

    def patch(self, kind: str, namespace: str, name: str, body: Json) -> Json: ...

    def patch_status(self, kind: str, namespace: str, name: str, status: Json) -> Json: ...


@dataclass(frozen=True)
class Planned:
    """One PDDeployment with a Planner role, as its spec says."""

    owner: Owner
    spec: PDDeploymentSpec
    policy: PlannerPolicy
    roles: tuple[Role, ...]


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def asks_for_planner(spec: Any) -> bool:
    """A raw spec with a role in Planner mode (checked before parsing anything)."""
    if not isinstance(spec, Mapping):
        return False
    return any(
        ((spec.get(role) or {}).get("scaling") or {}).get("mode") == "Planner" for role in ROLES
    )


def _owned_by(obj: Json, uid: str) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid for ref in refs)


class PDPlanner:
    """The loop and what it keeps: the planned PDDeployments, when each is due, each role's
    state. ``seen``/``gone`` come from the PDDeployment watch's thread, ``run`` is the
    supervised unit's body."""

    def __init__(
        self,
        kube: Writer,
        cache: LiveCache,
        scraper: Scraper,
        *,
        leading: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], str] = utc_now,
        reports: metrics.PlannerCollector = metrics.PLANNER,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.scraper = scraper
        self.leading = leading
        self.clock = clock
        self.wall = wall
        self.reports = reports
        self._lock = threading.Lock()
        self._planned: dict[Key, Planned] = {}
        self._due: dict[Key, float] = {}
        #: (namespace, name, role) -> the rule's state; touched by the loop's thread only.
        self._states: dict[tuple[str, str, str], RoleState] = {}
        #: Deployments (a role, or None: all) whose states the loop is to drop.
        self._forgotten: list[tuple[Key, str | None]] = []

    # --- fed by the PDDeployment watch -------------------------------------------------------
    def seen(self, namespace: str, name: str, uid: str, generation: int, spec: Any) -> None:
        """A PDDeployment as the watch reported it: planned while a role is in Planner mode."""
        key = (namespace, name)
        with self._lock:
            old = self._planned.get(key)
        if old is not None and (old.owner.uid, old.owner.generation) == (uid, generation):
            return
        planned = None
        if asks_for_planner(spec):
            try:
                parsed = parse_spec(copy.deepcopy(dict(spec)))
            except SpecError:
                parsed = None  # the reconcile says why (Validated); nothing to plan
            if parsed is not None and planner_roles(parsed):
                planned = Planned(Owner(name, namespace, uid, generation), parsed,
                                  planner_policy(parsed.scaling.planner),
                                  planner_roles(parsed))  # fmt: skip
        with self._lock:
            if planned is None:
                self._planned.pop(key, None)
                self._due.pop(key, None)
            else:
                self._planned[key] = planned
            if old is not None and (planned is None or old.owner.uid != uid):
                self._forgotten.append((key, None))  # the loop drops the states
            elif old is not None and planned is not None:
                for role in set(old.roles) - set(planned.roles):
                    self._forgotten.append((key, role))

    def gone(self, namespace: str, name: str) -> None:
        """The PDDeployment was deleted."""
        self.seen(namespace, name, "", 0, None)

    # --- the supervised unit -------------------------------------------------------------
    def run(self, unit: Unit, stop: threading.Event) -> None:
        """Tick until ``stop``; any exception ends this call and the supervisor starts it
        again (the states survive: they are this object's)."""
        while not stop.is_set():
            unit.beat()
            if self.leading():
                self.tick(unit.beat)
            else:
                self._stand_by()
            if stop.wait(self._wait()):
                return

    def _wait(self) -> float:
        now = self.clock()
        with self._lock:
            due = min(self._due.values(), default=now + TICK_SECONDS)
        return min(TICK_SECONDS, max(0.05, due - now))

    def _stand_by(self) -> None:
        """Not the leader: decide nothing, keep nothing, report nothing."""
        with self._lock:
            keys = list(self._planned)
            self._due.clear()
            self._forgotten.clear()
        self._states.clear()
        for namespace, name in keys:
            self.reports.forget(namespace, name)

    def tick(self, beat: Callable[[], None] = lambda: None) -> None:
        """Plan every PDDeployment whose interval is due."""
        self._drop_forgotten()
        now = self.clock()
        with self._lock:
            due = [(k, p) for k, p in self._planned.items() if self._due.get(k, now) <= now]
            for key, planned in due:
                self._due[key] = now + planned.policy.interval_seconds
        for (namespace, name), planned in due:
            try:
                self.plan(planned)
            except KubeError as exc:  # one deployment's failure does not stop the others
                log.warning("%s/%s: planner: %s", namespace, name, exc)
            beat()

    def _drop_forgotten(self) -> None:
        with self._lock:
            forgotten, self._forgotten = self._forgotten, []
        for (namespace, name), role in forgotten:
            for r in ROLES if role is None else (role,):
                self._states.pop((namespace, name, r), None)
            self.reports.forget(namespace, name, role)

    def plan(self, planned: Planned) -> list[RoleDecision]:
        """Observe, scrape, decide and write for one PDDeployment; its decisions."""
        owner = planned.owner
        namespace = owner.namespace
        scalers = {}
        for role in planned.roles:
            scaler = self.cache.listed_one(SCALER_KIND, namespace, scaler_name(owner, role))
            if scaler is not None and _owned_by(scaler, owner.uid):
                scalers[role] = scaler  # else the reconcile has not created it yet
        if not scalers:
            return []
        statefulsets = self.cache.listed("StatefulSet", namespace, {LABEL_DEPLOYMENT: owner.name})
        pods = self.cache.listed("Pod", namespace, {LABEL_DEPLOYMENT: owner.name})
        views = {role: role_view(owner, planned.spec, role, scaler, statefulsets, pods)
                 for role, scaler in scalers.items()}  # fmt: skip
        addresses = {i: ip for v in views.values() for i, ip in v.addresses.items()}
        samples = self.scraper.scrape(addresses) if addresses else {}
        decisions = []
        for role, view in views.items():
            key = (namespace, owner.name, role)
            decision = decide(planned.policy, view.with_samples(samples), self._states.get(key),
                              self.clock())  # fmt: skip
            self._states[key] = decision.state
            self.reports.decided(namespace, owner.name, role, decision.action,
                                 decision.replicas, decision.metrics)  # fmt: skip
            self._write(owner, scalers[role], decision)
            decisions.append(decision)
        return decisions

    def _write(self, owner: Owner, scaler: Json, decision: RoleDecision) -> None:
        namespace, name = owner.namespace, scaler["metadata"]["name"]
        if decision.changed:
            log.info("%s/%s: planner: %s %s", namespace, owner.name, decision.role,
                     decision.reason)  # fmt: skip
            version = scaler["metadata"].get("resourceVersion")
            body = {"metadata": {"resourceVersion": version},
                    "spec": {"replicas": decision.replicas}}  # fmt: skip
            try:
                self.kube.patch(SCALER_KIND, namespace, name, body)
            except NotFound:
                return  # the role turned Static meanwhile
            except KubeError as exc:
                if exc.status != 409:
                    raise
                # Someone scaled it since we read it: theirs stands, and the next interval
                # decides from it with a fresh window.
                log.info("%s/%s: planner: %s changed meanwhile; not overwritten",
                         namespace, owner.name, name)  # fmt: skip
                self._states.pop((namespace, owner.name, decision.role), None)
                return
        status = planner_status(decision, self.wall())
        old = scaler.get("status") or {}
        if status_due(old.get(STATUS_KEY), status):
            with contextlib.suppress(NotFound):
                self.kube.patch_status(SCALER_KIND, namespace, name, status_patch(old, status))
