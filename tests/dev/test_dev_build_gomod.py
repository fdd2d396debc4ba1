"""The pure parts of the control-plane build (Go modules, one committed module per release) and
of picking the release."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ascend_pd_dev.controlplane import build, build_gomod, versions

KUBERNETES_GOMOD = """module k8s.io/kubernetes

go 1.26.0

require (
\tgithub.com/spf13/cobra v1.10.2
\tk8s.io/api v0.0.0
\tk8s.io/klog/v2 v2.140.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go // a comment
\tgithub.com/example/fork => github.com/example/fork v1.2.3
)
"""


@pytest.mark.parametrize("release", sorted(versions.RELEASES))
def test_the_committed_gomod_pins_every_staging_module_to_the_pinned_release(
    release: str,
) -> None:
    """Read independently of the build's own checker: Go resolves a requirement of a k8s.io
    staging module at v0.0.0 (what k8s.io/kubernetes requires) only through a replace of
    ours, and every such replace must be the release k8s.io/kubernetes is pinned at."""
    row = versions.RELEASES[release]
    assert row.gomod_dir.name == f"k8s-{release}"
    assert row.version.startswith(f"{release}.")
    text = (row.gomod_dir / "go.mod").read_text()
    pinned = re.search(r"^\s*k8s\.io/kubernetes (v1\.(\d+)\.(\d+))", text, re.M)
    assert pinned is not None and pinned.group(1) == f"v{row.version}"
    staging_release = f"v0.{pinned.group(2)}.{pinned.group(3)}"
    replaced = dict(re.findall(r"^\s*(k8s\.io/\S+) => \1 (v\S+)$", text, re.M))
    assert replaced, "no k8s.io replace lines"
    assert set(replaced.values()) == {staging_release}
    at_v000 = re.findall(r"^\s*(k8s\.io/\S+) v0\.0\.0(?:\s|$)", text, re.M)
    assert at_v000 and set(at_v000) <= set(replaced)
    staging = build_gomod.committed_staging(text)
    assert staging == tuple(sorted(replaced))
    assert build_gomod.gomod_problems(text, row.version, staging) == []
    # the go.sum has the kubernetes module itself (go build -mod=readonly needs its hashes)
    go_sum = (row.gomod_dir / "go.sum").read_text()
    assert f"k8s.io/kubernetes v{row.version} h1:" in go_sum
    assert f"k8s.io/api {staging_release} h1:" in go_sum


def test_staging_modules_are_the_ones_kubernetes_replaces_with_its_staging_tree() -> None:
    assert build_gomod.staging_modules(KUBERNETES_GOMOD) == ("k8s.io/api", "k8s.io/client-go")


def test_the_rendered_gomod_requires_the_release_and_replaces_its_staging_modules() -> None:
    text = build_gomod.render_gomod("1.36.3", ("k8s.io/client-go", "k8s.io/api"), "1.26.0")
    assert "require k8s.io/kubernetes v1.36.3\n" in text
    assert (
        "\tk8s.io/api => k8s.io/api v0.36.3\n\tk8s.io/client-go => k8s.io/client-go v0.36.3\n"
        in text
    )
    assert "\tk8s.io/kubernetes/cmd/kube-scheduler\n" in text
    assert text.startswith("module ascend-pd.dev/controlplane\n\ngo 1.26.0\n")
    assert build_gomod.gomod_problems(text, "1.36.3", ("k8s.io/api", "k8s.io/client-go")) == []


def test_a_gomod_mixing_releases_or_missing_a_replace_is_refused_by_name() -> None:
    text = build_gomod.render_gomod("1.36.3", ("k8s.io/api",), "1.26.0")
    mixed = text.replace("k8s.io/api v0.36.3", "k8s.io/api v0.35.0")
    assert build_gomod.gomod_problems(mixed, "1.36.3", ("k8s.io/api",)) == [
        "k8s.io/api is replaced by ('k8s.io/api', 'v0.35.0'), expected v0.36.3"
    ]
    problems = build_gomod.gomod_problems(text, "1.36.4", ("k8s.io/api", "k8s.io/kubelet"))
    assert "requires k8s.io/kubernetes v1.36.3, expected v1.36.4" in problems
    assert "k8s.io/kubelet is replaced by None, expected v0.36.4" in problems
    no_tools = text.replace("\tk8s.io/kubernetes/cmd/kube-apiserver\n", "")
    assert build_gomod.gomod_problems(no_tools, "1.36.3", ("k8s.io/api",)) == [
        "tool directives missing: k8s.io/kubernetes/cmd/kube-apiserver"
    ]


def test_staging_version_is_v0_of_the_same_minor_and_patch() -> None:
    assert build_gomod.staging_version("1.36.3") == "v0.36.3"
    assert build_gomod.staging_version("v1.37.0") == "v0.37.0"
    with pytest.raises(build.BuildError, match=r"'1\.36'.*1\.MINOR\.PATCH"):
        build_gomod.staging_version("1.36")


def test_one_go_build_of_the_three_commands_stamped_with_the_release(tmp_path: Path) -> None:
    command = build_gomod.build_command(Path("/go/bin/go"), tmp_path / "bin", "1.36.3")
    assert command[command.index("/go/bin/go") + 1] == "build"
    assert command.count("build") == 1 and "-trimpath" in command
    assert command[-3:] == [f"k8s.io/kubernetes/cmd/{b}" for b in build.BINARIES]
    assert command[command.index("-o") + 1] == f"{tmp_path / 'bin'}/"  # a directory: all three
    (ldflags,) = [a for a in command if a.startswith("-ldflags=")]
    words = ldflags.removeprefix("-ldflags=").split()
    assert words[:2] == ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"{package}.gitVersion=v1.36.3" in words
        assert f"{package}.gitMinor=36" in words and f"{package}.gitMajor=1" in words


def test_the_build_environment_keeps_caches_in_work_and_trusts_only_go_sum(
    tmp_path: Path,
) -> None:
    base = {"PATH": "/usr/bin", "GOFLAGS": "-mod=mod", "GOPATH": "/home/x/go",
            "GOPROXY": "https://proxy.example", "GONOSUMDB": "*", "HOME": "/root"}  # fmt: skip
    env = build_gomod.build_environment(base, Path("/opt/go/bin/go"), tmp_path)
    assert env["GOFLAGS"] == "-mod=readonly -modcacherw"
    assert env["GOMODCACHE"] == str(tmp_path / "gomodcache")
    assert env["GOCACHE"] == str(tmp_path / "gocache")
    assert env["GOPATH"] == str(tmp_path / "gopath")
    assert env["GOTMPDIR"] == str(tmp_path / "tmp")
    assert env["GOSUMDB"] == "off" and env["GOTOOLCHAIN"] == "local"
    assert env["GOPROXY"] == "https://proxy.example" and "GONOSUMDB" not in env
    assert env["PATH"].startswith("/opt/go/bin:") and env["HOME"] == "/root"


def test_the_go_version_is_read_from_go_env() -> None:
    assert build_gomod.go_version_tuple("go1.26.8") == (1, 26)
    assert build_gomod.go_version_tuple("go1.9") == (1, 9)
    assert build_gomod.go_version_tuple("devel") is None


def test_cached_binaries_of_another_gomod_are_not_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(build_gomod, "GOMOD_ROOT", tmp_path)
    row = build_gomod.Release("1.30", "1.30.2", "minutes")
    row.gomod_dir.mkdir()
    (row.gomod_dir / "go.mod").write_text("module a\n")
    (row.gomod_dir / "go.sum").write_text("")
    cache = row.cache_dir()
    assert cache == tmp_path / "cache" / "ascend-pd" / "k8s-1.30.2" / "recipe-1"
    (cache / "bin").mkdir(parents=True)
    for name in build.BINARIES:
        (cache / "bin" / name).write_text("#!/bin/sh\n")
        (cache / "bin" / name).chmod(0o755)
    info = {"recipe": row.recipe, "digest": row.recipe_digest()}
    (cache / "build-info.json").write_text(json.dumps(info))
    assert row.binaries_ready()
    (row.gomod_dir / "go.sum").write_text("k8s.io/api v0.30.3 h1:x=\n")  # another module graph
    assert not row.binaries_ready()


def test_the_release_table_has_the_newest_as_default_and_the_oldest_as_floor() -> None:
    minors = {r.minor for r in versions.RELEASES.values()}
    assert versions.RELEASES[versions.DEFAULT].minor == max(minors)
    assert versions.RELEASES[versions.FLOOR].minor == min(minors)
    assert versions.FLOOR != versions.DEFAULT


def test_the_release_is_the_option_else_the_environment_else_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(versions.K8S_VERSION_ENV, raising=False)
    assert versions.selected_release() == versions.DEFAULT == "1.36"
    monkeypatch.setenv(versions.K8S_VERSION_ENV, versions.FLOOR)
    assert versions.selected_release() == versions.FLOOR
    assert versions.control_plane() is versions.RELEASES[versions.FLOOR]
    assert versions.selected_release("1.36") == "1.36"
    assert versions.control_plane("v1.36").version == "1.36.3"
    assert versions.RELEASES["1.36"].minor == 36


def test_an_unknown_release_is_refused_naming_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(versions.K8S_VERSION_ENV, "1.20")
    expected = " or ".join(sorted(versions.RELEASES))
    with pytest.raises(
        versions.VersionError, match=rf"ASCEND_PD_K8S_VERSION='1\.20'.*{re.escape(expected)}"
    ):
        versions.selected_release()
    with pytest.raises(versions.VersionError, match=r"--k8s-version='1\.36\.3'"):
        versions.selected_release("1.36.3")
