"""A stand-in for the PD router that records a request stream, for proving that a drain
cuts no request.

It routes as sglang-router 0.3.0 to 0.3.2 discover their workers (``service_discovery``
of those releases, read from their source, not from the operator): a pod becomes a worker
when it matches the router's selector and is Running with condition Ready, and stops being
one only when it is being deleted while it still matches (a label taken off, or the pod
turning NotReady, leaves it a worker). The selector is the one the operator gave the real
router: the ``--decode-selector`` words of the router Deployment's arguments.

Every ``every`` seconds it sends one request of ``duration`` seconds to the next worker,
round robin, and watches the pods (a list per tick, as often as the real router's watch
would tell it): a request is lost when, before it ends, a pod of its instance is gone (the
leader's process ended, or a rank it needs did). ``Requests`` is the pure bookkeeping; the
thread around it only lists pods.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]


def selector_of(args: list[str], role: str) -> dict[str, str]:
    """The ``key=value`` words after ``--<role>-selector`` in the router's arguments."""
    flag = f"--{role}-selector"
    if flag not in args:
        raise ValueError(f"the router's arguments have no {flag}: {args}")
    words = itertools.takewhile(lambda w: not w.startswith("--"), args[args.index(flag) + 1 :])
    return dict(w.split("=", 1) for w in words)


def routable(pod: Json) -> bool:
    status = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or [])  # fmt: skip
    return status.get("phase") == "Running" and ready


def instance_of(pod: Json) -> str:
    """The StatefulSet a pod belongs to: its name without the ordinal."""
    return str(pod["metadata"]["name"]).rpartition("-")[0]


@dataclass
class Request:
    worker: str  # the leader pod's uid
    instance: str
    started: float
    ends: float
    lost: str = ""


@dataclass
class Requests:
    """The workers sglang-router would route to, and every request sent to them."""

    selector: Mapping[str, str]
    duration: float
    #: the leader and its workers: one of them gone cuts the instance's requests
    pods_per_instance: int
    workers: dict[str, str] = field(default_factory=dict)  # uid -> instance
    sent: list[Request] = field(default_factory=list)
    _turn: int = 0
    _looked: float = float("-inf")

    def observe(self, pods: Iterable[Json], now: float) -> None:
        """One look at the role's pods: workers added and removed by the router's rule, and
        requests in flight lost to a pod of their instance that is gone."""
        pods = list(pods)
        # a pod gone between two looks is gone for the router too (its watch said DELETED)
        present = {pod["metadata"]["uid"] for pod in pods}
        self.workers = {uid: i for uid, i in self.workers.items() if uid in present}
        for pod in pods:
            meta = pod["metadata"]
            labels = meta.get("labels") or {}
            if any(labels.get(k) != v for k, v in self.selector.items()):
                continue
            if meta.get("deletionTimestamp"):
                self.workers.pop(meta["uid"], None)
            elif routable(pod):
                self.workers.setdefault(meta["uid"], instance_of(pod))
        uids: dict[str, set[str]] = {}
        for pod in pods:
            uids.setdefault(instance_of(pod), set()).add(pod["metadata"]["uid"])
        # a pod that ended since the last look may have ended before any request that was
        # still running then: those count as cut (strict: the look is 10 times a second)
        since, self._looked = self._looked, now
        for request in [r for r in self.sent if not r.lost and r.ends > since]:
            mine = uids.get(request.instance, set())
            if request.worker not in mine:
                request.lost = f"{request.instance}: its leader ended with the request in flight"
            elif len(mine) < self.pods_per_instance:
                # the leader's request needs every rank of its instance
                request.lost = f"{request.instance}: a rank ended with the request in flight"

    def send(self, now: float) -> Request | None:
        """One request to the next worker, round robin; None while there is none."""
        if not self.workers:
            return None
        uids = sorted(self.workers)
        uid = uids[self._turn % len(uids)]
        self._turn += 1
        request = Request(uid, self.workers[uid], now, now + self.duration)
        self.sent.append(request)
        return request

    def lost(self) -> list[Request]:
        return [r for r in self.sent if r.lost]

    def completed(self, now: float) -> list[Request]:
        return [r for r in self.sent if not r.lost and r.ends <= now]


class RecordingRouter(threading.Thread):
    """``Requests`` driven against the API server: lists the namespace's pods of the
    selector's role every ``every`` seconds and sends one request each time."""

    def __init__(self, api_client: Any, namespace: str, requests: Requests,
                 role_selector: str, every: float = 0.1) -> None:  # fmt: skip
        from kubernetes import client

        super().__init__(daemon=True, name="recording-router")
        self.core = client.CoreV1Api(api_client)
        self.namespace, self.requests, self.every = namespace, requests, every
        self.role_selector = role_selector
        self.stopping = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stopping.wait(self.every):
            try:
                found = self.core.list_namespaced_pod(
                    self.namespace, label_selector=self.role_selector
                )
            except Exception as exc:  # a busy API server: count it, look again
                self.errors.append(str(exc)[:200])
                continue
            pods = [self.core.api_client.sanitize_for_serialization(p) for p in found.items]
            now = time.monotonic()
            self.requests.observe(pods, now)
            self.requests.send(now)

    def __enter__(self) -> RecordingRouter:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # the requests in flight end before the stream is judged
        self.stopping.wait(self.requests.duration)
        self.stopping.set()
        self.join(10)
