"""The lifecycle of kubelet-sim's launcher-check containers: runs, restarts, back-off, status.

``launch_check`` prepares and runs one check; this module decides when a container runs,
and what its ``containerStatuses`` entry says meanwhile, the way a kubelet does for a
container that exits:

- while the check runs: ``state.running``, not ready;
- exit 0: the launcher would exec SGLang now, so the container stays ``running`` (ready as
  the pod's outcome annotation says) and is never run again;
- exit N != 0: ``state.terminated`` (reason ``Error``, ``exitCode``, ``message``, times) for
  ``TERMINATED_SHOWN`` seconds, then, under restart policy Always/OnFailure, ``waiting``
  ``CrashLoopBackOff`` with the run in ``lastState.terminated`` and ``restartCount`` raised,
  and after the kubelet's back-off (10 s doubling to 5 min) the check runs again. Under
  ``Never`` it stays terminated.

Checks run on a small thread pool so a slow one never stalls the simulated nodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ascend_pd_dev.kubelet_sim import launch_check as lc
from ascend_pd_dev.kubelet_sim.objects import Obj, iso, log

BACKOFF_START, BACKOFF_CAP = 10.0, 300.0
#: how long a failed run shows as ``state.terminated`` before ``CrashLoopBackOff``
TERMINATED_SHOWN = 2.0


def backoff(failures: int) -> float:
    """The kubelet's crash-loop back-off after ``failures`` failed runs."""
    return min(BACKOFF_CAP, BACKOFF_START * float(2 ** max(0, failures - 1)))


@dataclass
class Attempt:
    started_at: str
    future: Future[lc.Ended]
    finished_at: str = ""
    finished: float = 0.0
    ended: lc.Ended | None = None
    reported: bool = False


@dataclass
class Record:
    scratch: Path
    first_seen: str
    base_restarts: int
    attempts: list[Attempt] = field(default_factory=list)


@dataclass(frozen=True)
class View:
    """One container's status fields while kubelet-sim runs its check."""

    state: Obj
    last_state: Obj
    restart_count: int
    ready: bool
    started: bool
    #: terminated for good (restart policy Never)
    final: bool = False


def terminated(attempt: Attempt) -> Obj:
    assert attempt.ended is not None
    body: Obj = {
        "exitCode": attempt.ended.exit_code,
        "reason": "Completed" if attempt.ended.exit_code == 0 else "Error",
        "startedAt": attempt.started_at,
        "finishedAt": attempt.finished_at,
    }
    if attempt.ended.message:
        body["message"] = attempt.ended.message
    return {"terminated": body}


class LaunchChecks:
    """Every checked container's runs, keyed by pod uid and container name."""

    def __init__(
        self,
        runtimes_dir: Path | None,
        scratch_root: Path | None = None,
        workers: int = 2,
        clock: Callable[[], float] = time.monotonic,
        runner: Callable[[lc.Prepared], lc.Ended] = lc.run,
    ) -> None:
        self.runtimes_dir = runtimes_dir
        self.scratch_root = scratch_root
        self.clock = clock
        self.runner = runner
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="launch-check")
        self.records: dict[tuple[str, str], Record] = {}
        #: (pod, type, reason, message) for the simulator to record as Events
        self.events: list[tuple[Obj, str, str, str]] = []

    def shutdown(self) -> None:
        """Stop starting checks (a running one finishes) and remove every scratch directory."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.forget(set())

    def forget(self, live_uids: set[str]) -> None:
        """Drop the runs of pods that are gone (and their scratch files)."""
        for key in [k for k in self.records if k[0] not in live_uids]:
            record = self.records.pop(key)
            lc.remove_scratch(record.scratch)

    def views(
        self, pod: Obj, pod_ip: str, host_ip: str, cluster: lc.Cluster, asked: bool
    ) -> dict[str, View]:
        """Views of the pod's launcher containers, by name ({} when the pod is not checked)."""
        if not asked:
            return {}
        previous = {
            c.get("name"): c for c in (pod.get("status") or {}).get("containerStatuses") or []
        }
        out = {}
        for container in pod.get("spec", {}).get("containers") or []:
            if lc.is_launcher(container):
                name = container.get("name", "")
                restarts = int((previous.get(name) or {}).get("restartCount", 0) or 0)
                out[name] = self._view(pod, container, pod_ip, host_ip, cluster, restarts)
        return out

    def _view(
        self, pod: Obj, container: Obj, pod_ip: str, host_ip: str, cluster: lc.Cluster,
        restarts: int,
    ) -> View:  # fmt: skip
        key = (str(pod["metadata"].get("uid", "")), str(container.get("name", "")))
        record = self.records.get(key)
        if record is None:
            scratch = lc.scratch_dir(self.scratch_root, pod, key[1])
            record = self.records[key] = Record(scratch, iso(time.time()), restarts)
        self._collect(pod, record)
        never = (pod.get("spec", {}).get("restartPolicy") or "Always") == "Never"
        last = record.attempts[-1] if record.attempts else None
        if last is None or (
            last.ended is not None
            and last.ended.exit_code != 0
            and not never
            and self.clock() - last.finished >= backoff(len(record.attempts))
        ):
            waiting = self._start(pod, container, pod_ip, host_ip, cluster, record)
            if waiting is not None:
                return waiting
            last = record.attempts[-1]
        return self._from_attempts(record, never)

    def _start(
        self, pod: Obj, container: Obj, pod_ip: str, host_ip: str, cluster: lc.Cluster,
        record: Record,
    ) -> View | None:  # fmt: skip
        """Start a run; a View when the container cannot run (yet)."""
        count = record.base_restarts + len(record.attempts)
        last_state = terminated(record.attempts[-1]) if record.attempts else {}
        image = container.get("image", "")
        runtime = lc.load_runtimes(self.runtimes_dir).get(image)
        if runtime is None:
            message = (
                f"kubelet-sim: image {image!r} is not a local runtime registered in "
                f"{self.runtimes_dir} (launch_check.register_runtime)"
            )
            return View({"waiting": {"reason": "ErrImagePull", "message": message}},
                        last_state, count, False, False)  # fmt: skip
        try:
            prepared = lc.prepare(pod, container, runtime, pod_ip, host_ip, cluster, record.scratch)
        except lc.NotStartable as exc:
            return View({"waiting": {"reason": exc.reason, "message": exc.message}},
                        last_state, count, False, False)  # fmt: skip
        except lc.Unresolved as exc:
            # the launcher would be up, waiting for the name: running, not ready
            log.info("%s: launcher check waits for DNS: %s", pod["metadata"]["name"], exc)
            started = record.attempts[-1].finished_at if record.attempts else record.first_seen
            return View({"running": {"startedAt": started}}, last_state, count, False, True)
        log.info("%s/%s: running %s", pod["metadata"]["namespace"], pod["metadata"]["name"],
                 " ".join(prepared.argv))  # fmt: skip
        record.attempts.append(Attempt(iso(time.time()), self.pool.submit(self.runner, prepared)))
        return None

    def _collect(self, pod: Obj, record: Record) -> None:
        for attempt in record.attempts:
            if attempt.ended is None and attempt.future.done():
                try:
                    attempt.ended = attempt.future.result()
                except Exception as exc:  # a bug here must not look like the launcher's exit
                    attempt.ended = lc.Ended(128, f"kubelet-sim: the check crashed: {exc}", "")
                attempt.finished_at = iso(time.time())
                attempt.finished = self.clock()
            if attempt.ended is not None and not attempt.reported:
                attempt.reported = True
                code = attempt.ended.exit_code
                if code == 0:
                    self.events.append((pod, "Normal", "LaunchCheckPassed",
                                        "kubelet-sim ran the launcher's check "
                                        "(ascend-pd-runtime launch --check): exit 0"))  # fmt: skip
                else:
                    text = attempt.ended.message or attempt.ended.log_tail[-500:]
                    self.events.append((pod, "Warning", "LaunchCheckFailed",
                                        f"kubelet-sim ran the launcher's check: exit {code}: "
                                        f"{text}"))  # fmt: skip

    def _from_attempts(self, record: Record, never: bool) -> View:
        attempts = record.attempts
        last = attempts[-1]
        before = terminated(attempts[-2]) if len(attempts) > 1 else {}
        runs_before = record.base_restarts + len(attempts) - 1
        if last.ended is None or last.ended.exit_code == 0:
            return View({"running": {"startedAt": last.started_at}}, before, runs_before,
                        last.ended is not None, True)  # fmt: skip
        if never:
            return View(terminated(last), before, runs_before, False, False, final=True)
        if self.clock() - last.finished < TERMINATED_SHOWN:
            return View(terminated(last), before, runs_before, False, False)
        wait = backoff(len(attempts))
        message = f"back-off {wait:g}s restarting failed container (kubelet-sim)"
        return View({"waiting": {"reason": "CrashLoopBackOff", "message": message}},
                    terminated(last), runs_before + 1, False, False)  # fmt: skip
