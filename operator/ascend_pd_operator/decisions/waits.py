"""Why a pod, an instance or the router is not ready, in words a status can carry: pure
functions of the live objects (pods, StatefulSets, PodGroups, Events), each cause ranked by
how much it tells, and the launchers' refusals and failed NPU preflight checks."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import (
    LABEL_ROLE,
)
from ascend_pd_runtime.env_contract import (
    EXIT_ARGS_REFUSED,
    EXIT_PREFLIGHT,
    LAUNCHER_EXITS,
    preflight_reason,
)


def instance_ready(sts: Json | None) -> bool:
    """All pods of the instance ready, at the StatefulSet's current generation."""
    if not sts:
        return False
    status = sts.get("status") or {}
    want = (sts.get("spec") or {}).get("replicas", 0)
    generation = (sts.get("metadata") or {}).get("generation", 0)
    return bool(
        status.get("observedGeneration", 0) >= generation
        and status.get("readyReplicas", 0) >= want
        and status.get("updatedReplicas", want) >= want
    )


def launch_refusal(pod: Json, code: int = EXIT_ARGS_REFUSED) -> str:
    """The launcher's termination message when a container of this pod ended, now or before
    its restart, with exit ``code``: by default SGLang's parser refused the command
    (``EXIT_ARGS_REFUSED``); ``EXIT_CONTRACT_VERSION``: the image speaks another env
    contract than the operator; ``EXIT_SGLANG_VERSION``: its SGLang is not the spec's."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        for key in ("state", "lastState"):
            ended = (container.get(key) or {}).get("terminated") or {}
            if ended.get("exitCode") == code:
                message = str(ended.get("message") or "").strip()
                return message or f"{LAUNCHER_EXITS[code]} (no message)"
    return ""


def launch_refusals(pods: list[Json], role: str, code: int = EXIT_ARGS_REFUSED) -> list[str]:
    """``pod <name>: <message>`` for every pod of ``role`` whose launcher exited ``code``."""
    found = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        if (pod["metadata"].get("labels") or {}).get(LABEL_ROLE) != role:
            continue
        message = launch_refusal(pod, code)
        if message:
            found.append(f"pod {pod['metadata']['name']}: {message}")
    return found


# --- why an instance is not ready ------------------------------------------------------

#: A role's condition names at most this many instances that are not ready (the rest are
#: counted), and quotes at most ``QUOTE_CHARS`` of each message it passes on: it is read by
#: people, and a cluster's text (a scheduler's per-node list, a webhook's answer) must not
#: grow the status without bound. ``ROLE_MESSAGE_CHARS`` caps the whole.
LISTED_INSTANCES = 3
QUOTE_CHARS = 240
ROLE_MESSAGE_CHARS = 1536
#: How much a cause tells (lower: more). An instance names its most telling one: a refused
#: pod or a failing container, not the pods that only wait behind it.
(RANK_NOT_CREATED, RANK_EXITED, RANK_WAITING, RANK_GANG, RANK_UNSCHEDULED, RANK_NODE,
 RANK_CREATING, RANK_LOADING, RANK_TERMINATING) = range(9)  # fmt: skip
#: The StatefulSet controller's words before the API server's refusal of a pod: "Create Pod"
#: on 1.36 (older releases wrote "create Pod").
_FAILED_CREATE_PREFIX = re.compile(r"^[Cc]reate Pod \S+ in StatefulSet \S+ failed error: ")
#: The fix for a refused pod, by the words of the admission that refused it.
FAILED_CREATE_FIXES = (
    ("violates PodSecurity", "the namespace's Pod Security level does not admit the runtime "
     "pods' host network, host ports and hostPath: label the namespace "
     "pod-security.kubernetes.io/enforce=privileged (docs/security.md)"),
    ("unable to validate against any pod security policy", "no PodSecurityPolicy admits the "
     "runtime pods' host network, host ports and hostPath: let the namespace's default "
     "ServiceAccount use a privileged one (docs/security.md)"),
    ("exceeded quota", "a ResourceQuota of the namespace refuses the pods: raise it, or free "
     "what it counts"),
)  # fmt: skip
#: The fix for a refused router pod (the runtime pods' fixes name their host network).
ROUTER_FAILED_CREATE_FIXES = (
    ("violates PodSecurity", "the namespace's Pod Security level refuses the router pod: give "
     "spec.router.podSecurityContext and containerSecurityContext what the level asks, or "
     "label the namespace for a level that admits it (docs/security.md)"),
    *(fix for fix in FAILED_CREATE_FIXES if fix[0] == "exceeded quota"),
)  # fmt: skip
#: What a pod that runs and is not ready yet waits for: a runtime pod, its instance's model;
#: the router, its readiness probe.
LOADING_WEIGHTS = (
    "loading weights: running since {since}, ready once its instance leader's SGLang answers "
    "/health"
)
ROUTER_STARTING = "starting: running since {since}, ready once the router answers /health"
#: Signals a container's exit code above 128 may carry.
SIGNALS = {6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}


def quoted(text: Any, limit: int = QUOTE_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters (cut ones end in "...")."""
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def exit_meaning(code: Any, has_message: bool) -> str:
    """What a container's exit code says: the launcher's own codes (it always leaves a
    termination message; without one, exit 1 is more likely SGLang's after the exec), or the
    signal that ended it."""
    if code in LAUNCHER_EXITS and has_message:
        return f"launcher: {LAUNCHER_EXITS[code]}"
    if isinstance(code, int) and code > 128:
        signal = SIGNALS.get(code - 128, f"signal {code - 128}")
        return f"killed by {signal}" + (": out of memory, or killed" if code == 137 else "")
    return ""


def exit_text(ended: Json) -> str:
    """``exit <code> [reason] (<meaning>): <termination message>`` of a terminated state."""
    code = ended.get("exitCode")
    message = quoted(ended.get("message"))
    reason = str(ended.get("reason") or "")
    meaning = exit_meaning(code, bool(message))
    text = f"exit {code}" + (f" {reason}" if reason not in ("", "Error") else "")
    return text + (f" ({meaning})" if meaning else "") + (f": {message}" if message else "")


def _pod_condition(pod: Json, type_: str) -> Json:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == type_), {})


def _pod_ready(pod: Json) -> bool:
    return _pod_condition(pod, "Ready").get("status") == "True"


def _said(cond: Json) -> str:
    """``(<reason>): <message>`` of a condition, as far as it says them."""
    reason, message = cond.get("reason"), quoted(cond.get("message"))
    return (f" ({reason})" if reason else "") + (f": {message}" if message else "")


def pod_wait(pod: Json, running: str = LOADING_WEIGHTS) -> tuple[int, str] | None:
    """Why ``pod`` is not ready, and how much that tells (a ``RANK_*``); None when it is
    ready. From what the pod's status says, in the order Kubernetes gets a pod going:
    scheduled, its image pulled and container created, started, ready (``running``: what
    a started container waits for, with ``{since}``)."""
    name = pod["metadata"]["name"]
    if pod["metadata"].get("deletionTimestamp"):
        return RANK_TERMINATING, f"pod {name} terminating"
    if _pod_ready(pod):
        return None
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    states = [(c, c.get("state") or {}) for c in containers]
    if status.get("phase") == "Failed":
        ended = next((s["terminated"] for _, s in states if "terminated" in s), None)
        text = f"pod {name} failed" + _said(status)
        return RANK_EXITED, text + (f", its container {exit_text(ended)}" if ended else "")
    if not (pod.get("spec") or {}).get("nodeName"):
        scheduled = _pod_condition(pod, "PodScheduled")
        if scheduled.get("status") == "False":
            return RANK_UNSCHEDULED, f"pod {name} not scheduled{_said(scheduled)}"
        return RANK_CREATING, f"pod {name} not scheduled yet"
    for container, state in states:
        last = (container.get("lastState") or {}).get("terminated")
        if "terminated" in state:
            return RANK_EXITED, f"pod {name} {exit_text(state['terminated'])}"
        waiting = state.get("waiting")
        if waiting is None:
            continue
        reason = str(waiting.get("reason") or "Waiting")
        if last:  # between restarts (CrashLoopBackOff): the last exit says why
            return RANK_EXITED, f"pod {name} {reason}, last {exit_text(last)}"
        said = f"pod {name} {reason}" + (f": {quoted(waiting['message'])}"
                                          if waiting.get("message") else "")  # fmt: skip
        creating = reason in ("ContainerCreating", "PodInitializing")
        return (RANK_CREATING if creating else RANK_WAITING), said
    ready = _pod_condition(pod, "Ready")
    if ready.get("reason") == "NodeNotReady":
        return RANK_NODE, f"pod {name} not ready{_said(ready)}"
    for container, state in states:
        since = (state.get("running") or {}).get("startedAt")
        if since is None:
            continue
        last = (container.get("lastState") or {}).get("terminated")
        again = f"; restarted after {exit_text(last)}" if last else ""
        return RANK_LOADING, f"pod {name} {running.format(since=since)}{again}"
    return RANK_CREATING, f"pod {name} {status.get('phase') or 'Pending'}"


def _refused(what: str, message: str, fixes: tuple[tuple[str, str], ...]) -> str:
    """``<what> cannot create pods (FailedCreate): <message>[; <fix>]``."""
    fix = next((fix for words, fix in fixes if words in message), "")
    return f"{what} cannot create pods (FailedCreate): {quoted(message)}" + (
        f"; {fix}" if fix else ""
    )


def failed_create(sts: Json, events: Iterable[Json]) -> str:
    """Why the StatefulSet controller could not create ``sts``'s pods (its latest
    FailedCreate Event of this StatefulSet, not of an older one of the same name), with the
    fix where the refusal's words tell it; "" when it has not said."""
    meta = sts.get("metadata") or {}
    name, uid = meta.get("name"), meta.get("uid")
    mine = [
        e for e in events
        if e.get("reason") == "FailedCreate"
        and (e.get("involvedObject") or {}).get("name") == name
        and (not uid or (e.get("involvedObject") or {}).get("uid") in (None, "", uid))
    ]  # fmt: skip
    if not mine:
        return ""
    latest = max(mine, key=lambda e: (str(e.get("lastTimestamp") or ""), int(e.get("count") or 0)))
    message = _FAILED_CREATE_PREFIX.sub("", str(latest.get("message") or ""))
    return _refused(f"StatefulSet {name}", message, FAILED_CREATE_FIXES)


def replica_failure(deployment: Json) -> str:
    """Why the router's ReplicaSet could not create pods: the Deployment's ReplicaFailure
    condition (the Deployment controller copies its ReplicaSet's), or ""."""
    name = (deployment.get("metadata") or {}).get("name")
    for cond in (deployment.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            message = str(cond.get("message") or cond.get("reason") or "")
            return _refused(f"Deployment {name}", message, ROUTER_FAILED_CREATE_FIXES)
    return ""


def podgroup_wait(podgroup: Json | None) -> str:
    """Why Volcano holds an instance's pods (its PodGroup not yet Running), or ""."""
    if not podgroup:
        return ""
    name = podgroup["metadata"]["name"]
    status = podgroup.get("status") or {}
    phase = status.get("phase")
    if not phase:
        return f"PodGroup {name} has no phase yet: is Volcano's scheduler running?"
    if phase not in ("Pending", "Inqueue"):
        return ""
    said = [c for c in status.get("conditions") or []
            if c.get("type") == "Unschedulable" and c.get("status") == "True"]  # fmt: skip
    return (
        f"PodGroup {name} {phase}"
        + (_said(said[-1]) if said else "")
        + (" (Volcano starts an instance's pods together, once all of them fit)")
    )


def instance_wait(
    name: str,
    want: int,
    sts: Json | None,
    pods: list[Json],
    podgroup: Json | None = None,
    events: Iterable[Json] = (),
) -> str:
    """``<instance> (<ready>/<want> pods ready): <why>`` for an instance that is not ready
    (``pods_wait``; a refused pod and a Volcano gang are its StatefulSet's causes)."""
    if sts is None:
        return f"{name}: StatefulSet not created yet"
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    head = f"{name} ({sum(_pod_ready(p) for p in live)}/{want} pods ready)"
    causes: list[tuple[int, str]] = []
    if len(live) < want:
        refused = failed_create(sts, events)
        if refused:
            causes.append((RANK_NOT_CREATED, refused))
    if any(not (p.get("spec") or {}).get("nodeName") for p in live):
        gang = podgroup_wait(podgroup)
        if gang:
            causes.append((RANK_GANG, gang))
    return f"{head}: {pods_wait('StatefulSet', want, pods, causes)}"


def pods_wait(
    kind: str,
    want: int,
    pods: list[Json],
    causes: Iterable[tuple[int, str]] = (),
    running: str = LOADING_WEIGHTS,
) -> str:
    """Why a workload (an instance's StatefulSet, the router's Deployment) of ``want`` pods
    is not ready: its most telling cause (``RANK_*``; among equals, its lowest pod) among
    its pods' (``pod_wait``) and its controller's ``causes``, and how many other pods are
    not ready."""
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    waits = [w for p in sorted(pods, key=lambda p: p["metadata"]["name"])
             if (w := pod_wait(p, running)) is not None]  # fmt: skip
    found = sorted([*causes, *waits], key=lambda f: f[0])  # stable: the lowest pod first
    if not found:
        if len(live) < want:
            return f"{want - len(live)} of its pods not created yet"
        return f"its {kind}'s status has not caught up yet"
    others = len(waits) - (found[0] in waits)
    return found[0][1] + (f" (and {counted(others, 'more pod')} not ready)" if others else "")


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def preflight_failures(pods: list[Json]) -> list[tuple[str, str]]:
    """(reason, ``pod <name> on node <node>: <message>``) of every pod whose launcher
    ended, now or before its restart, with a failed NPU preflight check: exit
    ``EXIT_PREFLIGHT`` and a termination message naming the reason (an exit 7 without one
    is not the launcher's). A ready pod passed its checks since: its lastState is history."""
    found = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        if _pod_ready(pod):
            continue
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            ended = next(
                (t for key in ("state", "lastState")
                 if (t := (container.get(key) or {}).get("terminated") or {})
                 and t.get("exitCode") == EXIT_PREFLIGHT
                 and preflight_reason(str(t.get("message") or ""))),
                None,
            )  # fmt: skip
            if ended is None:
                continue
            message = str(ended.get("message") or "")
            node = (pod.get("spec") or {}).get("nodeName") or "no node"
            text = f"pod {pod['metadata']['name']} on node {node}: {quoted(message)}"
            found.append((preflight_reason(message), text))
            break
    return found
