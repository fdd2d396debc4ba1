"""Monitoring in the chart: the ServiceMonitor and PodMonitor exist exactly when the cluster
serves monitoring.coreos.com/v1 (or ``monitoring.mode`` forces them), validate against the
Prometheus Operator's CRD schemas, select what they must; the dashboard ConfigMap carries
the dashboard file and the sidecar's label."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import monitoring_crds
import pytest
from chart_env import CHART, KUBE_VERSIONS, NAMESPACE, Render

MONITORING_API = "monitoring.coreos.com/v1"
MONITORS = {"ServiceMonitor", "PodMonitor"}


def kinds(manifests: list[dict[str, Any]]) -> set[str]:
    return {d["kind"] for d in manifests}


def one(manifests: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in manifests if d["kind"] == kind]
    return doc


@pytest.mark.parametrize(
    ("mode", "served", "rendered"),
    [
        ("auto", False, False),
        ("auto", True, True),
        ("always", False, True),
        ("never", True, False),
    ],
)
def test_monitors_only_when_served_or_forced(
    render: Render, mode: str, served: bool, rendered: bool
) -> None:
    manifests = render(
        set_values=[f"monitoring.mode={mode}"], api_versions=[MONITORING_API] if served else []
    )
    assert (kinds(manifests) >= MONITORS) is rendered
    assert not (MONITORS & kinds(manifests)) or rendered
    # the ServiceMonitor needs the metrics Service, even with metrics.enabled false
    services = [d for d in manifests if d["kind"] == "Service"]
    assert bool(services) is rendered


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_monitors_validate_against_the_prometheus_operator_crds(render: Render, kube: str) -> None:
    for values in ([], [CHART / "ci" / "monitoring-values.yaml"]):
        manifests = render(values, kube, api_versions=[MONITORING_API])
        for kind in sorted(MONITORS):
            monitoring_crds.validate(one(manifests, kind))


MONITOR = ("monitoring.mode=always", "ServiceMonitor")
RULE = ("metrics.prometheusRule.enabled=true", "PrometheusRule")


@pytest.mark.parametrize(
    ("rendered", "path", "bad"),
    [
        (MONITOR, ("spec", "endpoints", 0, "honorLabels"), "yes"),
        (MONITOR, ("spec", "endpoints", 0, "scrapeInterval"), "30s"),  # a typo of "interval"
        (MONITOR, ("spec", "namespaceSelector", "any"), "true"),
        (RULE, ("spec", "groups", 0, "rules", 0, "for"), "five minutes"),  # not a duration
        (RULE, ("spec", "groups", 0, "rules", 0, "severity"), "critical"),  # not a rule field
        (RULE, ("spec", "groups", 0, "interval"), 30),
    ],
)
def test_validation_catches_a_bad_monitor_or_prometheus_rule(
    render: Render, rendered: tuple[str, str], path: tuple[Any, ...], bad: Any
) -> None:
    setting, kind = rendered
    doc = one(render(set_values=[setting]), kind)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = bad
    with pytest.raises(jsonschema.ValidationError):
        monitoring_crds.validate(doc)


def test_service_monitor_scrapes_the_operator_metrics_port(render: Render) -> None:
    manifests = render(set_values=["monitoring.mode=always"])
    monitor, service = one(manifests, "ServiceMonitor"), one(manifests, "Service")
    labels = service["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"] == "metrics"
    assert endpoint["path"] == "/metrics"
    assert endpoint["honorLabels"] is True  # the per-PDDeployment namespace label is kept


def test_pod_monitor_selects_runtime_leaders_in_watched_namespaces(render: Render) -> None:
    from ascend_pd_operator.api.vocabulary import HTTP_PORT, LABEL_ROLE, MANAGED_BY, ROLES

    manifests = render([CHART / "ci" / "monitoring-values.yaml"])
    monitor = one(manifests, "PodMonitor")
    spec = monitor["spec"]
    assert spec["namespaceSelector"] == {"matchNames": ["team-a"]}
    assert spec["selector"]["matchLabels"] == {"app.kubernetes.io/managed-by": MANAGED_BY}
    (expr,) = spec["selector"]["matchExpressions"]
    assert (expr["key"], expr["operator"], sorted(expr["values"])) == (
        LABEL_ROLE, "In", sorted(ROLES))  # fmt: skip
    (endpoint,) = spec["podMetricsEndpoints"]
    assert endpoint["port"] == "http" and endpoint["path"] == "/metrics"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    # every label the dashboard's SGLang queries filter by is set by a relabeling
    targets = {r.get("targetLabel") for r in endpoint["relabelings"]}
    assert {"pddeployment", "role", "pd_instance"} <= targets
    # ... and the port is the runtime pods' http port (SGLang's --port)
    from ascend_pd_operator.builders.workloads import _ports

    assert {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"} in _ports("decode", 0)
    with_all = render(set_values=["monitoring.mode=always"])
    assert one(with_all, "PodMonitor")["spec"]["namespaceSelector"] == {"any": True}


def test_dashboard_configmap(render: Render) -> None:
    def dashboards(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [d for d in manifests if d["metadata"]["name"].endswith("-dashboard")]

    assert not dashboards(render())
    (cm,) = dashboards(
        render(set_values=["dashboards.enabled=true", "dashboards.namespace=grafana"])
    )
    assert cm["kind"] == "ConfigMap"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "grafana"
    shipped = (CHART / "files" / "dashboards" / "ascend-pd.json").read_text()
    assert json.loads(cm["data"]["ascend-pd.json"]) == json.loads(shipped)


def test_prometheus_rule_only_when_enabled(render: Render) -> None:
    """Off by default, whatever the cluster serves; on when asked, and then valid."""
    assert "PrometheusRule" not in kinds(render(api_versions=[MONITORING_API]))
    assert "PrometheusRule" not in kinds(render(set_values=["monitoring.mode=always"]))
    for kube in KUBE_VERSIONS:
        manifests = render([CHART / "ci" / "alerts-values.yaml"], kube)
        rule = one(manifests, "PrometheusRule")
        monitoring_crds.validate(rule)
        assert rule["metadata"]["namespace"] == NAMESPACE
        assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"


@pytest.mark.parametrize(
    "bad",
    [
        "metrics.prometheusRule.thresholds.notReadyFor=30 minutes",
        "metrics.prometheusRule.thresholds.decodeKVUsage=1.5",
        "metrics.prometheusRule.thresholds.prefillQueueRequests=-1",
        "metrics.prometheusRule.alertLabels.severity=page",  # would replace each alert's own
        "metrics.prometheusRule.runbookBaseURL=docs/operator.md#alerts",
        "metrics.prometheusRule.tresholds.notReadyFor=1h",
    ],
)
def test_prometheus_rule_values_are_checked(helm: Path, bad: str) -> None:
    from chart_env import run_template

    done = run_template(helm, set_values=["metrics.prometheusRule.enabled=true", bad])
    assert done.returncode != 0
    assert "schema" in done.stderr, done.stderr
