"""The knobs a test turns: every annotation kubelet-sim reads or writes, and what a request in
one says (a crash, a failure, a readiness delay, an outcome, images the registry lacks,
whether a pod's claims are checked), parsed and checked.

They share one prefix, so ``kubectl get pod -o yaml`` shows at a glance what a test asked of the
simulation and what the simulation recorded. The package's docstring says what each does; a
malformed request is a ValueError naming the annotation, which fails the pod.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ascend_pd_dev.kubelet_sim.objects import Obj

PREFIX = "kubelet-sim.ascend-pd.dev/"

#: pod: what the simulated containers do (ready, unready, crash, succeed, fail)
OUTCOME = PREFIX + "outcome"
#: pod or namespace: run the launcher's pre-exec check locally (``launch_check``)
RUN_LAUNCH_CHECK = PREFIX + "run-launch-check"
#: pod: seconds from a container's start to its readiness (overrides ``--ready-after``)
READY_AFTER = PREFIX + "ready-after-seconds"
#: pod: seconds a pod being deleted keeps running (its containers finishing their work on
#: SIGTERM) before it is gone, at most its grace period (default 0: gone at once)
TERMINATE_AFTER = PREFIX + "terminate-after-seconds"
#: pod, set by a test: one container crash, a JSON object with an ``id``
CRASH = PREFIX + "crash"
#: pod, written by kubelet-sim: the ``id`` of the last crash request it applied
CRASH_HANDLED = PREFIX + "crash-handled"
#: pod, set by a test: the pod fails for good ("true" or a JSON object)
FAIL = PREFIX + "fail"
#: pod or namespace, set by a test: images the registry does not have, comma-separated; a
#: container of one of them waits in ErrImagePull, then ImagePullBackOff, as a kubelet shows
#: it (on a namespace: for every pod in it, such as a router, which has no podAnnotations)
UNPULLABLE_IMAGES = PREFIX + "unpullable-images"
#: pod, set by a test: NPU device ids, comma-separated, whose link the simulated hccn_tool
#: of the launcher's check reports DOWN (``npu``; a role's podAnnotations reach every pod)
NPU_LINK_DOWN = PREFIX + "npu-link-down"
#: Node, set by a test: "true" (the kubelet reports NotReady) or "unknown" (it is unreachable)
NOT_READY = PREFIX + "not-ready"
#: Node, written by kubelet-sim: the pid of the kubelet-sim process serving it
OWNER = PREFIX + "pid"

#: the values of ``OUTCOME``
OUTCOMES = ("ready", "unready", "crash", "succeed", "fail")


@dataclass(frozen=True)
class Exit:
    """How a container ended, as its ``state.terminated`` shows it."""

    code: int = 1
    reason: str = "Error"
    message: str = ""


@dataclass(frozen=True)
class Crash:
    """One container crash a test asked for (``CRASH``)."""

    id: str
    ended: Exit = Exit()
    #: None: the pod's first container (``kubectl``'s default container)
    container: str | None = None
    #: None: the kubelet's back-off (restart at once the first time, then 10 s doubling)
    restart_after: float | None = None


@dataclass(frozen=True)
class Failure:
    """The pod's end a test asked for (``FAIL``): how every container ended."""

    ended: Exit = Exit()
    pod_reason: str | None = None
    pod_message: str | None = None


@dataclass(frozen=True)
class Requests:
    """What a pod's annotations ask of its kubelet now."""

    #: seconds from a container's start to its readiness
    delay: float
    #: the crash to apply now, and the one applied last (either None)
    crash: Crash | None = None
    handled: Crash | None = None
    failure: Failure | None = None
    #: why a request is malformed (the pod fails saying so); None: all well formed
    invalid: str | None = None


CRASH_FIELDS = {"id", "exitCode", "reason", "message", "container", "restartAfterSeconds"}
FAILURE_FIELDS = {"exitCode", "reason", "message", "podReason", "podMessage"}


def _json_object(name: str, text: str, fields: set[str]) -> Obj:
    try:
        body = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"kubelet-sim: annotation {name} is not JSON: {err}") from None
    if not isinstance(body, dict):
        raise ValueError(f"kubelet-sim: annotation {name} is not a JSON object")
    unknown = sorted(set(body) - fields)
    if unknown:
        raise ValueError(f"kubelet-sim: annotation {name}: unknown fields {unknown}")
    code = body.get("exitCode", 1)
    if not isinstance(code, int) or isinstance(code, bool) or not 0 <= code <= 255:
        raise ValueError(f"kubelet-sim: annotation {name}: exitCode {code!r} is not 0..255")
    for key in fields - {"exitCode", "restartAfterSeconds"}:
        if key in body and not isinstance(body[key], str):
            raise ValueError(f"kubelet-sim: annotation {name}: {key} must be a string")
    return body


def parse_crash(text: str) -> Crash:
    """A crash request; its ``id`` defaults to the whole annotation value. ValueError if bad."""
    body = _json_object(CRASH, text, CRASH_FIELDS)
    after = body.get("restartAfterSeconds")
    if after is not None and (isinstance(after, bool) or not isinstance(after, int | float)
                              or after < 0):  # fmt: skip
        raise ValueError(f"kubelet-sim: annotation {CRASH}: restartAfterSeconds "
                         f"{after!r} is not a number >= 0")  # fmt: skip
    completed = body.get("exitCode") == 0
    return Crash(
        id=str(body.get("id") or text), ended=_exit(body, "Completed" if completed else "Error"),
        container=body.get("container"), restart_after=None if after is None else float(after),
    )  # fmt: skip


def parse_failure(text: str) -> Failure:
    """A failure request: "true" or a JSON object. ValueError if bad."""
    if text.strip().lower() in ("", "true"):
        return Failure()
    body = _json_object(FAIL, text, FAILURE_FIELDS)
    return Failure(
        ended=_exit(body, "Error"), pod_reason=body.get("podReason"),
        pod_message=body.get("podMessage"),
    )  # fmt: skip


def _exit(body: Obj, reason: str) -> Exit:
    """The ``exitCode``, ``reason`` (``reason`` when none) and ``message`` a request asks for."""
    return Exit(body.get("exitCode", 1), body.get("reason") or reason, body.get("message", ""))


def _annotations(obj: Obj) -> dict[str, str]:
    return obj.get("metadata", {}).get("annotations") or {}


def outcome_of(pod: Obj) -> str:
    return str(_annotations(pod).get(OUTCOME, "ready"))


def unpullable_images(pod: Obj, namespace_annotations: Mapping[str, str] | None = None) -> set[str]:
    """The images a test says the registry lacks (``UNPULLABLE_IMAGES``), on the pod or on its
    namespace."""
    texts = (
        _annotations(pod).get(UNPULLABLE_IMAGES),
        (namespace_annotations or {}).get(UNPULLABLE_IMAGES),
    )
    return {image.strip() for text in texts for image in str(text or "").split(",")
            if image.strip()}  # fmt: skip


def npu_link_down(pod: Obj) -> set[int]:
    """The NPU ids whose link a test says is down (``NPU_LINK_DOWN``); ValueError when the
    annotation is not comma-separated device ids."""
    text = str(_annotations(pod).get(NPU_LINK_DOWN) or "")
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not all(p.isdigit() for p in parts):
        raise ValueError(f"{NPU_LINK_DOWN} {text!r}: expected NPU device ids, comma-separated")
    return {int(p) for p in parts}


def ready_after_of(pod: Obj, default: float) -> float:
    """Seconds from a container's start to its readiness: the pod's annotation, else
    ``default``. ValueError if the annotation is not a number >= 0."""
    return _seconds(pod, READY_AFTER, default)


def terminate_after_of(pod: Obj) -> float:
    """Seconds a pod being deleted keeps running (``TERMINATE_AFTER``; 0: none)."""
    return _seconds(pod, TERMINATE_AFTER, 0.0)


def _seconds(pod: Obj, annotation: str, default: float) -> float:
    text = _annotations(pod).get(annotation)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise ValueError(f"kubelet-sim: annotation {annotation}={text!r} is not a "
                         "number of seconds >= 0")  # fmt: skip
    return value


def crash_requests(pod: Obj) -> tuple[Crash | None, Crash | None]:
    """(the crash to apply now, the crash applied last) from the pod's annotations; either
    None. ValueError if the request is malformed."""
    notes = _annotations(pod)
    text = notes.get(CRASH)
    if text is None:
        return None, None
    crash = parse_crash(str(text))
    if notes.get(CRASH_HANDLED) == crash.id:
        return None, crash
    return crash, None


def requests_of(pod: Obj, containers: Iterable[Obj], ready_after: float) -> Requests:
    """Everything the pod's annotations ask, read in order; the first malformed request ends
    the reading (what was read before it stays) and is named in ``invalid``."""
    delay, crash, handled, failure = ready_after, None, None, None
    try:
        delay = ready_after_of(pod, ready_after)
        crash, handled = crash_requests(pod)
        if (
            crash is not None
            and crash.container is not None
            and crash.container not in {c.get("name") for c in containers}
        ):
            raise ValueError(f"kubelet-sim: annotation {CRASH}: the pod has no "
                             f"container {crash.container!r}")  # fmt: skip
        if FAIL in _annotations(pod):
            failure = parse_failure(str(_annotations(pod)[FAIL]))
    except ValueError as err:
        return Requests(delay, crash, handled, failure, str(err))
    return Requests(delay, crash, handled, failure)
