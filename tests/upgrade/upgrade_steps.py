"""The upgrade test's steps: helm, the operators, the three deployments, and the oracle of
what HEAD would change (the API server's dry-run of HEAD's StatefulSets)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_dev.controlplane import cluster as dev_cluster
from ascend_pd_dev.kubelet_sim.nodes import DOMAIN_LABEL
from ascend_pd_dev.testtools.helm import ensure_helm
from ascend_pd_dev.testtools.kubectl import established, kubectl_path
from ascend_pd_dev.testtools.local_run import OperatorProcess
from ascend_pd_dev.testtools.rbac import local_operator_command, service_account_kubeconfig
from ascend_pd_dev.testtools.template_diff import changed_paths
from ascend_pd_operator.api.vocabulary import (
    FIELD_MANAGER,
    LABEL_DEPLOYMENT,
    LABEL_INSTANCE,
    LABEL_ROLE,
    ROLES,
)
from reliability.specs import merged, pdd

NAMESPACE = "llm"
SYSTEM = "ascend-pd-system"
RELEASE = "apd"
FULLNAME = f"{RELEASE}-ascend-pd-operator"
CRDS = ("pddeployments.ascendpd.io", "pdrolescalers.ascendpd.io")
#: the three deployments (issue 39): multi-node prefill PP, scaled by a PDRoleScaler, placed
PP, SCALED, PLACED = "pp", "scaled", "placed"
SCALED_DECODE = 2
#: the router's key beside the roles'
ROUTER = "router"
Json = dict[str, Any]


@dataclass
class Plane:
    """The test's control plane (``conftest.plane``)."""

    layout: dev_cluster.Layout

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig

    def run(self, *args: str, input: str | None = None, check: bool = True) -> Any:
        done = subprocess.run(
            [str(kubectl_path()), "--kubeconfig", str(self.kubeconfig), *args],
            input=input, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)


def specs() -> list[Json]:
    """Small enough for 4 simulated nodes, valid for the CRD of 0.1.0 and of 0dd9e25 (fields
    both have: the API server refuses the rest). One NPU a pod, on the pod network."""
    pp = pdd(PP, NAMESPACE, prefill=1, decode=1, prefill_pp=2)
    pp["spec"]["rollout"] = {"maxUnavailable": 1}
    scaled = merged(pdd(SCALED, NAMESPACE), {"spec": {
        "router": {"enabled": False},
        "decode": {"scaling": {"mode": "External", "minReplicas": 1, "maxReplicas": 3}},
    }})  # fmt: skip
    # scope None with domains: the pods are held to sp-0 by the template itself, which
    # `ascend-pd render` builds offline (a domain the operator chooses needs the cluster)
    placed = merged(pdd(PLACED, NAMESPACE), {"spec": {
        "router": {"enabled": False},
        "placement": {"topologyKey": DOMAIN_LABEL, "scope": "None", "domains": ["sp-0"]},
    }})  # fmt: skip
    return [pp, scaled, placed]


class Helm:
    def __init__(self, kubeconfig: Path) -> None:
        self.binary = str(ensure_helm())
        self.kubeconfig = kubeconfig

    def __call__(self, *args: str) -> str:
        done = subprocess.run([self.binary, "--kubeconfig", str(self.kubeconfig), *args],
                              capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
        assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout


def chart_values(resync_seconds: float | None) -> list[str]:
    values = ["--namespace", SYSTEM, "--set", f"watch.namespaces={{{NAMESPACE}}}"]
    if resync_seconds is not None:
        values += ["--set", f"resyncSeconds={resync_seconds:g}"]
    return values


def wait_established(plane: Plane) -> None:
    for name in CRDS:
        wait_for(lambda: established(plane.json("get", "crd", name)), f"crd/{name} Established")  # noqa: B023


def start_operator(
    plane: Plane, tmp: Path, tag: str, python: Path | None = None, *extra: str
) -> OperatorProcess:
    """The chart's live operator Deployment as a local process, as its ServiceAccount,
    with ``python`` (an old commit's venv; default: HEAD's)."""
    deployment = plane.json("get", "deployment", FULLNAME, "-n", SYSTEM)
    argv, env = local_operator_command(deployment, 0)
    config = service_account_kubeconfig(plane.kubeconfig, SYSTEM, FULLNAME,
                                        tmp / f"{tag}.kubeconfig")  # fmt: skip
    return OperatorProcess([*argv[1:], *extra], config, tmp / f"{tag}-operator.log",
                           env=env, python=python)  # fmt: skip


def templates(plane: Plane) -> dict[str, Json]:
    """Every instance StatefulSet's and router Deployment's pod template, by kind/name."""
    found = plane.json("get", "statefulsets,deployments", "-n", NAMESPACE, "-l", LABEL_DEPLOYMENT)
    return {f"{o['kind']}/{o['metadata']['name']}": o["spec"]["template"] for o in found["items"]}


def pods(plane: Plane) -> dict[str, Json]:
    """Every runtime and router pod of the namespace, by name."""
    found = plane.json("get", "pods", "-n", NAMESPACE, "-l", LABEL_DEPLOYMENT)
    return {p["metadata"]["name"]: p for p in found["items"]}


def uids(plane: Plane) -> dict[str, str]:
    return {name: p["metadata"]["uid"] for name, p in pods(plane).items()}


def pdd_object(plane: Plane, name: str) -> Json:
    return dict(plane.json("get", "pdd", name, "-n", NAMESPACE))


def condition(obj: Json, type_: str) -> Json:
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == type_), {})


def statefulsets(plane: Plane, name: str) -> list[Json]:
    found = plane.json("get", "statefulsets", "-n", NAMESPACE, "-l",
                       f"{LABEL_DEPLOYMENT}={name},{LABEL_INSTANCE}")  # fmt: skip
    return list(found["items"])


def instances_down(plane: Plane, name: str) -> dict[str, int]:
    """Per role, the instances whose pods are not all ready (for the rollout's bounds)."""
    down = dict.fromkeys(ROLES, 0)
    for sts in statefulsets(plane, name):
        want = sts["spec"].get("replicas") or 0
        if (sts.get("status") or {}).get("readyReplicas", 0) < want:
            down[sts["metadata"]["labels"][LABEL_ROLE]] += 1
    return down


def stale_instances(plane: Plane) -> list[str]:
    """The instance StatefulSets some of whose pods run another revision than the current
    template (an update under way): the old operator must leave none behind, or HEAD would
    only be finishing the old one's rollout."""
    found = plane.json("get", "statefulsets", "-n", NAMESPACE, "-l", LABEL_INSTANCE)
    return [s["metadata"]["name"] for s in found["items"]
            if (s.get("status") or {}).get("updatedReplicas", 0) != s["spec"].get("replicas")
            or s["status"].get("currentRevision") != s["status"].get("updateRevision")]  # fmt: skip


def ready(plane: Plane, name: str, decode: int | None = None) -> bool:
    obj = pdd_object(plane, name)
    if condition(obj, "Ready").get("status") != "True":
        return False
    if decode is None:
        return True
    roles = [s["metadata"]["labels"][LABEL_ROLE] for s in statefulsets(plane, name)]
    return roles.count("decode") == decode and not any(instances_down(plane, name).values())


def warnings(plane: Plane, after: datetime | None = None) -> dict[str, Json]:
    """The namespace's Warning Events, by uid and count (a repeat is a new warning);
    ``after``: only those last seen later than that second."""
    found = plane.json("get", "events", "-n", NAMESPACE)
    return {f"{e['metadata']['uid']}/{e.get('count', 1)}": e for e in found["items"]
            if e.get("type") == "Warning" and (after is None or seen(e) > after)}  # fmt: skip


def seen(event: Json) -> datetime:
    """When an Event was last seen (core/v1 or events.k8s.io fields), to the second."""
    series = event.get("series") or {}
    when = (event.get("lastTimestamp") or series.get("lastObservedTime")
            or event.get("eventTime") or event["metadata"]["creationTimestamp"])  # fmt: skip
    return datetime.fromisoformat(when.replace("Z", "+00:00")).replace(microsecond=0)


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
        if not match:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(match.group(2))
    return total


def resyncs(operator: OperatorProcess) -> tuple[float, float]:
    """(resync passes, reconciles that ended ok): each pass LISTs the PDDeployments of the
    watched namespace once (``handlers.resync_once``); kopf's own listing at start is not
    counted (it does not go through the operator's client)."""
    text = operator.metrics_text()
    passes = metric_sum(text, "ascend_pd_operator_api_requests_total", verb="list",
                        kind="PDDeployment", code="200")  # fmt: skip
    ok = metric_sum(text, "ascend_pd_operator_reconcile_duration_seconds_count", result="ok")
    return passes, ok


def rendered(plane: Plane, live: Json, decode: int | None) -> dict[str, Json]:
    """HEAD's manifests for the live PDDeployment (``ascend-pd render``), by kind/name;
    ``decode``: the live decode count when a scaler, not spec.decode.replicas, sets it."""
    doc = {"apiVersion": live["apiVersion"], "kind": live["kind"],
           "metadata": {k: live["metadata"][k] for k in ("name", "namespace", "uid")},
           "spec": copy.deepcopy(live["spec"])}  # fmt: skip
    if decode is not None:
        doc["spec"]["decode"]["replicas"] = decode
    done = subprocess.run(
        [sys.executable, "-m", "ascend_pd_operator.wiring.cli", "render", "-f", "-"],
        input=yaml.safe_dump(doc), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"ascend-pd render {live['metadata']['name']}: {done.stderr}"
    out = {}
    for manifest in yaml.safe_load_all(done.stdout):
        if manifest:
            for ref in manifest["metadata"].get("ownerReferences") or []:
                ref["uid"] = live["metadata"]["uid"]
            out[f"{manifest['kind']}/{manifest['metadata']['name']}"] = manifest
    return out


def part_of(pod: Json) -> str:
    """The role of a runtime pod, ``router`` for a router pod."""
    return str(pod["metadata"]["labels"].get(LABEL_ROLE) or ROUTER)


def would_change(plane: Plane, name: str, decode: int | None = None) -> dict[str, list[str]]:
    """Per role (and ``router``), the pod-template fields HEAD would change, by the API
    server's verdict: a server-side dry-run apply of HEAD's StatefulSet (the router's
    Deployment) as the operator (its field manager, so fields it applied before and no
    longer does go too) against the live one."""
    live_pdd = pdd_object(plane, name)
    desired = rendered(plane, live_pdd, decode)
    out: dict[str, list[str]] = {part: [] for part in (*ROLES, ROUTER)}
    live = [(f"StatefulSet/{s['metadata']['name']}", s["metadata"]["labels"][LABEL_ROLE], s)
            for s in statefulsets(plane, name)]  # fmt: skip
    router = plane.run("get", "deployment", f"{name}-router", "-n", NAMESPACE, "-o", "json",
                       check=False)  # fmt: skip
    if router.returncode == 0:
        live.append((f"Deployment/{name}-router", ROUTER, json.loads(router.stdout)))
    for key, part, obj in live:
        assert key in desired, f"HEAD renders no {key} (renders {sorted(desired)})"
        done = plane.run("apply", "--server-side", "--dry-run=server", "--force-conflicts",
                         f"--field-manager={FIELD_MANAGER}", "-o", "json", "-f", "-",
                         input=json.dumps(desired[key]))  # fmt: skip
        verdict = json.loads(done.stdout)
        paths = changed_paths(obj["spec"]["template"], verdict["spec"]["template"])
        out[part] = sorted(set(out[part]) | set(paths))
    return out


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 600.0,
             interval: float = 0.5) -> Any:  # fmt: skip
    """Poll ``predicate`` until truthy; fail naming ``what`` and the last value."""
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"gave up waiting for {what} after {timeout:.0f}s: {last!r}")
        time.sleep(interval)
