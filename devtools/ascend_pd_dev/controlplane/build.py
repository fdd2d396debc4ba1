"""Build (once) and locate kube-apiserver, kube-controller-manager and kube-scheduler 1.20.2.

This machine has no container engine and reaches only package registries, so the control plane
comes from Debian: etcd from ``etcd-server``, and the three Kubernetes binaries built from
bookworm's ``kubernetes`` source package with ``golang-1.19-go`` and the tree's own ``make``
(the tree vendors every dependency, so no Go proxy is involved). The source is fetched through a
private apt configuration (its own deb-src list, index and cache under the build cache) so the
system's apt sources stay untouched. The result is cached per user and per recipe (a checkout
of an older recipe keeps using its own binaries); a file lock makes concurrent callers wait for
one build instead of starting several.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ascend_pd_dev.controlplane import paths, reflect2_fix

#: apt packages the build and the cluster need
APT_PACKAGES = (
    "etcd-server",
    "golang-1.19-go",
    "rsync",
    "make",
    "openssl",
    # unpacking the source package
    "dpkg-dev",
    "xz-utils",
)
#: apt packages a running dev cluster needs (etcd; openssl for its credentials)
RUNTIME_PACKAGES = ("etcd-server", "openssl")
SOURCE_PACKAGE = "kubernetes"
SOURCE_VERSION = "1.20.5+really1.20.2-1.1+deb12u1"
#: the Kubernetes release that source package builds
VERSION = "1.20.2"
GO_ROOT = Path("/usr/lib/go-1.19")
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
#: bump when the build recipe changes: each recipe has its own cache directory
RECIPE = 2
#: how long a build takes, for the progress lines
USUALLY = "5-15 minutes on 2 cores"

Progress = Callable[[str], None]


class BuildError(RuntimeError):
    """The control plane could not be built; the message names the failed step and its log."""


@dataclass(frozen=True)
class AptSource:
    """One Debian archive entry of the system's apt configuration."""

    uri: str
    suite: str
    components: tuple[str, ...]
    signed_by: str | None


def cache_dir() -> Path:
    """This recipe's build cache (``~/.cache/ascend-pd/k8s-1.20.2/recipe-N``)."""
    return paths.build_cache(VERSION) / f"recipe-{RECIPE}"


def bin_dir() -> Path:
    return cache_dir() / "bin"


def binaries_ready() -> bool:
    info = cache_dir() / "build-info.json"
    if not info.is_file():
        return False
    try:
        recipe = json.loads(info.read_text()).get("recipe")
    except (OSError, ValueError):
        return False
    return recipe == RECIPE and all(os.access(bin_dir() / b, os.X_OK) for b in BINARIES)


def missing_apt_packages(packages: tuple[str, ...] = APT_PACKAGES) -> list[str]:
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


def parse_apt_sources(one_line: str, deb822: str, codename: str) -> list[AptSource]:
    """The binary Debian archive entries for ``codename`` (and its -updates/-security suites).

    ``one_line`` is the text of ``sources.list`` files, ``deb822`` of ``*.sources`` files.
    Only entries whose suite belongs to ``codename`` are kept, so third-party repositories
    (with their own suite names) never reach the private source list.
    """
    found: list[AptSource] = []

    def keep(uri: str, suite: str, components: list[str], signed_by: str | None) -> None:
        if suite == codename or suite.startswith(codename + "-"):
            source = AptSource(uri.rstrip("/"), suite, tuple(components), signed_by)
            if source not in found:
                found.append(source)

    for raw in one_line.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line.startswith("deb "):
            continue
        words = line.split()[1:]
        options: dict[str, str] = {}
        if words and words[0].startswith("["):
            opts: list[str] = []
            while words:
                word = words.pop(0)
                opts.append(word.strip("[]"))
                if word.endswith("]"):
                    break
            options = dict(o.split("=", 1) for o in opts if "=" in o)
        if len(words) >= 3:
            keep(words[0], words[1], words[2:], options.get("signed-by"))

    for stanza in re.split(r"\n\s*\n", deb822):
        fields: dict[str, str] = {}
        for raw in stanza.splitlines():
            if raw.lstrip().startswith("#") or ":" not in raw or raw[:1].isspace():
                continue
            key, value = raw.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").lower() == "no":
            continue
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                keep(uri, suite, fields.get("components", "").split(), fields.get("signed-by"))
    return found


def deb_src_list(sources: list[AptSource]) -> str:
    """A one-line-format sources.list with a ``deb-src`` line for each archive entry."""
    lines = []
    for s in sources:
        option = f"[signed-by={s.signed_by}] " if s.signed_by else ""
        lines.append(f"deb-src {option}{s.uri} {s.suite} {' '.join(s.components)}")
    return "\n".join(lines) + "\n"


def system_codename() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip().strip('"')
    raise BuildError("/etc/os-release has no VERSION_CODENAME; a Debian system is required")


def system_apt_sources() -> list[AptSource]:
    etc = Path("/etc/apt")
    one_line = [etc / "sources.list", *sorted((etc / "sources.list.d").glob("*.list"))]
    deb822 = sorted((etc / "sources.list.d").glob("*.sources"))
    return parse_apt_sources(
        "\n".join(p.read_text() for p in one_line if p.is_file()),
        "\n\n".join(p.read_text() for p in deb822 if p.is_file()),
        system_codename(),
    )


def private_apt_options(apt_dir: Path) -> list[str]:
    """apt options that read only our list and keep index and downloads under ``apt_dir``."""
    return [
        "-o",
        f"Dir::Etc::SourceList={apt_dir / 'sources.list'}",
        "-o",
        f"Dir::Etc::SourceParts={apt_dir / 'sources.list.d'}",
        "-o",
        f"Dir::State::Lists={apt_dir / 'lists'}",
        "-o",
        f"Dir::Cache={apt_dir / 'cache'}",
        # the download directory belongs to root, not to apt's sandbox user
        "-o",
        "APT::Sandbox::User=root",
    ]


def make_command() -> list[str]:
    targets = " ".join(f"cmd/{b}" for b in BINARIES)
    return ["nice", "-n", "10", "make", f"WHAT={targets}"]


#: what every Go build here runs with: no module proxy or checksum database (no network),
#: no toolchain download, no cgo
OFFLINE_GO = {"GOPROXY": "off", "GOSUMDB": "off", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}


def build_environment(base: dict[str, str], gocache: Path) -> dict[str, str]:
    """The environment of the Go build: the pinned toolchain, vendored modules, no network."""
    env = dict(base)
    env.update(
        OFFLINE_GO,
        PATH=f"{GO_ROOT / 'bin'}:{base.get('PATH', '/usr/bin:/bin')}",
        GOFLAGS="-mod=vendor",
        GOCACHE=str(gocache),
        DEBIAN_FRONTEND="noninteractive",
    )
    env.pop("GOPATH", None)
    env.pop("GOROOT", None)
    return env


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


def _run(
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


def ensure_apt_packages(
    log: Path, progress: Progress, packages: tuple[str, ...] = APT_PACKAGES
) -> None:
    missing = missing_apt_packages(packages)
    if not missing:
        return
    if os.geteuid() != 0:
        raise BuildError(
            f"missing Debian packages {', '.join(missing)}; install them as root: "
            f"apt-get install {' '.join(missing)}"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    progress(f"installing Debian packages: {', '.join(missing)}")
    _run(["apt-get", "update", "-q"], log, "apt-get update", env=env)
    _run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
        log,
        "apt-get install",
        env=env,
    )


def fetch_source(work: Path, log: Path, progress: Progress) -> Path:
    """Download and unpack the Debian source package; return the source tree."""
    apt_dir = work / "apt"
    for sub in ("lists/partial", "cache/archives/partial", "sources.list.d"):
        (apt_dir / sub).mkdir(parents=True, exist_ok=True)
    sources = system_apt_sources()
    if not sources:
        raise BuildError(
            "no Debian archive entry for this release in /etc/apt; cannot fetch the "
            f"{SOURCE_PACKAGE} source package"
        )
    (apt_dir / "sources.list").write_text(deb_src_list(sources))
    options = private_apt_options(apt_dir)
    progress(f"fetching Debian source package {SOURCE_PACKAGE} {SOURCE_VERSION}")
    _run(["apt-get", *options, "update", "-q"], log, "apt-get update (deb-src)")
    download = work / "download"
    download.mkdir(exist_ok=True)
    _run(
        ["apt-get", *options, "source", "--download-only", f"{SOURCE_PACKAGE}={SOURCE_VERSION}"],
        log,
        "apt-get source",
        cwd=download,
    )
    dsc = next(download.glob("*.dsc"), None)
    if dsc is None:
        raise BuildError(f"apt-get source left no .dsc in {download}; log: {log}")
    tree = work / "src"
    progress("unpacking the source tree and applying Debian's patches")
    _run(["dpkg-source", "-x", str(dsc), str(tree)], log, "dpkg-source -x")
    return tree


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


def compile_binaries(tree: Path, work: Path, log: Path, progress: Progress) -> None:
    progress("fixing the vendored modern-go/reflect2 v1.0.1 for Go >= 1.18 (as v1.0.2 did)")
    reflect2_fix.apply(tree)
    progress(f"compiling {', '.join(BINARIES)} with Go 1.19 (once; cached afterwards)")
    env = build_environment(dict(os.environ), work / "gocache")
    with heartbeat(progress, USUALLY):
        _run(
            make_command(),
            log,
            f"make ({', '.join(BINARIES)})",
            env=env,
            cwd=tree,
            echo=progress,
        )


def _default_progress(message: str) -> None:
    print(f"ascend-pd-dev cluster: {message}", file=sys.stderr, flush=True)


def ensure_binaries(progress: Progress = _default_progress, rebuild: bool = False) -> Path:
    """Return the directory holding the control-plane binaries (``BINARIES``), building once."""
    cache = cache_dir()
    if binaries_ready() and not rebuild:
        return bin_dir()
    log = cache / "build.log"
    with file_lock(cache / ".build.lock"):
        # another process may have finished the build while we waited for the lock
        if binaries_ready() and not rebuild:
            return bin_dir()
        started = time.monotonic()
        cache.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        progress(f"building the local Kubernetes {VERSION} control plane (log: {log})")
        ensure_apt_packages(log, progress)
        work = cache / "work"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        tree = fetch_source(work, log, progress)
        compile_binaries(tree, work, log, progress)
        staged = cache / "bin.new"
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir()
        for name in BINARIES:
            built = tree / "_output" / "bin" / name
            if not built.is_file():
                raise BuildError(f"make finished but {built} is missing; log: {log}")
            shutil.copy2(built, staged / name)
        shutil.rmtree(bin_dir(), ignore_errors=True)
        staged.rename(bin_dir())
        elapsed = time.monotonic() - started
        info = {
            "recipe": RECIPE,
            "kubernetes": VERSION,
            "source_package": f"{SOURCE_PACKAGE} {SOURCE_VERSION}",
            "go": str(GO_ROOT),
            "build_seconds": round(elapsed, 1),
        }
        (cache / "build-info.json").write_text(json.dumps(info, indent=2) + "\n")
        shutil.rmtree(work, ignore_errors=True)
        progress(f"built in {elapsed / 60:.1f} min; cached in {bin_dir()}")
    return bin_dir()


def ensure_runtime_packages(progress: Progress = _default_progress) -> None:
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
