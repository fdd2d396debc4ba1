"""``make release VERSION=0.1.0 DRY_RUN=1`` on this repository, as CI runs it: the recorded
0.1.0 commit agrees, the real helm packages its chart, images.sh prints the image builds
(no container engine needed) and the push commands are printed, not run. A version nothing
agrees with stops it before anything is packaged.

Marked ``release``: the ``scanner`` tier runs it (it has helm, and starts no cluster)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ascend_pd_dev.cli.release import recorded
from ascend_pd_dev.testtools.helm import ensure_helm

pytestmark = pytest.mark.release

ROOT = Path(__file__).resolve().parents[2]
#: settings of make images / make release the caller's environment must not bring in
SETTINGS = ("PUSH", "REGISTRY", "DRY_RUN", "ENGINE", "CHIPS", "SGLANG_VERSION", "ONLY", "TAG",
            "RUNTIME_TAG", "BASE_IMAGE", "CHIP", "PLATFORM", "OPERATOR_PLATFORM",
            "RUNTIME_PLATFORM", "MAKEFLAGS")  # fmt: skip


def make_release(*settings: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    venv = Path(sys.prefix)
    # the venv running the tests, when make made it: make must not build another one
    own = [f"VENV={venv}"] if (venv / ".installed").is_file() else []
    return subprocess.run(["make", "--no-print-directory", "release", *own, *settings],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL)  # fmt: skip


def test_make_release_0_1_0_dry_run_passes(tmp_path: Path) -> None:
    done = make_release("VERSION=0.1.0", "DRY_RUN=1", f"DIST={tmp_path}")
    out = done.stdout
    assert done.returncode == 0, f"{out}\n{done.stderr}"
    commit = recorded(ROOT)["0.1.0"]
    assert f"the versions agree in commit {commit}" in out
    # helm itself reads the package back
    (package,) = tmp_path.glob("*.tgz")
    assert package.name == "ascend-pd-operator-0.1.0.tgz"
    shown = subprocess.run([str(ensure_helm(quiet=True)), "show", "chart", str(package)],
                           capture_output=True, text=True, check=True)  # fmt: skip
    chart = yaml.safe_load(shown.stdout)
    assert (chart["name"], chart["version"], chart["appVersion"]) == (
        "ascend-pd-operator", "0.1.0", "0.1.0")  # fmt: skip
    registry = "registry.example.com/ascend-pd"
    images = [f"{registry}/ascend-pd-operator:0.1.0", f"{registry}/ascend-pd-runtime:0.1.0-a2",
              f"{registry}/ascend-pd-runtime:0.1.0-a3"]  # fmt: skip
    builds = [line for line in out.splitlines() if line.startswith("+ docker buildx build")]
    assert [line.split(" -t ")[1].split()[0] for line in builds] == images
    pushes = out.split("release: to push", 1)[1].splitlines()[1:]
    assert [line.strip() for line in pushes] == [
        *(f"docker push {image}" for image in images),
        f"helm push {package} oci://{registry}/charts",
    ]


def test_make_release_of_a_version_nothing_agrees_with_fails_before_packaging(
    tmp_path: Path,
) -> None:
    done = make_release("VERSION=99.0.0", "DRY_RUN=1", f"DIST={tmp_path}")
    assert done.returncode != 0
    assert "release: charts/ascend-pd-operator/Chart.yaml: version: found '" in done.stderr
    assert "expected '99.0.0'" in done.stderr
    assert "disagreement(s) with 99.0.0 in the working tree" in done.stderr
    assert list(tmp_path.iterdir()) == []
