"""``make images`` (devtools/images.sh) and the runtime image's import check
(runtime/check-image.py), without a container engine: the refusal with none on PATH, the
commands each engine gets (a fake engine records them), and the check against fake
sglang_router and SGLang packages."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "devtools" / "images.sh"
CHECK = ROOT / "runtime" / "check-image.py"
BASH = "/bin/bash"
BASE = "quay.io/ascend/sglang:v0.5.23-cann9.0.0-a3"
SETTINGS = {"REGISTRY": "registry.example.com/llm", "BASE_IMAGE": BASE, "SGLANG_VERSION": "0.5.23"}


def images(path: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BASH, str(SCRIPT)],
        env={"PATH": path, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def fake_engines(tmp_path: Path, *names: str) -> Path:
    """A bin directory whose engines append their argv to <name>.log, plus the tools the
    script needs from the system."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in names:
        engine = bin_dir / name
        engine.write_text(f'#!{BASH}\necho "$*" >> {tmp_path}/{name}.log\n')
        engine.chmod(0o755)
    for tool in ("sed", "head", "dirname", "env"):
        found = subprocess.run(["which", tool], capture_output=True, text=True, check=True)
        (bin_dir / tool).symlink_to(found.stdout.strip())
    return bin_dir


def test_refuses_without_an_engine(tmp_path: Path) -> None:
    done = images("", tmp_path, **SETTINGS)
    assert done.returncode == 1
    assert "no container engine found on PATH (looked for docker podman buildah)" in done.stderr
    assert done.stdout == ""


def test_refuses_an_engine_it_does_not_know(tmp_path: Path) -> None:
    bin_dir = fake_engines(tmp_path, "docker")
    done = images(str(bin_dir), tmp_path, ENGINE="nerdctl", **SETTINGS)
    assert done.returncode == 1
    assert "ENGINE=nerdctl: use docker, podman or buildah" in done.stderr


def test_the_runtime_image_needs_its_base(tmp_path: Path) -> None:
    bin_dir = fake_engines(tmp_path, "docker")
    done = images(str(bin_dir), tmp_path, REGISTRY="r.example")
    assert done.returncode == 1
    assert "needs BASE_IMAGE" in done.stderr
    assert not (tmp_path / "docker.log").exists()


@pytest.mark.parametrize(
    ("engine", "build"),
    [
        ("docker", "build -f {df} -t {image}"),
        ("podman", "build -f {df} --ignorefile {df}.dockerignore -t {image}"),
        ("buildah", "build -f {df} --ignorefile {df}.dockerignore -t {image}"),
    ],
)
def test_builds_and_pushes_both_images(tmp_path: Path, engine: str, build: str) -> None:
    bin_dir = fake_engines(tmp_path, engine)
    done = images(str(bin_dir), tmp_path, PUSH="1", **SETTINGS)
    assert done.returncode == 0, done.stderr
    version = next(
        line.split('"')[1]
        for line in (ROOT / "pyproject.toml").read_text().splitlines()
        if line.startswith("version = ")
    )
    operator = f"registry.example.com/llm/ascend-pd-operator:{version}"
    runtime = f"registry.example.com/llm/ascend-pd-runtime:{version}"
    assert (tmp_path / f"{engine}.log").read_text().splitlines() == [
        build.format(df="operator/Dockerfile", image=operator) + " .",
        f"push {operator}",
        build.format(df="runtime/Dockerfile", image=runtime)
        + f" --build-arg BASE_IMAGE={BASE} --build-arg SGLANG_VERSION=0.5.23 .",
        f"push {runtime}",
    ]


def test_only_the_operator_needs_no_base(tmp_path: Path) -> None:
    bin_dir = fake_engines(tmp_path, "podman", "docker")
    done = images(str(bin_dir), tmp_path, REGISTRY="r.example/", ONLY="operator", TAG="9.9.9")
    assert done.returncode == 0, done.stderr
    # docker is preferred when several engines are present
    assert (tmp_path / "docker.log").read_text() == (
        "build -f operator/Dockerfile -t r.example/ascend-pd-operator:9.9.9 .\n"
    )
    assert not (tmp_path / "podman.log").exists()


def test_every_dockerfile_has_its_ignore_file() -> None:
    # podman and buildah are given <Dockerfile>.dockerignore and refuse a missing one
    for dockerfile in ("operator/Dockerfile", "runtime/Dockerfile"):
        assert (ROOT / f"{dockerfile}.dockerignore").is_file(), dockerfile


def test_the_runtime_dockerfile_runs_the_import_check() -> None:
    text = (ROOT / "runtime" / "Dockerfile").read_text()
    install = text.index("install-and-patch.sh\n")
    assert text.index("RUN python3 /opt/ascend-pd/src/runtime/check-image.py") > install


# --- runtime/check-image.py -------------------------------------------------------------

CONN_PATCHED = """\
# ascend-pd patch: vectorized-send (layout guard + layout-core plan)
from ascend_pd_runtime.connector import UPSTREAM, send_kvcache_planned
"""


def fake_site(tmp_path: Path, conn: str | None = CONN_PATCHED, router: bool = True) -> Path:
    site = tmp_path / "site"
    if router:
        (site / "sglang_router").mkdir(parents=True)
        (site / "sglang_router" / "__init__.py").write_text("")
        (site / "sglang_router" / "launch_router.py").write_text("")
    if conn is not None:
        package = site / "sglang" / "srt" / "disaggregation" / "ascend"
        package.mkdir(parents=True)
        for parent in (package, *list(package.parents)[:3]):
            (parent / "__init__.py").write_text("")
        (package / "conn.py").write_text(conn)
    site.mkdir(exist_ok=True)
    return site


def check(site: Path) -> subprocess.CompletedProcess[str]:
    runtime = str(ROOT / "runtime")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), runtime])}
    return subprocess.run(
        [sys.executable, str(CHECK)], env=env, capture_output=True, text=True, check=False
    )


def test_check_passes_on_a_complete_image(tmp_path: Path) -> None:
    done = check(fake_site(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "sglang.srt.disaggregation.ascend.conn is patched and imports" in done.stdout


def test_check_fails_without_the_router(tmp_path: Path) -> None:
    done = check(fake_site(tmp_path, router=False))
    assert done.returncode == 1
    assert "cannot import sglang_router.launch_router (the router container runs it)" in (
        done.stderr
    )


def test_check_fails_without_sglang(tmp_path: Path) -> None:
    done = check(fake_site(tmp_path, conn=None))
    assert done.returncode == 1
    assert "SGLang is not installed" in done.stderr


def test_check_fails_on_an_unpatched_connector(tmp_path: Path) -> None:
    done = check(fake_site(tmp_path, conn="import os\n"))
    assert done.returncode == 1
    assert "lacks the ascend-pd patch" in done.stderr


def test_check_fails_when_the_connector_does_not_import(tmp_path: Path) -> None:
    done = check(fake_site(tmp_path, conn=CONN_PATCHED + "import no_such_module\n"))
    assert done.returncode == 1
    assert "cannot import the patched sglang.srt.disaggregation.ascend.conn" in done.stderr
    assert "no_such_module" in done.stderr


def test_check_accepts_a_missing_driver_at_build_time(tmp_path: Path) -> None:
    missing_driver = CONN_PATCHED + textwrap.dedent(
        """\
        raise ImportError("libascend_hal.so: cannot open shared object file")
        """
    )
    done = check(fake_site(tmp_path, conn=missing_driver))
    assert done.returncode == 0, done.stderr
    assert "is patched and compiles; importing it needs the Ascend driver" in done.stdout


def test_check_uses_the_installed_runtime_not_a_copy_beside_it(tmp_path: Path) -> None:
    # a stale ascend_pd_runtime beside the script (as /opt/ascend-pd/src/runtime is in the
    # image) must not stand in for the installed one
    here = tmp_path / "src"
    (here / "ascend_pd_runtime").mkdir(parents=True)
    (here / "ascend_pd_runtime" / "__init__.py").write_text("")
    (here / "ascend_pd_runtime" / "connector.py").write_text("UPSTREAM = None\n")
    script = here / "check-image.py"
    script.write_text(CHECK.read_text())
    env = {**os.environ, "PYTHONPATH": str(fake_site(tmp_path))}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
