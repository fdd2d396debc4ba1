"""Scale-down drains across operator crashes: SIGKILL the operator at seeded moments while
a role drains, and show that every drain resumes and completes with nothing cut.

One PDDeployment whose decode role (two-node instances) has a PDRoleScaler. Its pods keep
running ``TERMINATE_AFTER`` seconds once deleted, as SGLang does while it finishes what it
holds. Each round scales decode down to 1 or back up to 3 through the scaler, SIGKILLs the
operator a seeded while later, starts it again and waits until the role runs the count and
no instance drains. A sampler reads the decode pods every 100 ms throughout; these are
problems, counted as lost requests where they would cut one:

- a pod seen being deleted without the draining label (cut before it was marked);
- a worker pod seen being deleted while its leader ran and was not being deleted (the
  leader's requests need the worker's ranks until the leader ends).
"""

from __future__ import annotations

import random
import threading
from typing import Any

from kubernetes import client

from ascend_pd_dev.kubelet_sim.knobs import READY_AFTER, TERMINATE_AFTER
from ascend_pd_operator.api.vocabulary import role_status

from .crash import crash_rounds
from .env import Env, Release, wait_for
from .result import ScenarioResult
from .specs import pdd

Json = dict[str, Any]
NAME = "draining"
SEED = 13
#: decode instances up and down, each of two nodes (one pod per node)
HIGH, LOW = 3, 1
#: how long a deleted pod runs on (its requests finishing)
TERMINATE_SECONDS = 2
BOUND_SECONDS = 180.0


class DrainSampler(threading.Thread):
    """Reads the decode pods every ``period`` seconds until stopped; what it saw cut."""

    def __init__(self, api_client: Any, namespace: str, period: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.core = client.CoreV1Api(api_client)
        self.namespace, self.period = namespace, period
        self.stopping = threading.Event()
        self.samples = 0
        self.unmarked: set[str] = set()
        self.early_workers: set[str] = set()
        self.marked_deletions: set[str] = set()
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stopping.wait(self.period):
            try:
                pods = self.core.list_namespaced_pod(
                    self.namespace, label_selector="ascendpd.io/role=decode"
                ).items
            except Exception as exc:  # a busy API server: count it, sample again
                self.errors.append(str(exc)[:200])
                continue
            self.samples += 1
            self.check(pods)

    def check(self, pods: list[Any]) -> None:
        live_leaders = {
            p.metadata.name[: -len("-0")]
            for p in pods
            if p.metadata.name.endswith("-0") and p.metadata.deletion_timestamp is None
        }
        for pod in pods:
            if pod.metadata.deletion_timestamp is None:
                continue
            name = pod.metadata.name
            if (pod.metadata.labels or {}).get("ascendpd.io/draining") != "true":
                self.unmarked.add(name)
                continue
            self.marked_deletions.add(name)
            instance, _, rank = name.rpartition("-")
            if rank != "0" and instance in live_leaders:
                self.early_workers.add(name)

    def __enter__(self) -> DrainSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.join(10)


def _settled(env: Env, namespace: str, want: int) -> bool:
    scaler = env.get_json(f"pdrolescaler/{NAME}-decode", "-n", namespace) or {}
    cr = env.get_json("pdd", NAME, "-n", namespace) or {}
    st = cr.get("status") or {}
    decode = role_status(st, "decode")
    pods = env.get_json("pods", "-n", namespace, "-l", "ascendpd.io/role=decode") or {}
    return bool(
        (scaler.get("status") or {}).get("replicas") == want
        and decode.get("readyReplicas") == want
        and not decode.get("draining")
        and len(pods.get("items", [])) == 2 * want
        and st.get("phase") == "Ready"
    )


def run(env: Env, release: Release, namespace: str, kills: int = 4) -> ScenarioResult:
    result = ScenarioResult("drain-crash")
    rng = random.Random(SEED)
    doc = pdd(NAME, namespace, prefill=1, decode=HIGH)
    decode = doc["spec"]["decode"]
    decode["parallelism"] = {"tensor": 2}
    decode["scaling"] = {"mode": "External", "minReplicas": LOW, "maxReplicas": HIGH}
    annotations = {READY_AFTER: "1", TERMINATE_AFTER: str(TERMINATE_SECONDS)}
    for role in ("prefill", "decode"):
        doc["spec"][role]["podAnnotations"] = dict(annotations)
    doc["spec"]["scaling"] = {"drainTimeoutSeconds": 30}
    operator = release.operator([namespace], "drain-crash-operator")
    targets = [LOW if r % 2 == 0 else HIGH for r in range(kills)]

    round_now = 0

    def change(round_: int) -> None:
        nonlocal round_now
        round_now = round_
        env.kubectl("scale", f"pdrolescaler/{NAME}-decode", "-n", namespace,
                    f"--replicas={targets[round_]}")  # fmt: skip

    def settled() -> bool:
        return _settled(env, namespace, targets[round_now])

    try:
        operator.start()
        env.apply([doc])
        ok, _ = wait_for(lambda: _settled(env, namespace, HIGH), BOUND_SECONDS, 0.5)
        if not ok:
            result.problems.append(f"decode never ran {HIGH} Ready instances")
            return result
        with DrainSampler(env.api_client, namespace) as sampler:
            # each kill at a seeded moment within a round's drains (or scale-up)
            for round_, converged, seconds in crash_rounds(
                operator, rng, kills, (0.3, 3.0), change, settled, BOUND_SECONDS
            ):
                result.record(converged, seconds, f"round {round_}: decode never settled "
                              f"at {targets[round_]}")  # fmt: skip
        result.lost = len(sampler.unmarked) + len(sampler.early_workers)
        if sampler.unmarked:
            result.problems.append(
                f"pods deleted before they were marked: {sorted(sampler.unmarked)}"
            )
        if sampler.early_workers:
            result.problems.append(
                f"workers deleted while their leader ran: {sorted(sampler.early_workers)}"
            )
        selector = f"involvedObject.name={NAME},reason=InstanceDrained"
        events = env.get_json("events", "-n", namespace, "--field-selector", selector) or {}
        drained = len(events.get("items", []))
        expected = sum(HIGH - LOW for t in targets if t == LOW)
        if drained < expected:
            result.problems.append(f"{drained} InstanceDrained Events, {expected} drains")
        result.details.update(
            kills=kills, seed=SEED, samples=sampler.samples, drains=drained,
            deleted_marked_pods=len(sampler.marked_deletions),
            sampler_errors=len(sampler.errors),
            tracebacks_in_log=operator.log_text().count("Traceback"),
        )  # fmt: skip
    finally:
        operator.kill()
    return result
