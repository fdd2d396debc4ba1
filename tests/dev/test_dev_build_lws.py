"""The LWS build's recipe (``controlplane.build_lws``): the committed module and the one
``go build``; the build itself runs in the ``prepare-lws`` step and is judged by the e2e test
that runs what it built (tests/e2e/test_bench_peer_smoke.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascend_pd_dev.controlplane import build_gomod, build_lws


def test_the_committed_gomod_requires_the_release_and_builds_the_manager() -> None:
    text = (build_lws.GOMOD_DIR / "go.mod").read_text()
    assert build_lws.gomod_problems(text) == []
    mod = build_gomod.parse_gomod(text)
    assert build_gomod.go_version_tuple(f"go{mod.go}") <= build_gomod.GO_MINIMUM
    assert mod.replaces == {}
    sums = (build_lws.GOMOD_DIR / "go.sum").read_text()
    assert f"{build_lws.MODULE} v{build_lws.VERSION} h1:" in sums


def test_a_gomod_of_another_release_or_without_the_manager_is_refused_by_name() -> None:
    text = (build_lws.GOMOD_DIR / "go.mod").read_text()
    other = text.replace(f"{build_lws.MODULE} v{build_lws.VERSION}", f"{build_lws.MODULE} v0.6.2")
    assert build_lws.gomod_problems(other) == [
        f"requires {build_lws.MODULE} v0.6.2, expected v{build_lws.VERSION}"
    ]
    assert build_lws.gomod_problems(text.replace(f"tool {build_lws.COMMAND}\n", "")) == [
        f"tool directive missing: {build_lws.COMMAND}"
    ]


def test_one_go_build_of_the_manager_stamped_with_the_release(tmp_path: Path) -> None:
    command = build_lws.build_command(Path("/go/bin/go"), tmp_path / "manager")
    assert command[command.index("/go/bin/go") + 1] == "build" and "-trimpath" in command
    assert command[-1] == build_lws.COMMAND
    assert command[command.index("-o") + 1] == str(tmp_path / "manager")
    (ldflags,) = [a for a in command if a.startswith("-ldflags=")]
    assert f"{build_lws.MODULE}/pkg/version.GitVersion=v{build_lws.VERSION}" in ldflags


def test_a_cached_manager_of_another_gomod_or_without_its_crd_is_not_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gomod = tmp_path / "gomod"
    gomod.mkdir()
    (gomod / "go.mod").write_text("module a\n")
    (gomod / "go.sum").write_text("")
    monkeypatch.setattr(build_lws, "GOMOD_DIR", gomod)
    cache = build_lws.cache_dir()
    assert cache == tmp_path / "cache" / "ascend-pd" / f"lws-{build_lws.VERSION}" / "recipe-1"
    build_lws.binary().parent.mkdir(parents=True)
    build_lws.binary().write_text("#!/bin/sh\n")
    build_lws.binary().chmod(0o755)
    info = {"recipe": build_lws.RECIPE, "digest": build_lws.recipe_digest()}
    (cache / "build-info.json").write_text(json.dumps(info))
    assert not build_lws.binaries_ready()  # no CRD
    build_lws.crd_dir().mkdir()
    (build_lws.crd_dir() / "leaderworkerset.x-k8s.io_leaderworkersets.yaml").write_text("kind: x\n")
    assert build_lws.binaries_ready()
    (gomod / "go.sum").write_text("k8s.io/api v0.33.3 h1:x=\n")
    assert not build_lws.binaries_ready()
