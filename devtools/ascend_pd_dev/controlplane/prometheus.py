"""Install (once) and locate Prometheus and promtool, the oracle of the alert and query tests.

The chart's PrometheusRule and the dashboard's queries are checked by the real Prometheus,
never by a PromQL parser of our own. This machine reaches only package registries, so both
binaries come from Debian's ``prometheus`` package of the system's release (bookworm:
2.42.0): the package is downloaded through a private apt state (its own source list, index
and cache, made from the system's Debian entries and keyring; the system's apt state is
never touched) and unpacked with ``dpkg -x``; nothing is installed. The two binaries link
only against libc. They are cached per user under ``~/.cache/ascend-pd/prometheus-<ver>/``
beside a recipe stamp; a file lock makes concurrent callers wait for one download.
``make demo`` never needs them: only the tests that evaluate PromQL call ``ensure``.
``ASCEND_PD_PROMTOOL`` overrides the lookup with a directory holding both binaries.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ascend_pd_dev.controlplane import apt, build, paths
from ascend_pd_dev.controlplane.build import Progress

PACKAGE = "prometheus"
#: the upstream release of the system's Debian package (checked after unpacking)
VERSION = "2.42.0"
BINARIES = ("promtool", "prometheus")
#: bump when the recipe changes, so a cached copy of an older recipe is fetched again
RECIPE = 1


class PrometheusError(RuntimeError):
    """Prometheus could not be found or installed; the message names the step and its log."""


def cache_dir() -> Path:
    return paths.cache_root() / f"prometheus-{VERSION}"


def bin_dir() -> Path:
    """The directory holding ``promtool`` and ``prometheus`` (or the override)."""
    override = os.environ.get("ASCEND_PD_PROMTOOL")
    return Path(override) if override else cache_dir() / "bin"


def info_path() -> Path:
    return cache_dir() / "install-info.json"


def ready() -> bool:
    if os.environ.get("ASCEND_PD_PROMTOOL"):
        return all(os.access(bin_dir() / b, os.X_OK) for b in BINARIES)
    try:
        recipe = json.loads(info_path().read_text()).get("recipe")
    except (OSError, ValueError):
        return False
    return recipe == RECIPE and all(os.access(bin_dir() / b, os.X_OK) for b in BINARIES)


def source_list(sources: list[apt.AptSource]) -> str:
    """A one-line-format source list of the system release's binary Debian entries."""
    lines = []
    for s in sources:
        option = f"[signed-by={s.signed_by}] " if s.signed_by else ""
        lines.append(f"deb {option}{s.uri} {s.suite} {' '.join(s.components)}")
    if not lines:
        raise PrometheusError("no Debian archive entry for this release in /etc/apt")
    return "\n".join(lines) + "\n"


def upstream_version(version_output: str) -> str:
    """``promtool --version``'s first line -> the upstream release (``2.42.0``)."""
    match = re.search(r"version (\d+\.\d+\.\d+)", version_output)
    if match is None:
        raise PrometheusError(f"cannot read a version from {version_output.splitlines()[:1]}")
    return match.group(1)


def _run(cmd: list[str], log: Path, step: str, cwd: Path | None = None) -> None:
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        done = subprocess.run(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd,
            check=False,
        )  # fmt: skip
    if done.returncode != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:])
        raise PrometheusError(f"{step} failed (exit {done.returncode}); log: {log}\n{tail}")


def _default_progress(message: str) -> None:
    print(f"ascend-pd prometheus: {message}", file=sys.stderr, flush=True)


def ensure(progress: Progress = _default_progress) -> Path:
    """Return the directory holding ``promtool`` and ``prometheus``, fetching them once."""
    if ready():
        return bin_dir()
    if os.environ.get("ASCEND_PD_PROMTOOL"):
        raise PrometheusError(
            f"ASCEND_PD_PROMTOOL={bin_dir()}: needs executable {' and '.join(BINARIES)}"
        )
    cache = cache_dir()
    with build.file_lock(cache / ".install.lock"):
        if ready():  # another process finished while we waited for the lock
            return bin_dir()
        started = time.monotonic()
        log = cache / "install.log"
        log.write_text("")
        work = cache / "work"
        shutil.rmtree(work, ignore_errors=True)
        apt_dir = work / "apt"
        for sub in ("lists/partial", "cache/archives/partial", "sources.list.d"):
            (apt_dir / sub).mkdir(parents=True, exist_ok=True)
        try:
            (apt_dir / "sources.list").write_text(source_list(apt.system_apt_sources()))
            options = apt.private_apt_options(apt_dir)
            progress(f"fetching Debian's {PACKAGE} package (private apt state; log: {log})")
            _run(["apt-get", *options, "update", "-q"], log, "apt-get update")
            debs = work / "debs"
            debs.mkdir()
            _run(["apt-get", *options, "download", PACKAGE], log, "apt-get download", cwd=debs)
            (deb,) = sorted(debs.glob(f"{PACKAGE}_*.deb"))
            root = work / "root"
            _run(["dpkg", "-x", str(deb), str(root)], log, f"dpkg -x {deb.name}")
            staged = work / "bin"
            staged.mkdir()
            for name in BINARIES:
                shutil.copy2(root / "usr" / "bin" / name, staged / name)
            done = subprocess.run(
                [str(staged / "promtool"), "--version"], capture_output=True, text=True,
                check=False,
            )  # fmt: skip
            found = upstream_version(done.stdout + done.stderr)
            if found != VERSION:
                raise PrometheusError(
                    f"{deb.name} carries Prometheus {found}, expected {VERSION}; update "
                    f"VERSION in {__name__} after running the alert and query tests with it"
                )
            target = cache / "bin"
            shutil.rmtree(target, ignore_errors=True)
            staged.rename(target)
            info = {
                "recipe": RECIPE,
                "version": found,
                "deb": deb.name,
                "seconds": round(time.monotonic() - started, 1),
            }
            info_path().write_text(json.dumps(info, indent=2) + "\n")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        progress(f"Prometheus {VERSION} cached in {target}")
    return bin_dir()


def promtool() -> Path:
    return ensure() / "promtool"


def prometheus() -> Path:
    return ensure() / "prometheus"
