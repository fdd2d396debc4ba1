"""The Prometheus e2e tier: a real Prometheus 2.42 scrapes the running system, and every
dashboard panel's query and every alert expression of the chart is asked through its HTTP
API (marker ``prometheus``; the tier ``prometheus-e2e`` of ``make test``, on a dev cluster of
its own).

The system: the operator (``ascend-pd run``, as the other e2e tests run it, its API traffic
through the fault proxy) reconciles ``examples/deepseek-v2-lite.yaml`` on the dev cluster
until it is Ready; SGLang leaders stand in on the nodes' addresses at the runtime pods'
``http`` port (runtime pods use the host network, so kubelet-sim gives each pod its node's
address; ``exporters.HostLeaders`` serves the metrics the real SGLang releases define,
``exporters.SGLANG_METRICS``, which the SGLang tier checks against every supported wheel).
Prometheus finds the leaders as the chart's PodMonitor says, with the relabelling the
Prometheus Operator generates from the rendered PodMonitor
(``prometheus_server.podmonitor_job``), over the pods of the dev cluster's API server
labelled as Prometheus's Kubernetes pod discovery labels them (Debian's build has no
Kubernetes discovery: ``prometheus_server.PodDiscovery`` writes them to a file-SD file), and
scrapes the operator as the chart's ServiceMonitor says (job, ``honor_labels``); both every
second. The alert rules are the rendered PrometheusRule's, loaded into it.

What must hold, once every target is up and scraped twice (waited on, never slept):

- every panel query (the dashboard's variables set to the test's namespace and
  PDDeployment) parses and returns at least one series with a finite value; a panel with
  nothing to show names itself and is a bug in the panel or in the fixture;
- the dashboard's variable queries find the namespace and the PDDeployment;
- every alert expression parses, and its *non-filtering form* returns at least one series:
  each comparison made a ``bool`` comparison (``x > 0.9`` answers 0 or 1 instead of
  dropping the series), ``unless`` evaluated as ``and`` (the suppressing side must match
  the alerting side on its ``on (...)`` labels, or the ``unless`` never suppresses), and
  ``absent(x)`` as ``x``. So every series an alert reads exists with the labels its joins
  expect, without waiting for a threshold or a ``for`` on healthy data. Two alerts select
  a state by a label, not a threshold, and the test drives the system into it for real:
  ``AscendPDInstanceRestartLoop`` reads ``ascend_pd_condition{reason="RestartLoop"}`` (a
  decode pod crashes, and the operator runs with ``--restart-loop-limit 1``), and
  ``AscendPDOperatorAPIErrors`` reads requests that answered 5xx (the fault proxy answers
  500 to some requests for a while).

``ASCEND_PD_PROMETHEUS_DUMP=<file>`` makes the panel test wait until Prometheus holds two
minutes of scrapes and write every panel query's answer over them to that JSON file, which
``ascend-pd-dev dashboard-picture`` draws as docs/dashboard-layout.svg.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pdd_e2e import REPO, Operator, apply, condition, example, get, status

from ascend_pd_dev.controlplane import cluster as dev_cluster
from ascend_pd_dev.controlplane import prometheus
from ascend_pd_dev.controlplane.certs import Pki
from ascend_pd_dev.kubelet_sim.testing import crash_pod
from ascend_pd_dev.testtools import volumes
from ascend_pd_dev.testtools.faultproxy import CONFIG_PATH, FaultPlan, FaultProxy
from ascend_pd_dev.testtools.prometheus_server import (
    PodDiscovery,
    PrometheusServer,
    dashboard_queries,
    panels_without_data,
    podmonitor_job,
    servicemonitor_job,
)

sys.path.insert(0, str(REPO / "tests" / "prometheus"))

from exporters import HostLeaders
from promql_env import render

pytestmark = [pytest.mark.prometheus, pytest.mark.simulated, pytest.mark.local]

DASHBOARD = REPO / "charts" / "ascend-pd-operator" / "files" / "dashboards" / "ascend-pd.json"
NAME = "dsv2-lite"
DUMP_ENV = "ASCEND_PD_PROMETHEUS_DUMP"
#: the seconds of data the dump holds
DUMP_SECONDS = 120
#: the fault proxy's share of requests answered 500 while the test wants API errors
ERROR_RATE = 0.2


@dataclass
class Scraped:
    prom: PrometheusServer
    namespace: str
    rule: dict[str, Any]


def non_filtering(expr: str) -> str:
    """``expr`` with every comparison a ``bool`` one, ``unless`` as ``and`` and ``absent(x)``
    as ``x``; selectors (``{...}``) and strings are left alone."""
    parts = re.split(r'(\{[^}]*\}|"(?:[^"\\]|\\.)*")', expr)
    for i in range(0, len(parts), 2):  # the even parts are outside selectors and strings
        part = re.sub(
            r"(==|!=|>=|<=|>|<)(\s*bool\b)?", lambda m: m[0] if m[2] else f"{m[1]} bool", parts[i]
        )
        part = re.sub(r"\bunless\b", "and", part)
        parts[i] = re.sub(r"\babsent\(", "(", part)
    return "".join(parts)


def test_non_filtering_form() -> None:
    assert non_filtering('absent(up{job="a"} == 1)') == '(up{job="a"} == bool 1)'
    assert non_filtering('max(x{a!=""}) > 0.9') == 'max(x{a!=""}) > bool 0.9'
    assert non_filtering("a >= bool 2 unless on (n) b <= 1") == "a >= bool 2 and on (n) b <= bool 1"
    assert non_filtering('rate(x{code=~"5..|429"}[5m]) / y') == 'rate(x{code=~"5..|429"}[5m]) / y'


def _rendered(namespace: str) -> dict[str, dict[str, Any]]:
    """The chart's monitors, metrics Service and rule, for a release watching ``namespace``."""
    manifests = render((
        "monitoring.mode=always", "metrics.enabled=true", "metrics.prometheusRule.enabled=true",
        f"watch.namespaces={{{namespace}}}",
    ))  # fmt: skip
    wanted = {"PodMonitor", "ServiceMonitor", "PrometheusRule"}
    found = {d["kind"]: d for d in manifests if d["kind"] in wanted}
    (found["Service"],) = [d for d in manifests if d["kind"] == "Service"
                           and d["metadata"]["name"].endswith("-metrics")]  # fmt: skip
    return found


def _node_addresses(kubectl: Any) -> list[str]:
    nodes = json.loads(kubectl("get", "nodes", "-o", "json").stdout)["items"]
    return sorted(
        a["address"]
        for n in nodes
        for a in n["status"].get("addresses", [])
        if a["type"] == "InternalIP"
    )


def _http_port(kubectl: Any, namespace: str) -> tuple[int, list[dict[str, Any]]]:
    """The runtime pods' ``http`` container port (one for all) and the leader pods."""
    pods = (get(kubectl, namespace, "pods", "-l", "ascendpd.io/role in (prefill,decode)")
            or {}).get("items", [])  # fmt: skip
    ports = {p["containerPort"] for pod in pods for c in pod["spec"]["containers"]
             for p in c.get("ports", []) if p.get("name") == "http"}  # fmt: skip
    (port,) = ports
    assert all(pod["spec"].get("hostNetwork") for pod in pods)
    return int(port), [p for p in pods if p["metadata"]["name"].endswith("-0")]


def _set_errors(proxy: FaultProxy, rate: float) -> None:
    request = urllib.request.Request(
        proxy.url + CONFIG_PATH, data=json.dumps({"error_rate": rate}).encode(), method="PUT"
    )
    with urllib.request.urlopen(request, timeout=10):
        pass


def _up_targets(prom: PrometheusServer) -> dict[str, int]:
    """Targets per job that are up and scraped at least twice (their rates have data)."""
    up: dict[str, int] = {}
    for target in prom.targets():
        job = target["labels"]["job"]
        if target["health"] == "up":
            scrapes = prom.query(f'count_over_time(up{{job="{job}", '
                                 f'instance="{target["labels"]["instance"]}"}}[1m])')  # fmt: skip
            result = scrapes["data"]["result"] if scrapes["status"] == "success" else []
            if result and float(result[0]["value"][1]) >= 2:
                up[job] = up.get(job, 0) + 1
    return up


@pytest.fixture(scope="module")
def scraped(
    cluster: Any, crd: None, kubectl: Any, tmp_path_factory: Any, wait_until: Any
) -> Iterator[Scraped]:
    namespace = f"e2e-prometheus-{os.getpid()}"
    kubectl("create", "namespace", namespace)
    # the examples' models volume and claim, as the namespace fixture gives its namespaces
    kubectl("apply", "-f", "-",
            input=yaml.safe_dump_all(volumes.for_namespace(REPO, namespace)))  # fmt: skip
    work = tmp_path_factory.mktemp("prometheus-e2e")
    rendered = _rendered(namespace)
    state = dev_cluster.load_state(cluster.layout)
    assert state is not None
    proxy = FaultProxy(
        state.server, FaultPlan(seed=24), ca_file=str(Pki(cluster.layout.pki).ca_crt)
    )
    proxy.start()
    doc = yaml.safe_load(cluster.kubeconfig.read_text())
    for entry in doc["clusters"]:
        entry["cluster"] = {"server": proxy.url}
    proxied = work / "proxy.kubeconfig"
    proxied.write_text(yaml.safe_dump(doc))
    stops: list[Any] = [proxy.stop]
    try:
        operator = Operator(proxied, namespace, work / "operator.log", "--restart-loop-limit", "1")
        stops.insert(0, operator.stop)
        apply(kubectl, example("deepseek-v2-lite.yaml", namespace))
        wait_until(lambda: condition(status(kubectl, namespace, NAME), "Ready").get("status")
                   == "True", f"{NAME} Ready", timeout=300)  # fmt: skip
        port, leaders = _http_port(kubectl, namespace)
        hosts = _node_addresses(kubectl)
        assert {p["status"]["podIP"] for p in leaders} <= set(hosts), "a leader off its node"
        fixtures = HostLeaders(hosts, port)
        stops.insert(0, fixtures.stop)
        operator_job = servicemonitor_job(
            rendered["ServiceMonitor"],
            rendered["Service"],
            f"127.0.0.1:{operator.metrics_port}",
            "operator-0",
        )
        discovery = PodDiscovery(cluster.api_client, [namespace], work / "pods.json")
        stops.insert(0, discovery.stop)
        runtime_job = podmonitor_job(rendered["PodMonitor"], discovery.path)
        prom = PrometheusServer(
            prometheus.ensure() / "prometheus",
            {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
             "scrape_configs": [operator_job, runtime_job]},
            work, rendered["PrometheusRule"]["spec"]["groups"],
        ).start()  # fmt: skip
        stops.insert(0, prom.stop)
        # a restart loop: decode instance 1's pod crashes once, which the operator (limit
        # 1) restarts and calls a loop
        crash_pod(cluster.api_client, namespace, f"{NAME}-decode-1-0", 137, "Error",
                  "HCCL timeout (the Prometheus e2e tier)")  # fmt: skip
        wait_until(lambda: condition(status(kubectl, namespace, NAME), "InstancesHealthy")
                   .get("reason") == "RestartLoop", "InstancesHealthy RestartLoop")  # fmt: skip
        # API errors: 500s until Prometheus has scraped one
        _set_errors(proxy, ERROR_RATE)
        wait_until(lambda: prom.query(
            'ascend_pd_operator_api_requests_total{code="500"}')["data"]["result"],
            "a 500 in the operator's scraped requests", timeout=120)  # fmt: skip
        _set_errors(proxy, 0.0)
        jobs = {operator_job["job_name"]: 1, runtime_job["job_name"]: len(leaders)}
        wait_until(lambda: _up_targets(prom) == jobs, f"targets up and scraped twice: {jobs}",
                   timeout=120)  # fmt: skip
        yield Scraped(prom, namespace, rendered["PrometheusRule"])
    finally:
        for stop in stops:
            stop()
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        kubectl("delete", "pv", volumes.volume_name(namespace), "--wait=false", check=False)


def _variables(namespace: str) -> dict[str, str]:
    return {"namespace": namespace, "pddeployment": NAME}


def _empty_panels(scraped: Scraped) -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = dashboard_queries(dashboard, _variables(scraped.namespace))
    return panels_without_data(scraped.prom.query, queries)


def test_every_panel_query_returns_data(scraped: Scraped, wait_until: Any) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert len(dashboard_queries(dashboard, _variables(scraped.namespace))) >= 40
    # a histogram's quantile is finite once a rate window holds an observation
    problems: list[str] = []

    def judged() -> bool:
        problems[:] = _empty_panels(scraped)
        return not problems

    try:
        wait_until(judged, "every panel with data", timeout=60)
    except pytest.fail.Exception:
        pytest.fail("panels without data (a bug in the panel or in the fixture):\n"
                    + "\n".join(problems))  # fmt: skip
    if dump := os.environ.get(DUMP_ENV):
        # the picture shows two minutes: wait until Prometheus holds them (1 scrape a second)
        held = "max(count_over_time(up[10m]))"
        wait_until(
            lambda: (
                float(scraped.prom.query(held)["data"]["result"][0]["value"][1]) >= DUMP_SECONDS
            ),
            f"{DUMP_SECONDS} s of scrapes",
            timeout=DUMP_SECONDS + 60,
        )
        _dump(scraped, Path(dump))


def test_every_variable_query_finds_the_deployment(scraped: Scraped) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = _variables(scraped.namespace)
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"]["query"])
        assert match, variable["query"]["query"]
        selector = match.group(1).replace("$namespace", scraped.namespace)
        answer = scraped.prom.api(f"label/{match.group(2)}/values", **{"match[]": selector})
        assert variables[variable["name"]] in answer["data"], (variable["name"], answer)


def _alerts(rule: dict[str, Any]) -> dict[str, str]:
    return {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}


def test_every_alert_expression_reads_scraped_series(scraped: Scraped) -> None:
    problems = []
    for name, expr in _alerts(scraped.rule).items():
        answer = scraped.prom.query(expr)
        if answer["status"] != "success":
            problems.append(f"{name}: does not evaluate: {answer.get('error')}")
            continue
        form = non_filtering(expr)
        answer = scraped.prom.query(form)
        if answer["status"] != "success" or not answer["data"]["result"]:
            problems.append(f"{name}: no series: {form}: {answer.get('error', '')}")
    assert not problems, "\n".join(problems)


def test_the_driven_states_fire_their_alert_expressions(scraped: Scraped) -> None:
    """The restart loop the test made is seen by the alert's own expression."""
    expr = _alerts(scraped.rule)["AscendPDInstanceRestartLoop"]
    result = scraped.prom.query(expr)["data"]["result"]
    assert [r["metric"] for r in result] == [
        {"namespace": scraped.namespace, "pddeployment": NAME}
    ], result


def _dump(scraped: Scraped, path: Path) -> None:
    """Every panel query's answer over the last minutes, for the dashboard picture."""
    dashboard = json.loads(DASHBOARD.read_text())
    end = time.time()
    panels = []
    for panel in dashboard["panels"]:
        series = []
        queries = dashboard_queries({"panels": [panel]}, _variables(scraped.namespace))
        for target, (_, query) in zip(panel.get("targets", []), queries, strict=True):
            answer = scraped.prom.api("query_range", query=query, start=str(end - DUMP_SECONDS),
                                      end=str(end), step="2")  # fmt: skip
            for r in answer["data"]["result"]:
                series.append(
                    {
                        "legend": target.get("legendFormat", ""),
                        "metric": r["metric"],
                        "values": [[float(t), float(v)] for t, v in r["values"]],
                    }
                )
        panels.append({"title": panel["title"], "type": panel["type"],
                       "gridPos": panel["gridPos"], "series": series})  # fmt: skip
    path.write_text(json.dumps({"namespace": scraped.namespace, "pddeployment": NAME,
                                "panels": panels}, indent=1))  # fmt: skip
