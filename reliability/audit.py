"""Is the cluster exactly what the PDDeployments ask for? Desired state vs live objects.

The desired children come from the operator's own observation and planner
(``reconciler.observe_resource``, ``planner.plan``), so the check needs no second copy
of the rules: for every PDDeployment in a namespace each desired child must exist, be
owned by that PDDeployment's current uid and carry every field the builder sets
(API-server defaults may add more); nothing else may carry our deployment label; no StatefulSet
may have more pods than it asks for; the status must be Ready for the current
generation with the desired layout fingerprint.

``missing`` counts lost objects, ``extra`` duplicated or orphaned ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ascend_pd_operator.api import models
from ascend_pd_operator.api.vocabulary import LABEL_DEPLOYMENT, role_status
from ascend_pd_operator.decisions.planner import plan
from ascend_pd_operator.kubeio.kube import Kube
from ascend_pd_operator.wiring.reconciler import observe_resource
from ascend_pd_runtime.plan import layout_fingerprint

from .env import Env, wait_for
from .result import ScenarioResult

Json = dict[str, Any]
#: Kinds of children the operator creates in a deployment's namespace.
CHILD_KINDS = ("ConfigMap", "Service", "StatefulSet", "Deployment", "Job",
               "ServiceAccount", "Role", "RoleBinding", "PodDisruptionBudget")  # fmt: skip


@dataclass
class Audit:
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    status: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.wrong or self.status)

    def __str__(self) -> str:
        parts = [
            f"{what}: {', '.join(items[:6])}{' ...' if len(items) > 6 else ''}"
            for what, items in (
                ("missing", self.missing),
                ("extra", self.extra),
                ("wrong", self.wrong),
                ("status", self.status),
            )
            if items
        ]
        return "; ".join(parts) or "converged"


def covers(desired: Any, live: Any) -> bool:
    """Every field of ``desired`` is in ``live`` with the same value (lists: same length)."""
    if desired is None:
        return True
    if isinstance(desired, dict):
        # The API server drops empty values (omitempty): "", {} or a false is the same as
        # absent (``is False``: a 0 is not, and ``False in ("", ...)`` would not match it).
        return isinstance(live, dict) and all(
            covers(value, live[key])
            if key in live
            else value is False or value in ("", [], {}, None)
            for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(desired) == len(live)
            and all(covers(d, x) for d, x in zip(desired, live, strict=True))
        )
    # The API server stores quantities and some ints as strings ("2" for 2).
    return desired == live or str(desired) == str(live)


def _owned_by(obj: Json, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])


def desired_children(kube: Kube, cr: Json) -> tuple[list[Json], str, str]:
    """(children, layout fingerprint, why none) for one live PDDeployment: the operator's
    own plan for what the cluster shows now."""
    todo = plan(observe_resource(kube, None, cr), now="")
    if todo.validation.spec is None:
        return [], "", f"invalid spec: {todo.validation.error}"
    if todo.facts is None or todo.facts.facts is None:
        return [], "", f"no model facts: {todo.facts.message if todo.facts else ''}"
    desired = todo.desired
    if desired is None or not desired.ok or desired.layout is None:
        return [], "", f"no layout: {desired.message if desired else ''}"
    children = [w.manifest for w in todo.applies if w.manifest is not None]
    return children, layout_fingerprint(desired.layout), ""


def _status_problems(cr: Json, fingerprint: str) -> list[str]:
    name = cr["metadata"]["name"]
    status = cr.get("status") or {}
    problems = []
    generation = cr["metadata"].get("generation", 0)
    if status.get("observedGeneration") != generation:
        problems.append(f"{name}: observedGeneration {status.get('observedGeneration')} != "
                        f"generation {generation}")  # fmt: skip
    if status.get("phase") != "Ready":
        problems.append(f"{name}: phase {status.get('phase')}")
    if (status.get("kvLayout") or {}).get("fingerprint") != fingerprint:
        problems.append(f"{name}: kvLayout fingerprint is not the desired {fingerprint}")
    for role in ("prefill", "decode"):
        want = cr["spec"][role].get("replicas", 1)
        got = role_status(status, role)
        if got.get("replicas") != want or got.get("readyReplicas") != want:
            problems.append(f"{name}: status.roles.{role} {got} for {want} replicas")
    return problems


def audit_namespace(kube: Kube, namespace: str, expect_ready: bool = True) -> Audit:
    """Compare every PDDeployment's desired children with the namespace's live objects."""
    found = Audit()
    crs = [c for c in kube.list(models.KIND, namespace)
           if not c["metadata"].get("deletionTimestamp")]  # fmt: skip
    live: dict[tuple[str, str], Json] = {}
    for kind in CHILD_KINDS:
        for obj in kube.list(kind, namespace, LABEL_DEPLOYMENT):
            live[(kind, obj["metadata"]["name"])] = obj
    wanted: set[tuple[str, str]] = set()
    for cr in crs:
        children, fingerprint, why = desired_children(kube, cr)
        if why:
            found.status.append(f"{cr['metadata']['name']}: {why}")
            continue
        uid = cr["metadata"]["uid"]
        for child in children:
            key = (child["kind"], child["metadata"]["name"])
            wanted.add(key)
            obj = live.get(key)
            if obj is None:
                found.missing.append("/".join(key))
            elif not _owned_by(obj, uid):
                found.wrong.append(f"{'/'.join(key)} (owned by another uid)")
            elif not all(
                covers(child[part].get(sub) if sub else child.get(part),
                       obj[part].get(sub) if sub else obj.get(part))
                for part, sub in (("spec", ""), ("data", ""), ("metadata", "labels"),
                                  ("metadata", "annotations"))
                if part in child
            ):  # fmt: skip
                found.wrong.append(f"{'/'.join(key)} (content differs from the desired)")
        if expect_ready:
            found.status += _status_problems(cr, fingerprint)
    found.extra += ["/".join(key) for key in live if key not in wanted]
    all_pods = [*kube.list("Pod", namespace, LABEL_DEPLOYMENT)]
    for (kind, name), obj in live.items():
        if kind != "StatefulSet" or (kind, name) not in wanted:
            continue
        pods = [p for p in all_pods if _owned_by(p, obj["metadata"]["uid"])]
        replicas = int(obj["spec"].get("replicas", 1))
        if len(pods) > replicas:
            found.extra.append(f"StatefulSet/{name}: {len(pods)} pods for {replicas} replicas")
    return found


def wait_converged(
    kube: Kube, namespace: str, timeout: float, interval: float = 0.3
) -> tuple[Audit, float]:
    """Audit the namespace until the audit passes or ``timeout`` seconds have passed: (the
    last audit, seconds waited)."""
    last = [Audit()]

    def converged() -> bool:
        last[0] = audit_namespace(kube, namespace)
        return last[0].ok

    _, seconds = wait_for(converged, timeout, interval)
    return last[0], seconds


#: How long a scenario's starting point may take to converge. It is set-up, not what the
#: scenario measures: several deployments with two routers each start at once on a machine
#: that runs other tiers beside this one, so it gets a cold cluster's patience, not a bound.
SETUP_SECONDS = 600.0


def started_converged(
    env: Env, namespace: str, docs: list[Json], result: ScenarioResult, interval: float = 0.3
) -> bool:
    """Apply a scenario's first ``docs`` and wait (up to ``SETUP_SECONDS``) for the namespace
    to converge; if it does not, the result records why."""
    env.apply(docs)
    found, _ = wait_converged(env.kube, namespace, SETUP_SECONDS, interval)
    if not found.ok:
        result.problems.append(
            f"not Ready before the scenario: {found}; {unready_pods(env, namespace)}"
        )
    return found.ok


def unready_pods(env: Env, namespace: str) -> str:
    """Each pod of ``namespace`` that is not Ready and why, as its conditions and container
    states say: what a failed wait needs to be diagnosed after the cluster is gone."""
    lines = []
    for pod in env.kube.list("Pod", namespace):
        status = pod.get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        if conditions.get("Ready", {}).get("status") == "True":
            continue
        why = [f"{t}={c.get('status')} {c.get('reason', '')} {c.get('message', '')}".strip()
               for t, c in conditions.items() if c.get("status") != "True"]  # fmt: skip
        for state in status.get("containerStatuses") or []:
            waiting = (state.get("state") or {}).get("waiting") or {}
            if waiting:
                why.append(f"{state['name']} waiting {waiting.get('reason', '')}")
        lines.append(f"{pod['metadata']['name']} on {pod['spec'].get('nodeName', '-')} "
                     f"{status.get('phase')}: {'; '.join(why) or 'no condition yet'}")  # fmt: skip
    return "pods not Ready: " + (" | ".join(lines) if lines else "none")
