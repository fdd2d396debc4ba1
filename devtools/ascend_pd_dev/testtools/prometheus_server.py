"""A real Prometheus (the caller's binary: the cached Debian one that
``controlplane.prometheus.ensure`` installs) as a local process, and the scrape jobs the
Prometheus Operator would make of the chart's monitors.

``PrometheusServer`` starts ``prometheus`` on a free loopback port with a given
configuration (and rule groups), waits until it answers ``/-/ready``, and asks its HTTP API.
``podmonitor_job`` and ``servicemonitor_job`` turn a rendered PodMonitor or ServiceMonitor
into the scrape job the Prometheus Operator generates for it: the same job name, the same
selection of pods and ports and the same target labels, then the monitor's own
relabelings, so a test's Prometheus labels series as a user's does.

Debian builds its ``prometheus`` without the Kubernetes service discovery, so
``PodDiscovery`` stands in for it: it lists the pods of some namespaces from the API server
every second and writes them, one target per container port with the
``__meta_kubernetes_pod_*`` labels Prometheus's pod discovery gives it, to a file that the
job reads through ``file_sd_configs`` (which Prometheus watches), so the PodMonitor's
relabelling runs unchanged on the labels Prometheus itself would discover. A
ServiceMonitor's job scrapes a fixed address: the dev cluster's Services get no endpoints
(its pod IPs are loopback addresses) and the operator runs as a local process, not in a pod.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_dev.testtools.local_run import free_port, stop_child_group

Json = dict[str, Any]


class PrometheusError(RuntimeError):
    """Prometheus did not start, or exited; the message holds the end of its log."""


class PrometheusServer:
    """``binary`` with ``config`` (and ``rule_groups`` as its one rule file) in ``workdir``."""

    def __init__(self, binary: Path, config: Json, workdir: Path,
                 rule_groups: list[Json] | None = None) -> None:  # fmt: skip
        self.binary, self.workdir = binary, workdir
        workdir.mkdir(parents=True, exist_ok=True)
        config = dict(config)
        if rule_groups is not None:
            rules = workdir / "rules.yaml"
            rules.write_text(yaml.safe_dump({"groups": rule_groups}, sort_keys=False))
            config["rule_files"] = [str(rules)]
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.log = workdir / "prometheus.log"
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> PrometheusServer:
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [str(self.binary), f"--config.file={self.config_path}",
                 f"--storage.tsdb.path={self.workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.process.poll() is not None:
                raise PrometheusError(f"prometheus exited:\n{self.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise PrometheusError(f"prometheus not ready in {timeout:.0f} s")
            time.sleep(0.2)
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base}/-/ready", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, ConnectionError):
            return False

    def api(self, path: str, **params: str) -> Json:
        """``GET /api/v1/<path>``: the JSON answer, errors (400, 422) included."""
        url = f"{self.base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return dict(json.load(resp))
        except urllib.error.HTTPError as exc:  # a bad query answers 400 with its error
            return dict(json.load(exc))

    def query(self, expr: str) -> Json:
        return self.api("query", query=expr)

    def targets(self) -> list[Json]:
        return list(self.api("targets", state="active")["data"]["activeTargets"])

    def stop(self) -> None:
        if self.process is not None:
            stop_child_group(self.process, 10.0)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def meta_label(name: str) -> str:
    """A Kubernetes label's name as a ``__meta_kubernetes_*`` suffix (Prometheus's form)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _relabelings(monitor_relabelings: list[Json]) -> list[Json]:
    """The monitor's relabelings in Prometheus's spelling (camelCase to snake_case)."""
    out = []
    for r in monitor_relabelings:
        out.append({re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), k): v
                    for k, v in r.items()})  # fmt: skip
    return out


def _selector(selector: Json, kind: str) -> list[Json]:
    """keep-relabelings for a label selector over ``__meta_kubernetes_<kind>_label*``."""
    keep = []
    for key, value in (selector.get("matchLabels") or {}).items():
        keep.append({
            "source_labels": [f"__meta_kubernetes_{kind}_label_{meta_label(key)}",
                              f"__meta_kubernetes_{kind}_labelpresent_{meta_label(key)}"],
            "regex": f"({re.escape(value)});true", "action": "keep",
        })  # fmt: skip
    for expr in selector.get("matchExpressions") or []:
        if expr["operator"] != "In":
            raise ValueError(f"selector operator {expr['operator']} is not translated")
        keep.append({
            "source_labels": [f"__meta_kubernetes_{kind}_label_{meta_label(expr['key'])}",
                              f"__meta_kubernetes_{kind}_labelpresent_{meta_label(expr['key'])}"],
            "regex": f"({'|'.join(map(re.escape, expr['values']))});true", "action": "keep",
        })  # fmt: skip
    return keep


def podmonitor_job(podmonitor: Json, discovered: Path, interval: str = "1s") -> Json:
    """The scrape job of a PodMonitor's first endpoint over the pods ``PodDiscovery`` writes
    to ``discovered`` (the monitor's ``namespaceSelector`` is the discovery's to honour), at
    ``interval`` instead of the monitor's."""
    meta, spec = podmonitor["metadata"], podmonitor["spec"]
    (endpoint,) = spec["podMetricsEndpoints"]
    return {
        "job_name": f"{meta['namespace']}/{meta['name']}",
        "scrape_interval": interval,
        "metrics_path": endpoint.get("path", "/metrics"),
        "file_sd_configs": [{"files": [str(discovered)]}],
        "relabel_configs": [
            *_selector(spec["selector"], "pod"),
            {"source_labels": ["__meta_kubernetes_pod_container_port_name"],
             "regex": endpoint["port"], "action": "keep"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"],
             "target_label": "container"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"target_label": "job", "replacement": f"{meta['namespace']}/{meta['name']}"},
            {"target_label": "endpoint", "replacement": endpoint["port"]},
            *_relabelings(endpoint.get("relabelings") or []),
        ],
    }  # fmt: skip


def pod_targets(pods: list[Json]) -> list[Json]:
    """File-SD target groups for ``pods``: one per container port of each pod that has an
    IP, labelled as Prometheus's Kubernetes pod discovery labels it."""
    groups = []
    for pod in pods:
        meta, spec, st = pod["metadata"], pod["spec"], pod.get("status") or {}
        if not st.get("podIP"):
            continue
        ready = next((c["status"] for c in st.get("conditions") or []
                      if c["type"] == "Ready"), "unknown")  # fmt: skip
        common = {
            "__meta_kubernetes_namespace": meta["namespace"],
            "__meta_kubernetes_pod_name": meta["name"],
            "__meta_kubernetes_pod_ip": st["podIP"],
            "__meta_kubernetes_pod_host_ip": st.get("hostIP", ""),
            "__meta_kubernetes_pod_node_name": spec.get("nodeName", ""),
            "__meta_kubernetes_pod_ready": ready.lower(),
            "__meta_kubernetes_pod_phase": st.get("phase", ""),
            "__meta_kubernetes_pod_uid": meta.get("uid", ""),
        }
        for key, value in (meta.get("labels") or {}).items():
            common[f"__meta_kubernetes_pod_label_{meta_label(key)}"] = value
            common[f"__meta_kubernetes_pod_labelpresent_{meta_label(key)}"] = "true"
        for container in spec["containers"]:
            for port in container.get("ports") or []:
                groups.append({
                    "targets": [f"{st['podIP']}:{port['containerPort']}"],
                    "labels": {
                        **common,
                        "__meta_kubernetes_pod_container_name": container["name"],
                        "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                        "__meta_kubernetes_pod_container_port_number":
                            str(port["containerPort"]),
                        "__meta_kubernetes_pod_container_port_protocol":
                            port.get("protocol", "TCP"),
                    },
                })  # fmt: skip
    return groups


class PodDiscovery:
    """Every second, the pods of ``namespaces`` as file-SD targets in ``path`` (replaced
    whole, so Prometheus never reads half a file), until ``stop``."""

    def __init__(self, api_client: Any, namespaces: list[str], path: Path) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.namespaces, self.path = namespaces, path
        self._stop = threading.Event()
        self.refresh()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def refresh(self) -> None:
        pods = [self.core.api_client.sanitize_for_serialization(p)
                for ns in self.namespaces
                for p in self.core.list_namespaced_pod(ns).items]  # fmt: skip
        text = json.dumps(pod_targets(pods), sort_keys=True)
        if self.path.exists() and self.path.read_text() == text:
            return
        partial = self.path.with_suffix(".partial")
        partial.write_text(text)
        partial.replace(self.path)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            with contextlib.suppress(Exception):  # the next round tries again
                self.refresh()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def servicemonitor_job(
    servicemonitor: Json, service: Json, address: str, pod: str, interval: str = "1s"
) -> Json:
    """The scrape job of a ServiceMonitor's first endpoint for one pod of ``service`` at
    ``address``: the job is the Service's name, the target labels those the Prometheus
    Operator sets (namespace, service, pod, endpoint)."""
    (endpoint,) = servicemonitor["spec"]["endpoints"]
    meta = service["metadata"]
    return {
        "job_name": meta["name"],
        "scrape_interval": interval,
        "metrics_path": endpoint.get("path", "/metrics"),
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        "static_configs": [{
            "targets": [address],
            "labels": {"namespace": meta["namespace"], "service": meta["name"], "pod": pod,
                       "endpoint": endpoint["port"]},
        }],
    }  # fmt: skip


def dashboard_queries(dashboard: Json, variables: dict[str, str]) -> list[tuple[str, str]]:
    """(panel title, query) of every panel target, the dashboard's variables set."""
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = str(target["expr"])
            for name, value in variables.items():
                expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)
            if "$" in expr:
                raise ValueError(f"a variable not set: {expr}")
            found.append((str(panel["title"]), expr))
    return found


def panels_without_data(query: Callable[[str], Json], queries: list[tuple[str, str]]) -> list[str]:
    """For each (panel, query) that does not parse or returns no series with a finite
    value, what ``query`` (a Prometheus's ``/api/v1/query``) answered."""
    problems = []
    for title, expr in queries:
        answer = query(expr)
        if answer.get("status") != "success":
            problems.append(f"{title!r}: {expr}: {answer.get('errorType')}: {answer.get('error')}")
            continue
        values = [float(r["value"][1]) for r in answer["data"]["result"]]
        if not any(math.isfinite(v) for v in values):
            problems.append(f"{title!r}: {expr}: no series with a finite value ({values})")
    return problems
