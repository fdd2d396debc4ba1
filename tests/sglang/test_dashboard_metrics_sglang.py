"""Every SGLang metric the chart's dashboard queries, every one its alert rules read and
every value the built-in planner reads (``decisions.autoscale.SIGNAL_METRICS``) is one the
real SGLang defines, in every supported release (0.5.10–0.5.23, the wheels from PyPI the
harness caches).

The names are read from each wheel's own source: every ``Gauge``/``Counter``/``Histogram``/
``Summary`` constructed with a literal ``sglang:`` name (prometheus_client's classes, as
SGLang's collectors use them). A query may fall back with ``or`` when a metric was renamed:
then, per release, one alternative must name only metrics that release defines. The names
each release lacks are reported in the tier's summary.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import zipfile
from pathlib import Path

import pytest
import sglang_harness as harness

from ascend_pd_operator.decisions.autoscale import METRICS_READ, SIGNAL_METRICS
from ascend_pd_runtime.layout import supported_sglang_versions

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(900)]

DASHBOARD = (
    harness.REPO / "charts" / "ascend-pd-operator" / "files" / "dashboards" / "ascend-pd.json"
)
RULES = harness.REPO / "charts" / "ascend-pd-operator" / "templates" / "prometheusrule.yaml"
NAME = re.compile(r"sglang:[A-Za-z0-9_:]+")
KINDS = {"Gauge": "gauge", "Counter": "counter", "Histogram": "histogram", "Summary": "summary"}


def defined_metrics(wheel: Path) -> dict[str, str]:
    """``sglang:`` metric name -> its type, from every module of the wheel."""
    found: dict[str, str] = {}
    with zipfile.ZipFile(wheel) as zf:
        for entry in zf.namelist():
            if not entry.endswith(".py"):
                continue
            source = zf.read(entry)
            # a module constructing one names the class in its text: parse no other
            if b"sglang:" not in source or not any(k.encode() in source for k in KINDS):
                continue
            for node in ast.walk(ast.parse(source)):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                kind = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if kind not in KINDS:
                    continue
                name = next((k.value.value for k in node.keywords if k.arg == "name"
                             and isinstance(k.value, ast.Constant)), None)  # fmt: skip
                if name is None and node.args and isinstance(node.args[0], ast.Constant):
                    name = node.args[0].value
                if isinstance(name, str) and name.startswith("sglang:"):
                    found[name] = KINDS[kind]
    return found


@functools.cache
def defined_by_release() -> dict[str, dict[str, str]]:
    """Each supported release -> its ``defined_metrics`` (read once per session)."""
    return {v: defined_metrics(harness.wheel_for(v)) for v in supported_sglang_versions()}


def exposed(defined: dict[str, str]) -> set[str]:
    """The sample names prometheus_client exposes for these metrics."""
    names: set[str] = set()
    for name, kind in defined.items():
        if kind == "counter":
            names.add(name if name.endswith("_total") else f"{name}_total")
        elif kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        elif kind == "summary":
            names |= {name, f"{name}_sum", f"{name}_count"}
        else:
            names.add(name)
    return names


def dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [
        t["expr"] for p in doc["panels"] for t in p.get("targets", []) if "sglang:" in t["expr"]
    ]


def alert_queries() -> list[str]:
    """Each line of the PrometheusRule template that names an SGLang metric (an alert's
    expression or a line of one; the rules use no ``or`` fallback, so every name on a line
    must exist)."""
    return [line.strip() for line in RULES.read_text().splitlines() if "sglang:" in line]


def test_every_dashboard_sglang_metric_exists_in_every_release() -> None:
    versions = supported_sglang_versions()
    names = {v: exposed(d) for v, d in defined_by_release().items()}
    alerts = alert_queries()
    assert alerts, f"{RULES} reads no SGLang metric any more"
    queries = dashboard_queries() + alerts
    used = {n for q in queries for n in NAME.findall(q)}
    assert queries and used
    problems = []
    for query in queries:
        alternatives = [NAME.findall(part) for part in query.split(" or ")]
        for version in versions:
            if not any(alt and set(alt) <= names[version] for alt in alternatives):
                problems.append(f"{version}: {query}")
    unknown = sorted(n for n in used if not any(n in names[v] for v in versions))
    assert not unknown, f"no supported SGLang defines {unknown}"
    assert not problems, "\n".join(problems)
    harness.SUMMARY.append(
        f"dashboard and alerts: {len(used)} SGLang series in {len(queries)} queries "
        f"({len(alerts)} of the alert rules), checked against "
        f"{len(versions)} releases; sglang: metrics defined per release: "
        + ", ".join(
            f"{v} {sum(1 for n in names[v] if not n.endswith(('_sum', '_count')))}"
            for v in versions
        )
    )
    for name in sorted(used):
        missing = [v for v in versions if name not in names[v]]
        if missing:
            harness.SUMMARY.append(
                f"dashboard: {name} missing in {', '.join(missing)} (an `or` fallback covers it)"
            )


def test_the_promql_fixture_serves_sglang_names_and_types() -> None:
    """tests/prometheus/exporters.py stands in for SGLang leaders in the PromQL tier: each
    metric it serves must be one the newest supported release defines, with the same type
    in every release that defines it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "promql_exporters", harness.REPO / "tests" / "prometheus" / "exporters.py"
    )
    assert spec is not None and spec.loader is not None
    exporters = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exporters)
    versions = supported_sglang_versions()
    defined = defined_by_release()
    newest = defined[versions[-1]]
    problems = []
    for name, kind in exporters.SGLANG_METRICS.items():
        if newest.get(name) != kind:
            problems.append(f"{name}: {versions[-1]} defines {newest.get(name)}, fixture {kind}")
        problems += [
            f"{name}: {v} defines a {d[name]}, fixture a {kind}"
            for v, d in defined.items()
            if name in d and d[name] != kind
        ]
    assert not problems, "\n".join(problems)


def test_every_value_the_planner_reads_has_a_name_in_every_release() -> None:
    """The planner reads each value under one or more SGLang names (the first a leader
    exposes counts; a rename keeps the old name as an alternative). In every supported
    release each value must have one of its names, with the type the planner reads it as,
    and each name must be one some release defines; the summary says which release lacks
    which name."""
    versions = supported_sglang_versions()
    defined = defined_by_release()
    problems = []
    for name, kind in METRICS_READ.items():
        problems += [
            f"{name}: {v} defines a {defined[v][name]}, the planner reads a {kind}"
            for v in versions
            if name in defined[v] and defined[v][name] != kind
        ]
        lacking = [v for v in versions if name not in defined[v]]
        if len(lacking) == len(versions):
            problems.append(f"{name}: no supported release defines it")
        elif lacking:
            harness.SUMMARY.append(f"planner: {name} missing in {', '.join(lacking)}")
    for key, names in SIGNAL_METRICS.items():
        problems += [
            f"{key}: {v} defines none of {', '.join(names)}"
            for v in versions
            if not any(n in defined[v] for n in names)
        ]
    assert not problems, "\n".join(problems)
    harness.SUMMARY.append(
        f"planner: {len(SIGNAL_METRICS)} values under {len(METRICS_READ)} SGLang names, "
        f"each value present in all {len(versions)} releases"
    )
