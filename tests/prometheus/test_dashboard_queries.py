"""Every query of the chart's Grafana dashboard, and every alert rule, evaluated by a real
Prometheus 2.42 that scrapes the operator's own metrics registry and four SGLang leaders
(``exporters.py``, a process of its own) every second, labelled as the chart's
ServiceMonitor (``honor_labels``) and PodMonitor (``pddeployment``, ``role``,
``pd_instance``) label them.

Each panel query, with the dashboard's variables set to the fixture's PDDeployment, must
parse and return at least one series with a finite value: a panel with nothing to show here
is a bug in the panel or in the fixture, and the failure says which panel. The dashboard's
variable queries must find the fixture's namespace and PDDeployment. The rendered alert
rules are loaded into the same Prometheus: every rule must evaluate without error on these
series (a join that matches many-to-many fails only at evaluation, never in
``promtool check rules``), and exactly the alerts the fixture's state calls for are active.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from promql_env import CHART

from ascend_pd_dev.testtools.prometheus_server import panels_without_data

HERE = Path(__file__).resolve().parent
DASHBOARD = CHART / "files" / "dashboards" / "ascend-pd.json"
#: the dashboard's variables as the fixture's PDDeployment sets them
VARIABLES = {"namespace": "llm", "pddeployment": "dsv3"}
#: (alert, role or None) active on the fixture: decode instance 1 is not ready, and a
#: fifth of the reconciles end in error
EXPECTED_ACTIVE = {("AscendPDDeploymentNotReady", "decode"), ("AscendPDReconcileErrors", None)}
OPERATOR_JOB = "apd-ascend-pd-operator-metrics"  # the chart's metrics Service, for release apd
DEADLINE = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape_config(exporter_port: int, rules: Path) -> dict[str, Any]:
    from exporters import LEADERS, NAMESPACE

    target = f"127.0.0.1:{exporter_port}"
    leaders = [
        {
            "targets": [target],
            "labels": {
                "__metrics_path__": f"/sglang/{role}/{index}/metrics",
                "namespace": NAMESPACE,
                "pod": f"dsv3-{role}-{index}-0",
                "pddeployment": "dsv3",
                "role": role,
                "pd_instance": str(index),
            },
        }
        for role, index in LEADERS
    ]
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": OPERATOR_JOB,
                "honor_labels": True,
                "metrics_path": "/operator/metrics",
                "static_configs": [
                    {
                        "targets": [target],
                        "labels": {"namespace": "ascend-pd-system", "pod": "apd-operator-0"},
                    }
                ],
            },
            {
                "job_name": "ascend-pd-system/apd-ascend-pd-operator-runtime",
                "static_configs": leaders,
            },
        ],
    }


def api(base: str, path: str, **params: str) -> dict[str, Any]:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return dict(json.load(resp))
    except urllib.error.HTTPError as exc:  # 400 and 422 carry the error as JSON
        return dict(json.load(exc))


@pytest.fixture(scope="module")
def prom(prometheus_bin: Path, rule: dict[str, Any], tmp_path_factory: Any) -> Iterator[str]:
    work = tmp_path_factory.mktemp("prometheus")
    rules = work / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    exporter_port, prom_port = free_port(), free_port()
    exporter = subprocess.Popen(
        [sys.executable, str(HERE / "exporters.py"), str(exporter_port)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    server = None
    try:
        assert exporter.stdout is not None and exporter.stdout.readline().strip() == "ready"
        config = work / "prometheus.yml"
        config.write_text(yaml.safe_dump(scrape_config(exporter_port, rules)))
        log = (work / "prometheus.log").open("w")
        server = subprocess.Popen(
            [str(prometheus_bin), f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        base = f"http://127.0.0.1:{prom_port}"
        started = time.monotonic()
        while True:
            assert server.poll() is None, (work / "prometheus.log").read_text()
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.monotonic() - started < DEADLINE, "Prometheus never became ready"
            time.sleep(0.2)
        yield base
    finally:
        for proc in (server, exporter):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def substitute(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)
    assert "$" not in expr, f"a variable the test does not set: {expr}"
    return expr


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, query) of every panel target, the variables substituted."""
    return [
        (panel["title"], substitute(target["expr"]))
        for panel in dashboard()["panels"]
        for target in panel.get("targets", [])
    ]


def empty_panels(base: str) -> list[str]:
    return panels_without_data(lambda q: api(base, "/api/v1/query", query=q), panel_queries())


def test_every_panel_query_returns_data(prom: str) -> None:
    assert len(panel_queries()) >= 40
    started = time.monotonic()
    # the rates need two scrapes with traffic between them: wait for them, then judge
    while (problems := empty_panels(prom)) and time.monotonic() - started < DEADLINE:
        time.sleep(1)
    assert not problems, "panels without data (a bug in the panel or in exporters.py):\n" + (
        "\n".join(problems)
    )


def test_every_variable_query_finds_the_fixture(prom: str) -> None:
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"]["query"])
        assert match, variable["query"]["query"]
        selector, label = substitute(match.group(1)), match.group(2)
        started = time.monotonic()
        while True:
            answer = api(prom, f"/api/v1/label/{label}/values", **{"match[]": selector})
            assert answer["status"] == "success", answer
            if (
                VARIABLES[variable["name"]] in answer["data"]
                or time.monotonic() - started > DEADLINE
            ):
                break
            time.sleep(1)
        assert VARIABLES[variable["name"]] in answer["data"], (variable["name"], answer["data"])


def active_alerts(base: str) -> tuple[set[tuple[str, str | None]], list[str]]:
    """The alerts pending or firing, and the rules that failed to evaluate."""
    groups = api(base, "/api/v1/rules")["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    errors = [f"{r['name']}: {r.get('lastError')}" for r in rules if r["health"] == "err"]
    active = {
        (r["name"], a["labels"].get("role"))
        for r in rules
        for a in r.get("alerts", [])
        if a["state"] in ("pending", "firing")
    }
    unevaluated = [r["name"] for r in rules if r["health"] == "unknown"]
    return active, errors + [f"{n}: not evaluated yet" for n in unevaluated]


def test_alert_rules_evaluate_on_the_real_series(prom: str, rule: dict[str, Any]) -> None:
    names = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    started = time.monotonic()
    while True:
        active, problems = active_alerts(prom)
        done = active == EXPECTED_ACTIVE and not problems
        if done or time.monotonic() - started > DEADLINE:
            break
        time.sleep(1)
    assert not problems, problems
    assert active == EXPECTED_ACTIVE
    # and every metric an alert reads is one the fixture serves
    for alert in rule["spec"]["groups"]:
        for r in alert["rules"]:
            for metric in set(
                re.findall(r"\b(up|process_\w+|ascend_pd_\w+|sglang:[\w:]+)\{", r["expr"])
            ):
                answer = api(prom, "/api/v1/query", query=f"count({metric})")
                assert answer["data"]["result"], f"{r['alert']}: no {metric} in the fixture"
    assert names == {
        r["name"] for g in api(prom, "/api/v1/rules")["data"]["groups"] for r in g["rules"]
    }
