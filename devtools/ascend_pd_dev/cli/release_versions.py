"""Whether every place that names ascend-pd's version agrees with a release's version.

``make release VERSION=x.y.z`` (``ascend_pd_dev.cli.release``) runs :func:`check` on the
working tree, or, for a version ``releases.yaml`` already records, on that commit's tree
(``git show <sha>:<path>``): both are a :class:`Tree`, so the rules are the same. The places:

- ``CHANGELOG.md``: its first version heading is ``## x.y.z`` (an ``## Unreleased`` section
  above it is allowed: that is where the next changes go);
- the chart's ``version`` and ``appVersion``, and its values' ``image.tag`` (empty: the
  appVersion);
- ``version`` of both Python distributions (``pyproject.toml``, ``devtools/pyproject.toml``)
  and a ``__version__`` literal in a package's ``__init__.py``, should one be added;
- the tag of every ascend-pd image the examples name (a runtime image may carry the chip,
  ``x.y.z-a2``, as ``make images CHIP=a2`` tags it).

Each disagreement is one :class:`Mismatch`, printed as one line naming the file, the field,
the value found and the value expected.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

CHANGELOG = "CHANGELOG.md"
CHART = "charts/ascend-pd-operator"
PYPROJECTS = ("pyproject.toml", "devtools/pyproject.toml")
PACKAGES = (
    "operator/ascend_pd_operator/__init__.py",
    "runtime/ascend_pd_runtime/__init__.py",
    "devtools/ascend_pd_dev/__init__.py",
)
EXAMPLES = "examples"
#: the images ``make images`` builds, by the last part of their repository
IMAGES = ("ascend-pd-operator", "ascend-pd-runtime")
#: the chips a runtime image's tag may name after the version (devtools/images.sh)
CHIPS = ("a2", "a3")
UNRELEASED = "Unreleased"
VERSION = re.compile(r"^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$")
_HEADING = re.compile(r"^## (.+?)\s*$", re.MULTILINE)
_DUNDER = re.compile(r"^__version__\s*=\s*['\"]([^'\"]*)['\"]", re.MULTILINE)


class Tree(Protocol):
    """The repository's files at one state: the working tree or a commit."""

    def read(self, path: str) -> str | None:
        """The file's text, None when it does not exist."""

    def listdir(self, path: str) -> list[str]:
        """The repository paths of the files directly in folder ``path``, sorted."""


@dataclass(frozen=True)
class WorkTree:
    root: Path

    def read(self, path: str) -> str | None:
        file = self.root / path
        return file.read_text() if file.is_file() else None

    def listdir(self, path: str) -> list[str]:
        folder = self.root / path
        if not folder.is_dir():
            return []
        return sorted(f"{path}/{p.name}" for p in folder.iterdir() if p.is_file())


@dataclass(frozen=True)
class CommitTree:
    root: Path
    commit: str

    def _git(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=self.root, capture_output=True, text=True,
                              check=False)  # fmt: skip

    def read(self, path: str) -> str | None:
        done = self._git("show", f"{self.commit}:{path}")
        return done.stdout if done.returncode == 0 else None

    def listdir(self, path: str) -> list[str]:
        done = self._git("ls-tree", "--name-only", f"{self.commit}", f"{path}/")
        return sorted(line for line in done.stdout.splitlines() if line)


@dataclass(frozen=True)
class Mismatch:
    path: str
    field: str
    found: str
    expected: str

    def __str__(self) -> str:
        return f"{self.path}: {self.field}: found {self.found}, expected {self.expected}"


def check(version: str, tree: Tree) -> list[Mismatch]:
    """Every place that disagrees with ``version``, in a fixed order."""
    return [
        *_changelog(version, tree),
        *_chart(version, tree, CHART),
        *_python(version, tree),
        *_examples(version, tree),
    ]


def _quoted(value: object) -> str:
    return "nothing" if value is None else repr(value) if isinstance(value, str) else str(value)


def _changelog(version: str, tree: Tree) -> Iterator[Mismatch]:
    text = tree.read(CHANGELOG)
    expected = f"'## {version}'"
    if text is None:
        yield Mismatch(CHANGELOG, "first version heading", "no file", expected)
        return
    headings = [h for h in _HEADING.findall(text) if h != UNRELEASED]
    if not headings or headings[0] != version:
        found = f"'## {headings[0]}'" if headings else "none"
        yield Mismatch(CHANGELOG, "first version heading", found, expected)


def _yaml(tree: Tree, path: str) -> tuple[Any, Mismatch | None]:
    text = tree.read(path)
    if text is None:
        return None, Mismatch(path, "file", "no file", "the file")
    return yaml.safe_load(text) or {}, None


def _chart(version: str, tree: Tree, chart: str) -> Iterator[Mismatch]:
    path = f"{chart}/Chart.yaml"
    meta, missing = _yaml(tree, path)
    if missing:
        yield missing
    else:
        for field in ("version", "appVersion"):
            if str(meta.get(field)) != version:
                yield Mismatch(path, field, _quoted(meta.get(field)), repr(version))
    path = f"{chart}/values.yaml"
    values, missing = _yaml(tree, path)
    if missing:
        yield missing
        return
    tag = (values.get("image") or {}).get("tag")
    if tag not in ("", None, version):
        yield Mismatch(path, "image.tag", _quoted(tag), f"{version!r} or '' (the appVersion)")


def _python(version: str, tree: Tree) -> Iterator[Mismatch]:
    for path in PYPROJECTS:
        text = tree.read(path)
        if text is None:
            yield Mismatch(path, "file", "no file", "the file")
            continue
        found = tomllib.loads(text).get("project", {}).get("version")
        if found != version:
            yield Mismatch(path, "project.version", _quoted(found), repr(version))
    for path in PACKAGES:
        match = _DUNDER.search(tree.read(path) or "")
        if match and match.group(1) != version:
            yield Mismatch(path, "__version__", repr(match.group(1)), repr(version))


def _images(node: Any, where: str) -> Iterator[tuple[str, str]]:
    """(field path, image) of every ``image`` string in a manifest."""
    if isinstance(node, dict):
        for key, value in node.items():
            field = f"{where}.{key}" if where else str(key)
            if key == "image" and isinstance(value, str):
                yield field, value
            else:
                yield from _images(value, field)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _images(value, f"{where}[{i}]")


def _examples(version: str, tree: Tree) -> Iterator[Mismatch]:
    for path in tree.listdir(EXAMPLES):
        if not path.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.safe_load_all(tree.read(path) or ""):
            for field, image in _images(doc, ""):
                name, _, tag = image.rpartition(":")
                if "/" in tag or not name:  # a registry port, no tag
                    name, tag = image, ""
                if name.rsplit("/", 1)[-1] not in IMAGES:
                    continue
                allowed = [version]
                if name.endswith("ascend-pd-runtime"):
                    allowed += [f"{version}-{chip}" for chip in CHIPS]
                if tag not in allowed:
                    yield Mismatch(path, f"{field} tag", _quoted(tag or None),
                                   " or ".join(map(repr, allowed)))  # fmt: skip
