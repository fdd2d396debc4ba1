"""Upgrading the operator from an old commit to HEAD replaces no runtime or router pod.

For each old version (the recorded release 0.1.0, and ``0dd9e25``, main before the release
work, whose pod templates differ from HEAD's):

1. its chart (with its CRDs) installed by the real ``helm`` from a worktree of that commit,
   and its own operator run as a local process from a venv of that commit (the chart
   Deployment's args, as the chart's ServiceAccount), as the e2e tests run HEAD's;
2. three PDDeployments on it (multi-node prefill PP with a router; decode scaled to 2 by
   its PDRoleScaler; spec.placement), Ready; every runtime and router pod's uid recorded;
3. the old operator stopped, ``helm upgrade`` to HEAD's chart, HEAD's CRDs applied as
   docs/upgrade.md says, HEAD's operator started with a 2 s resync;
4. once HEAD's operator has resynced 3 times (its own metrics count the passes), and at
   every check before: the same pods (uids); each status in HEAD's shape; no new Warning
   Event; ``UpdatePending`` True for a role exactly when the API server says HEAD would
   change one of its instances' pod templates (a server-side dry-run apply of HEAD's
   rendered StatefulSet as the operator), naming those fields;
5. the user's trigger on ``pp``: its changed instances are replaced within
   ``spec.rollout.maxUnavailable``, it is Ready again and nothing is pending.
"""

from __future__ import annotations

import re
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from upgrade_steps import (
    NAMESPACE,
    PLACED,
    PP,
    RELEASE,
    ROUTER,
    SCALED,
    SCALED_DECODE,
    Helm,
    Plane,
    chart_values,
    condition,
    instances_down,
    part_of,
    pdd_object,
    pods,
    ready,
    resyncs,
    specs,
    stale_instances,
    start_operator,
    templates,
    uids,
    wait_established,
    wait_for,
    warnings,
    would_change,
)

from ascend_pd_dev.controlplane.paths import project_root
from ascend_pd_dev.testtools import old_release
from ascend_pd_dev.testtools.template_diff import changed_paths, covers, uncovered
from ascend_pd_operator.api.vocabulary import (
    ANNOTATION_APPLY_OPERATOR_UPDATES,
    COND_UPDATE_PENDING,
    LABEL_DEPLOYMENT,
    ROLES,
    STATUS_ROLES,
)

pytestmark = [pytest.mark.timeout(1500)]

ROOT = project_root()
#: the per-role (and router) status field naming what waits (``operator_updates``)
ROLE_PENDING = "updatePending"
#: ``operator_updates.listed`` ends a long list with "and N more"
MORE = re.compile(r"^and (\d+) more$")
#: resync period of HEAD's operator, and the passes that must see nothing replaced
RESYNC_SECONDS, RESYNCS = 2, 3
#: status keys operators before status.roles wrote; HEAD drops them at its first write
DROPPED_STATUS_KEYS = ("prefill", "decode")


def old_commit(version: str) -> str:
    ref = old_release.release_commit(ROOT, version) if "." in version else version
    return old_release.full_commit(ROOT, ref)


def pending(obj: dict[str, Any]) -> dict[str, list[str]]:
    """What the status says waits, per role and for the router."""
    st = obj.get("status") or {}
    roles = st.get(STATUS_ROLES) or {}
    found = {role: list((roles.get(role) or {}).get(ROLE_PENDING) or []) for role in ROLES}
    found[ROUTER] = list((st.get(ROUTER) or {}).get(ROLE_PENDING) or [])
    return found


def check_upgraded(
    plane: Plane, before: dict[str, str], stopped: datetime, shapes: dict[str, Any]
) -> list[str]:
    """What is wrong now (nothing: []): a pod replaced, a status not in HEAD's shape, a
    new Warning Event; with any of them, the pod templates changed since ``shapes``."""
    problems = []
    now = uids(plane)
    if now != before:
        gone = sorted(set(before) - set(now))
        changed = sorted(n for n in now if n in before and now[n] != before[n])
        new = sorted(set(now) - set(before))
        problems.append(f"pods replaced: gone {gone}, new uid {changed}, new {new}")
    for name in (PP, SCALED, PLACED):
        obj = pdd_object(plane, name)
        st = obj.get("status") or {}
        if st.get("observedGeneration") != obj["metadata"]["generation"]:
            problems.append(f"{name}: observedGeneration {st.get('observedGeneration')}")
        if sorted(st.get(STATUS_ROLES) or {}) != sorted(ROLES):
            problems.append(f"{name}: status.{STATUS_ROLES} {sorted(st.get(STATUS_ROLES) or {})}")
        if dropped := [k for k in DROPPED_STATUS_KEYS if k in st]:
            problems.append(f"{name}: status still has {dropped}")
        if condition(obj, "Ready").get("status") != "True":
            problems.append(f"{name}: Ready {condition(obj, 'Ready')}")
    # by time, not against a list taken at the upgrade: comparing lists flagged Warnings
    # the old operator posted while it created the deployments
    new_warnings = warnings(plane, after=stopped)
    problems += [f"Warning Event {e.get('reason')} on {e['involvedObject'].get('name')} from "
                 f"{e.get('reportingComponent') or (e.get('source') or {}).get('component')} "
                 f"(count {e.get('count')}, last {e.get('lastTimestamp') or e.get('eventTime')}): "
                 f"{e.get('message')}" for e in new_warnings.values()]  # fmt: skip
    if problems:
        now_shapes = templates(plane)
        changed = {k: changed_paths(v, now_shapes.get(k) or {}) for k, v in shapes.items()}
        problems.append(f"templates changed: { {k: v for k, v in changed.items() if v} }")
    return problems


def check_pending(obj: dict[str, Any], changes: dict[str, list[str]]) -> list[str]:
    """Whether the status says exactly what HEAD would change (``changes``, per role)."""
    name = obj["metadata"]["name"]
    problems = []
    cond = condition(obj, COND_UPDATE_PENDING)
    # a router whose template changes restarts its pods too: that waits for the user as well
    expected = "True" if any(changes.values()) else "False"
    if cond.get("status") != expected:
        problems.append(f"{name}: {COND_UPDATE_PENDING} {cond or 'absent'}, expected {expected} "
                        f"(the API server's dry-run changes {changes})")  # fmt: skip
    for part, named in pending(obj).items():
        more = [int(m.group(1)) for m in map(MORE.match, named) if m]
        named = [n for n in named if not MORE.match(n)]
        if missing := uncovered(named, changes[part]):
            if not more:
                problems.append(f"{name}: {part}.{ROLE_PENDING} {named} leaves out {missing}")
            elif len(missing) > more[0]:
                problems.append(f"{name}: {part}.{ROLE_PENDING} {named} and {more[0]} more "
                                f"leave out {missing}")  # fmt: skip
        if extra := [n for n in named if not any(covers(n, p) for p in changes[part])]:
            problems.append(f"{name}: {part}.{ROLE_PENDING} names {extra}, which HEAD "
                            f"would not change ({changes[part]})")  # fmt: skip
    return problems


@pytest.mark.parametrize("version", ["0.1.0", "0dd9e25"])
def test_upgrade_from_an_old_commit_replaces_no_pod(
    plane: Plane, version: str, tmp_path: Path
) -> None:
    began = time.monotonic()
    commit = old_commit(version)
    helm = Helm(plane.kubeconfig)
    plane.run("create", "namespace", NAMESPACE)
    with old_release.checkout(ROOT, commit) as tree:
        python = old_release.operator_python(tree, commit, print)
        # 1. the old chart and CRDs, the old operator
        helm("install", RELEASE, str(tree / "charts" / "ascend-pd-operator"),
             *chart_values(None), "--create-namespace", "--wait", "--timeout", "5m")  # fmt: skip
    wait_established(plane)
    old = start_operator(plane, tmp_path, "old", python, "--resync-seconds=5")
    try:
        wait_for(old.healthy, f"the operator of {version} healthy")
        # 2. three deployments, Ready; the scaler scales decode
        plane.run("apply", "-f", "-", input=yaml.safe_dump_all(specs()))
        for name in (PP, SCALED, PLACED):
            wait_for(lambda: ready(plane, name), f"{name} Ready under {version}")  # noqa: B023
        plane.run("scale", "pdrolescalers.ascendpd.io", f"{SCALED}-decode", "-n", NAMESPACE,
                  f"--replicas={SCALED_DECODE}")  # fmt: skip
        wait_for(lambda: ready(plane, SCALED, SCALED_DECODE), f"{SCALED} with 2 decode")
        wait_for(lambda: not stale_instances(plane) or None, "no instance mid-update")
    finally:
        old.stop()
    before, shapes = uids(plane), templates(plane)
    # Event times are whole seconds; HEAD's operator starts seconds later (helm upgrade)
    stopped = datetime.now(UTC).replace(microsecond=0)
    print(f"{version}: {len(before)} runtime and router pods before the upgrade")
    installed = time.monotonic()

    # 3. HEAD's chart and CRDs, HEAD's operator
    helm("upgrade", RELEASE, str(ROOT / "charts" / "ascend-pd-operator"),
         *chart_values(RESYNC_SECONDS), "--wait", "--timeout", "5m")  # fmt: skip
    plane.run("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    wait_established(plane)
    head = start_operator(plane, tmp_path, "head")
    try:
        wait_for(head.healthy, "HEAD's operator healthy")
        passes = wait_for(lambda: resyncs(head)[0] >= 1 and resyncs(head), "a first resync")

        # 4. over RESYNCS resyncs: nothing replaced, status migrated, no warnings
        def settled() -> tuple[float, float] | None:
            problems = check_upgraded(plane, before, stopped, shapes)
            assert not problems, f"after the upgrade from {version}: {problems}"
            now = resyncs(head)
            return now if now[0] >= passes[0] + RESYNCS else None

        wait_for(settled, f"{RESYNCS} resyncs of HEAD's operator", timeout=300)
        changes = {name: would_change(plane, name, SCALED_DECODE if name == SCALED else None)
                   for name in (PP, SCALED, PLACED)}  # fmt: skip
        print(f"{version}: HEAD would change {changes}")
        # judged at the end, so that a wrong name does not hide how the trigger rolls
        misnamed = [p for name in changes
                    for p in check_pending(pdd_object(plane, name), changes[name])]  # fmt: skip

        # 5. the user's trigger rolls pp within its bounds
        upgraded = time.monotonic()
        # the pods of pp's roles (and router) that HEAD would change
        rolled = {n for n, p in pods(plane).items()
                  if p["metadata"]["labels"].get(LABEL_DEPLOYMENT) == PP
                  and changes[PP][part_of(p)]}  # fmt: skip
        plane.run(
            "annotate",
            "pdd",
            PP,
            "-n",
            NAMESPACE,
            f"{ANNOTATION_APPLY_OPERATOR_UPDATES}={uuid.uuid4().hex[:8]}",
        )
        triggered = resyncs(head)[0]
        worst = dict.fromkeys(ROLES, 0)

        def rolled_out() -> bool:
            for role, n in instances_down(plane, PP).items():
                worst[role] = max(worst[role], n)
            # by uid: the router's replaced pods have new names (a new ReplicaSet)
            replaced = not {before[n] for n in rolled} & set(uids(plane).values())
            obj = pdd_object(plane, PP)
            nothing: dict[str, list[str]] = {part: [] for part in changes[PP]}
            # resyncs since the trigger: with nothing to roll, nothing may start either
            seen = resyncs(head)[0] >= triggered + 2
            return seen and replaced and ready(plane, PP) and not check_pending(obj, nothing)

        wait_for(rolled_out, f"{PP} rolled out after the trigger", timeout=600)
        bound = pdd_object(plane, PP)["spec"]["rollout"]["maxUnavailable"]
        assert all(n <= bound for n in worst.values()), (worst, bound)
        # the rest kept running: the other deployments' pods and pp's unchanged ones
        now = uids(plane)
        kept = {n: u for n, u in before.items() if n not in rolled}
        assert {n: now.get(n) for n in kept} == kept
        assert not any(would_change(plane, PP).values()), would_change(plane, PP)
        print(
            f"{version}: old install {installed - began:.0f} s, upgrade and checks "
            f"{upgraded - installed:.0f} s, trigger {time.monotonic() - upgraded:.0f} s; "
            f"{len(now)} pods after ({len(rolled)} replaced by the trigger, at most {worst} "
            f"instances down at once)"
        )
        assert not misnamed, misnamed
    finally:
        head.stop()
        assert "Traceback" not in head.log.read_text(), head.log.read_text()[-4000:]
