"""The chart README's table of values is the one generated from values.yaml's comments and
values.schema.json (``ascend-pd-dev values-table``), and the generator refuses a value that
nothing documents."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from chart_env import CHART

from ascend_pd_dev.cli import values_table


def check(chart: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "ascend_pd_dev.cli", "values-table", "--check"]
    return subprocess.run(
        [*cmd, "--chart", str(chart)], capture_output=True, text=True, check=False
    )


def test_the_readme_table_is_the_generated_one() -> None:
    done = check(CHART)
    assert done.returncode == 0, done.stderr


def test_every_value_has_a_row_with_its_default_and_type() -> None:
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    rows = {
        line.split("|")[1].strip().strip("`"): [c.strip() for c in line.split("|")[2:-1]]
        for line in values_table.generated(CHART).splitlines()[2:]
    }
    # spot checks against the sources themselves
    assert rows["livenessProbe.failureThreshold"] == [
        "integer", f"`{values['livenessProbe']['failureThreshold']}`",
        "Consecutive failures before the container is restarted.",
    ]  # fmt: skip
    assert rows["image.pullPolicy"][0] == 'one of `"Always"`, `"IfNotPresent"`, `"Never"`'
    assert rows["metrics.prometheusRule.enabled"][1] == "`false`"
    # a parent documented as a whole stands for its keys
    assert "resources" in rows and "resources.requests.cpu" not in rows
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(schema["properties"]) - {"global"} == {k.split(".")[0] for k in rows}


@pytest.fixture()
def chart_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "chart"
    shutil.copytree(CHART, copy)
    return copy


def test_a_changed_comment_fails_the_check(chart_copy: Path) -> None:
    values = chart_copy / "values.yaml"
    text = values.read_text()
    old = "# -- Seconds between liveness checks."
    assert old in text
    values.write_text(text.replace(old, "# -- Seconds between two liveness checks."))
    done = check(chart_copy)
    assert done.returncode == 1
    assert "values-table --write" in done.stderr


def test_a_changed_default_fails_the_check(chart_copy: Path) -> None:
    values = chart_copy / "values.yaml"
    values.write_text(
        values.read_text().replace("  failureThreshold: 6\n", "  failureThreshold: 3\n")
    )
    assert check(chart_copy).returncode == 1


def test_an_undocumented_value_is_refused(chart_copy: Path) -> None:
    values = chart_copy / "values.yaml"
    values.write_text(values.read_text() + "\nextra:\n  knob: 1\n")
    done = check(chart_copy)
    assert done.returncode == 1
    assert "no '# --' comment documents extra.knob" in done.stderr
