"""The chart's Grafana dashboard: valid dashboard JSON (schema version, unique panel ids, a
datasource variable every query uses, namespace and PDDeployment variables, panels that do
not overlap), the rows the issue asks for, and every operator metric it queries exported by
the operator's registry. (SGLang's names are checked against the real wheels in
tests/sglang/test_dashboard_metrics_sglang.py; the operator's in the e2e scrape too.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ascend_pd_operator.kubeio import metrics

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "charts" / "ascend-pd-operator" / "files" / "dashboards" / "ascend-pd.json"
METRIC = re.compile(r"(ascend_pd_[a-z0-9_]+|sglang:[A-Za-z0-9_:]+)")


def load() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def queries(doc: dict[str, Any]) -> list[str]:
    found = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    for var in doc["templating"]["list"]:
        if var["type"] == "query":
            found.append(var["query"]["query"])
    return found


def test_is_a_grafana_dashboard() -> None:
    doc = load()
    assert isinstance(doc["schemaVersion"], int) and doc["schemaVersion"] >= 36
    assert doc["uid"] and doc["title"]
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "pddeployment"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"]["uid"] == "${datasource}"
    for panel in doc["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            assert METRIC.search(target["expr"]), f"{panel['title']}: no metric in its query"


def test_panels_tile_without_overlap() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in load()["panels"]:
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, panel["title"]
        cells = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


def test_rows_operator_serving_per_role_and_instances() -> None:
    rows = [p["title"] for p in load()["panels"] if p["type"] == "row"]
    assert rows == ["Operator", "Serving: prefill", "Serving: decode", "Instances"]
    titles = " | ".join(p["title"] for p in load()["panels"])
    for wanted in ("Time to first token", "Inter-token latency", "Running and queued",
                   "Throughput", "KV cache use", "KV transfer", "Restarts", "Rollout"):  # fmt: skip
        assert wanted in titles, wanted


def test_sglang_queries_filter_by_deployment_and_role() -> None:
    for expr in queries(load()):
        for selector in re.findall(r"sglang:[A-Za-z0-9_:]+\{([^}]*)\}", expr):
            assert 'pddeployment="$pddeployment"' in selector, expr
            assert 'namespace="$namespace"' in selector, expr
            assert re.search(r'role="(prefill|decode)"', selector), expr


def test_every_operator_metric_queried_is_exported() -> None:
    collector = metrics.DEPLOYMENTS
    collector.deployment_status("ns", "pd", {"roles": {"prefill": {"replicas": 1}, "decode": {}}})
    collector.child_seen(
        "StatefulSet",
        {
            "metadata": {
                "name": "pd-prefill-0",
                "namespace": "ns",
                "labels": {
                    "ascendpd.io/deployment": "pd",
                    "ascendpd.io/role": "prefill",
                    "ascendpd.io/instance": "0",
                },
            }
        },
    )
    metrics.observe_reconcile("ok", 0.1)
    metrics.observe_request("get", "Pod", 200)
    metrics.observe_write("apply", "Service")
    metrics.observe_write("delete", "Service")
    try:
        exported = {s.name for family in metrics.REGISTRY.collect() for s in family.samples}
    finally:
        collector.deployment_status("ns", "pd", None)
    used = {m for q in queries(load()) for m in METRIC.findall(q) if m.startswith("ascend_pd_")}
    assert used, "the dashboard queries no operator metric"
    assert not used - exported, sorted(used - exported)
