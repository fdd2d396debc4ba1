"""kubelet-sim: simulated Ascend nodes for the dev cluster. It never runs a container.

The dev cluster has no container runtime and no NPUs, yet the operator's StatefulSets, readiness
and status aggregation deserve a real API server and real controllers. kubelet-sim stands in
for the kubelets of N Ascend nodes, and does only what those do to API objects (the dev cluster
runs the real kube-scheduler, which binds the pods):

- registers Node objects ``sim-ascend-<i>`` with ``huawei.com/Ascend910`` capacity (8 by
  default), labelled ``ascend-pd.dev/simulated=true``, the kubelet version the API
  server's with ``-sim`` (``v1.36.3-sim``);
- reports every pod bound to one of its nodes Running and Ready (after the readiness delay
  below) with a loopback pod IP (127.1.0.1 and up; a ``hostNetwork`` pod gets its node's
  127.0.1.x; no traffic is ever sent to any of them; the endpoints controller refuses loopback
  addresses, so a Service lists none of them), and removes pods being deleted (grace period 0).

A pod (or its template) chooses what the simulated containers do with the annotation
``kubelet-sim.ascend-pd.dev/outcome`` (read every cycle, so tests may change it on a live pod):

- ``ready`` (default): Running, every container running and ready;
- ``unready``: Running, containers running but not ready (a failing readiness probe);
- ``crash``: Running, containers waiting in ``CrashLoopBackOff``, not ready;
- ``succeed``: Succeeded, containers terminated with exit code 0;
- ``fail``: Failed, containers terminated with exit code 1.

A pod that would run to completion (a Job's, a helm test hook) also stays Running until its
annotation says ``succeed`` or ``fail``: kubelet-sim cannot know how a container would end, so
it never invents a success; a test runs the real work itself and then reports the outcome.

One real step, for pods that ask (``kubelet-sim.ascend-pd.dev/run-launch-check: "true"`` on
the pod or its namespace): a container whose command is ``ascend-pd-runtime launch`` gets the
launcher's pre-exec check run on this machine in a local runtime registered for its image
(``--local-runtimes``), and its exit is reported as a kubelet would (``launch_check``,
``check_runs``). Nothing else of it runs: exit 0 leaves the container "running". The check
includes the launcher's NPU preflight, so the container gets simulated NPUs (``npu``: device
files, hccn.conf, an ``hccn_tool``); ``kubelet-sim.ascend-pd.dev/npu-link-down`` on the pod
takes devices' links down.

Failures and time, so rollouts and group recovery can be watched (every annotation name is in
``knobs``; ``testing`` sets them; all times come from one injectable clock):

- readiness delay: containers run at once and turn ready ``--ready-after`` seconds (default 0)
  after their ``startedAt``, or as many as the pod's ``ready-after-seconds`` annotation says;
- crash: a test sets ``kubelet-sim.ascend-pd.dev/crash`` on a live pod to a JSON object
  ``{"id": ..., "exitCode": 137, "reason": "Error", "message": "HCCL timeout on rank 1",
  "container": ..., "restartAfterSeconds": ...}`` (all optional; ``id`` defaults to the whole
  value, ``container`` to the first). Once per ``id`` (kubelet-sim records it in
  ``crash-handled``), like a kubelet: ``lastState.terminated`` (reason, exitCode, message,
  startedAt, finishedAt), ``restartCount`` + 1, state ``waiting`` ``CrashLoopBackOff``, pod
  NotReady; then running again after ``restartAfterSeconds`` (default the kubelet's back-off:
  at once for the first restart, then 10 s doubling to 5 min, counted from ``restartCount``),
  and ready after the readiness delay. Under restart policy Never (or OnFailure and exit 0)
  the container stays terminated and, once every container has, the pod Failed (Succeeded);
- image pull: ``kubelet-sim.ascend-pd.dev/unpullable-images`` on a pod names images (comma-
  separated) the registry does not have: a container of one of them never starts, as a kubelet
  shows it: state ``waiting`` ``ErrImagePull`` (the registry's answer) for the kubelet's first
  back-off (``containers.PULL_BACKOFF_SECONDS`` from the pod's start), then ``ImagePullBackOff``
  (``Back-off pulling image "<image>"``); pod Pending, not ready (a kubelet goes on
  alternating the two at each retry; kubelet-sim keeps the second);
- pod failure: ``kubelet-sim.ascend-pd.dev/fail`` (``"true"`` or ``{"exitCode", "reason",
  "message", "podReason", "podMessage"}``) ends a running pod: phase Failed, every container
  terminated with that exit. Restart policy Never: nothing more, as a kubelet shows a pod whose
  containers failed. Always/OnFailure: a kubelet would restart the containers (that is a crash),
  and fails such a pod only by evicting it, so its reason is ``Evicted`` unless ``podReason``;
- node readiness: ``kubelet-sim.ascend-pd.dev/not-ready`` on a simulated Node, ``"true"`` (the
  kubelet reports Ready=False, reason ``KubeletNotReady``) or ``"unknown"`` (unreachable: every
  condition Unknown, "Kubelet stopped posting node status.", heartbeat stopped, and its kubelet
  does nothing: no crash applied, a deleted pod stays Terminating). Either way the node gets the
  ``node.kubernetes.io/not-ready`` or ``unreachable`` NoSchedule taint (the scheduler honours
  taints and tolerations) and its pods Ready=False, reason ``NodeNotReady`` (phase,
  containers and ContainersReady untouched). That is the node lifecycle controller's job, which
  the dev cluster's kube-controller-manager does not run (``controlplane.cluster.CONTROLLERS``),
  so kubelet-sim does it and nothing fights it; the controller's NoExecute taints and the
  evictions after 5 min are not simulated (delete the pod to move it). Removing the annotation
  makes the node and its pods Ready again. A Ready node's heartbeat (``lastHeartbeatTime``) is
  refreshed every ``NODE_STATUS_REPORT_SECONDS``.

A malformed request (annotation) fails the pod with reason ``InvalidSimulationRequest`` and a
message naming it. For tests: ``testing.crash_pod``, ``fail_pod`` and ``set_node_ready``
take a kubeconfig path, an ``ApiClient`` or a ``CoreV1Api``. Containers whose launcher check
kubelet-sim runs follow the check's own lifecycle (``check_runs``); crash requests and the
readiness delay apply to the others.

Succeeded and Failed are final, as with a real kubelet. ``kubectl logs``/``exec`` cannot work:
there is no container. Run it as ``python -m ascend_pd_dev.kubelet_sim --kubeconfig
PATH`` (``ascend-pd-dev cluster up`` does), or drive ``simulator.Simulator.step()`` from Python.

The modules, bottom-up (each imports only those above it in this list):

- ``objects``: API objects as dicts, timestamps, conditions, a LIST, 404/409 tolerated;
- ``knobs``: every annotation it reads or writes and what a request in one says;
- ``nodes``: node registration, readiness, heartbeat and taints;
- ``launch_check``, ``check_runs``: the launcher check and its containers' runs;
- ``npu``: a launch-checked container's simulated NPUs (device files, hccn.conf, hccn_tool);
- ``containers``, ``pod_status``: the status a kubelet would report (pure);
- ``events``, ``pods``: the kubelets' writes and Events;
- ``simulator``: one cycle over nodes and pods; ``process``: the process around it;
- ``client``, ``testing``: the helpers tests steer it with (``crash_pod``, ``fail_pod``,
  ``set_node_ready``).
"""
