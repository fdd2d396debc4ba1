"""The targets the PromQL tier's Prometheus scrapes, in a process of their own.

- ``/operator/metrics``: the operator's own registry (``ascend_pd_operator.kubeio.metrics``), fed
  through its real hooks, its work queue and its per-PDDeployment collector with the
  StatefulSets, pods and status of one PDDeployment ``llm/dsv3`` (2 prefill and 2 decode
  instances, one decode instance not ready and restarted once).
- ``/sglang/<role>/<index>/metrics``: one SGLang leader each, serving the ``sglang:``
  metrics the dashboard and the alerts read, by the name and type the real SGLang gives
  them (``SGLANG_METRICS``; the SGLang tier checks that table against every supported
  release's wheel), through prometheus_client as SGLang does.

Every 0.2 s the operator reconciles, requests and queues, and every SGLang serves requests,
so rates, quantiles and derivatives have data after a few scrapes. Run:
``python exporters.py PORT``; it prints ``ready`` once serving and stops on SIGTERM or
when its parent's stdin closes.

``HostLeaders`` serves the same SGLang leaders in this process on the addresses of the
dev cluster's nodes, for the e2e tier where Prometheus scrapes the running operator
(``tests/e2e/test_prometheus_scrape.py``).
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

#: SGLang metric name -> its type, as the real SGLang defines them
SGLANG_METRICS: dict[str, str] = {
    "sglang:time_to_first_token_seconds": "histogram",
    "sglang:inter_token_latency_seconds": "histogram",
    "sglang:num_running_reqs": "gauge",
    "sglang:num_queue_reqs": "gauge",
    "sglang:gen_throughput": "gauge",
    "sglang:prompt_tokens_total": "counter",
    "sglang:generation_tokens_total": "counter",
    "sglang:token_usage": "gauge",
    "sglang:num_prefill_bootstrap_queue_reqs": "gauge",
    "sglang:num_prefill_inflight_queue_reqs": "gauge",
    "sglang:num_decode_prealloc_queue_reqs": "gauge",
    "sglang:num_decode_transfer_queue_reqs": "gauge",
    "sglang:kv_transfer_speed_gb_s": "histogram",
    "sglang:kv_transfer_latency_ms": "histogram",
    "sglang:kv_transfer_bootstrap_ms": "histogram",
    "sglang:num_transfer_failed_reqs_total": "counter",
    "sglang:num_bootstrap_failed_reqs_total": "counter",
}
#: the SGLang leaders served: (role, instance index)
LEADERS = (("prefill", 0), ("prefill", 1), ("decode", 0), ("decode", 1))
NAMESPACE, DEPLOYMENT = "llm", "dsv3"
#: SGLang's own labels on its metrics (the Prometheus target adds the pod's)
SGLANG_LABELS = {
    "model_name": "deepseek-v3",
    "engine_type": "unified",
    "tp_rank": "0",
    "pp_rank": "0",
}


class SGLangLeader:
    """One leader's registry; ``step`` serves a few requests' worth of metrics."""

    def __init__(self, role: str, index: int) -> None:
        self.role, self.index = role, index
        self.registry = CollectorRegistry()
        labels = list(SGLANG_LABELS)
        self.metrics: dict[str, Any] = {}
        for name, kind in SGLANG_METRICS.items():
            doc = f"{name} (fixture)"
            if kind == "gauge":
                self.metrics[name] = Gauge(name, doc, labels, registry=self.registry)
            elif kind == "counter":
                self.metrics[name] = Counter(name, doc, labels, registry=self.registry)
            else:
                self.metrics[name] = Histogram(name, doc, labels, registry=self.registry)
        self.rng = random.Random(f"{role}-{index}")

    def step(self) -> None:
        rng = self.rng
        for name, kind in SGLANG_METRICS.items():
            metric = self.metrics[name].labels(**SGLANG_LABELS)
            if kind == "gauge":
                metric.set(
                    rng.uniform(0.1, 0.8) if name == "sglang:token_usage" else rng.randint(0, 12)
                )
            elif kind == "counter":
                metric.inc(rng.randint(1, 50) if "tokens" in name else rng.randint(0, 1))
            else:
                scale = 10.0 if name.endswith("_ms") else 0.5
                metric.observe(rng.uniform(0.01, 1.0) * scale)


def feed_operator() -> tuple[Any, Any]:
    """The operator's registry with one PDDeployment's children and status; returns the
    registry and a step function that reconciles once more."""
    from ascend_pd_operator.api import vocabulary as naming
    from ascend_pd_operator.kubeio import metrics
    from ascend_pd_operator.kubeio.workqueue import RateLimitedQueue

    col = metrics.DEPLOYMENTS
    col.deployment_spec(NAMESPACE, DEPLOYMENT, {"runtime": {"sglangVersion": "0.5.23"}})
    col.deployment_status(
        NAMESPACE,
        DEPLOYMENT,
        {
            "roles": {
                "prefill": {"replicas": 2, "effectiveReplicas": 2, "readyReplicas": 2},
                "decode": {"replicas": 2, "effectiveReplicas": 2, "readyReplicas": 1},
            },
            "conditions": [{"type": "KVLayoutCompatible", "status": "True"}],
            "kvLayout": {"fingerprint": "3f2a9c", "totalKvLayers": 61, "kvBufGroups": 2,
                         "prefillStages": [{}, {}]},
        },
    )  # fmt: skip
    for role, index in LEADERS:
        sts = f"{DEPLOYMENT}-{role}-{index}"
        labels = {naming.LABEL_DEPLOYMENT: DEPLOYMENT, naming.LABEL_ROLE: role,
                  naming.LABEL_INSTANCE: str(index)}  # fmt: skip
        ready = not (role == "decode" and index == 1)
        col.child_seen(
            "StatefulSet",
            {
                "metadata": {"namespace": NAMESPACE, "name": sts, "labels": labels,
                             "generation": 2},
                "spec": {"replicas": 2},
                "status": {"observedGeneration": 2, "readyReplicas": 2 if ready else 1,
                           "updatedReplicas": 2, "currentRevision": "r2",
                           "updateRevision": "r2"},
            },
        )  # fmt: skip
        for pod in range(2):
            restarts = 1 if not ready and pod == 1 else 0
            col.child_seen(
                "Pod",
                {
                    "metadata": {"namespace": NAMESPACE, "name": f"{sts}-{pod}", "labels": labels},
                    "status": {"containerStatuses": [{"restartCount": restarts}]},
                },
            )
    queue: RateLimitedQueue[str] = RateLimitedQueue()
    rng = random.Random("operator")

    def step() -> None:
        key = f"{NAMESPACE}/{DEPLOYMENT}"
        queue.add(key)
        queue.add_after(f"{NAMESPACE}/other", 30.0)
        taken = queue.get(timeout=0.1)
        started = time.monotonic()
        for kind in ("StatefulSet", "Service", "ConfigMap"):
            metrics.observe_request("get", kind, 200)
            metrics.observe_request("apply", kind, 200)
            metrics.observe_write("apply", kind)
        metrics.observe_request("list", "Pod", rng.choice((200, 200, 200, 500)))
        failed = rng.random() < 0.2
        metrics.observe_reconcile("error" if failed else "ok", time.monotonic() - started + 0.01)
        if taken is not None:
            queue.done(taken)
            if failed:
                queue.add_rate_limited(taken)
                metrics.observe_write("delete", "Pod")
            else:
                queue.forget(taken)

    return metrics.REGISTRY, step


def serve(host: str, port: int, registry_of: Callable[[str], Any], lock: threading.Lock
          ) -> ThreadingHTTPServer:  # fmt: skip
    """Serve ``registry_of(path)``'s exposition (404 when it is None) at ``host:port`` from a
    daemon thread, holding ``lock`` while it is written."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                registry = registry_of(self.path)
                body = generate_latest(registry) if registry is not None else b""
            if registry is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class HostLeaders:
    """SGLang leaders on the host network, as the runtime pods run them: one leader's
    ``/metrics`` on each of ``hosts`` at ``port`` (a node runs one runtime pod at a time),
    serving a few requests' worth of metrics every 0.2 s until ``stop``."""

    def __init__(self, hosts: list[str], port: int) -> None:
        self.lock = threading.Lock()
        self.leaders = [SGLangLeader("host", i) for i in range(len(hosts))]
        self.servers = [
            serve(host, port, lambda path, leader=leader: leader.registry
                  if path == "/metrics" else None, self.lock)
            for host, leader in zip(hosts, self.leaders, strict=True)
        ]  # fmt: skip
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            with self.lock:
                for leader in self.leaders:
                    leader.step()

    def stop(self) -> None:
        self._stop.set()
        for server in self.servers:
            server.shutdown()
            server.server_close()
        self._thread.join(timeout=5)


def main(port: int) -> int:
    registry, operator_step = feed_operator()
    leaders = {f"/sglang/{r}/{i}/metrics": SGLangLeader(r, i) for r, i in LEADERS}
    lock = threading.Lock()

    def registry_of(path: str) -> Any:
        if path == "/operator/metrics":
            return registry
        leader = leaders.get(path)
        return leader.registry if leader is not None else None

    server = serve("127.0.0.1", port, registry_of, lock)
    stop = threading.Event()
    # the parent holds our stdin: when it goes (even killed), so do we
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    print("ready", flush=True)
    while not stop.wait(0.2):
        with lock:
            operator_step()
            for leader in leaders.values():
                leader.step()
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
