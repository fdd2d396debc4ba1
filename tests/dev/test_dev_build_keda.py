"""The KEDA build's recipe (``controlplane.build_keda``): the committed module and the one
``go build``; the build itself runs in the ``prepare-keda`` step and is judged by the e2e test
that runs what it built (tests/e2e/test_keda_scaling.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascend_pd_dev.controlplane import build_gomod, build_keda


def test_the_committed_gomod_requires_the_release_and_builds_both_commands() -> None:
    text = (build_keda.GOMOD_DIR / "go.mod").read_text()
    assert build_keda.gomod_problems(text) == []
    mod = build_gomod.parse_gomod(text)
    # the Go the machine has builds it: no newer go line (KEDA 2.21.1 says go 1.27.4)
    assert build_gomod.go_version_tuple(f"go{mod.go}") <= build_gomod.GO_MINIMUM
    # KEDA's own replacement of an unlicensed module, which a dependency's go.mod cannot make
    (replaced,) = mod.replaces
    assert replaced == "github.com/nexus-rpc/nexus-proto-annotations"
    # every module the build downloads is pinned by the committed go.sum
    sums = (build_keda.GOMOD_DIR / "go.sum").read_text()
    assert f"{build_keda.MODULE} v{build_keda.VERSION} h1:" in sums


def test_a_gomod_of_another_release_or_without_a_command_is_refused_by_name() -> None:
    text = (build_keda.GOMOD_DIR / "go.mod").read_text()
    other = text.replace(
        f"{build_keda.MODULE} v{build_keda.VERSION}", f"{build_keda.MODULE} v2.20.2"
    )
    assert build_keda.gomod_problems(other) == [
        f"requires {build_keda.MODULE} v2.20.2, expected v{build_keda.VERSION}"
    ]
    adapter = build_keda.COMMANDS["adapter"]
    assert build_keda.gomod_problems(text.replace(f"\t{adapter}\n", "")) == [
        f"tool directives missing: {adapter}"
    ]


def test_one_go_build_of_both_commands_stamped_with_the_release(tmp_path: Path) -> None:
    command = build_keda.build_command(Path("/go/bin/go"), tmp_path / "bin")
    assert command[command.index("/go/bin/go") + 1] == "build" and "-trimpath" in command
    assert command[-2:] == list(build_keda.COMMANDS.values())
    assert command[command.index("-o") + 1] == f"{tmp_path / 'bin'}/"
    (ldflags,) = [a for a in command if a.startswith("-ldflags=")]
    assert f"{build_keda.MODULE}/version.Version={build_keda.VERSION}" in ldflags


def test_cached_binaries_of_another_gomod_or_without_crds_are_not_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gomod = tmp_path / "gomod"
    gomod.mkdir()
    (gomod / "go.mod").write_text("module a\n")
    (gomod / "go.sum").write_text("")
    monkeypatch.setattr(build_keda, "GOMOD_DIR", gomod)
    cache = build_keda.cache_dir()
    assert cache == tmp_path / "cache" / "ascend-pd" / f"keda-{build_keda.VERSION}" / "recipe-1"
    (cache / "bin").mkdir(parents=True)
    for name in build_keda.COMMANDS:
        (cache / "bin" / name).write_text("#!/bin/sh\n")
        (cache / "bin" / name).chmod(0o755)
    info = {"recipe": build_keda.RECIPE, "digest": build_keda.recipe_digest()}
    (cache / "build-info.json").write_text(json.dumps(info))
    assert not build_keda.binaries_ready()  # no CRDs
    (cache / "crds").mkdir()
    (cache / "crds" / "keda.sh_scaledobjects.yaml").write_text("kind: CustomResourceDefinition\n")
    assert build_keda.binaries_ready()
    (gomod / "go.sum").write_text("k8s.io/api v0.36.4 h1:x=\n")
    assert not build_keda.binaries_ready()
