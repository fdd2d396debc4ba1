"""The patched Ascend connector, driven through the real SGLang code of every listed release.

For each version: ``runtime/install-and-patch.sh`` (what the Dockerfile runs)
patches a copy of the PyPI release; ``AscendKVManager.send_kvcache`` then sends
one fragmented request per prefill PP stage of many layouts to a recording
transfer engine. The descriptors must equal the layout core's plan (and an
oracle written from the README's layout rules); upstream's own code must agree
wherever upstream is correct; a decode with the wrong pointer count must be
refused before anything is sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sglang_harness as harness
from release_checks import Job, ReleaseChecks, release_check
from sglang_cases import Case, layout_cases, mismatch_cases

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(1800)]

VERSIONS = harness.VERSIONS
FROM_0_5_12 = [v for v in VERSIONS if tuple(map(int, v.split("."))) >= (0, 5, 12)]
#: a release_checks job: ``driver.run_all`` on ``CASES``
CONNECTOR = """
import json, sys
sys.path.insert(0, TESTS)
import driver
print("REPORT " + json.dumps(driver.run_all(CASES)))
"""


def _cases(env: harness.SGLangEnv) -> list[Case]:
    return layout_cases(env.version_tuple) + mismatch_cases()


def _connector_job(env: harness.SGLangEnv) -> Job:
    return Job("connector", CONNECTOR, {"CASES": [c.to_json() for c in _cases(env)]})


# first in the process: SGLang as the connector meets it at start-up
@release_check("patched", order=10)
def _patched_jobs(env: harness.SGLangEnv) -> list[Job]:
    return [_connector_job(env), Job("request-path", CONNECTOR, {"CASES": _bad_requests(env)})]


@release_check("upstream", order=10)
def _upstream_jobs(env: harness.SGLangEnv) -> list[Job]:
    return [_connector_job(env)]


def _results(checks: ReleaseChecks, version: str, mode: str, job: str = "connector") -> Any:
    """The driver's result of every case of ``job`` in ``version``, patched or upstream."""
    result = checks.result(version, mode, job)
    assert result.report is not None, result.error or result.stdout[-3000:]
    assert result.report["version"] == version
    assert result.report["patched"] is (mode == "patched")
    return result.report["results"]


def _patched_and_upstream(
    checks: ReleaseChecks, version: str
) -> tuple[harness.SGLangEnv, dict[str, Any], dict[str, Any]]:
    """``version``'s environment and the driver's results of every case, patched and not."""
    env = checks.envs.get(version)
    return env, _results(checks, version, "patched"), _results(checks, version, "upstream")


def test_install_and_patch_applies_every_patch_of_the_version(env: harness.SGLangEnv) -> None:
    lines = env.patch_output.splitlines()
    expected = {"vectorized-send"}
    if env.version_tuple <= (0, 5, 11):
        expected |= {"mla-pp-kv-args", "torch-npu-optional"}
    if env.version_tuple == (0, 5, 12):
        expected.add("index-buffer-guard")
    applied = {line.split()[0] for line in lines if line.split()[1:2] == ["applied"]}
    assert applied == expected
    assert f"SGLang {env.version} at {env.patched / 'sglang'}: patched" in env.patch_output


def test_second_run_is_a_no_op(env: harness.SGLangEnv) -> None:
    before = (env.patched / "sglang/srt/disaggregation/ascend/conn.py").read_text()
    code = "from ascend_pd_runtime.cli import main; raise SystemExit(main(['patch-sglang']))"
    out = harness.run_python((env.patched, env.pristine), code)
    assert out.returncode == 0, out.stderr
    assert "already applied" in out.stdout
    assert " applied\n" not in out.stdout.replace("already applied", "")
    assert (env.patched / "sglang/srt/disaggregation/ascend/conn.py").read_text() == before
    # the pristine release behind the hard links is untouched
    pristine = (env.pristine / "sglang/srt/disaggregation/ascend/conn.py").read_text()
    assert "ascend-pd patch" not in pristine


def test_wrong_sglang_version_fails_the_build(env: harness.SGLangEnv) -> None:
    out = harness.run_install_and_patch(
        env.patched, env.pristine, env.version, ("SGLANG_VERSION", "0.5.99")
    )
    assert out.returncode == 1
    assert f"SGLANG_VERSION is 0.5.99 but the base image has SGLang {env.version}" in out.stderr


def test_patched_send_kvcache_sends_the_layout_core_plan(
    env: harness.SGLangEnv, release_checks: ReleaseChecks
) -> None:
    results = _results(release_checks, env.version, "patched")
    checked = 0
    for case in layout_cases(env.version_tuple):
        result = results[case.name]
        assert "error" not in result, f"{case.name}: {result['message']}"
        expected = case.expected()
        assert expected == case.oracle(), case.name
        assert result["descriptors"] == expected, case.name
        assert result["status"] == 0 and result["logged_errors"] == []
        if case.custom_mem_pool and expected:
            assert result["calls"] == case.prefill.kv_buf_groups * (
                case.prefill.num_layers + case.prefill.draft_layers
            )
        elif expected:
            assert result["calls"] == 1, case.name
        checked += 1
    assert checked >= 30


def test_guard_refuses_a_decode_with_the_wrong_pointer_count(
    env: harness.SGLangEnv, release_checks: ReleaseChecks
) -> None:
    results = _results(release_checks, env.version, "patched")
    for case in mismatch_cases():
        result = results[case.name]
        assert result.get("status") == -1, f"{case.name}: {_brief(result)}"
        assert result["calls"] == 0 and result["descriptors"] == []
        (message,) = result["logged_errors"]
        assert "refusing KV transfer to session decode-session: KV layout mismatch" in message
        assert f"decode registered {case.decode.kv_pointer_count} KV pointers" in message
        prefill = case.prefill
        assert f"layers [{prefill.start_layer}, {prefill.end_layer})" in message
        assert f"{prefill.kv_pointer_count} pointers" in message
        assert f"{case.total_kv_layers} target layers" in message


def _brief(result: dict[str, Any]) -> str:
    return str({k: v for k, v in result.items() if k != "descriptors"})


def _upstream_is_correct(case: Case, version: tuple[int, int, int]) -> bool:
    """Where upstream's own send_kvcache maps KV correctly (established by these tests)."""
    if "mismatch" in case.tags:
        return False
    if case.pp_size == 1:
        return True
    if "decode-pp-draft" in case.tags and case.decode.draft_layers:
        # decode's last PP stage holds its own layers plus the draft layers: upstream
        # slices that list as if it were a whole decode's
        return False
    if version <= (0, 5, 11):
        # no MLA branch: the MHA slicing splits MLA's groups in two
        return "mha" in case.tags
    return True


@pytest.mark.parametrize("version", FROM_0_5_12)
def test_unpatched_upstream_sends_the_same_where_it_is_correct(
    version: str, release_checks: ReleaseChecks
) -> None:
    env, patched, upstream = _patched_and_upstream(release_checks, version)
    compared = 0
    for case in layout_cases(env.version_tuple):
        if not _upstream_is_correct(case, env.version_tuple):
            continue
        assert upstream[case.name].get("descriptors") == patched[case.name]["descriptors"], (
            f"{version} {case.name}: upstream differs"
        )
        compared += 1
    assert compared >= 30


@pytest.mark.parametrize("version", ["0.5.10", "0.5.11"])
def test_mla_under_pp_is_new_in_0_5_10_and_0_5_11(
    version: str, release_checks: ReleaseChecks
) -> None:
    """Upstream sends MLA KV under PP to the wrong decode entries; patched follows the core."""
    env, patched, upstream = _patched_and_upstream(release_checks, version)
    pp_mla = [c for c in layout_cases(env.version_tuple) if "pp" in c.tags and c.mla]
    differing = [
        c.name
        for c in pp_mla
        if c.expected() and upstream[c.name].get("descriptors") != c.expected()
    ]
    assert differing
    for case in pp_mla:
        assert patched[case.name]["descriptors"] == case.expected()


@pytest.mark.parametrize("version", FROM_0_5_12)
def test_upstream_misplaces_kv_for_a_pp_decode_holding_draft_layers(
    version: str, release_checks: ReleaseChecks
) -> None:
    """The one layout where upstream 0.5.12+ is wrong: patched sends the core's plan."""
    env, patched, upstream = _patched_and_upstream(release_checks, version)
    cases = [c for c in layout_cases(env.version_tuple) if "decode-pp-draft" in c.tags]
    wrong = [c for c in cases if c.decode.draft_layers]
    assert len(cases) == 2 and len(wrong) == 1
    for case in cases:
        assert patched[case.name]["descriptors"] == case.expected() == case.oracle()
    for case in cases:
        assert (upstream[case.name].get("descriptors") == case.expected()) is (case not in wrong)


def _bad_config(env: harness.SGLangEnv) -> Path:
    return env.workdir / "bad-model" / "config.json"


def _bad_requests(env: harness.SGLangEnv) -> list[dict[str, Any]]:
    """``v3-pp1/rank0`` with a hub model id, an unreadable config.json, one item length
    short."""
    (base,) = [c for c in layout_cases(env.version_tuple) if c.name == "v3-pp1/rank0"]
    bad_config = _bad_config(env)
    bad_config.parent.mkdir(exist_ok=True)
    bad_config.write_text('{"num_hidden_layers": 61,')
    hub = dict(base.to_json(), name="hub-model-id", model_path="deepseek-ai/DeepSeek-V3")
    unreadable = dict(base.to_json(), name="unreadable-config", model_path=str(bad_config.parent))
    short = base.to_json()
    short.update(name="short-item-lens", item_lens=short["item_lens"][:-1])
    return [hub, unreadable, short]


def test_request_path_refuses_instead_of_raising(
    env: harness.SGLangEnv, release_checks: ReleaseChecks
) -> None:
    """An exception out of ``send_kvcache`` ends SGLang's transfer thread and the prefill is
    reported dead: a missing or unreadable model config, or KVArgs the guard cannot read,
    must fail the one request with a logged reason instead."""
    results = _results(release_checks, env.version, "patched", "request-path")
    assert sorted(results) == sorted(c["name"] for c in _bad_requests(env))
    expected = {
        "hub-model-id": "model path 'deepseek-ai/DeepSeek-V3' is not a local path; set "
        "ASCEND_PD_MODEL_CONFIG to the config.json or the model directory",
        "unreadable-config": f"{_bad_config(env)}: not valid JSON",
        "short-item-lens": "122 KV pointers but 121 item lengths",
    }
    for name, needle in expected.items():
        result = results[name]
        assert result.get("status") == -1, f"{env.version} {name}: {_brief(result)}"
        assert result["calls"] == 0 and result["descriptors"] == []
        (message,) = result["logged_errors"]
        assert message.startswith("refusing KV transfer to session decode-session: "), message
        assert needle in message, message
