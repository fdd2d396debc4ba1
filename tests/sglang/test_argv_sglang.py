"""Every command a runtime pod runs is accepted by the real SGLang it runs, and means
what the PDDeployment asked for.

For every supported release (0.5.10-0.5.23, each from PyPI) every pod of every example
and of the generated specs (``argv_cases``) is planned by ``plan_launch`` from the env
the operator's builders give it; SGLang's own parser (``argv_driver``: the launcher's
pre-exec check and ``prepare_server_args``, what ``launch_server`` calls) parses it,
and each parsed value must equal the intent derived by hand from the spec. Specs a
release cannot run are refused by the operator with the rule's message.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import sglang_harness as harness
from argv_cases import ArgvCase, Refusal, cases_for
from release_checks import Job, ReleaseChecks, release_check

from ascend_pd_runtime.layout import (
    SGLANG_PP_PREFILL_DRAFT,
    parse_sglang_version,
    supported_sglang_versions,
)

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(900)]

VERSIONS = supported_sglang_versions()
DRIVER = Path(__file__).resolve().parent / "argv_driver.py"
_PLANNED: dict[str, tuple[list[ArgvCase], list[Refusal]]] = {}
_RESULTS: dict[str, tuple[list[ArgvCase], list[Refusal], dict[str, Any]]] = {}

#: The only way prepare_server_args may fail here: a pre-0.5.2x ServerArgs.__post_init__
#: asks the NPU for its memory, and this machine has none.
NO_NPU = "module 'torch' has no attribute 'npu'"
#: The rule that refuses, before 0.5.20, what those releases cannot run.
PP_PREFILL_DRAFT_RULE = "refuses speculative decoding on a prefill with pipeline size > 1"
#: a release_checks job: ``argv_driver.run_all`` on ``CASES``
ARGV = """
import json, sys
sys.path.insert(0, TESTS)
import argv_driver
print("REPORT " + json.dumps(argv_driver.run_all(CASES)))
"""


def planned(version: str, tmp: Path) -> tuple[list[ArgvCase], list[Refusal]]:
    """Every pod's argv for ``version`` and the specs refused (planned once; the model
    directories under ``tmp`` of the first call)."""
    if version not in _PLANNED:
        _PLANNED[version] = cases_for(version, tmp)
    return _PLANNED[version]


# last in the release's pristine interpreter: it turns logging off while it parses, and
# what prepare_server_args leaves behind is no later job's business
@release_check("upstream", order=90)
def _argv_job(env: harness.SGLangEnv) -> list[Job]:
    cases, _ = planned(env.version, env.workdir / "argv")
    return [Job("argv", ARGV, {"CASES": [c.request() for c in cases]})]


def parse_all(
    version: str, tmp: Path, checks: ReleaseChecks
) -> tuple[list[ArgvCase], list[Refusal], dict[str, Any]]:
    """Plan every pod for ``version`` and parse every argv with that release (cached): in
    the release's pristine batch where the session has one (``harness.VERSIONS``), in an
    interpreter of its own otherwise."""
    if version not in _RESULTS:
        if version in harness.VERSIONS:
            job = checks.result(version, "upstream", "argv")
            assert job.report is not None, (job.error or job.stdout)[-4000:]
            parsed = job.report
            cases, refused = planned(version, tmp)
        else:
            cases, refused = planned(version, tmp)
            parsed = _parse_alone(version, cases, tmp)
        _RESULTS[version] = (cases, refused, parsed)
    return _RESULTS[version]


def _parse_alone(version: str, cases: list[ArgvCase], tmp: Path) -> Any:
    site = harness.ensure_version(version)
    requests = [c.request() for c in cases]
    return harness.run_cases(DRIVER, (site,), requests, tmp / f"argv-{version}.json")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("argv")


@pytest.mark.parametrize("version", VERSIONS)
def test_every_pod_command_parses_to_its_intent(
    version: str, workdir: Path, release_checks: ReleaseChecks
) -> None:
    cases, refused, parsed = parse_all(version, workdir, release_checks)
    assert parsed["version"] == version
    assert cases, "no argv planned"
    problems: list[str] = []
    full = 0
    for case in cases:
        entry = parsed["results"][case.id]
        check = entry["check"]
        if not check["ok"]:
            problems.append(f"{case.id}: refused: {check['error']} ({check['argument']!r})")
            continue
        # parse_args alone names some dests differently (0.5.10: tensor_parallel_size,
        # which from_cli_args copies to tp_size): the ServerArgs record is what counts.
        record = entry["server_args"]
        if not record["full"]:
            assert NO_NPU in record["post_init_error"], record
        full += record["full"]
        if record["values"] != case.intent:
            problems.append(f"{case.id}: ServerArgs gave {_diff(record['values'], case.intent)}")
    assert not problems, "\n".join(problems)
    # What the operator refuses for this release: only what the release cannot run.
    old = parse_sglang_version(version) < SGLANG_PP_PREFILL_DRAFT
    for refusal in refused:
        assert old and PP_PREFILL_DRAFT_RULE in refusal.message, refusal
    line = (
        f"SGLang {version}: {len(cases)} argvs parsed by its own parser, {len(cases)} matched "
        f"their intent ({full} through the full prepare_server_args, {len(cases) - full} "
        f"with __post_init__ skipped: no NPU); {len(refused)} specs refused by the operator"
    )
    harness.SUMMARY.append(line)
    print(line)


def _diff(got: dict[str, Any], want: dict[str, Any]) -> str:
    keys = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    return ", ".join(f"{k}={got.get(k)!r} (want {want.get(k)!r})" for k in keys)


def test_flag_differences_between_releases(workdir: Path, release_checks: ReleaseChecks) -> None:
    """Which options each release drops or adds (and choice lists of the flags we write
    that change): the record behind extraArgs that one release accepts and the next
    refuses. Every flag the launcher writes exists in every release."""
    options = {v: parse_all(v, workdir, release_checks)[2]["options"] for v in VERSIONS}
    written = {
        a.split("=", 1)[0]
        for case in parse_all(VERSIONS[-1], workdir, release_checks)[0]
        for a in case.argv
        if a.startswith("--")
    }
    for version, known in options.items():
        missing = sorted(f for f in written if f not in known)
        assert not missing, f"SGLang {version} lacks {missing}"
    lines = []
    for before, after in itertools.pairwise(VERSIONS):
        old, new = options[before], options[after]
        removed = sorted(set(old) - set(new))
        added = sorted(set(new) - set(old))
        choices = sorted(
            f"{flag} choices {old[flag]} -> {new[flag]}"
            for flag in set(old) & set(new) & written
            if old[flag] != new[flag]
        )
        # An old flag that is now a prefix of two new ones is refused as ambiguous.
        ambiguous = sorted(f for f in removed if sum(n.startswith(f) for n in new) > 1)
        lines.append(
            f"{before} -> {after}: removed {removed or 'none'}; ambiguous now "
            f"{ambiguous or 'none'}; {len(added)} added; {choices or 'no choice changes'}"
        )
    harness.SUMMARY.extend(lines)
    print("\n".join(lines))
    assert "--cuda-graph-max-bs" in options[VERSIONS[0]]
    assert "--cuda-graph-max-bs" not in options[VERSIONS[-1]]
