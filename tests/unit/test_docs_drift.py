"""What the docs name, against what exists (the sibling of ``test_docs.py``): every rule here
is stated over all of the user docs, so a new page, example, CRD or label is checked as it
comes, without a test naming it.

- a label or annotation under ``ascendpd.io/`` is one the operator writes now (the
  vocabulary's, not a legacy one outside the CHANGELOG and upgrade.md);
- a probe (startup, readiness, liveness) is one some pod of ours has: the pods the
  builders make for every example, and the chart's operator pod;
- every example holding a PDDeployment is a row of the README's and docs/operator.md's
  example tables, and every other example is named in both;
- every CRD file under ``crds/`` is applied by a command of docs/upgrade.md; every
  ``kubectl apply ... crds/...`` of the docs applies a whole variant (a directory: each CRD
  of the API), every ``kubectl delete crd`` deletes each CRD, and a page that names one
  CRD names them all;
- a Helm flag newer than the oldest Helm the docs support carries its version where it is
  used and in docs/compatibility.md;
- docs/operator.md's usage of ``ascend-pd run`` shows every flag its parser has.
- the minimum Kubernetes the README, docs/compatibility.md and docs/development.md state, and
  each chart's ``kubeVersion``, is the floor of the dev cluster's release table
  (``versions.FLOOR``, the release the ``floor`` test tier runs).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_pd_operator.api import models, vocabulary
from ascend_pd_operator.api.crd import KINDS
from ascend_pd_operator.wiring.render_cli import EXIT_OK, render

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "ascend-pd-operator"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
#: Every text a user reads: the pages, the chart's README, NOTES and values' comments, and
#: the examples' headers.
USER_TEXTS = sorted(
    [
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
        *(ROOT / "docs").glob("*.md"),
        CHART / "README.md",
        CHART / "templates" / "NOTES.txt",
        CHART / "values.yaml",
        *EXAMPLES,
    ]
)
#: Pages that tell the history, where a name the operator no longer writes belongs.
HISTORY = {ROOT / "CHANGELOG.md", ROOT / "docs" / "upgrade.md"}
CRD_NAMES = sorted(f"{kind.plural}.{models.GROUP}" for kind in KINDS)


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _words(text: str) -> str:
    return " ".join(text.split())


# --- labels and annotations -------------------------------------------------------------


def _our_names() -> tuple[set[str], set[str]]:
    """(current, legacy) ``ascendpd.io/...`` names of the vocabulary, and the API version."""
    current, legacy = {f"{models.GROUP}/{models.VERSION}"}, set()
    for name, value in vars(vocabulary).items():
        if isinstance(value, str) and value.startswith(f"{vocabulary.PREFIX}/"):
            (legacy if "LEGACY" in name else current).add(value)
    return current, legacy


NAME = re.compile(rf"{re.escape(vocabulary.PREFIX)}/[a-z0-9][a-z0-9._-]*[a-z0-9]")


@pytest.mark.parametrize("doc", USER_TEXTS, ids=_rel)
def test_every_ascendpd_label_the_docs_name_is_the_operator_s(doc: Path) -> None:
    current, legacy = _our_names()
    found = set(NAME.findall(doc.read_text()))
    unknown = sorted(found - current - legacy)
    assert not unknown, f"{_rel(doc)} names {unknown}, which the operator never writes"
    if doc not in HISTORY:
        old = sorted(found & legacy)
        assert not old, f"{_rel(doc)} names {old}, which only operators up to 0.1.0 wrote"


# --- probes -----------------------------------------------------------------------------

PROBE = re.compile(r"\b(startup|readiness|liveness)(?:[ -]probe|Probe)", flags=re.I)


def _examples_manifests() -> list[dict[str, Any]]:
    manifests = []
    for path in EXAMPLES:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        configmaps = [d for d in docs if d["kind"] == "ConfigMap"]
        for pdd in (d for d in docs if d["kind"] == models.KIND):
            code, rendered, message = render(pdd, None, "llm", configmaps)
            assert code == EXIT_OK, f"{path.name}: {message}"
            manifests += rendered
    return manifests


def _probes_we_set() -> set[str]:
    """The probe kinds of every container of every pod the builders make for the examples,
    and of the chart's operator pod (its template)."""
    kinds = set()
    for manifest in _examples_manifests():
        template = (manifest.get("spec") or {}).get("template") or {}
        for container in (template.get("spec") or {}).get("containers") or []:
            kinds |= {key[: -len("Probe")] for key in container if key.endswith("Probe")}
    chart = (CHART / "templates" / "deployment.yaml").read_text()
    kinds |= set(re.findall(r"^\s+(startup|readiness|liveness)Probe:", chart, flags=re.M))
    return kinds


def test_every_probe_the_docs_name_is_one_a_pod_of_ours_has() -> None:
    ours = _probes_we_set()
    assert {"readiness", "liveness"} <= ours
    wrong = [
        f"{_rel(doc)}: {match.group(0)!r}"
        for doc in USER_TEXTS
        if doc not in HISTORY  # the CHANGELOG may tell of a probe that went
        for match in PROBE.finditer(doc.read_text())
        if match.group(1).lower() not in ours
    ]
    assert not wrong, f"no pod of ours has these probes: {wrong}"


# --- examples ---------------------------------------------------------------------------


def _table_rows(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith("| `")]


@pytest.mark.parametrize("page", [ROOT / "README.md", ROOT / "docs" / "operator.md"], ids=_rel)
def test_every_example_is_in_the_page_s_table(page: Path) -> None:
    rows = _table_rows(page)
    text = page.read_text()
    for example in EXAMPLES:
        if f"kind: {models.KIND}" in example.read_text():
            assert any(f"`{example.name}`" in row for row in rows), (
                f"{_rel(page)}: no row of the examples table for {example.name}"
            )
        else:
            assert f"`{example.name}`" in text, f"{_rel(page)} does not name {example.name}"


# --- CRDs -------------------------------------------------------------------------------

APPLY = re.compile(r"kubectl apply [^`\n#|]*?-f (crds/[^\s`)]*)")


def _crd_files() -> list[Path]:
    return sorted((ROOT / "crds").rglob("*.yaml"))


def applied_crd_files(target: str) -> set[Path]:
    """The CRD files ``kubectl apply -f <target>`` applies: a file, or a directory's own
    files (``-f`` does not recurse without ``-R``)."""
    path = ROOT / target
    assert path.exists(), f"kubectl apply -f {target}: no such file or directory"
    return set(path.glob("*.yaml")) if path.is_dir() else {path}


def test_the_crd_files_are_one_per_kind_in_each_variant() -> None:
    for folder in {p.parent for p in _crd_files()}:
        kinds = sorted(yaml.safe_load(p.read_text())["metadata"]["name"]
                       for p in folder.glob("*.yaml"))  # fmt: skip
        assert kinds == CRD_NAMES, f"{_rel(folder)} holds {kinds}"


def test_upgrade_md_applies_every_crd_file() -> None:
    text = (ROOT / "docs" / "upgrade.md").read_text()
    applied = set().union(*(applied_crd_files(t) for t in APPLY.findall(text)))
    missing = [_rel(p) for p in _crd_files() if p not in applied]
    assert not missing, f"docs/upgrade.md gives no kubectl apply for {missing}"


@pytest.mark.parametrize("doc", USER_TEXTS, ids=_rel)
def test_every_crd_command_of_the_docs_takes_every_crd(doc: Path) -> None:
    text = _words(doc.read_text())
    for target in APPLY.findall(text):
        files = applied_crd_files(target)
        names = sorted(yaml.safe_load(p.read_text())["metadata"]["name"] for p in files)
        assert names == CRD_NAMES, f"{_rel(doc)}: kubectl apply -f {target} applies {names}"
    for deleted in re.findall(r"kubectl delete crds? ([a-z0-9. ]+)", text):
        assert sorted(deleted.split()) == CRD_NAMES, f"{_rel(doc)}: deletes {deleted}"
    if doc not in HISTORY:
        named = [name for name in CRD_NAMES if name in text]
        assert named in ([], CRD_NAMES), f"{_rel(doc)} names {named}, not every CRD"


# --- Helm versions ----------------------------------------------------------------------

#: Helm flags the docs may use that Helm 3.0 lacks, and the release that brought each
#: (Helm's release notes: --take-ownership in 3.17.0, server-side apply in 4.0.0).
HELM_FLAGS_SINCE = {"--take-ownership": "3.17", "--force-conflicts": "4"}


def _paragraphs(text: str) -> list[str]:
    return [_words(p) for p in re.split(r"\n\s*\n", text)]


def test_helm_s_oldest_supported_version_is_stated() -> None:
    text = (ROOT / "docs" / "compatibility.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| Helm |"))
    assert re.search(r"\| Helm \| 3 and later", row), row
    used = {f for f in HELM_FLAGS_SINCE if any(_uses(doc, f) for doc in USER_TEXTS)}
    for flag in sorted(used):
        assert flag in row and f"Helm {HELM_FLAGS_SINCE[flag]}" in row, (
            f"docs/compatibility.md's Helm row does not say {flag} needs "
            f"Helm {HELM_FLAGS_SINCE[flag]}"
        )


def _uses(doc: Path, flag: str) -> bool:
    """Whether ``doc`` names the Helm flag: in a helm command, or as a code span."""
    text = doc.read_text()
    return f"`{flag}`" in text or bool(re.search(rf"^\s*helm [^\n]*{re.escape(flag)}\b", text,
                                                 flags=re.M))  # fmt: skip


@pytest.mark.parametrize("doc", USER_TEXTS, ids=_rel)
def test_a_newer_helm_flag_says_which_helm_it_needs(doc: Path) -> None:
    for flag, since in HELM_FLAGS_SINCE.items():
        if not _uses(doc, flag):
            continue
        for paragraph in _paragraphs(doc.read_text()):
            if flag in paragraph:
                assert f"Helm {since}" in paragraph, (
                    f"{_rel(doc)}: {flag} without 'Helm {since}' beside it: {paragraph[:300]}"
                )


# --- the operator's flags ---------------------------------------------------------------


def test_docs_operator_md_shows_every_flag_of_ascend_pd_run() -> None:
    import argparse

    from ascend_pd_operator.wiring.run_cli import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    commands = (ROOT / "docs" / "operator.md").read_text().split("## Commands", 1)[1]
    commands = commands.split("```", 2)[1]
    flags = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}
    missing = sorted(f for f in flags - {"--help"} if f not in commands)
    assert not missing, f"docs/operator.md's `ascend-pd run` usage lacks {missing}"


# --- the oldest supported Kubernetes ----------------------------------------------------

#: a statement of the minimum Kubernetes: "Kubernetes 1.28 or later", "| Kubernetes | 1.28 and
#: later", "Kubernetes 1.28+", "clusters >= 1.28", "kubeVersion: >=1.28.0-0"
MINIMUM = re.compile(
    r"Kubernetes(?: \|)? (1\.\d+)(?:\.\d+)?(?:\+| or later| and later| or newer)"
    r"|(?:clusters|Kubernetes) >= ?(1\.\d+)"
    r"|kubeVersion:? `?\"?>= ?(1\.\d+)"
)
#: the pages that must state it (the chart's Chart.yaml gates installs by it)
STATE_THE_FLOOR = [ROOT / "README.md", ROOT / "docs" / "compatibility.md",
                   ROOT / "docs" / "development.md"]  # fmt: skip


def _floor() -> str:
    from ascend_pd_dev.controlplane import versions

    return versions.FLOOR


@pytest.mark.parametrize("doc", STATE_THE_FLOOR, ids=_rel)
def test_the_pages_state_the_tested_floor_as_the_minimum_kubernetes(doc: Path) -> None:
    """The floor is the oldest release of the dev cluster's release table, the one the
    ``floor`` test tier runs: a page stating another minimum claims what nothing tests."""
    found = {next(filter(None, m)) for m in MINIMUM.findall(_words(doc.read_text()))}
    assert found == {_floor()}, f"{_rel(doc)} states Kubernetes >= {sorted(found)}, not {_floor()}"


def test_each_chart_s_kube_version_is_the_tested_floor() -> None:
    charts = sorted((ROOT / "charts").glob("*/Chart.yaml"))
    assert charts
    for chart in charts:
        gate = yaml.safe_load(chart.read_text())["kubeVersion"]
        assert gate == f">={_floor()}.0-0", f"{_rel(chart)}: kubeVersion {gate!r}"
