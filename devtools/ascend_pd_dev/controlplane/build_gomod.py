"""Build (once) and locate kube-apiserver, kube-controller-manager and kube-scheduler of one
Kubernetes release from Go modules.

The usual way to build Kubernetes' commands as a dependency: a module of ours per release
(``gomod/k8s-1.MINOR/go.mod``, committed with its ``go.sum``) requires ``k8s.io/kubernetes
v1.MINOR.N`` and ``replace``s every ``k8s.io/*`` staging module with ``v0.MINOR.N`` of the same
release. (k8s.io/kubernetes' own go.mod requires them at ``v0.0.0`` and points them at its
``./staging`` tree; a main module's ``replace`` is the only one Go honours, so ours must say it.)
The three commands are the module's ``tool``s, so ``go mod tidy`` keeps what they need. Which
modules are staging modules is read from that release's own go.mod before each build, so a
replacement missing from ours fails at once instead of after the compile.

A release is a row (``Release``) of ``versions.RELEASES``. One ``go build`` compiles the three
commands together (the packages they share once) with the machine's Go, modules from the Go
module proxy checked against the committed go.sum (no checksum-database look-up),
``-trimpath -ldflags='-s -w'`` and the release stamped into ``/version``. The module and build
caches live under the recipe's ``work/`` and are deleted afterwards: they only pay off on a
rebuild of the same recipe, and a new patch release recompiles every ``k8s.io`` package anyway.
The binaries are cached per user, release and recipe (``build.build_once``); the stamp holds a
digest of the go.mod and go.sum, so an edited module rebuilds.

``python -m ascend_pd_dev.controlplane.build_gomod --update v1.MINOR.N`` writes the committed
go.mod and go.sum of that release (with ``go mod tidy``; network needed).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ascend_pd_dev.controlplane import build, paths
from ascend_pd_dev.controlplane.build import BINARIES, BuildError, Progress

#: where the committed modules are, one folder per release (``k8s-1.36``)
GOMOD_ROOT = Path(__file__).resolve().parent / "gomod"
MODULE_PATH = "ascend-pd.dev/controlplane"
#: the oldest Go that builds our modules: their ``go`` line (``tool`` directives need 1.24,
#: k8s.io/kubernetes 1.36 itself 1.26)
GO_MINIMUM = (1, 26)
COMMANDS = tuple(f"k8s.io/kubernetes/cmd/{name}" for name in BINARIES)


@dataclass(frozen=True)
class Release:
    """One Kubernetes release the dev cluster runs, built from ``gomod/k8s-<release>``."""

    #: "1.36": what ``--k8s-version`` and ``ASCEND_PD_K8S_VERSION`` name
    release: str
    #: the patch release the committed go.mod pins, which the binaries report ("1.36.3")
    version: str
    #: what a cold build took on a 2-core machine, for the progress lines (docs/development.md
    #: has the measurements)
    usually: str
    #: bump when the build recipe changes: each recipe has its own cache directory
    recipe: int = 1

    @property
    def minor(self) -> int:
        return int(self.release.split(".")[1])

    @property
    def gomod_dir(self) -> Path:
        return GOMOD_ROOT / f"k8s-{self.release}"

    def cache_dir(self) -> Path:
        """This recipe's build cache (``~/.cache/ascend-pd/k8s-1.36.N/recipe-M``)."""
        return paths.build_cache(self.version) / f"recipe-{self.recipe}"

    def bin_dir(self) -> Path:
        return self.cache_dir() / "bin"

    def recipe_digest(self) -> str:
        """What the binaries are built from: the recipe number, the go.mod and the go.sum."""
        digest = hashlib.sha256(f"recipe {self.recipe}\n".encode())
        for name in ("go.mod", "go.sum"):
            digest.update((self.gomod_dir / name).read_bytes())
        return digest.hexdigest()[:16]

    def binaries_ready(self) -> bool:
        info = build.read_info(self.cache_dir())
        if info.get("recipe") != self.recipe or info.get("digest") != self.recipe_digest():
            return False
        return all(os.access(self.bin_dir() / b, os.X_OK) for b in BINARIES)

    def ensure_binaries(
        self, progress: Progress = build.default_progress, rebuild: bool = False
    ) -> Path:
        """The directory holding the release's ``BINARIES``, built once."""
        build.build_once(
            self.cache_dir(), f"the local Kubernetes {self.version} control plane from Go modules",
            self.binaries_ready, lambda log: _build(self, log, progress), progress, rebuild,
        )  # fmt: skip
        return self.bin_dir()


@dataclass
class GoMod:
    """What the build relies on in a go.mod: its requirements, replacements and tools."""

    module: str = ""
    go: str = ""
    requires: dict[str, str] = field(default_factory=dict)
    #: module -> (replacement path, replacement version; "" for a directory)
    replaces: dict[str, tuple[str, str]] = field(default_factory=dict)
    tools: list[str] = field(default_factory=list)


def parse_gomod(text: str) -> GoMod:
    """The directives of a go.mod (single-line and parenthesised blocks; comments dropped)."""
    mod = GoMod()
    block: str | None = None
    for raw in text.splitlines():
        line = raw.split("//", 1)[0].strip()
        if not line:
            continue
        if block is not None:
            if line == ")":
                block = None
                continue
            verb, rest = block, line
        else:
            verb, _, rest = line.partition(" ")
            rest = rest.strip()
            if rest == "(":
                block = verb
                continue
        words = rest.split()
        if verb == "module":
            mod.module = words[0]
        elif verb == "go":
            mod.go = words[0]
        elif verb == "require" and len(words) >= 2:
            mod.requires[words[0]] = words[1]
        elif verb == "tool" and words:
            mod.tools.append(words[0])
        elif verb == "replace" and "=>" in words:
            arrow = words.index("=>")
            target = words[arrow + 1 :]
            mod.replaces[words[0]] = (target[0], target[1] if len(target) > 1 else "")
    return mod


def staging_modules(kubernetes_gomod: str) -> tuple[str, ...]:
    """The staging modules of a k8s.io/kubernetes go.mod: those it replaces with a directory
    under ``./staging/``, sorted."""
    replaces = parse_gomod(kubernetes_gomod).replaces
    return tuple(sorted(m for m, (path, _) in replaces.items() if path.startswith("./staging/")))


def staging_version(version: str) -> str:
    """The staging modules' tag of Kubernetes ``version``: 1.36.3 -> v0.36.3."""
    match = re.fullmatch(r"v?1\.(\d+)\.(\d+)", version)
    if match is None:
        raise BuildError(f"Kubernetes version {version!r}: expected 1.MINOR.PATCH, e.g. 1.36.3")
    return f"v0.{match.group(1)}.{match.group(2)}"


def render_gomod(version: str, staging: tuple[str, ...], go: str) -> str:
    """Our go.mod before ``go mod tidy`` adds the requirements of the commands: it requires
    k8s.io/kubernetes ``version``, makes the three commands its tools and replaces every
    staging module with the same release's ``v0.MINOR.PATCH``."""
    pin = staging_version(version)
    tools = "".join(f"\t{c}\n" for c in COMMANDS)
    replaces = "".join(f"\t{m} => {m} {pin}\n" for m in sorted(staging))
    return (
        f"module {MODULE_PATH}\n\ngo {go}\n\n"
        f"require k8s.io/kubernetes v{version.lstrip('v')}\n\n"
        f"tool (\n{tools})\n\nreplace (\n{replaces})\n"
    )


def gomod_problems(text: str, version: str, staging: tuple[str, ...]) -> list[str]:
    """Why ``text`` is not a go.mod that builds the commands of Kubernetes ``version`` (empty:
    it is): the kubernetes pin, the tools, and every staging module replaced with the same
    release (a requirement of one left at v0.0.0, or of another release, fails or mixes)."""
    mod = parse_gomod(text)
    problems = []
    want = f"v{version.lstrip('v')}"
    if mod.requires.get("k8s.io/kubernetes") != want:
        found = mod.requires.get("k8s.io/kubernetes")
        problems.append(f"requires k8s.io/kubernetes {found}, expected {want}")
    missing_tools = sorted(set(COMMANDS) - set(mod.tools))
    if missing_tools:
        problems.append(f"tool directives missing: {', '.join(missing_tools)}")
    pin = staging_version(version)
    for module in staging:
        if mod.replaces.get(module) != (module, pin):
            problems.append(f"{module} is replaced by {mod.replaces.get(module)}, expected {pin}")
    for module in mod.requires:
        if module.startswith("k8s.io/") and module not in staging and module in mod.replaces:
            problems.append(f"{module} is replaced but is no staging module of {want}")
    return problems


def version_ldflags(version: str) -> str:
    """``-s -w`` and the release stamped where ``/version`` and the client user agent read it
    (built without it, the servers say ``v0.0.0-master``; the operator picks API versions from
    ``/version``)."""
    major, minor = version.lstrip("v").split(".")[:2]
    stamps = {"gitVersion": f"v{version.lstrip('v')}", "gitMajor": major, "gitMinor": minor,
              "gitTreeState": "clean"}  # fmt: skip
    packages = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
    flags = [f"-X {p}.{k}={v}" for p in packages for k, v in stamps.items()]
    return " ".join(["-s", "-w", *flags])


def build_command(go: Path, out_dir: Path, version: str) -> list[str]:
    """One ``go build`` of the three commands into ``out_dir`` (shared packages compiled once)."""
    return ["nice", "-n", "10", str(go), "build", "-trimpath",
            f"-ldflags={version_ldflags(version)}", "-o", f"{out_dir}/", *COMMANDS]  # fmt: skip


def build_environment(base: dict[str, str], go: Path, work: Path) -> dict[str, str]:
    """The Go build: caches under ``work``, modules verified by go.sum alone, no toolchain
    download, no cgo, the go.mod never rewritten; the proxy is the environment's own
    (``GOPROXY``, Go's default when unset)."""
    env = {k: v for k, v in base.items() if not k.startswith("GO") or k in ("GOPROXY",)}
    env.update(
        PATH=f"{go.parent}:{base.get('PATH', '/usr/bin:/bin')}",
        GOMODCACHE=str(work / "gomodcache"),
        GOCACHE=str(work / "gocache"),
        GOPATH=str(work / "gopath"),
        # the compiler's scratch files too, so that work/ is all the disk the build takes
        GOTMPDIR=str(work / "tmp"),
        # -modcacherw: the module cache is deleted afterwards, and Go makes it read-only
        GOFLAGS="-mod=readonly -modcacherw",
        GOSUMDB="off",
        GOTOOLCHAIN="local",
        GOWORK="off",
        CGO_ENABLED="0",
    )
    return env


def go_binary(version: str) -> Path:
    """The machine's Go (``PATH``, else ``/usr/local/go/bin/go``), checked against
    ``GO_MINIMUM``; ``version`` (what it is to build) is for the messages."""
    found = shutil.which("go") or "/usr/local/go/bin/go"
    go = Path(found)
    need = f"building Kubernetes {version} needs Go >= {'.'.join(map(str, GO_MINIMUM))}"
    if not os.access(go, os.X_OK):
        raise BuildError(f"no Go toolchain (looked on PATH and at {go}); {need}")
    done = subprocess.run([str(go), "env", "GOVERSION"], capture_output=True, text=True,
                          check=False, env={**os.environ, "GOTOOLCHAIN": "local"})  # fmt: skip
    have = go_version_tuple(done.stdout.strip())
    if have is None or have < GO_MINIMUM:
        raise BuildError(f"{go} is {done.stdout.strip() or 'unusable'}; {need}")
    return go


def go_version_tuple(text: str) -> tuple[int, int] | None:
    """``go1.26.8`` -> (1, 26)."""
    match = re.match(r"go(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def committed_staging(text: str) -> tuple[str, ...]:
    """The ``k8s.io/*`` modules a committed go.mod replaces with a version, sorted."""
    replaces = parse_gomod(text).replaces
    return tuple(sorted(m for m, (_, v) in replaces.items() if m.startswith("k8s.io/") and v))


def _disk_mb(root: Path) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total // (1 << 20)


def module_workdir(cache: Path, gomod_dir: Path) -> tuple[Path, Path]:
    """A fresh ``cache/work`` (the build's caches and scratch, deleted afterwards) holding a
    copy of the committed module (go.mod, go.sum) in ``work/module``: (work, module)."""
    work = cache / "work"
    shutil.rmtree(work, ignore_errors=True)
    module = work / "module"
    module.mkdir(parents=True)
    (work / "tmp").mkdir()
    for name in ("go.mod", "go.sum"):
        shutil.copy2(gomod_dir / name, module / name)
    return work, module


def _kubernetes_gomod(go: Path, env: dict[str, str], module: Path, version: str) -> str:
    """k8s.io/kubernetes' own go.mod of ``version``, through the module's go.sum."""
    want = f"k8s.io/kubernetes@v{version}"
    done = subprocess.run([str(go), "mod", "download", "-json", want], capture_output=True,
                          text=True, env=env, cwd=module, check=False)  # fmt: skip
    if done.returncode != 0:
        raise BuildError(f"go mod download {want} failed:\n{done.stdout}{done.stderr}")
    return Path(json.loads(done.stdout)["GoMod"]).read_text()


def _build(release: Release, log: Path, progress: Progress) -> dict[str, object]:
    """The build ``build.build_once`` runs: the binaries into ``release.bin_dir()``."""
    cache, version = release.cache_dir(), release.version
    go = go_binary(version)
    work, module = module_workdir(cache, release.gomod_dir)
    staged = cache / "bin.new"
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir()
    env = build_environment(dict(os.environ), go, work)
    try:
        staging = staging_modules(_kubernetes_gomod(go, env, module, version))
        text = (release.gomod_dir / "go.mod").read_text()
        problems = gomod_problems(text, version, staging)
        if problems:
            raise BuildError(f"{release.gomod_dir / 'go.mod'} does not build {version}: "
                             f"{'; '.join(problems)}")  # fmt: skip
        progress(f"downloading the modules and compiling {', '.join(BINARIES)} in one go "
                 f"build (once; cached afterwards)")  # fmt: skip
        with build.heartbeat(progress, release.usually):
            build.run_logged(build_command(go, staged, version), log, "go build", env=env,
                             cwd=module)  # fmt: skip
        # what the caches hold once go is done (its scratch directory is gone by then)
        caches_mb = _disk_mb(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for name in BINARIES:
        if not (staged / name).is_file():
            raise BuildError(f"go build finished but {staged / name} is missing; log: {log}")
    shutil.rmtree(release.bin_dir(), ignore_errors=True)
    staged.rename(release.bin_dir())
    return {
        "recipe": release.recipe,
        "digest": release.recipe_digest(),
        "kubernetes": version,
        "go": str(go),
        "caches_disk_mb": caches_mb,
        "binaries_disk_mb": _disk_mb(release.bin_dir()),
    }


def update_gomod(version: str, progress: Progress = build.default_progress) -> Path:
    """Write the committed go.mod and go.sum of Kubernetes ``version`` (network needed) into
    ``gomod/k8s-1.MINOR``: the staging modules come from that release's own go.mod, the
    requirements from ``go mod tidy``. Then set the release's row in ``versions.RELEASES``."""
    version = version.lstrip("v")
    go = go_binary(version)
    target = GOMOD_ROOT / f"k8s-{'.'.join(version.split('.')[:2])}"
    with tempfile.TemporaryDirectory(prefix="k8s-gomod-") as tmp:
        work = Path(tmp)
        env = build_environment(dict(os.environ), go, work)
        env["GOFLAGS"] = "-modcacherw"
        env.pop("GOSUMDB")  # new modules are checked against the checksum database
        staging = staging_modules(_kubernetes_gomod(go, env, work, version))
        module = work / "module"
        module.mkdir()
        go_line = ".".join(map(str, GO_MINIMUM)) + ".0"
        (module / "go.mod").write_text(render_gomod(version, staging, go_line))
        progress(f"go mod tidy for k8s.io/kubernetes v{version} ({len(staging)} staging modules)")
        tidy = subprocess.run([str(go), "mod", "tidy"], capture_output=True, text=True, env=env,
                              cwd=module, check=False)  # fmt: skip
        if tidy.returncode != 0:
            raise BuildError(f"go mod tidy failed:\n{tidy.stderr}")
        target.mkdir(parents=True, exist_ok=True)
        for name in ("go.mod", "go.sum"):
            shutil.copy2(module / name, target / name)
    progress(f"wrote {target}/go.mod and go.sum; set the row of versions.RELEASES to {version!r}")
    return target


def main(argv: list[str] | None = None) -> int:
    from ascend_pd_dev.controlplane import versions

    parser = argparse.ArgumentParser(prog="python -m ascend_pd_dev.controlplane.build_gomod")
    parser.add_argument("--update", metavar="VERSION", help="write go.mod/go.sum for VERSION")
    parser.add_argument("--rebuild", action="store_true", help="build even when cached")
    parser.add_argument("--k8s-version", choices=sorted(versions.RELEASES), default=None,
                        help=f"the release to build (default: ${versions.K8S_VERSION_ENV}, "
                             f"else {versions.DEFAULT})")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        if args.update:
            update_gomod(args.update)
        else:
            print(versions.control_plane(args.k8s_version).ensure_binaries(rebuild=args.rebuild))
    except (BuildError, versions.VersionError) as err:
        print(f"build_gomod: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
