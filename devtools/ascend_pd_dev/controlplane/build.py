"""What every build here shares: building once under a file lock, with progress lines.

The control plane's binaries (``build_gomod``, one Kubernetes release each; the CRD checker
runs the newest release's kube-apiserver) are built once per user, release and recipe into a
cache directory, and a build takes minutes: ``build_once`` runs a build under that
directory's file lock (concurrent callers wait for one build instead of starting several,
then find it done), announces it, reports its time and writes the ``build-info.json`` stamp
that says it is complete. Also here: running a build step into its log, the heartbeat of a
long compile, and the Debian packages (etcd, openssl) a running cluster needs.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ascend_pd_dev.controlplane import paths

#: the control plane's commands, each release's
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
#: apt packages a running dev cluster needs (etcd; openssl for its credentials)
RUNTIME_PACKAGES = ("etcd-server", "openssl")
#: the stamp a build writes last: without it (or with another recipe in it) nothing is built
INFO_FILE = "build-info.json"

Progress = Callable[[str], None]


class BuildError(RuntimeError):
    """Something could not be built; the message names the failed step and its log."""


def default_progress(message: str) -> None:
    print(f"ascend-pd-dev cluster: {message}", file=sys.stderr, flush=True)


def read_info(cache: Path) -> dict[str, Any]:
    """The stamp of the last complete build in ``cache`` (empty: none)."""
    try:
        info = json.loads((cache / INFO_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def build_once(
    cache: Path,
    what: str,
    ready: Callable[[], bool],
    build: Callable[[Path], dict[str, Any]],
    progress: Progress = default_progress,
    rebuild: bool = False,
) -> None:
    """Run ``build`` (given its log file) unless ``ready()``, under ``cache``'s file lock.

    ``build`` leaves its result in ``cache`` and returns what the stamp records besides the
    time (the recipe, what it was built from); the stamp is written after it returns, so a
    build that failed half-way is never taken for a complete one.
    """
    if ready() and not rebuild:
        return
    with file_lock(cache / ".build.lock"):
        # another process may have finished the build while we waited for the lock
        if ready() and not rebuild:
            return
        # a rebuild's callers wait on the lock instead of taking the old stamp for this build
        (cache / INFO_FILE).unlink(missing_ok=True)
        started = time.monotonic()
        log = cache / "build.log"
        log.write_text("")
        progress(f"building {what} (log: {log})")
        info = build(log)
        elapsed = time.monotonic() - started
        info["build_seconds"] = round(elapsed, 1)
        (cache / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
        progress(f"built {what} in {elapsed / 60:.1f} min; cached in {cache}")


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (created if missing), held for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_logged(
    cmd: list[str],
    log: Path,
    step: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    echo: Progress | None = None,
) -> None:
    """Run ``cmd`` with its output appended to ``log``; ``echo`` also gets make's step lines."""
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, cwd=cwd, text=True, errors="replace",
        )  # fmt: skip
        assert proc.stdout is not None
        announcing = False
        for line in proc.stdout:
            out.write(line)
            if echo is None:
                continue
            # the Kubernetes build announces each step with '+++', its Go targets indented below
            if line.startswith("+++"):
                announcing = True
                echo("  " + line.split("]", 1)[-1].strip())
            elif announcing and line[:1].isspace() and line.strip():
                echo("    " + line.strip())
            else:
                announcing = False
        returncode = proc.wait()
    if returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise BuildError(f"{step} failed (exit {returncode}); log: {log}\n{tail}")


def missing_apt_packages(packages: tuple[str, ...] = RUNTIME_PACKAGES) -> list[str]:
    """The packages that dpkg does not report as installed."""
    missing = []
    for package in packages:
        done = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or "install ok installed" not in done.stdout:
            missing.append(package)
    return missing


#: How long apt-get waits for a lock another apt run holds.
APT_LOCK_WAIT_SECONDS = 600


def ensure_apt_packages(
    log: Path, progress: Progress, packages: tuple[str, ...] = RUNTIME_PACKAGES
) -> None:
    if not missing_apt_packages(packages):
        return
    # Tiers and clusters start side by side and each needs etcd: one apt-get at a time
    # (two fail on apt's own lock, "Could not get lock /var/lib/apt/lists/lock"), and what
    # another process installed meanwhile is not installed again. apt's lock timeout waits
    # for an apt run of the machine's own (unattended upgrades) instead of failing.
    with file_lock(paths.cache_root() / ".apt.lock"):
        missing = missing_apt_packages(packages)
        if not missing:
            return
        if os.geteuid() != 0:
            raise BuildError(
                f"missing Debian packages {', '.join(missing)}; install them as root: "
                f"apt-get install {' '.join(missing)}"
            )
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        wait = ["-o", f"DPkg::Lock::Timeout={APT_LOCK_WAIT_SECONDS}"]
        progress(f"installing Debian packages: {', '.join(missing)}")
        run_logged(["apt-get", *wait, "update", "-q"], log, "apt-get update", env=env)
        run_logged(
            ["apt-get", *wait, "install", "-y", "-q", "--no-install-recommends", *missing],
            log,
            "apt-get install",
            env=env,
        )


@contextmanager
def heartbeat(progress: Progress, usually: str) -> Iterator[None]:
    """A "still compiling" line every 30 s while the block runs (a long compile is otherwise
    silent); ``usually`` says how long it takes, e.g. "5-10 minutes on 2 cores"."""
    started = time.monotonic()
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(30):
            minutes, seconds = divmod(int(time.monotonic() - started), 60)
            progress(f"  still compiling ({minutes}m{seconds:02d}s; usually {usually})")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()


def ensure_runtime_packages(progress: Progress = default_progress) -> None:
    """What a running cluster needs even when the binaries came from the cache."""
    log = paths.cache_root() / "runtime-packages.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    ensure_apt_packages(log, progress, RUNTIME_PACKAGES)


def etcd_binary() -> Path:
    for candidate in (Path("/usr/bin/etcd"), Path("/usr/local/bin/etcd")):
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("etcd")
    if found is None:
        raise BuildError("etcd is not installed (Debian package etcd-server)")
    return Path(found)
