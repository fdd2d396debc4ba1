"""The chart's opt-in NetworkPolicy (issue 36): off by default; on, it selects exactly the
operator pods and admits only the configured Prometheus to the metrics port.

Expected values are written by hand from docs/security.md."""

from __future__ import annotations

from chart_env import CHART, Render


def _policies(manifests: list[dict]) -> list[dict]:
    return [m for m in manifests if m["kind"] == "NetworkPolicy"]


def test_off_by_default(render: Render) -> None:
    assert _policies(render()) == []


def test_on_it_admits_only_prometheus_to_the_metrics_port(render: Render) -> None:
    manifests = render(set_values=["networkPolicy.enabled=true", "metrics.port=9090"])
    (policy,) = _policies(manifests)
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    operator = next(m for m in manifests if m["kind"] == "Deployment")
    pod_labels = operator["spec"]["template"]["metadata"]["labels"]
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= pod_labels.items()
    assert selected == operator["spec"]["selector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress (the API server) stays open
    monitoring = {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    assert policy["spec"]["ingress"] == [{
        "from": [{"namespaceSelector": monitoring, "podSelector": {}}],
        "ports": [{"protocol": "TCP", "port": 9090}],
    }]  # fmt: skip


def test_the_scrapers_are_configurable(render: Render) -> None:
    manifests = render(set_values=[
        "networkPolicy.enabled=true",
        "networkPolicy.prometheus.namespaceSelector.matchLabels.team=obs",
        "networkPolicy.prometheus.podSelector.matchLabels.app=prometheus",
    ])  # fmt: skip
    (policy,) = _policies(manifests)
    peer = policy["spec"]["ingress"][0]["from"][0]
    assert peer["namespaceSelector"]["matchLabels"]["team"] == "obs"
    assert peer["podSelector"] == {"matchLabels": {"app": "prometheus"}}


def test_the_production_values_turn_it_on(render: Render) -> None:
    assert len(_policies(render([CHART / "ci" / "production-values.yaml"]))) == 1
