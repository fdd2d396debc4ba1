"""Build (once) and locate the LeaderWorkerSet controller manager from Go modules, with its CRD
beside it: the peer controller ``make bench`` measures the operator against (bench/operator.md).

Like the KEDA build (``build_keda``): a module of ours (``gomod/lws-0.7/go.mod``, committed with
its ``go.sum``) requires ``sigs.k8s.io/lws`` and makes its manager (``sigs.k8s.io/lws/cmd``, the
``main`` package of the release's own ``bin/manager``) its ``tool``; one ``go build`` compiles
it with the machine's Go, modules from the proxy checked against the committed go.sum, in the
same environment (``build_gomod.build_environment``), under the same kind of file lock, with
the same progress lines. LWS's go.mod has no ``replace`` or ``exclude`` for ours to repeat. Its
CRD (``config/crd/bases`` of the module) is copied out of the module cache before it is deleted.

``python -m ascend_pd_dev.controlplane.build_lws`` builds (or prints the cached directory).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
from pathlib import Path

from ascend_pd_dev.controlplane import build, build_gomod, paths
from ascend_pd_dev.controlplane.build import BuildError, Progress

#: the LWS release the committed go.mod requires
VERSION = "0.7.0"
#: bump when the build recipe changes: each recipe has its own cache directory
RECIPE = 1
MODULE = "sigs.k8s.io/lws"
GOMOD_DIR = Path(__file__).resolve().parent / "gomod" / "lws-0.7"
COMMAND = f"{MODULE}/cmd"
#: the binary's name under ``bin/`` (the release names it so too)
BINARY = "manager"
#: what a cold build took on a 2-core machine (docs/development.md has the measurement)
USUALLY = "6 CPU minutes: 5-15 minutes on 2 busy cores"


def cache_dir() -> Path:
    """This recipe's build cache (``~/.cache/ascend-pd/lws-0.7.N/recipe-M``)."""
    return paths.cache_root() / f"lws-{VERSION}" / f"recipe-{RECIPE}"


def binary() -> Path:
    return cache_dir() / "bin" / BINARY


def crd_dir() -> Path:
    """LWS's CRD manifests (``config/crd/bases`` of the module)."""
    return cache_dir() / "crds"


def recipe_digest() -> str:
    digest = hashlib.sha256(f"recipe {RECIPE}\n".encode())
    for name in ("go.mod", "go.sum"):
        digest.update((GOMOD_DIR / name).read_bytes())
    return digest.hexdigest()[:16]


def gomod_problems(text: str) -> list[str]:
    """Why ``text`` is not a go.mod that builds LWS ``VERSION``'s manager (empty: it is)."""
    mod = build_gomod.parse_gomod(text)
    problems = []
    if mod.requires.get(MODULE) != f"v{VERSION}":
        problems.append(f"requires {MODULE} {mod.requires.get(MODULE)}, expected v{VERSION}")
    if COMMAND not in mod.tools:
        problems.append(f"tool directive missing: {COMMAND}")
    return problems


def build_command(go: Path, out: Path) -> list[str]:
    """One ``go build`` of the manager, the release stamped where its startup log reads it."""
    stamp = f"-X {MODULE}/pkg/version.GitVersion=v{VERSION}"
    return ["nice", "-n", "10", str(go), "build", "-trimpath", f"-ldflags=-s -w {stamp}",
            "-o", str(out), COMMAND]  # fmt: skip


def binaries_ready() -> bool:
    info = build.read_info(cache_dir())
    if info.get("recipe") != RECIPE or info.get("digest") != recipe_digest():
        return False
    crds = crd_dir().glob("*.yaml") if crd_dir().is_dir() else iter(())
    return next(crds, None) is not None and os.access(binary(), os.X_OK)


def _default_progress(message: str) -> None:
    print(f"ascend-pd-dev lws: {message}", file=sys.stderr, flush=True)


def ensure_lws(progress: Progress = _default_progress, rebuild: bool = False) -> Path:
    """Return the cache directory holding ``bin/manager`` and ``crds/``, building once
    (``build.build_once``: the file lock, the stamp written last)."""
    cache = cache_dir()
    build.build_once(cache, f"the LeaderWorkerSet {VERSION} manager from Go modules",
                     binaries_ready, lambda log: _build(cache, log, progress), progress,
                     rebuild)  # fmt: skip
    return cache


def _build(cache: Path, log: Path, progress: Progress) -> dict[str, object]:
    """The build ``build.build_once`` runs: ``bin/manager`` and ``crds/`` into ``cache``."""
    problems = gomod_problems((GOMOD_DIR / "go.mod").read_text())
    if problems:
        raise BuildError(f"{GOMOD_DIR / 'go.mod'} does not build LWS {VERSION}: "
                         f"{'; '.join(problems)}")  # fmt: skip
    go = build_gomod.go_binary(f"LWS {VERSION}")
    work, module = build_gomod.module_workdir(cache, GOMOD_DIR)
    staged = cache / "new"
    shutil.rmtree(staged, ignore_errors=True)
    (staged / "bin").mkdir(parents=True)
    progress("downloading the modules and compiling the manager (once; cached afterwards)")
    try:
        with build.heartbeat(progress, USUALLY):
            build.run_logged(build_command(go, staged / "bin" / BINARY), log, "go build",
                             env=build_gomod.build_environment(dict(os.environ), go, work),
                             cwd=module)  # fmt: skip
        caches_mb = build_gomod._disk_mb(work)
        source = work / "gomodcache" / f"{MODULE}@v{VERSION}" / "config" / "crd" / "bases"
        shutil.copytree(source, staged / "crds")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not (staged / "bin" / BINARY).is_file():
        raise BuildError(f"go build finished but {staged / 'bin' / BINARY} is missing; log: {log}")
    for name in ("bin", "crds"):
        shutil.rmtree(cache / name, ignore_errors=True)
        (staged / name).rename(cache / name)
    shutil.rmtree(staged)
    return {"recipe": RECIPE, "digest": recipe_digest(), "lws": VERSION, "go": str(go),
            "caches_disk_mb": caches_mb}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ascend_pd_dev.controlplane.build_lws")
    parser.add_argument("--rebuild", action="store_true", help="build even when cached")
    args = parser.parse_args(argv)
    try:
        print(ensure_lws(rebuild=args.rebuild))
    except BuildError as err:
        print(f"build_lws: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
