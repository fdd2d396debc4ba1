"""checkov's verdict on the chart and on what the operator creates for every example
(``ascend_pd_dev.testtools.scanner``): nothing but the reviewed skips, each still needed.

The requests of issue 36 are judged by checkov's own CPU and memory request checks, not by
our builders: every runtime and router workload of every example must pass them.
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import pytest
import yaml

from ascend_pd_dev.testtools import scanner

pytestmark = pytest.mark.scanner

#: checkov's checks of a container's CPU and memory requests.
REQUEST_CHECKS = ("CKV_K8S_10", "CKV_K8S_12")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("scan")
    scanner.write_inputs(directory)
    return directory


@pytest.fixture(scope="module")
def scan(inputs: Path) -> scanner.Scan:
    return scanner.checkov(inputs)


@pytest.fixture(scope="module")
def skips() -> list[scanner.Skip]:
    return scanner.load_skips()


def test_checkov_is_the_pinned_release(scan: scanner.Scan) -> None:
    project = tomllib.loads((scanner.ROOT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["scan"] == [f"checkov=={scan.version}"]


def test_it_scans_the_chart_and_every_example(inputs: Path, scan: scanner.Scan) -> None:
    examples = {f"example-{p.stem}" for p in scanner.EXAMPLES.glob("*.yaml")}
    assert {p.stem for p in inputs.glob("*.yaml")} == {*scanner.CHART_VALUES, *examples}
    # checkov judges every file but the PVC's (it has no check of a PVC)
    sources = {f.source for f in scan.failed + scan.passed}
    assert sources == {*scanner.CHART_VALUES, *examples} - {"example-models-pvc"}
    assert len(scan.passed) > 1000  # the whole render, not one document of it


def test_every_finding_is_a_reviewed_skip(scan: scanner.Scan, skips: list[scanner.Skip]) -> None:
    new = scanner.unaccepted(scan, skips)
    assert not new, "checkov findings no skip in tests/scanner/checkov-skips.yaml accepts:\n" + (
        "\n".join(f.describe() for f in new)
    )


def test_every_skip_is_still_needed(scan: scanner.Scan, skips: list[scanner.Skip]) -> None:
    unused = scanner.stale(scan, skips)
    assert not unused, "skips that accept no finding (remove them): " + ", ".join(
        f"{s.check} {s.resources}" for s in unused
    )


def test_every_skip_says_why_and_is_listed_once(skips: list[scanner.Skip]) -> None:
    assert all(len(s.why) >= 20 and s.resources for s in skips)
    assert len({s.check for s in skips}) == len(skips)


def test_every_runtime_and_router_workload_passes_the_request_checks(
    scan: scanner.Scan,
) -> None:
    workloads = {f.resource for f in scan.passed + scan.failed
                 if f.source.startswith("example-deepseek")
                 and f.resource.split(".")[0] in ("StatefulSet", "Deployment")}  # fmt: skip
    assert any(w.endswith("-router") for w in workloads)
    assert any(w.startswith("StatefulSet.") for w in workloads)
    for check in REQUEST_CHECKS:
        passed = {f.resource for f in scan.passed if f.check == check}
        assert workloads <= passed, (check, sorted(workloads - passed))


def test_the_chart_is_clean_but_for_its_reviewed_skips(scan: scanner.Scan) -> None:
    chart = {f.check for f in scan.failed if f.source.startswith("chart-")}
    assert chart <= {"CKV_K8S_11", "CKV_K8S_15", "CKV_K8S_43", "CKV_K8S_38", "CKV2_K8S_6"}


def test_docs_show_the_skip_list(skips: list[scanner.Skip]) -> None:
    shown = scanner.docs_section(scanner.DOCS.read_text())
    assert shown == scanner.docs_table(skips), (
        "docs/security.md differs from tests/scanner/checkov-skips.yaml: "
        "python -m ascend_pd_dev.testtools.scanner --write-docs"
    )


def test_a_new_finding_fails(tmp_path: Path, inputs: Path, skips: list[scanner.Skip]) -> None:
    """The gate works: a privileged router, which no skip accepts, is reported."""
    docs = list(yaml.safe_load_all((inputs / "example-deepseek-v2-lite.yaml").read_text()))
    router = copy.deepcopy(next(d for d in docs if d and d["kind"] == "Deployment"))
    container = router["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"] = {"privileged": True}
    (tmp_path / "privileged.yaml").write_text(yaml.safe_dump(router))
    new = scanner.unaccepted(scanner.checkov(tmp_path), skips)
    assert "CKV_K8S_16" in {f.check for f in new}  # "Container should not be privileged"
