"""An earlier ascend-pd, runnable beside HEAD: its checkout and a virtualenv of its operator.

The upgrade tier (``tests/upgrade``) installs an old commit's chart and CRDs and runs that
commit's own operator, then upgrades to HEAD. The old sources come from this checkout's
history (``git worktree add --detach``), so the CI checkout must be a full clone: a commit
missing from it fails at once, naming the commit, rather than testing the wrong thing.

The old operator's virtualenv is cached per commit under the project's cache
(``~/.cache/ascend-pd/old-operators/<sha>/``), built under a file lock and stamped only once
complete, so a rerun (or a second tier process) reuses it. It is a plain, not an editable,
install of ``<checkout>[operator]``: the checkout is a temporary directory, and the
venv must outlive it. Only the ``operator`` extra: what ``ascend-pd run`` imports.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml

#: the file recording each release's commit (version -> full SHA)
RELEASES_FILE = "releases.yaml"
#: written into a finished venv: its absence means "build (again)"
STAMP = "installed-from"


class OldReleaseError(RuntimeError):
    """An old version cannot be made runnable; the message says which and why."""


def release_commit(root: Path, version: str) -> str:
    """The commit ``releases.yaml`` records for ``version``."""
    recorded = yaml.safe_load((root / RELEASES_FILE).read_text()) or {}
    if version not in recorded:
        raise OldReleaseError(
            f"{RELEASES_FILE}: no release {version!r} (recorded: {sorted(recorded)})"
        )
    return str(recorded[version])


def full_commit(root: Path, ref: str) -> str:
    """``ref``'s full SHA, failing clearly when this checkout lacks the commit."""
    probe = subprocess.run(
        ["git", "-C", str(root), "cat-file", "-e", f"{ref}^{{commit}}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if probe.returncode != 0:
        raise OldReleaseError(
            f"commit {ref} is not in the checkout at {root}: the upgrade test needs the "
            "repository's history (a full clone, not a shallow one: git fetch --unshallow)"
        )
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", f"{ref}^{{commit}}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


@contextlib.contextmanager
def checkout(root: Path, commit: str) -> Iterator[Path]:
    """A detached worktree of ``commit`` in a temporary directory, removed afterwards."""
    parent = Path(tempfile.mkdtemp(prefix=f"ascend-pd-{commit[:8]}-"))
    tree = parent / "src"
    subprocess.run(
        ["git", "-C", str(root), "worktree", "add", "--detach", str(tree), commit],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(tree)],
                       capture_output=True, check=False)  # fmt: skip
        shutil.rmtree(parent, ignore_errors=True)


def venv_dir(commit: str) -> Path:
    """Beside the control-plane builds (``controlplane.paths.cache_root``, which this
    layer may not import): ``$XDG_CACHE_HOME/ascend-pd`` or ``~/.cache/ascend-pd``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ascend-pd" / "old-operators" / commit / "venv"


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path``, held for the block: one build per venv."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def operator_python(
    tree: Path, commit: str, progress: Callable[[str], None] = lambda _: None
) -> Path:
    """The Python of a virtualenv that runs ``commit``'s operator (``tree`` is its checkout),
    built on first use and cached per commit."""
    venv = venv_dir(commit)
    python = venv / "bin" / "python"
    stamp = venv / STAMP
    with file_lock(venv.parent / "lock"):
        if stamp.is_file() and python.exists():
            return python
        progress(f"building the operator venv of {commit[:12]} in {venv}")
        shutil.rmtree(venv, ignore_errors=True)
        log = venv.parent / "install.log"
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            # the default pip cache (~/.cache/pip) serves the wheels HEAD's venv already took
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             f"{tree}[operator]"],
        ]  # fmt: skip
        with log.open("w") as out:
            for step in steps:
                done = subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, check=False)
                if done.returncode != 0:
                    raise OldReleaseError(
                        f"{' '.join(step)} exited {done.returncode}; see {log}:\n"
                        + log.read_text()[-3000:]
                    )
        stamp.write_text(commit + "\n")
        return python
