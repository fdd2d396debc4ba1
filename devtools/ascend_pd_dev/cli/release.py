"""``ascend-pd-dev release VERSION`` (``make release VERSION=x.y.z``): check, package, build,
and print (or run) the pushes of one release.

1. The versions agree (``release_versions.check``): on the working tree, or, for a version
   ``releases.yaml`` records, on that commit, which must exist and be an ancestor of HEAD.
   Any disagreement: one line each, exit 1, nothing built.
2. The chart is packaged by the real ``helm package`` into ``--dist`` (``dist/``, ignored by
   git); for a recorded version, the chart as it is at its commit (``git archive``).
3. The images are built by ``make images`` (devtools/images.sh) with ``TAG=VERSION``: the
   operator image and one runtime image per chip (``CHIPS``, default ``a2 a3``, tagged
   ``VERSION-<chip>``) on ``SGLANG_VERSION`` (default: the newest SGLang that
   devtools/base-images.txt has for every chip); for a recorded version, in a worktree of
   its commit. ``--dry-run`` passes ``DRY_RUN=1`` (and
   ``ENGINE=docker`` unless set), so images.sh prints its commands and needs no engine.
4. The push commands for an OCI registry are printed; ``--push`` (``PUSH=1``) runs them
   (images.sh pushes each image after building it, then ``helm push``), never with
   ``--dry-run``.

A release is cut by one commit with the versions and the CHANGELOG heading, then a second
that records that commit in ``releases.yaml`` (docs/development.md, "Cutting a release").
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import yaml

from ascend_pd_dev.cli import base_images
from ascend_pd_dev.cli.release_versions import (
    CHART,
    CHIPS,
    VERSION,
    CommitTree,
    Tree,
    WorkTree,
    check,
)
from ascend_pd_dev.controlplane.paths import project_root
from ascend_pd_dev.testtools.helm import ToolError, ensure_helm

RELEASES = "releases.yaml"
#: what the printed commands name when no registry is given
PLACEHOLDER_REGISTRY = "registry.example.com/ascend-pd"


class ReleaseError(RuntimeError):
    """The release cannot go on; the message says why."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("version", help="the release's version, x.y.z")
    parser.add_argument("--dry-run", action="store_true",
                        help="check and package, print the image builds and pushes")  # fmt: skip
    parser.add_argument("--push", action="store_true",
                        help="push the images and the chart (needs --registry)")  # fmt: skip
    parser.add_argument("--registry", default=os.environ.get("REGISTRY", ""),
                        help="the OCI registry, e.g. registry.example.com/llm (default: "
                             "$REGISTRY)")  # fmt: skip
    parser.add_argument("--dist", type=Path, default=None,
                        help="where the packaged chart goes (default: dist/)")  # fmt: skip


def git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)


def recorded(root: Path) -> dict[str, str]:
    """releases.yaml: version -> the full SHA of its release commit."""
    path = root / RELEASES
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    return {str(k): str(v) for k, v in data.items()}


def release_tree(root: Path, version: str) -> tuple[Tree, str]:
    """The tree the release is made of, and its commit ("" for the working tree)."""
    commit = recorded(root).get(version)
    if commit is None:
        return WorkTree(root), ""
    if git(root, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        raise ReleaseError(f"{RELEASES}: {version}: commit {commit} is not in this repository")
    if git(root, "merge-base", "--is-ancestor", commit, "HEAD").returncode != 0:
        raise ReleaseError(f"{RELEASES}: {version}: commit {commit} is not an ancestor of HEAD")
    return CommitTree(root, commit), commit


def package_chart(root: Path, commit: str, dist: Path) -> Path:
    """``helm package`` of the chart (at ``commit``, else the working tree's) into ``dist``."""
    helm = ensure_helm(quiet=True)
    dist = dist.resolve()
    dist.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        chart = root / CHART
        if commit:
            extract(root, commit, Path(tmp), CHART)
            chart = Path(tmp) / CHART
        done = subprocess.run([str(helm), "package", str(chart), "--destination", str(dist)],
                              capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise ReleaseError(f"helm package {CHART}: {done.stderr.strip() or done.stdout}")
    # "Successfully packaged chart and saved it to: <path>"
    return Path(done.stdout.strip().rsplit(": ", 1)[-1])


def default_sglang() -> str:
    """The newest SGLang release base-images.txt has an image of for every chip."""
    rows = base_images.load()
    chips_of: dict[str, set[str]] = {}
    for row in rows:
        chips_of.setdefault(row.sglang, set()).add(row.chip)
    both = [v for v, chips in chips_of.items() if chips >= set(CHIPS)]
    return max(both, key=lambda v: [int(p) if p.isdigit() else 0
                                    for p in v.replace(".post", ".").split(".")])  # fmt: skip


def image_builds(version: str, registry: str, env: dict[str, str]) -> list[dict[str, str]]:
    """The environment of each ``make images`` run: the operator with the first chip's
    runtime, then each other chip's runtime."""
    chips = env.get("CHIPS", " ".join(CHIPS)).split()
    common = {"TAG": version, "REGISTRY": registry,
              "SGLANG_VERSION": env.get("SGLANG_VERSION") or default_sglang()}  # fmt: skip
    runs = []
    for i, chip in enumerate(chips):
        runs.append({**common, "CHIP": chip, **({"ONLY": "runtime"} if i else {})})
    return runs


def images(version: str, chips: list[str], registry: str) -> list[str]:
    return [f"{registry}/ascend-pd-operator:{version}",
            *(f"{registry}/ascend-pd-runtime:{version}-{chip}" for chip in chips)]  # fmt: skip


def build_images(root: Path, runs: list[dict[str, str]], dry_run: bool, push: bool) -> None:
    for settings in runs:
        # not the outer make's command line (MAKEFLAGS): its DRY_RUN, PUSH or TAG would
        # override these in the inner one
        inherited = {k: v for k, v in os.environ.items()
                     if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}  # fmt: skip
        env = {**inherited, **settings, "DRY_RUN": "1" if dry_run else "",
               "PUSH": "1" if push else ""}  # fmt: skip
        if dry_run:
            env.setdefault("ENGINE", "docker")
        shown = " ".join(f"{k}={v}" for k, v in settings.items())
        print(f"release: make images {shown}{' DRY_RUN=1' if dry_run else ''}", flush=True)
        done = subprocess.run(["make", "--no-print-directory", "images"], cwd=root, env=env,
                              check=False)  # fmt: skip
        if done.returncode != 0:
            raise ReleaseError(f"make images {shown} exited {done.returncode}")


def extract(root: Path, commit: str, dest: Path, *paths: str) -> None:
    """``paths`` (all of it: none) as they are at ``commit``, written under ``dest``: no
    checkout, so neither the working tree nor git's worktree list changes."""
    archive = dest / "tree.tar"
    done = git(root, "archive", "-o", str(archive), commit, *paths)
    if done.returncode != 0:
        raise ReleaseError(f"git archive {commit} {' '.join(paths)}: {done.stderr.strip()}")
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    archive.unlink()


@contextlib.contextmanager
def checkout(root: Path, commit: str) -> Iterator[Path]:
    """The tree the images are built from: ``commit``'s files (``extract``), so a recorded
    release's images are its commit's whatever HEAD is; else ``root``."""
    if not commit:
        yield root
        return
    with tempfile.TemporaryDirectory() as tmp:
        extract(root, commit, Path(tmp))
        print(f"release: the images are built from commit {commit}'s files in {tmp}")
        yield Path(tmp)


def release(args: argparse.Namespace, root: Path) -> None:
    version = args.version
    if not VERSION.match(version):
        raise ReleaseError(f"VERSION={version}: give a version as x.y.z")
    if args.push and not args.registry:
        raise ReleaseError("PUSH=1 needs REGISTRY, e.g. REGISTRY=registry.example.com/llm")
    if not args.dry_run and not args.registry:
        raise ReleaseError("building the images needs REGISTRY (or DRY_RUN=1)")
    tree, commit = release_tree(root, version)
    where = f"commit {commit} ({RELEASES})" if commit else "the working tree"
    mismatches = check(version, tree)
    for mismatch in mismatches:
        print(f"release: {mismatch}", file=sys.stderr)
    if mismatches:
        raise ReleaseError(f"{len(mismatches)} disagreement(s) with {version} in {where}")
    print(f"release: {version}: the versions agree in {where}")

    chart = package_chart(root, commit, args.dist or root / "dist")
    print(f"release: chart packaged: {chart}")

    registry = (args.registry or PLACEHOLDER_REGISTRY).rstrip("/")
    runs = image_builds(version, registry, dict(os.environ))
    with checkout(root, commit) as source:
        build_images(source, runs, args.dry_run, args.push and not args.dry_run)

    chips = [r["CHIP"] for r in runs]
    engine = os.environ.get("ENGINE", "docker")
    pushes = [*(f"{engine} push {image}" for image in images(version, chips, registry)),
              f"helm push {chart} oci://{registry}/charts"]  # fmt: skip
    if args.push and not args.dry_run:
        helm = str(ensure_helm(quiet=True))
        done = subprocess.run([helm, "push", str(chart), f"oci://{registry}/charts"],
                              check=False)  # fmt: skip
        if done.returncode != 0:
            raise ReleaseError(f"helm push exited {done.returncode}")
        print(f"release: {version} pushed to {registry}")
        return
    print("release: to push (PUSH=1 REGISTRY=... runs them; images.sh pushes each image "
          "after building it, a multi-platform docker build only so):")  # fmt: skip
    for line in pushes:
        print(f"  {line}")


def run(args: argparse.Namespace) -> int:
    try:
        release(args, project_root())
    except (ReleaseError, ToolError, base_images.BaseImagesError) as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 1
    return 0
