"""``make images`` (devtools/images.sh) and the runtime image's import check
(runtime/check-image.py), without a container engine: the refusal with none on PATH, the
commands each engine gets (a fake engine records them), the base image picked per SGLang
release and chip from devtools/base-images.txt (and that docs/compatibility.md shows that
table), and the check against fake sglang_router and SGLang packages."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_pd_dev.cli import base_images
from ascend_pd_runtime.layout import (
    SUPPORTED_SGLANG_MAX,
    SUPPORTED_SGLANG_MIN,
    parse_sglang_version,
    supported_sglang_versions,
)

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
        # "manifest exists" answers no, unless FAKE_MANIFEST is set (a list of an earlier build)
        engine.write_text(
            f'#!{BASH}\necho "$*" >> {tmp_path}/{name}.log\n'
            'if [[ "$1 $2" == "manifest exists" && -z "${FAKE_MANIFEST:-}" ]]; then exit 1; fi\n'
        )
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


@pytest.mark.parametrize(
    "settings",
    [{}, {"SGLANG_VERSION": "0.5.14"}, {"CHIP": "a3"}, {"BASE_IMAGE": BASE}],
    ids=["nothing", "no-chip", "no-version", "base-without-version"],
)
def test_the_runtime_image_needs_its_base(tmp_path: Path, settings: dict[str, str]) -> None:
    bin_dir = fake_engines(tmp_path, "docker")
    done = images(str(bin_dir), tmp_path, REGISTRY="r.example", **settings)
    assert done.returncode == 1
    assert (
        "the runtime image needs SGLANG_VERSION (the SGLang its base image carries) and CHIP "
        "(a2 or a3) to pick its base from devtools/base-images.txt, or BASE_IMAGE"
    ) in done.stderr
    assert not (tmp_path / "docker.log").exists()


# --- the base image per SGLang release and chip -------------------------------------------

TABLE = base_images.load()


def _runtime_build(tmp_path: Path, engine: str = "docker") -> str:
    return (tmp_path / f"{engine}.log").read_text().splitlines()[-1]


def test_the_table_knows_supported_releases_on_both_chips() -> None:
    assert {r.chip for r in TABLE} == {"a2", "a3"}
    for row in TABLE:
        version = parse_sglang_version(row.sglang)
        assert version is not None and SUPPORTED_SGLANG_MIN <= version <= SUPPORTED_SGLANG_MAX
        # SGLang's tag scheme: v<the release>-cann<CANN>-<910b for A2, a3 for A3>
        device = {"a2": "910b", "a3": "a3"}[row.chip]
        assert row.image.split(":", 1)[1].startswith(f"v{row.sglang}-cann"), row
        assert row.image.endswith(f"-{device}"), row
    # each release on both chips, and a tag for the other chip only beside a published one
    releases = {r.sglang for r in TABLE}
    assert {(r.sglang, r.chip) for r in TABLE} == {(v, c) for v in releases for c in ("a2", "a3")}
    for version in releases:
        assert any(r.source == "published" for r in TABLE if r.sglang == version), version


#: NPUs per node of each chip (an example's header names its nodes "A2 nodes" or "A3 nodes").
CHIP_NPUS = {"a2": 8, "a3": 16}
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.yaml") if "sglangVersion" in p.read_text())


def example_chips(path: Path) -> tuple[set[str], dict[str, Any]]:
    """The chips ``path``'s header names (none named: it fits either, so every chip), and its
    PDDeployment."""
    text = path.read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    named = {m.lower() for m in re.findall(r"\b(A[23]) nodes\b", header)}
    docs = [d for d in yaml.safe_load_all(text) if d]
    pdd = next(d for d in docs if d["kind"] == "PDDeployment")
    return named or set(CHIP_NPUS), pdd


def test_every_example_s_chip_is_the_hardware_it_asks_for() -> None:
    for path in EXAMPLES:
        chips, pdd = example_chips(path)
        for role in ("prefill", "decode"):
            devices = pdd["spec"][role].get("devicesPerNode", 8)
            assert all(devices <= CHIP_NPUS[c] for c in chips), (path.name, role, chips)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_names_an_sglang_that_make_images_has_a_base_for(path: Path) -> None:
    """``make images SGLANG_VERSION=<v> CHIP=<chip>`` must find a base image for the version
    an example names, on each chip it runs on; and the version is the newest such release
    the runtime supports (the one the README's first build takes)."""
    chips, pdd = example_chips(path)
    version = pdd["spec"]["runtime"]["sglangVersion"]
    assert version in supported_sglang_versions(), (path.name, version)
    for chip in chips:
        known = [r.sglang for r in TABLE if r.chip == chip]
        assert version in known, f"{path.name}: no base image for SGLang {version} on {chip}"
    usable = [v for v in dict.fromkeys(r.sglang for r in TABLE)
              if all((v, c) in {(r.sglang, r.chip) for r in TABLE} for c in chips)
              and parse_sglang_version(v) is not None]  # fmt: skip
    newest = max(usable, key=lambda v: parse_sglang_version(v) or (0, 0, 0))
    assert version == newest, f"{path.name}: SGLang {version}, the newest with a base is {newest}"


@pytest.mark.parametrize("row", TABLE, ids=lambda r: f"{r.sglang}-{r.chip}")
def test_sglang_version_and_chip_pick_the_table_s_base(tmp_path: Path, row: Any) -> None:
    bin_dir = fake_engines(tmp_path, "docker")
    done = images(str(bin_dir), tmp_path, REGISTRY="r.example", ONLY="runtime",
                  SGLANG_VERSION=row.sglang, CHIP=row.chip, TAG="1.0")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"base image for SGLang {row.sglang} on {row.chip}" in done.stdout
    # an A2 and an A3 build of one release get different tags
    assert _runtime_build(tmp_path) == (
        f"buildx build --platform linux/arm64 -f runtime/Dockerfile "
        f"-t r.example/ascend-pd-runtime:1.0-{row.chip} --load "
        f"--build-arg BASE_IMAGE={row.image} --build-arg SGLANG_VERSION={row.sglang} ."
    )


def test_base_image_overrides_the_table(tmp_path: Path) -> None:
    bin_dir = fake_engines(tmp_path, "docker")
    mirror = "mirror.example/sglang:x"
    done = images(str(bin_dir), tmp_path, REGISTRY="r.example", ONLY="runtime", TAG="1.0",
                  SGLANG_VERSION="0.5.14", CHIP="a3", BASE_IMAGE=mirror)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "--build-arg BASE_IMAGE=mirror.example/sglang:x " in _runtime_build(tmp_path)
    assert "-t r.example/ascend-pd-runtime:1.0-a3 " in _runtime_build(tmp_path)


@pytest.mark.parametrize(
    ("version", "chip"),
    [("0.5.23", "a3"), ("0.5.13", "a2"), ("0.5.14 ", "a3"), ("a2", "a2")],
    ids=["unknown-release", "release-without-its-post", "trailing-space", "chip-as-version"],
)
def test_an_unknown_pair_is_refused_naming_what_the_table_knows(
    tmp_path: Path, version: str, chip: str
) -> None:
    bin_dir = fake_engines(tmp_path, "docker")
    done = images(str(bin_dir), tmp_path, REGISTRY="r.example", SGLANG_VERSION=version,
                  CHIP=chip)  # fmt: skip
    assert done.returncode == 1
    known = ", ".join(r.sglang for r in TABLE if r.chip == chip)
    assert done.stderr == (
        f"error: devtools/base-images.txt has no base image for SGLang {version} on {chip} (it "
        f"knows {known}); set BASE_IMAGE to an SGLang Ascend image carrying SGLang {version} "
        f"for {chip}\n"
    )
    assert not (tmp_path / "docker.log").exists()


def test_an_unknown_chip_is_refused(tmp_path: Path) -> None:
    bin_dir = fake_engines(tmp_path, "docker")
    done = images(str(bin_dir), tmp_path, REGISTRY="r.example", SGLANG_VERSION="0.5.14",
                  CHIP="910b")  # fmt: skip
    assert done.returncode == 1
    assert "CHIP=910b: use a2 (Atlas 800I A2, 8 NPUs per node) or a3" in done.stderr


def test_the_compatibility_page_shows_the_table() -> None:
    page = base_images.docs_path().read_text()
    shown = base_images.BLOCK.inside(page)
    assert shown == "\n" + base_images.render(TABLE)
    for row in TABLE:
        assert f"`{row.image}`" in shown, row
    # the rendered table is the page's, row for row: a release the file lacks is not shown
    rows = [line for line in shown.splitlines() if line.startswith("| 0.")]
    assert [line.split(" | ")[0][2:] for line in rows] == list(dict.fromkeys(
        r.sglang for r in TABLE))  # fmt: skip


def test_a_malformed_or_repeated_row_is_refused(tmp_path: Path) -> None:
    table = tmp_path / "base-images.txt"
    table.write_text("0.5.14 a4 img:1 published\n")
    malformed = re.escape("expected '<sglang> <a2|a3> <image>")
    with pytest.raises(base_images.BaseImagesError, match=malformed):
        base_images.load(table)
    table.write_text("# c\n0.5.14 a2 img:1 published\n0.5.14 a2 img:2 sibling\n")
    twice = re.escape(":3: SGLang 0.5.14 on a2 twice")
    with pytest.raises(base_images.BaseImagesError, match=twice):
        base_images.load(table)


OPERATOR = "registry.example.com/llm/ascend-pd-operator:9.9.9"
RUNTIME = "registry.example.com/llm/ascend-pd-runtime:9.9.9"
ARGS = f"--build-arg BASE_IMAGE={BASE} --build-arg SGLANG_VERSION=0.5.23"
IGNORE = "--ignorefile {df}.dockerignore"
BOTH = "linux/amd64,linux/arm64"
#: What each engine is asked to do, written out per engine, platform list and PUSH, for the
#: operator (the default: amd64 and arm64) and the runtime (the default: arm64).
COMMANDS = {
    ("docker", "default", ""): [
        f"docker buildx build --platform {BOTH} -f operator/Dockerfile -t {OPERATOR} .",
        f"docker buildx build --platform linux/arm64 -f runtime/Dockerfile -t {RUNTIME} "
        f"--load {ARGS} .",
    ],
    ("docker", "default", "1"): [
        f"docker buildx build --platform {BOTH} -f operator/Dockerfile -t {OPERATOR} --push .",
        f"docker buildx build --platform linux/arm64 -f runtime/Dockerfile -t {RUNTIME} "
        f"--load {ARGS} .",
        f"docker push {RUNTIME}",
    ],
    ("docker", "linux/amd64", "1"): [
        f"docker buildx build --platform linux/amd64 -f operator/Dockerfile -t {OPERATOR} --load .",
        f"docker push {OPERATOR}",
        f"docker buildx build --platform linux/amd64 -f runtime/Dockerfile -t {RUNTIME} "
        f"--load {ARGS} .",
        f"docker push {RUNTIME}",
    ],
    ("docker", BOTH, "1"): [
        f"docker buildx build --platform {BOTH} -f operator/Dockerfile -t {OPERATOR} --push .",
        f"docker buildx build --platform {BOTH} -f runtime/Dockerfile -t {RUNTIME} --push {ARGS} .",
    ],
}
for _engine in ("podman", "buildah"):
    _op = IGNORE.format(df="operator/Dockerfile")
    _rt = IGNORE.format(df="runtime/Dockerfile")
    _drop = f"{_engine} manifest exists {{0}} && {_engine} manifest rm {{0}}"
    COMMANDS |= {
        (_engine, "default", ""): [
            _drop.format(OPERATOR),
            f"{_engine} build --platform {BOTH} -f operator/Dockerfile {_op} "
            f"--manifest {OPERATOR} .",
            f"{_engine} build --platform linux/arm64 -f runtime/Dockerfile {_rt} -t {RUNTIME} "
            f"{ARGS} .",
        ],
        (_engine, "default", "1"): [
            _drop.format(OPERATOR),
            f"{_engine} build --platform {BOTH} -f operator/Dockerfile {_op} "
            f"--manifest {OPERATOR} .",
            f"{_engine} manifest push --all {OPERATOR} docker://{OPERATOR}",
            f"{_engine} build --platform linux/arm64 -f runtime/Dockerfile {_rt} -t {RUNTIME} "
            f"{ARGS} .",
            f"{_engine} push {RUNTIME}",
        ],
        (_engine, "linux/amd64", "1"): [
            f"{_engine} build --platform linux/amd64 -f operator/Dockerfile {_op} -t {OPERATOR} .",
            f"{_engine} push {OPERATOR}",
            f"{_engine} build --platform linux/amd64 -f runtime/Dockerfile {_rt} -t {RUNTIME} "
            f"{ARGS} .",
            f"{_engine} push {RUNTIME}",
        ],
        (_engine, BOTH, "1"): [
            _drop.format(OPERATOR),
            f"{_engine} build --platform {BOTH} -f operator/Dockerfile {_op} "
            f"--manifest {OPERATOR} .",
            f"{_engine} manifest push --all {OPERATOR} docker://{OPERATOR}",
            _drop.format(RUNTIME),
            f"{_engine} build --platform {BOTH} -f runtime/Dockerfile {_rt} "
            f"--manifest {RUNTIME} {ARGS} .",
            f"{_engine} manifest push --all {RUNTIME} docker://{RUNTIME}",
        ],
    }


def _settings(platform: str, push: str) -> dict[str, str]:
    out = {**SETTINGS, "TAG": "9.9.9"}
    if platform != "default":
        out["PLATFORM"] = platform
    if push:
        out["PUSH"] = push
    return out


@pytest.mark.parametrize(("engine", "platform", "push"), list(COMMANDS), ids="-".join)
def test_a_dry_run_prints_each_engine_s_commands(
    tmp_path: Path, engine: str, platform: str, push: str
) -> None:
    """With ENGINE named, a dry run needs no engine installed and runs nothing."""
    bin_dir = fake_engines(tmp_path)
    done = images(str(bin_dir), tmp_path, ENGINE=engine, DRY_RUN="1",
                  **_settings(platform, push))  # fmt: skip
    assert done.returncode == 0, done.stderr
    printed = [line[2:] for line in done.stdout.splitlines() if line.startswith("+ ")]
    assert printed == COMMANDS[engine, platform, push]
    # each image says what it is built for
    assert f"{OPERATOR} for {BOTH if platform == 'default' else platform}" in done.stdout


@pytest.mark.parametrize(("engine", "platform", "push"), list(COMMANDS), ids="-".join)
@pytest.mark.parametrize("earlier", ["", "1"], ids=["first-build", "list-exists"])
def test_a_run_asks_the_engine_for_what_the_dry_run_printed(
    tmp_path: Path, engine: str, platform: str, push: str, earlier: str
) -> None:
    """The engine gets exactly the printed commands; an earlier build's manifest list of the
    same name is removed first (podman and buildah would add to it), and only then."""
    bin_dir = fake_engines(tmp_path, engine)
    done = images(str(bin_dir), tmp_path, ENGINE=engine, FAKE_MANIFEST=earlier,
                  **_settings(platform, push))  # fmt: skip
    assert done.returncode == 0, done.stderr
    expected = []
    for command in COMMANDS[engine, platform, push]:
        if " && " in command:
            exists, remove = command.split(" && ")
            expected += [exists, remove] if earlier else [exists]
        else:
            expected.append(command)
    log = (tmp_path / f"{engine}.log").read_text().splitlines()
    assert log == [c.removeprefix(f"{engine} ") for c in expected]


def test_docker_says_a_multi_platform_image_is_not_kept_without_push(tmp_path: Path) -> None:
    bin_dir = fake_engines(tmp_path, "docker")
    done = images(str(bin_dir), tmp_path, ONLY="operator", REGISTRY="r.example", TAG="1")
    assert done.returncode == 0, done.stderr
    assert (
        "note: r.example/ascend-pd-operator:1 for linux/amd64,linux/arm64 is built but not kept "
        "(docker's image store holds one platform): add PUSH=1 to push it, or set one platform "
        "(OPERATOR_PLATFORM=linux/amd64) to load it"
    ) in done.stdout


@pytest.mark.parametrize(
    ("setting", "value"),
    [("PLATFORM", ""), ("PLATFORM", "arm64"), ("RUNTIME_PLATFORM", "linux/arm64,"),
     ("OPERATOR_PLATFORM", "linux/amd64,,linux/arm64"), ("PLATFORM", "linux/arm64 linux/amd64"),
     ("RUNTIME_PLATFORM", "Linux/ARM64"), ("OPERATOR_PLATFORM", ",linux/amd64")],
)  # fmt: skip
def test_a_malformed_platform_is_refused_naming_it(
    tmp_path: Path, setting: str, value: str
) -> None:
    bin_dir = fake_engines(tmp_path, "docker")
    done = images(str(bin_dir), tmp_path, **{**SETTINGS, setting: value})
    assert done.returncode == 1
    assert done.stderr == (
        f"error: {setting}={value}: give platforms as os/arch[/variant], comma-separated, e.g. "
        "linux/arm64 or linux/amd64,linux/arm64\n"
    )
    assert not (tmp_path / "docker.log").exists()


def test_each_image_takes_its_own_platform_setting(tmp_path: Path) -> None:
    """PLATFORM overrides both; without it each has its own, and a build that skips an image
    does not judge that image's setting."""
    bin_dir = fake_engines(tmp_path, "docker")
    done = images(str(bin_dir), tmp_path, DRY_RUN="1", ONLY="operator", TAG="1",
                  REGISTRY="r.example", RUNTIME_PLATFORM="bad",
                  OPERATOR_PLATFORM="linux/arm64")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "+ docker buildx build --platform linux/arm64 -f operator/Dockerfile" in done.stdout
    done = images(str(bin_dir), tmp_path, DRY_RUN="1", RUNTIME_PLATFORM="linux/amd64",
                  OPERATOR_PLATFORM="bad", PLATFORM="linux/riscv64", **SETTINGS)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("--platform linux/riscv64 ") == 2


def test_only_the_operator_needs_no_base(tmp_path: Path) -> None:
    bin_dir = fake_engines(tmp_path, "podman", "docker")
    done = images(str(bin_dir), tmp_path, REGISTRY="r.example/", ONLY="operator", TAG="9.9.9",
                  PUSH="1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    # docker is preferred when several engines are present
    assert (tmp_path / "docker.log").read_text() == (
        "buildx build --platform linux/amd64,linux/arm64 -f operator/Dockerfile "
        "-t r.example/ascend-pd-operator:9.9.9 --push .\n"
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
