"""The patch set fits every supported SGLang release, not only the ones driven end to end.

For each release 0.5.10–0.5.23 from PyPI (``pip download --no-deps``, cached),
the files the patches touch are taken from the wheel, patched with
``ascend-pd-runtime patch-sglang --site-dir`` and checked: every patch of the
version applied, the result still compiles, a second run changes nothing.
"""

from __future__ import annotations

import argparse
import py_compile
import zipfile
from pathlib import Path

import pytest
import sglang_harness as harness

from ascend_pd_runtime.layout import parse_sglang_version, supported_sglang_versions
from ascend_pd_runtime.sglang_patch import cli as patch_cli
from ascend_pd_runtime.sglang_patch.patches import patches_for

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(600)]


def _site_from_wheel(version: str, site: Path) -> list[Path]:
    parsed = parse_sglang_version(version)
    assert parsed is not None
    wanted = {f"sglang/{h.path}" for p in patches_for(parsed) for h in p.hunks}
    metadata = f"sglang-{version}.dist-info/METADATA"
    with zipfile.ZipFile(harness.wheel_for(version)) as wheel:
        for name in (*sorted(wanted), metadata):
            wheel.extract(name, site)
    return [site / name for name in sorted(wanted)]


@pytest.mark.parametrize("version", supported_sglang_versions())
def test_patch_set_applies_to_the_release(
    version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _site_from_wheel(version, tmp_path)
    args = argparse.Namespace(check=False, site_dir=str(tmp_path))
    assert patch_cli.run(args) == patch_cli.EXIT_OK, capsys.readouterr().err
    out = capsys.readouterr().out
    parsed = parse_sglang_version(version)
    assert parsed is not None
    for patch in patches_for(parsed):
        assert f"{patch.name:<20} applied" in out
    for path in files:
        assert "# ascend-pd patch:" in path.read_text()
        py_compile.compile(str(path), cfile=str(tmp_path / "check.pyc"), doraise=True)
    patched = {p: p.read_text() for p in files}
    assert patch_cli.run(args) == patch_cli.EXIT_OK
    assert "already applied" in capsys.readouterr().out
    assert {p: p.read_text() for p in files} == patched
    assert patch_cli.run(argparse.Namespace(check=True, site_dir=str(tmp_path))) == 0
