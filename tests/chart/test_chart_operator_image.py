"""The operator image (operator/Dockerfile), checked without a container engine.

CI has no Docker, so the image's install path is proven by running the Dockerfile's own
pip commands, verbatim, in fresh virtualenvs: the build stage's command in a copy of the
build context made from its COPY instructions, the final stage's command against the
wheels that produced (its --mount flag stripped: the bind mount is what WHEELS points at).
The non-pip RUN lines (useradd) are only checked for the UID the chart runs as.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "operator" / "Dockerfile"
HELPERS = REPO / "charts" / "ascend-pd-operator" / "templates" / "_helpers.tpl"

Instruction = tuple[str, str]


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[list[Instruction]]]:
    """(global ARG defaults, stages as [(INSTRUCTION, arguments)])."""
    joined = re.sub(r"\\\n", " ", text)
    args: dict[str, str] = {}
    stages: list[list[Instruction]] = []
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stages.append([])
        if not stages:
            if keyword == "ARG" and "=" in rest:
                name, _, default = rest.partition("=")
                args[name.strip()] = default.strip()
            continue
        stages[-1].append((keyword, re.sub(r"\s+", " ", rest).strip()))
    return args, stages


def stage_env(stage: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, rest in stage:
        if keyword == "ENV":
            for item in shlex.split(rest):
                name, _, value = item.partition("=")
                env[name] = value
    return env


def pip_commands(stage: list[Instruction]) -> list[str]:
    commands = []
    for keyword, rest in stage:
        if keyword == "RUN" and "pip" in rest:
            commands.append(re.sub(r"--mount=\S+\s*", "", rest).strip())
    return commands


ARGS, STAGES = parse_dockerfile(DOCKERFILE.read_text())
#: pip is gone from the final environment, so ask importlib.metadata what is installed
LIST_DISTRIBUTIONS = (
    "import importlib.metadata as m, json; "
    "print(json.dumps(sorted({d.metadata['Name'].lower() for d in m.distributions()})))"
)
BUILD, FINAL = STAGES[0], STAGES[-1]


def test_two_stages_on_a_slim_python() -> None:
    assert len(STAGES) == 2
    base = ARGS["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", base), base
    assert BUILD[0] == ("FROM", "${PYTHON_IMAGE} AS build")
    assert FINAL[0] == ("FROM", "${PYTHON_IMAGE}")


def test_final_stage_runs_ascend_pd_as_the_charts_user() -> None:
    entrypoint = [json.loads(rest) for keyword, rest in FINAL if keyword == "ENTRYPOINT"]
    assert entrypoint == [["ascend-pd", "run"]]
    users = [rest for keyword, rest in FINAL if keyword == "USER"]
    chart_uid = re.search(r"runAsUser: (\d+)", HELPERS.read_text())
    assert chart_uid is not None
    assert users == [f"{chart_uid.group(1)}:{chart_uid.group(1)}"]
    assert chart_uid.group(1) != "0"
    create_user = " ".join(rest for keyword, rest in FINAL if keyword == "RUN")
    assert f"--uid {chart_uid.group(1)}" in create_user


def test_no_build_tools_reach_the_final_stage() -> None:
    final_text = " ".join(rest for _, rest in FINAL)
    for tool in ("apt-get", "gcc", "build-essential", "make ", "pip wheel", "git "):
        assert tool not in final_text, tool
    # the sources stay in the build stage; the final stage sees only the wheels
    assert not [rest for keyword, rest in FINAL if keyword in ("COPY", "ADD")]
    (install,) = pip_commands(FINAL)
    assert "--no-index" in install
    assert "uninstall --yes setuptools wheel pip" in install


@pytest.mark.timeout(900)
def test_the_image_install_commands_work_in_fresh_virtualenvs(tmp_path: Path) -> None:
    context = tmp_path / "src"
    context.mkdir()
    for keyword, rest in BUILD:
        if keyword == "COPY":
            *sources, dest = rest.split()
            for source in sources:
                target = (
                    context / dest / Path(source).name if dest.endswith("/") else context / dest
                )
                if (REPO / source).is_dir():
                    shutil.copytree(
                        REPO / source,
                        target,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
                    )
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(REPO / source, target)
    wheels = tmp_path / "wheels"

    def run_stage(stage: list[Instruction], venv: Path, cwd: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        env = {**os.environ, **stage_env(stage), "WHEELS": str(wheels)}
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
        env.pop("PYTHONPATH", None)
        env.pop("VIRTUAL_ENV", None)
        for command in pip_commands(stage):
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", command],
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    run_stage(BUILD, tmp_path / "build-venv", context)
    assert any(wheels.glob("ascend_pd-*.whl"))
    final = tmp_path / "final-venv"
    run_stage(FINAL, final, tmp_path)

    python = final / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-c", LIST_DISTRIBUTIONS], capture_output=True, text=True, check=True
    )
    names = set(json.loads(installed.stdout))
    assert {"ascend-pd", "kopf", "pydantic", "pyyaml", "urllib3"} <= names
    # kopf would import it whenever installed: ~10 MiB of the operator's memory for nothing
    assert "kubernetes" not in names
    assert not names & {"setuptools", "wheel", "pip"}, "packaging tools left in the image"
    # installed from the wheel, not the source tree: the package lives in site-packages
    where = subprocess.run(
        [str(python), "-c", "import ascend_pd_operator; print(ascend_pd_operator.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    assert "site-packages" in where.stdout
    # the entrypoint exists and parses its arguments; the helm test's imports resolve
    entry = subprocess.run(
        [str(final / "bin" / "ascend-pd"), "run", "--help"], capture_output=True, text=True
    )
    assert entry.returncode == 0, entry.stderr
    assert "--health-port" in entry.stdout
    smoke = subprocess.run(
        [str(python), "-c", "import ascend_pd_operator.kubeio.kube, yaml"],
        capture_output=True,
        text=True,
    )
    assert smoke.returncode == 0, smoke.stderr
    # no development code in the image: the toolbox is absent and the CLI offers only the
    # production commands
    assert "ascend-pd-dev" not in names
    toolbox = subprocess.run(
        [str(python), "-c", "import ascend_pd_dev"], capture_output=True, text=True, cwd=tmp_path
    )
    assert toolbox.returncode != 0 and "ascend_pd_dev" in toolbox.stderr
    usage = subprocess.run(
        [str(final / "bin" / "ascend-pd"), "--help"], capture_output=True, text=True, check=True
    )
    offered = set(re.findall(r"^    (\w[\w-]*)\s", usage.stdout, flags=re.M))
    assert offered == {"plan", "crd", "render", "run"}, usage.stdout
