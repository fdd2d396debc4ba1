"""Every annotation kubelet-sim reads or writes, in one place.

They share one prefix, so ``kubectl get pod -o yaml`` shows at a glance what a test asked of the
simulation and what the simulation recorded. ``kubelet_sim``'s docstring says what each does.
"""

from __future__ import annotations

PREFIX = "kubelet-sim.ascend-pd.dev/"

#: pod: what the simulated containers do (ready, unready, crash, succeed, fail)
OUTCOME = PREFIX + "outcome"
#: pod or namespace: run the launcher's pre-exec check locally (``launch_check``)
RUN_LAUNCH_CHECK = PREFIX + "run-launch-check"
#: pod: seconds from a container's start to its readiness (overrides ``--ready-after``)
READY_AFTER = PREFIX + "ready-after-seconds"
#: pod, set by a test: one container crash, a JSON object with an ``id``
CRASH = PREFIX + "crash"
#: pod, written by kubelet-sim: the ``id`` of the last crash request it applied
CRASH_HANDLED = PREFIX + "crash-handled"
#: pod, set by a test: the pod fails for good ("true" or a JSON object)
FAIL = PREFIX + "fail"
#: Node, set by a test: "true" (the kubelet reports NotReady) or "unknown" (it is unreachable)
NOT_READY = PREFIX + "not-ready"
#: Node, written by kubelet-sim: the pid of the kubelet-sim process serving it
OWNER = PREFIX + "pid"
