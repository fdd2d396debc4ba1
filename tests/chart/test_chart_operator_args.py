"""The chart passes the operator's flags: each value reaches its flag, and the operator's own
argument parser (``run_cli.add_arguments``, the oracle) reads the rendered arguments back to
the value. Every flag of ``ascend-pd run`` is reachable from some value, the chart's defaults
are the operator's, and ``extraArgs`` adds what the chart has no value for, never a flag
another value sets."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_env import CHART, Render, run_template

from ascend_pd_operator.wiring.run_cli import add_arguments

#: value (dotted) -> (the parser's dest, a value other than the default)
VALUES: dict[str, tuple[str, Any]] = {
    "workers": ("workers", 7),
    "resyncSeconds": ("resync_seconds", 12.5),
    "unhealthyAfterSeconds": ("unhealthy_after_seconds", 90),
    "recovery.backoffSeconds": ("restart_backoff_seconds", 2.5),
    "recovery.backoffMaxSeconds": ("restart_backoff_max_seconds", 120),
    "recovery.loopLimit": ("restart_loop_limit", 9),
    "recovery.loopWindowSeconds": ("restart_loop_window_seconds", 1800),
    "health.port": ("health_port", 9090),
    "metrics.port": ("metrics_port", 9091),
}
#: values that switch a flag on, and the flags they switch
SWITCHES: dict[str, tuple[Any, str]] = {
    "leaderElection.enabled": (True, "--leader-elect"),
    "placement.deviceInfo": (True, "--placement-device-info"),
    "logLevel": ("debug", "--debug"),
    "watch.namespaces": (["llm"], "--namespace"),
}


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(prog="ascend-pd run", exit_on_error=False)
    add_arguments(found)
    return found


def _values_file(tmp_path: Path, values: dict[str, Any]) -> Path:
    nested: dict[str, Any] = {}
    for dotted, value in values.items():
        *parents, leaf = dotted.split(".")
        node = nested
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(nested))
    return path


def _args(manifests: list[dict[str, Any]]) -> list[str]:
    (deployment,) = [m for m in manifests if m["kind"] == "Deployment"]
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def test_the_defaults_are_the_operator_s(render: Render) -> None:
    rendered = parser().parse_args(_args(render()))
    assert rendered == parser().parse_args(["--all-namespaces"])


def test_each_value_reaches_its_flag(render: Render, tmp_path: Path) -> None:
    values = {key: sample for key, (_, sample) in VALUES.items()}
    read = parser().parse_args(_args(render([_values_file(tmp_path, values)])))
    for key, (dest, sample) in VALUES.items():
        assert getattr(read, dest) == sample, key
        assert getattr(read, dest) != parser().get_default(dest), key  # a change, not luck


@pytest.mark.parametrize("value", SWITCHES, ids=str)
def test_each_switch_reaches_its_flag(render: Render, tmp_path: Path, value: str) -> None:
    setting, flag = SWITCHES[value]
    args = _args(render([_values_file(tmp_path, {value: setting})]))
    assert any(a == flag or a.startswith(f"{flag}=") for a in args), args
    parser().parse_args(args)


def test_every_flag_of_the_operator_is_reachable_from_a_value(
    render: Render, tmp_path: Path
) -> None:
    """A flag added to ``ascend-pd run`` fails here until the chart has a value for it (or
    this test says why not)."""
    renders = [render()]
    renders.append(render([_values_file(tmp_path, {k: s for k, (_, s) in VALUES.items()})]))
    for i, (value, (setting, _)) in enumerate(SWITCHES.items()):
        folder = tmp_path / str(i)
        folder.mkdir()
        renders.append(render([_values_file(folder, {value: setting})]))
    given = {a.split("=", 1)[0] for manifests in renders for a in _args(manifests)}
    flags = {
        option
        for action in parser()._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }
    # --all-namespaces and --namespace are one choice: watch.namespaces
    assert flags - given == set(), f"no chart value reaches {sorted(flags - given)}"


def test_extra_args_come_last_and_the_parser_reads_them(render: Render, tmp_path: Path) -> None:
    extra = ["--resync-seconds=7", "--restart-loop-limit", "2"]
    args = _args(render([_values_file(tmp_path, {"extraArgs": extra})]))
    assert args[-3:] == extra
    read = parser().parse_args(args)
    assert (read.resync_seconds, read.restart_loop_limit) == (7.0, 2)  # the last one wins


@pytest.mark.parametrize(
    "extra",
    [["--namespace=x"], ["--namespace", "x"], ["-n", "x"], ["--all-namespaces"], ["-A"],
     ["--health-port=1"], ["--metrics-port", "2"], ["--leader-elect"],
     ["--placement-device-info"], ["--debug"], [""]],
    ids=lambda e: " ".join(e) or "empty",
)  # fmt: skip
def test_extra_args_refuse_a_flag_another_value_sets(
    helm: Path, tmp_path: Path, extra: list[str]
) -> None:
    done = run_template(helm, [_values_file(tmp_path, {"extraArgs": extra})])
    assert done.returncode != 0, done.stdout[-500:]
    assert "extraArgs/0" in done.stderr, done.stderr


@pytest.mark.parametrize(
    "values",
    [{"workers": 0}, {"workers": 1.5}, {"recovery.loopLimit": 0}, {"resyncSeconds": 0},
     {"recovery.loopWindowSeconds": 0}, {"unhealthyAfterSeconds": -1},
     {"recovery.backoff": 10}, {"extraArgs": "--debug"}],
    ids=lambda v: ",".join(f"{k}={w}" for k, w in v.items()),
)  # fmt: skip
def test_the_schema_refuses_values_the_parser_would(
    helm: Path, tmp_path: Path, values: dict[str, Any]
) -> None:
    done = run_template(helm, [_values_file(tmp_path, values)])
    assert done.returncode != 0, done.stdout[-500:]
    key = next(iter(values)).split(".")
    assert any(part in done.stderr for part in key), done.stderr


def test_the_readme_documents_every_new_value() -> None:
    readme = (CHART / "README.md").read_text()
    for key in [*VALUES, "extraArgs"]:
        assert f"| `{key}` |" in readme, key
