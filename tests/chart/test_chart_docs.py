"""The numbers the docs state about the chart and the pods, against their source: the
rendered chart for the operator's probe and ports, ``naming`` and the API's defaults for
the runtime's ports. Every statement below must match wherever the docs make it, and must
be made somewhere (a reworded sentence fails here instead of going unchecked)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from chart_env import CHART, REPO, Render

from ascend_pd_operator.api import models, vocabulary

DOCS = sorted(
    [
        REPO / "README.md",
        REPO / "CHANGELOG.md",
        CHART / "README.md",
        CHART / "templates" / "NOTES.txt",
        *(REPO / "docs").glob("*.md"),
        *(REPO / "examples").glob("*.yaml"),
    ]
)


def _one(manifests: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    found = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, [m["metadata"]["name"] for m in found]
    return found[0]


@pytest.fixture(scope="module")
def oracle(render: Render) -> dict[str, int]:
    """The values as the chart renders them, and the runtime's from the code."""
    manifests = render(set_values=["metrics.enabled=true"])
    container = _one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    liveness = container["livenessProbe"]
    service = _one(manifests, "Service", "-metrics")["spec"]["ports"][0]
    return {
        "liveness period": liveness["periodSeconds"],
        "liveness failures": liveness["failureThreshold"],
        "health port": ports["health"],
        "metrics port": ports["metrics"],
        "metrics service port": service["port"],
        "http port": vocabulary.HTTP_PORT,
        "dist-init port": vocabulary.DIST_INIT_PORT,
        "bootstrap base": vocabulary.BOOTSTRAP_PORT_BASE,
        "store port": models.Ascend().store_port,
        "router port": models.Router().port,
    }


#: (what, a pattern whose groups are that number in the docs; a space matches any run of
#: whitespace, so a statement wrapped across lines still counts). Add a pattern when the
#: docs state one of these numbers in a new way.
STATEMENTS: list[tuple[str, str]] = [
    ("liveness period", r"probes every (\d+) s\b"),
    ("liveness failures", r"probes every \d+ s and restarts the container after (\d+) failures"),
    ("health port", r"--health-port[=\s](\d+)"),
    ("health port", r"\| (\d+) \| the operator pod: `GET /healthz`"),
    ("health port", r"127\.0\.0\.1:(\d+)/healthz"),
    ("health port", r"port-forward deploy/\S+ (\d+)` and `curl http://127\.0\.0\.1:\d+/healthz"),
    ("metrics port", r"--metrics-port[=\s](\d+)"),
    ("metrics port", r"`--metrics-port` \((\d+)"),
    ("metrics port", r"\| (\d+) \| the operator pod: `GET /metrics`"),
    ("metrics port", r"127\.0\.0\.1:(\d+)/metrics"),
    ("metrics port", r"port-forward deploy/\S+ (\d+)` and open"),
    ("metrics port", r"only Prometheus to (\d+)"),
    ("http port", r"Ports inside runtime pods: HTTP (\d+)"),
    ("http port", r"\| (\d+) \| every runtime pod: SGLang's HTTP server"),
    ("http port", r"SGLang HTTP port \((\d+)\)"),
    ("http port", r"--service-discovery-port (\d+)"),
    ("http port", r"http://<podIP>:(\d+)"),
    ("http port", r"holds port (\d+) on"),
    ("http port", r"takes port (\d+) of(?:\s+#)? its node"),
    ("dist-init port", r"distributed init (\d+)"),
    ("dist-init port", r"\| (\d+) \| pod 0 of every instance: distributed init"),
    ("dist-init port", r"<sts>-0\.<sts>\.<ns>\.svc:(\d+)"),
    ("bootstrap base", r"bootstrap (\d+) \+ prefill"),
    ("bootstrap base", r"\| (\d+) \+ i \|"),
    ("bootstrap base", r"prefill: (\d+) \+ instance"),
    ("bootstrap base", r"admit \d+, \d+, (\d+) up to"),
    ("store port", r"\| (\d+) \| pod 0 of prefill instance 0: the memfabric store"),
    ("router port", r"\| (\d+) \| the router pod"),
    ("router port", r"port `spec\.router\.port` \((\d+)\)"),
    ("router port", r"svc/dsv2-lite-router (\d+):(\d+)"),
    ("router port", r"<name>-router\.<namespace>\.svc:(\d+)"),
]


def _statements(pattern: str) -> list[tuple[Path, str]]:
    found = []
    regex = re.compile(pattern.replace(" ", r"\s+"))
    for path in DOCS:
        for match in regex.finditer(path.read_text()):
            found += [(path, group) for group in match.groups()]
    return found


@pytest.mark.parametrize(("what", "pattern"), STATEMENTS, ids=[w for w, _ in STATEMENTS])
def test_the_docs_state_the_number_the_chart_has(
    oracle: dict[str, int], what: str, pattern: str
) -> None:
    found = _statements(pattern)
    assert found, f"no doc states the {what} as {pattern!r} any more: update STATEMENTS"
    wrong = [f"{p.relative_to(REPO)}: {n}" for p, n in found if int(n) != oracle[what]]
    assert not wrong, f"the {what} is {oracle[what]}, but {wrong}"


def test_every_number_is_checked_somewhere(oracle: dict[str, int]) -> None:
    assert {what for what, _ in STATEMENTS} >= set(oracle) - {"metrics service port"}
    # the metrics Service forwards the port the docs name
    assert oracle["metrics service port"] == oracle["metrics port"]


def test_the_liveness_numbers_are_the_values(oracle: dict[str, int]) -> None:
    """values.yaml is what renders (no hard-coded number in the template)."""
    import yaml

    values = yaml.safe_load((CHART / "values.yaml").read_text())["livenessProbe"]
    assert values["periodSeconds"] == oracle["liveness period"]
    assert values["failureThreshold"] == oracle["liveness failures"]
