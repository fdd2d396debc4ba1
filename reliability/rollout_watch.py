"""A sampler of a PDDeployment's runtime and router pods during a rollout.

It reads the pods (and the PDDeployment's status) straight from the API server every
~200 ms in a thread and records what a user would see: how many instances of each role were
Ready, whether an instance ever had Ready pods of two templates, what each running router
pod selects, and which Ready leaders a router could discover. The e2e tests and the
rollout reliability scenario judge the operator by these samples, never by its own code.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from ascend_pd_operator.api.vocabulary import (
    LABEL_FINGERPRINT,
    LABEL_INSTANCE,
    LABEL_LEADER,
    LABEL_REVISION,
    LABEL_ROLE,
)


def pod_ready(pod: Any) -> bool:
    if pod.metadata.deletion_timestamp is not None:
        return False  # on its way out: it serves nothing new
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


@dataclass
class Sample:
    #: role -> instances whose every pod is Ready
    ready: dict[str, int]
    #: instances with Ready pods of two templates
    mixed: list[str]
    #: (role, generation) -> Ready leader-labelled pods: what a router selecting them discovers
    discoverable: dict[tuple[str, str], int]
    #: pods labelled as leaders that are not pod 0 of their instance
    labelled_non_leaders: list[str]
    status: dict[str, Any] = field(default_factory=dict)
    #: per running router pod: (Ready, the generations its prefill and decode selectors name)
    routers: list[tuple[bool, tuple[str, ...]]] = field(default_factory=list)


class Sampler:
    """Samples the namespace every ``period`` seconds in a thread until ``stop``."""

    def __init__(
        self, api_client: Any, namespace: str, name: str, nodes: dict[str, int],
        period: float = 0.2,
    ) -> None:  # fmt: skip
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.namespace, self.name, self.nodes, self.period = namespace, name, nodes, period
        self.samples: list[Sample] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self.sample())
            except Exception as exc:  # an API hiccup: noted, never a false pass
                self.errors.append(repr(exc))
            self._stop.wait(self.period)

    def sample(self) -> Sample:
        pods = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"ascendpd.io/deployment={self.name}"
        ).items
        by_instance: dict[tuple[str, str], list[Any]] = defaultdict(list)
        discoverable: dict[tuple[str, str], int] = defaultdict(int)
        non_leaders, routers = [], []
        for pod in pods:
            labels = pod.metadata.labels or {}
            role = labels.get(LABEL_ROLE)
            if labels.get("app.kubernetes.io/component") == "router":
                if pod.metadata.deletion_timestamp is None:
                    args = pod.spec.containers[0].args or []
                    named = tuple(a.split("=", 1)[1] for a in args
                                  if a.startswith(LABEL_FINGERPRINT + "="))  # fmt: skip
                    routers.append((pod_ready(pod), named))
                continue
            if role not in ("prefill", "decode"):
                continue
            by_instance[(role, labels[LABEL_INSTANCE])].append(pod)
            if labels.get(LABEL_LEADER) == "true":
                if not pod.metadata.name.endswith("-0"):
                    non_leaders.append(pod.metadata.name)
                if pod_ready(pod):
                    discoverable[(role, labels.get(LABEL_FINGERPRINT, "?"))] += 1
        ready: dict[str, int] = {"prefill": 0, "decode": 0}
        mixed = []
        for (role, index), members in by_instance.items():
            live = [p for p in members if pod_ready(p)]
            if len(live) == self.nodes[role] and len(live) == len(members):
                ready[role] += 1
            if len({(p.metadata.labels or {}).get(LABEL_REVISION) for p in live}) > 1:
                mixed.append(f"{role}-{index}")
        cr = self.custom.get_namespaced_custom_object(
            "ascendpd.io", "v1alpha1", self.namespace, "pddeployments", self.name
        )
        return Sample(ready, mixed, dict(discoverable), non_leaders, cr.get("status") or {},
                      routers)  # fmt: skip
