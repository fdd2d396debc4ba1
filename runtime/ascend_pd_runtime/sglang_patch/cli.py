"""``ascend-pd-runtime patch-sglang [--check]``: patch the SGLang installed in this Python.

Applies the version's patch set once (re-running is a no-op) and verifies it;
``--check`` only reports each patch as applied or not applied. Exit 0 when every
patch is applied, 2 when ``--check`` finds one that is not, 1 on any error (an
SGLang that is missing or unsupported, an anchor that does not fit), with a
message naming the version, the patch and the file.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

from ..layout import parse_sglang_version, supported_sglang_versions
from .engine import PatchError, PatchState, apply_patch, patch_state
from .patches import Version, patches_for, supported

EXIT_OK, EXIT_ERROR, EXIT_NOT_APPLIED = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--check", action="store_true", help="report which patches are applied; change nothing"
    )
    parser.add_argument(
        "--site-dir",
        default=None,
        help="directory holding the sglang package and its dist-info "
        "(default: where this Python imports sglang from)",
    )


def locate_sglang(site_dir: str | None) -> tuple[Path, str]:
    """The installed ``sglang`` package directory and its version, without importing it."""
    if site_dir is not None:
        root = Path(site_dir) / "sglang"
        dists = list(importlib.metadata.distributions(name="sglang", path=[site_dir]))
        if not root.is_dir() or not dists:
            raise PatchError(f"--site-dir {site_dir}: no installed sglang package there")
        return root, dists[0].version
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise PatchError(f"SGLang is not installed for {sys.executable}")
    root = Path(next(iter(spec.submodule_search_locations)))
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        raise PatchError(
            f"{root}: sglang has no package metadata; cannot tell its version"
        ) from None
    return root, version


def check_version(text: str) -> Version:
    version = parse_sglang_version(text)
    if version is None or not supported(version):
        versions = supported_sglang_versions()
        raise PatchError(
            f"SGLang {text} is not supported by the ascend-pd patch set: "
            f"supported versions are {versions[0]} to {versions[-1]}"
        )
    return version


def run(args: argparse.Namespace) -> int:
    try:
        root, text = locate_sglang(args.site_dir)
        patches = patches_for(check_version(text))
        if args.check:
            states = [(p, patch_state(root, p)) for p in patches]
            for patch, state in states:
                print(f"{patch.name:<20} {state.value:<18} {patch.summary}")
            all_applied = all(s is PatchState.APPLIED for _, s in states)
            print(f"SGLang {text} at {root}: " + ("patched" if all_applied else "NOT patched"))
            return EXIT_OK if all_applied else EXIT_NOT_APPLIED
        for patch in patches:
            if patch_state(root, patch) is PatchState.PARTIAL:
                raise PatchError(
                    f"patch {patch.name!r} is partially applied to SGLang {text} at {root}; "
                    "reinstall SGLang and patch again"
                )
            changed = apply_patch(root, patch, text)
            print(f"{patch.name:<20} {'applied' if changed else 'already applied'}")
        unapplied = [p.name for p in patches if patch_state(root, p) is not PatchState.APPLIED]
        if unapplied:
            raise PatchError(f"after patching, {', '.join(unapplied)} still not applied")
        print(f"SGLang {text} at {root}: patched ({len(patches)} patches)")
        return EXIT_OK
    except PatchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
