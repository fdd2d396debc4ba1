"""The release check's agreement rules (``ascend_pd_dev.cli.release_versions``) on copies of
the recorded 0.1.0's files, each with one hand-made disagreement, and the recorded releases
themselves: each commit in this repository's history, its versions agreeing."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from ascend_pd_dev.cli.release import RELEASES, recorded
from ascend_pd_dev.cli.release_versions import (
    CHANGELOG,
    CHART,
    EXAMPLES,
    PACKAGES,
    PYPROJECTS,
    CommitTree,
    WorkTree,
    check,
)

ROOT = Path(__file__).resolve().parents[2]
CHART_YAML = f"{CHART}/Chart.yaml"
VALUES = f"{CHART}/values.yaml"
EXAMPLE = f"{EXAMPLES}/deepseek-v3-pp2.yaml"


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.fixture
def release(tmp_path: Path) -> Path:
    """The files the check reads, as the recorded 0.1.0 commit has them."""
    commit = recorded(ROOT)["0.1.0"]
    tree = CommitTree(ROOT, commit)
    for path in [CHANGELOG, CHART_YAML, VALUES, *PYPROJECTS, *PACKAGES,
                 *tree.listdir(EXAMPLES)]:  # fmt: skip
        text = tree.read(path)
        if text is not None:
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_text(text)
    return tmp_path


def edit(root: Path, path: str, old: str, new: str) -> None:
    file = root / path
    text = file.read_text()
    assert old in text, (path, old)
    file.write_text(text.replace(old, new, 1))


def messages(root: Path, version: str = "0.1.0") -> list[str]:
    return [str(m) for m in check(version, WorkTree(root))]


def test_the_recorded_0_1_0_files_agree(release: Path) -> None:
    assert messages(release) == []
    assert messages(release, "0.2.0") == [
        "CHANGELOG.md: first version heading: found '## 0.1.0', expected '## 0.2.0'",
        f"{CHART_YAML}: version: found '0.1.0', expected '0.2.0'",
        f"{CHART_YAML}: appVersion: found '0.1.0', expected '0.2.0'",
        "pyproject.toml: project.version: found '0.1.0', expected '0.2.0'",
        "devtools/pyproject.toml: project.version: found '0.1.0', expected '0.2.0'",
        *(f"{path}: spec.runtime.image tag: found '0.1.0', expected '0.2.0' or '0.2.0-a2' "
          "or '0.2.0-a3'" for path in sorted(
              str(p.relative_to(release)) for p in (release / EXAMPLES).glob("*.yaml")
              if "ascend-pd-runtime:" in p.read_text())),
    ]  # fmt: skip


MISMATCHES = {
    "chart version": (
        CHART_YAML, "version: 0.1.0", "version: 0.1.1",
        f"{CHART_YAML}: version: found '0.1.1', expected '0.1.0'",
    ),
    "chart appVersion": (
        CHART_YAML, 'appVersion: "0.1.0"', 'appVersion: "0.2.0"',
        f"{CHART_YAML}: appVersion: found '0.2.0', expected '0.1.0'",
    ),
    "chart appVersion missing": (
        CHART_YAML, 'appVersion: "0.1.0"', "",
        f"{CHART_YAML}: appVersion: found nothing, expected '0.1.0'",
    ),
    "values image tag": (
        VALUES, 'tag: ""', 'tag: "0.0.9"',
        f"{VALUES}: image.tag: found '0.0.9', expected '0.1.0' or '' (the appVersion)",
    ),
    "root package": (
        "pyproject.toml", 'version = "0.1.0"', 'version = "0.1.1"',
        "pyproject.toml: project.version: found '0.1.1', expected '0.1.0'",
    ),
    "devtools package": (
        "devtools/pyproject.toml", 'version = "0.1.0"', 'version = "1.0.0"',
        "devtools/pyproject.toml: project.version: found '1.0.0', expected '0.1.0'",
    ),
    "operator __version__": (
        PACKAGES[0], '"""\n', '"""\n\n__version__ = "0.0.1"\n',
        f"{PACKAGES[0]}: __version__: found '0.0.1', expected '0.1.0'",
    ),
    "example image tag": (
        EXAMPLE, "ascend-pd-runtime:0.1.0", "ascend-pd-runtime:0.1.0-a4",
        f"{EXAMPLE}: spec.runtime.image tag: found '0.1.0-a4', expected '0.1.0' or "
        "'0.1.0-a2' or '0.1.0-a3'",
    ),
    "example image without tag": (
        EXAMPLE, "ascend-pd-runtime:0.1.0", "ascend-pd-runtime",
        f"{EXAMPLE}: spec.runtime.image tag: found nothing, expected '0.1.0' or '0.1.0-a2' "
        "or '0.1.0-a3'",
    ),
    "changelog heading not yet released": (
        CHANGELOG, "## 0.1.0\n", "## 0.1.0 (not yet released)\n",
        "CHANGELOG.md: first version heading: found '## 0.1.0 (not yet released)', "
        "expected '## 0.1.0'",
    ),
    "changelog only unreleased": (
        CHANGELOG, "## 0.1.0\n", "## Unreleased\n",
        "CHANGELOG.md: first version heading: found none, expected '## 0.1.0'",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", MISMATCHES)
def test_one_disagreement_is_one_line_naming_it(release: Path, case: str) -> None:
    path, old, new, message = MISMATCHES[case]
    edit(release, path, old, new)
    assert messages(release) == [message]


def test_a_runtime_tag_with_the_chip_and_other_images_agree(release: Path) -> None:
    edit(release, EXAMPLE, "ascend-pd-runtime:0.1.0", "ascend-pd-runtime:0.1.0-a3")
    # an image that is not ascend-pd's (the model download Job's python) is not checked
    assert "python:3.11-slim" in (release / EXAMPLES / "models-download.yaml").read_text()
    assert messages(release) == []


def test_an_unreleased_section_above_the_version_is_where_the_next_changes_go(
    release: Path,
) -> None:
    edit(release, CHANGELOG, "## 0.1.0\n", "## Unreleased\n\n- Something new.\n\n## 0.1.0\n")
    assert messages(release) == []
    # but not a version heading above the released one
    edit(release, CHANGELOG, "## Unreleased\n", "## Unreleased\n\n## 0.2.0\n")
    assert messages(release) == [
        "CHANGELOG.md: first version heading: found '## 0.2.0', expected '## 0.1.0'"
    ]


def test_a_missing_file_is_named(release: Path) -> None:
    (release / "devtools" / "pyproject.toml").unlink()
    assert messages(release) == ["devtools/pyproject.toml: file: found no file, expected the file"]


def test_each_recorded_release_commit_is_in_the_history_of_head_and_agrees() -> None:
    releases = yaml.safe_load((ROOT / RELEASES).read_text())
    assert "0.1.0" in releases
    for version, commit in releases.items():
        assert re.fullmatch(r"[0-9a-f]{40}", commit), (version, commit)
        assert git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0, (version, commit)
        done = git("merge-base", "--is-ancestor", commit, "HEAD")
        assert done.returncode == 0, f"{version}: {commit} is not an ancestor of HEAD"
        assert check(version, CommitTree(ROOT, commit)) == [], version
        # the release commit is the one that cut it: its CHANGELOG's first section is the
        # version's, with no Unreleased section above it
        changelog = CommitTree(ROOT, commit).read(CHANGELOG) or ""
        assert re.findall(r"^## .*$", changelog, re.MULTILINE)[0] == f"## {version}"
