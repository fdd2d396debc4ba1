"""The containers of a simulated pod: each one's ``containerStatuses`` entry, as a kubelet
reports it, read back from the entry it had so a restarted kubelet-sim carries on.

A container runs from the pod's start and is ready ``delay`` seconds later. A crash request
terminates it (``lastState.terminated``, ``restartCount`` + 1, ``CrashLoopBackOff``) and it runs
again after the kubelet's back-off or the request's ``restartAfterSeconds``; under restart
policy Never (or OnFailure and exit 0) it stays terminated, ended for good. A container whose
launcher check kubelet-sim runs shows what the check says (``check_runs.View``). A container
whose image the registry lacks (``knobs.UNPULLABLE_IMAGES``) never starts: it waits in
``ErrImagePull``, then ``ImagePullBackOff`` (``pull_failure``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ascend_pd_dev.kubelet_sim import check_runs, knobs
from ascend_pd_dev.kubelet_sim.knobs import Crash, Exit, Failure
from ascend_pd_dev.kubelet_sim.objects import Obj, parse_iso

#: A failed pull shows ErrImagePull this long, then ImagePullBackOff (the kubelet's first
#: image back-off).
PULL_BACKOFF_SECONDS = 10.0


def kubelet_backoff(restarts: int) -> float:
    """The kubelet's delay before restart number ``restarts`` of a crashed container: none for
    the first, then 10 s doubling to 5 min (the kubelet also forgets it after 10 min of no
    crash; kubelet-sim counts from ``restartCount`` alone)."""
    if restarts <= 1:
        return 0.0
    return check_runs.backoff(restarts - 1)


@dataclass(frozen=True)
class PodView:
    """What every container's status of one pod depends on, decided before them."""

    meta: Obj
    timestamp: str
    now: float
    #: the pod's startTime
    start: str
    policy: str
    outcome: str
    #: the pod's phase and readiness so far (from its outcome and requests)
    phase: str
    ready: bool
    #: seconds from a container's start to its readiness
    delay: float
    failure: Failure | None
    #: the crash to apply now and the container it hits (None: no crash now)
    crash: Crash | None
    crash_target: str | None
    #: the crash applied last (its ``restartAfterSeconds`` still counts)
    handled: Crash | None
    #: the containers whose launcher check kubelet-sim runs, by name
    checked: Mapping[str, check_runs.View]
    #: the containers' entries in the current status, by name
    previous: Mapping[str, Obj]
    #: the containers whose image was never pulled (the registry lacks it), by name
    pulling: frozenset[str] = frozenset()

    @property
    def cid_base(self) -> str:
        return f"kubelet-sim://{self.meta.get('uid', '')}"


def _stays_terminated(policy: str, exit_code: object) -> bool:
    return policy == "Never" or (policy == "OnFailure" and exit_code == 0)


def _terminated(pod: PodView, ended: Exit, started: str) -> Obj:
    body: Obj = {"exitCode": ended.code, "reason": ended.reason, "startedAt": started,
                 "finishedAt": pod.timestamp}  # fmt: skip
    if ended.message:
        body["message"] = ended.message
    return {"terminated": body}


def _started_at(pod: PodView, prev_state: Obj) -> str:
    running_since = (prev_state.get("running") or {}).get("startedAt")
    if running_since is None:
        for body in prev_state.values():
            running_since = (body or {}).get("startedAt") or running_since
    return str(running_since or pod.start)


def _final_state(pod: PodView, started_at: str) -> Obj:
    """A container of a Succeeded or Failed pod."""
    if pod.phase == "Succeeded":
        return _terminated(pod, Exit(0, "Completed"), started_at)
    failure = pod.failure
    return _terminated(pod, Exit() if failure is None else failure.ended, started_at)


def _crashed(
    pod: PodView, crash: Crash, name: str, started_at: str, last_state: Obj, restarts: int
) -> tuple[Obj, Obj, int, bool]:
    died = _terminated(pod, crash.ended, started_at)
    died["terminated"]["containerID"] = f"{pod.cid_base}/{name}/{restarts}"
    if _stays_terminated(pod.policy, crash.ended.code):
        return died, last_state, restarts, True
    restarts += 1
    wait = kubelet_backoff(restarts) if crash.restart_after is None else crash.restart_after
    meta = pod.meta
    message = (f"back-off {wait:g}s restarting failed container={name} "
               f"pod={meta.get('name')}_{meta.get('namespace')}({meta.get('uid')}) "
               f"(kubelet-sim: crash {crash.id})")  # fmt: skip
    return {"waiting": {"reason": "CrashLoopBackOff", "message": message}}, died, restarts, False


def _backing_off(pod: PodView, prev_state: Obj, last_state: Obj, restarts: int) -> Obj:
    """Still in CrashLoopBackOff, or restarted now that the back-off is over."""
    handled = pod.handled
    if handled is not None and handled.restart_after is not None:
        wait = handled.restart_after
    else:
        wait = kubelet_backoff(restarts)
    finished = parse_iso(last_state["terminated"].get("finishedAt")) or 0.0
    return prev_state if pod.now < finished + wait else {"running": {"startedAt": pod.timestamp}}


def next_state(pod: PodView, name: str, prev: Obj) -> tuple[Obj, Obj, int, bool]:
    """(state, lastState, restartCount, ended for good) of container ``name`` now."""
    prev_state = prev.get("state") or {}
    last_state = prev.get("lastState") or {}
    restarts = int(prev.get("restartCount", 0) or 0)
    started_at = _started_at(pod, prev_state)
    if pod.phase in ("Succeeded", "Failed"):
        return _final_state(pod, started_at), last_state, restarts, False
    if pod.outcome == "crash":
        state = {"waiting": {"reason": "CrashLoopBackOff",
                             "message": "kubelet-sim: simulated crash loop"}}  # fmt: skip
        return state, last_state, max(restarts, 1), False
    if pod.crash is not None and name == pod.crash_target:
        return _crashed(pod, pod.crash, name, started_at, last_state, restarts)
    if "terminated" in prev_state and _stays_terminated(
        pod.policy, prev_state["terminated"].get("exitCode")
    ):
        return prev_state, last_state, restarts, True
    if (prev_state.get("waiting") or {}).get("reason") == "CrashLoopBackOff" and (
        "terminated" in last_state
    ):
        return _backing_off(pod, prev_state, last_state, restarts), last_state, restarts, False
    if prev_state and "running" not in prev_state:
        return {"running": {"startedAt": pod.timestamp}}, last_state, restarts, False  # (re)started
    return {"running": {"startedAt": started_at}}, last_state, restarts, False


def pull_failure(image: str, waited: float) -> Obj:
    """The ``waiting`` state of a container whose image the registry lacks, ``waited``
    seconds after its pod started: the pull's error, then the kubelet's back-off."""
    if waited >= PULL_BACKOFF_SECONDS:
        return {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}
    return {"reason": "ErrImagePull", "message": (
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": not '
        f"found (kubelet-sim: {knobs.UNPULLABLE_IMAGES})")}  # fmt: skip


def never_pulled(containers: list[Obj], lacking: set[str], previous: Mapping[str, Obj]) -> set[str]:
    """The names of the ``containers`` whose image is in ``lacking`` and that never ran (an
    image once pulled stays on the node): those wait for their image."""

    def ran(name: str) -> bool:
        prev = previous.get(name) or {}
        return bool(prev.get("lastState")) or "running" in (prev.get("state") or {})

    return {
        c.get("name", "")
        for c in containers
        if c.get("image") in lacking and not ran(c.get("name", ""))
    }


def _pulling_entry(pod: PodView, entry: Obj, image: str, name: str) -> Obj:
    """Never pulled, never started: a kubelet shows ErrImagePull, then backs off."""
    waiting = pull_failure(image, pod.now - (parse_iso(pod.start) or pod.now))
    restarts = int((pod.previous.get(name) or {}).get("restartCount", 0) or 0)
    entry.update(ready=False, started=False, restartCount=restarts, imageID="",
                 state={"waiting": waiting})  # fmt: skip
    return entry


def _checked_entry(entry: Obj, view: check_runs.View, outcome_ready: bool) -> Obj:
    entry.update(ready=view.ready and outcome_ready, started=view.started,
                 restartCount=view.restart_count, state=view.state)  # fmt: skip
    if view.last_state:
        entry["lastState"] = view.last_state
    return entry


def container_status(pod: PodView, container: Obj) -> tuple[Obj, bool]:
    """(its containerStatuses entry, ended for good)."""
    name = container.get("name", "")
    entry: Obj = {
        "name": name,
        "image": container.get("image", ""),
        "imageID": f"kubelet-sim://{container.get('image', '')}",
        "containerID": f"{pod.cid_base}/{name}",
    }
    if pod.phase == "Running" and name in pod.pulling:
        return _pulling_entry(pod, entry, container.get("image", ""), name), False
    # the checked containers' state counts while the outcome says the pod runs
    view = pod.checked.get(name) if pod.phase == "Running" else None
    if view is not None:
        return _checked_entry(entry, view, pod.ready), view.final
    state, last_state, restarts, ended = next_state(pod, name, pod.previous.get(name) or {})
    up = (state.get("running") or {}).get("startedAt")
    warm = up is not None and pod.now >= (parse_iso(up) or 0.0) + pod.delay
    entry.update(ready=bool(pod.ready and pod.phase == "Running" and warm),
                 started=up is not None, restartCount=restarts, state=state)  # fmt: skip
    if last_state:
        entry["lastState"] = last_state
    return entry, ended


def init_container_statuses(pod: PodView, init_containers: list[Obj]) -> list[Obj]:
    """Init containers: all completed at the pod's start (kubelet-sim runs none of them)."""
    return [
        {
            "name": c.get("name", ""),
            "image": c.get("image", ""),
            "imageID": f"kubelet-sim://{c.get('image', '')}",
            "containerID": f"{pod.cid_base}/{c.get('name')}",
            "ready": True,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                     "startedAt": pod.start, "finishedAt": pod.start}},
        }
        for c in init_containers
    ]  # fmt: skip
