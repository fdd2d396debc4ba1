"""Build (once) and locate the KEDA operator and its metrics adapter from Go modules, with KEDA's
CRDs beside them.

Like the Kubernetes build (``build_gomod``): a module of ours (``gomod/keda-2.21/go.mod``,
committed with its ``go.sum``) requires ``github.com/kedacore/keda/v2`` and makes its two
commands, ``cmd/operator`` and ``cmd/adapter``, its ``tool``s; one ``go build`` compiles both
with the machine's Go, modules from the proxy checked against the committed go.sum, in the same
environment (``build_gomod.build_environment``), under the same kind of file lock, with the
same progress lines. KEDA's own go.mod ``replace``s and ``exclude``s a module; a dependency's
directives are ignored, so ours repeats them.

The operator evaluates the triggers (and scales a target between zero and one itself); the
adapter serves ``external.metrics.k8s.io`` to the HPA the operator creates, asking the operator
for the values over gRPC. KEDA's CRDs (``config/crd/bases`` of the module) are copied out of the
module cache before it is deleted.

v2.21.0 is the newest release the machine's Go builds: v2.21.1's go.mod says ``go 1.27.4``.
``python -m ascend_pd_dev.controlplane.build_keda`` builds (or prints the cached directory).
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

#: the KEDA release the committed go.mod requires
VERSION = "2.21.0"
#: bump when the build recipe changes: each recipe has its own cache directory
RECIPE = 1
MODULE = "github.com/kedacore/keda/v2"
GOMOD_DIR = Path(__file__).resolve().parent / "gomod" / "keda-2.21"
#: binary name (go build names it after the package's last element) -> package
COMMANDS = {"operator": f"{MODULE}/cmd/operator", "adapter": f"{MODULE}/cmd/adapter"}
#: what a cold build took on a 2-core machine (docs/development.md has the measurement)
USUALLY = "16 CPU minutes: 10-40 minutes on 2 busy cores"


def cache_dir() -> Path:
    """This recipe's build cache (``~/.cache/ascend-pd/keda-2.21.N/recipe-M``)."""
    return paths.cache_root() / f"keda-{VERSION}" / f"recipe-{RECIPE}"


def bin_dir() -> Path:
    return cache_dir() / "bin"


def crd_dir() -> Path:
    """KEDA's CRD manifests (``config/crd/bases`` of the module)."""
    return cache_dir() / "crds"


def recipe_digest() -> str:
    digest = hashlib.sha256(f"recipe {RECIPE}\n".encode())
    for name in ("go.mod", "go.sum"):
        digest.update((GOMOD_DIR / name).read_bytes())
    return digest.hexdigest()[:16]


def gomod_problems(text: str) -> list[str]:
    """Why ``text`` is not a go.mod that builds KEDA ``VERSION``'s commands (empty: it is)."""
    mod = build_gomod.parse_gomod(text)
    problems = []
    if mod.requires.get(MODULE) != f"v{VERSION}":
        problems.append(f"requires {MODULE} {mod.requires.get(MODULE)}, expected v{VERSION}")
    missing = sorted(set(COMMANDS.values()) - set(mod.tools))
    if missing:
        problems.append(f"tool directives missing: {', '.join(missing)}")
    return problems


def build_command(go: Path, out_dir: Path) -> list[str]:
    """One ``go build`` of both commands, the release stamped where ``keda --version`` and the
    startup log read it."""
    stamp = f"-X {MODULE}/version.Version={VERSION} -X {MODULE}/version.GitCommit=v{VERSION}"
    return ["nice", "-n", "10", str(go), "build", "-trimpath", f"-ldflags=-s -w {stamp}",
            "-o", f"{out_dir}/", *COMMANDS.values()]  # fmt: skip


def binaries_ready() -> bool:
    info = build.read_info(cache_dir())
    if info.get("recipe") != RECIPE or info.get("digest") != recipe_digest():
        return False
    crds = crd_dir().glob("*.yaml") if crd_dir().is_dir() else iter(())
    return next(crds, None) is not None and all(
        os.access(bin_dir() / name, os.X_OK) for name in COMMANDS
    )


def _default_progress(message: str) -> None:
    print(f"ascend-pd-dev keda: {message}", file=sys.stderr, flush=True)


def ensure_keda(progress: Progress = _default_progress, rebuild: bool = False) -> Path:
    """Return the cache directory holding ``bin/{operator,adapter}`` and ``crds/``, building
    once (``build.build_once``: the file lock, the stamp written last)."""
    cache = cache_dir()
    build.build_once(cache, f"KEDA {VERSION} (operator, metrics adapter) from Go modules",
                     binaries_ready, lambda log: _build(cache, log, progress), progress,
                     rebuild)  # fmt: skip
    return cache


def _build(cache: Path, log: Path, progress: Progress) -> dict[str, object]:
    """The build ``build.build_once`` runs: ``bin/`` and ``crds/`` into ``cache``."""
    problems = gomod_problems((GOMOD_DIR / "go.mod").read_text())
    if problems:
        raise BuildError(f"{GOMOD_DIR / 'go.mod'} does not build KEDA {VERSION}: "
                         f"{'; '.join(problems)}")  # fmt: skip
    go = build_gomod.go_binary(f"KEDA {VERSION}")
    work, module = build_gomod.module_workdir(cache, GOMOD_DIR)
    staged = cache / "new"
    shutil.rmtree(staged, ignore_errors=True)
    (staged / "bin").mkdir(parents=True)
    progress("downloading the modules and compiling operator, adapter in one go build "
             "(once; cached afterwards)")  # fmt: skip
    try:
        with build.heartbeat(progress, USUALLY):
            build.run_logged(build_command(go, staged / "bin"), log, "go build",
                             env=build_gomod.build_environment(dict(os.environ), go, work),
                             cwd=module)  # fmt: skip
        caches_mb = build_gomod._disk_mb(work)
        source = work / "gomodcache" / f"{MODULE}@v{VERSION}" / "config" / "crd" / "bases"
        shutil.copytree(source, staged / "crds")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for name in COMMANDS:
        if not (staged / "bin" / name).is_file():
            raise BuildError(f"go build finished but {staged / 'bin' / name} is missing; "
                             f"log: {log}")  # fmt: skip
    for name in ("bin", "crds"):
        shutil.rmtree(cache / name, ignore_errors=True)
        (staged / name).rename(cache / name)
    shutil.rmtree(staged)
    return {"recipe": RECIPE, "digest": recipe_digest(), "keda": VERSION, "go": str(go),
            "caches_disk_mb": caches_mb}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ascend_pd_dev.controlplane.build_keda")
    parser.add_argument("--rebuild", action="store_true", help="build even when cached")
    args = parser.parse_args(argv)
    try:
        print(ensure_keda(rebuild=args.rebuild))
    except BuildError as err:
        print(f"build_keda: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
