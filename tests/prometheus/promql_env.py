"""Helpers of the PromQL tier: the chart's PrometheusRule rendered by the real helm."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_dev.testtools.helm import ensure_helm

# --import-mode=importlib: the chart tests' helpers (chart_env) by their folder
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "chart"))

from chart_env import CHART, REPO, run_template

__all__ = ["CHART", "REPO", "render", "render_rule"]


def render(set_values: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    done = run_template(ensure_helm(), set_values=set_values)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def render_rule(set_values: tuple[str, ...] = ()) -> dict[str, Any]:
    """The chart's PrometheusRule, rendered by the real helm with the rule enabled."""
    manifests = render(("metrics.prometheusRule.enabled=true", *set_values))
    (rule,) = [d for d in manifests if d["kind"] == "PrometheusRule"]
    return rule
