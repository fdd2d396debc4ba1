"""The SGLang version check: the spec's ``sglangVersion`` against the SGLang the image holds.

The launcher and the inspector used to take ``ASCEND_PD_SGLANG_VERSION`` as given; the KV
layout's draft-layer rules depend on it, so an image with another SGLang could run a layout
the operator did not compute. The oracle for which versions agree is the table below,
written from PEP 440 and the layout core's rule that a release's post-releases and local
builds follow that release's rules (docs/compatibility.md), not from the code.
"""

from __future__ import annotations

import json
import os

import pytest

from ascend_pd_runtime import env_contract
from ascend_pd_runtime.cli import main as runtime_cli
from ascend_pd_runtime.env_contract import (
    EXIT_SGLANG_VERSION,
    INSPECT_OUTPUT,
    decode_inspect_result,
    inspector_env,
)
from ascend_pd_runtime.errors import BadInput
from ascend_pd_runtime.plan_cli import example_config
from ascend_pd_runtime.sglang_version import (
    installed_version,
    mismatch_message,
    versions_agree,
)
from tests.unit.runtime.fake_sglang import fake_python
from tests.unit.runtime.test_launcher import _env, resolver

#: (spec, installed): the same rules apply.
AGREE = [
    ("0.5.20", "0.5.20"),
    ("v0.5.20", "0.5.20"),  # PEP 440 normalisation: a leading v
    ("0.5.20.0", "0.5.20"),  # trailing zeros of the release
    ("0.5.13", "0.5.13.post1"),  # a post-release follows its release's rules
    ("0.5.13.post1", "0.5.13"),
    ("0.5.13-post1", "0.5.13.post1"),
    ("0.5.13post1", "0.5.13.post2"),
    ("0.5.20", "0.5.20+ascend.cann9"),  # a local build of the release
    ("0.5.20rc1", "0.5.20-rc1"),
]
#: (spec, installed): another release, or not the release itself.
DIFFER = [
    ("0.5.23", "0.5.20"),
    ("0.5.20", "0.5.23"),
    ("0.5.2", "0.5.20"),  # no prefix match
    ("0.5.20", "0.5.2"),
    ("0.5.20", "0.6.20"),
    ("0.5.20", "0.5.20.1"),
    ("0.5.20", "0.5.20rc1"),  # a pre-release precedes the release and may lack its change
    ("0.5.20", "0.5.20.dev0"),
    ("0.5.20rc1", "0.5.20rc2"),
    ("0.5.20", "1!0.5.20"),
]


@pytest.mark.parametrize(("spec", "installed"), AGREE)
def test_versions_that_follow_the_same_rules_agree(spec: str, installed: str) -> None:
    assert versions_agree(spec, installed)
    assert mismatch_message(spec, installed, "python3") == ""


@pytest.mark.parametrize(("spec", "installed"), DIFFER)
def test_other_releases_disagree_naming_both(spec: str, installed: str) -> None:
    assert not versions_agree(spec, installed)
    message = mismatch_message(spec, installed, "/usr/bin/python3")
    assert message.startswith("SGLang version mismatch: ")
    assert f"spec.runtime.sglangVersion is {spec}" in message
    assert f"this image's SGLang is {installed} (/usr/bin/python3)" in message
    assert (
        f"Set spec.runtime.sglangVersion to {installed}, or use a runtime image with "
        f"SGLang {spec}" in message
    )


def test_no_sglang_at_all_is_a_mismatch() -> None:
    message = mismatch_message("0.5.20", None, "/usr/bin/python3")
    assert message.startswith("SGLang version mismatch: spec.runtime.sglangVersion is 0.5.20")
    assert "no SGLang is installed for /usr/bin/python3" in message


def test_a_version_that_is_no_pep_440_version_is_a_mismatch_naming_it() -> None:
    assert not versions_agree("latest", "0.5.20")
    assert "'latest' is not a PEP 440 version" in mismatch_message("latest", "0.5.20", "py")
    assert not versions_agree("0.5.20", "0.5.20-custom-build")
    message = mismatch_message("0.5.20", "0.5.20-custom-build", "py")
    assert "'0.5.20-custom-build' is not a PEP 440 version" in message


def test_the_installed_version_is_read_from_sglang_s_interpreter(tmp_path) -> None:
    assert installed_version(fake_python(tmp_path / "a", "0.5.13.post1"), {}) == "0.5.13.post1"
    assert installed_version(fake_python(tmp_path / "b", None), {}) is None


def test_an_interpreter_that_cannot_answer_is_bad_input(tmp_path) -> None:
    with pytest.raises(BadInput, match="cannot read the installed SGLang's version"):
        installed_version(str(tmp_path / "no-python"), {})
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\necho 'no module named importlib' >&2\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(BadInput, match="exited 3: no module named importlib"):
        installed_version(str(broken), {})


# --- the launcher: refused before anything else runs --------------------------------------


def _launch_env(tmp_path, monkeypatch, spec_version: str = "0.5.23"):
    """The pod env of a prefill pod whose spec names ``spec_version``; the termination log."""
    env = _env(tmp_path)
    env[env_contract.SGLANG_VERSION] = spec_version
    termination = tmp_path / "termination-log"
    env[env_contract.TERMINATION_LOG] = str(termination)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr("ascend_pd_runtime.launcher.retrying_resolver", lambda timeout: resolver)
    return termination


def test_launch_check_refuses_another_sglang_naming_both(tmp_path, monkeypatch, capsys) -> None:
    """``launch --check``: the spec says 0.5.23, the image holds 0.5.20. Before this check
    the launcher accepted it (exit 0, "SGLang's parser accepts the command")."""
    termination = _launch_env(tmp_path, monkeypatch, "0.5.23")
    python = fake_python(tmp_path / "image", "0.5.20")
    code = runtime_cli(["launch", "--check", "--python", python, "--no-parser-check",
                        "--no-preflight"])  # fmt: skip
    assert code == EXIT_SGLANG_VERSION == 8
    message = termination.read_text()
    assert message.startswith("SGLang version mismatch: spec.runtime.sglangVersion is 0.5.23")
    assert f"this image's SGLang is 0.5.20 ({python})" in message
    assert message in capsys.readouterr().err


def test_launch_check_refuses_an_image_without_sglang(tmp_path, monkeypatch) -> None:
    termination = _launch_env(tmp_path, monkeypatch, "0.5.23")
    python = fake_python(tmp_path / "image", None)
    code = runtime_cli(["launch", "--check", "--python", python, "--no-parser-check",
                        "--no-preflight"])  # fmt: skip
    assert code == EXIT_SGLANG_VERSION
    assert f"no SGLang is installed for {python}" in termination.read_text()


def test_launch_check_passes_a_post_release_of_the_spec_s(tmp_path, monkeypatch, capsys) -> None:
    termination = _launch_env(tmp_path, monkeypatch, "0.5.23")
    python = fake_python(tmp_path / "image", "0.5.23.post1")
    code = runtime_cli(["launch", "--check", "--python", python, "--no-parser-check",
                        "--no-preflight"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert not termination.exists()


def test_the_launch_refuses_before_the_layout_and_the_exec(tmp_path, monkeypatch) -> None:
    """The real launch (no --check): exit 8 before the model's config is read (it is not
    there) and before anything is exec'd."""
    termination = _launch_env(tmp_path, monkeypatch, "0.5.20")
    monkeypatch.setenv(env_contract.MODEL_PATH, str(tmp_path / "no-model-here"))

    def exec_not_allowed(*args: object) -> None:
        raise AssertionError(f"the launcher exec'd {args}")

    monkeypatch.setattr(os, "execvpe", exec_not_allowed)
    python = fake_python(tmp_path / "image", "0.5.23")
    assert runtime_cli(["launch", "--python", python]) == EXIT_SGLANG_VERSION
    assert "spec.runtime.sglangVersion is 0.5.20" in termination.read_text()


# --- the inspector Job ----------------------------------------------------------------------


def _inspector_job_env(tmp_path, monkeypatch, spec_version: str):
    (tmp_path / "config.json").write_text(example_config("deepseek-v3.2").read_text())
    out = tmp_path / "termination-log"
    for key, value in inspector_env(str(tmp_path), spec_version).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(INSPECT_OUTPUT, str(out))
    return out


def test_the_inspector_refuses_another_sglang_naming_both(tmp_path, monkeypatch, capsys) -> None:
    out = _inspector_job_env(tmp_path, monkeypatch, "0.5.20")
    python = fake_python(tmp_path / "image", "0.5.23")
    assert runtime_cli(["inspect", "--python", python]) == EXIT_SGLANG_VERSION
    config, error = decode_inspect_result(out.read_text())
    assert config is None
    assert error.startswith("SGLang version mismatch: spec.runtime.sglangVersion is 0.5.20")
    assert f"this image's SGLang is 0.5.23 ({python})" in error
    assert error in capsys.readouterr().err


def test_the_inspector_refuses_an_image_without_sglang(tmp_path, monkeypatch) -> None:
    out = _inspector_job_env(tmp_path, monkeypatch, "0.5.20")
    python = fake_python(tmp_path / "image", None)
    assert runtime_cli(["inspect", "--python", python]) == EXIT_SGLANG_VERSION
    assert "no SGLang is installed" in decode_inspect_result(out.read_text())[1]


def test_the_inspector_reads_the_model_when_the_versions_agree(tmp_path, monkeypatch) -> None:
    out = _inspector_job_env(tmp_path, monkeypatch, "0.5.20")
    python = fake_python(tmp_path / "image", "0.5.20")
    assert runtime_cli(["inspect", "--python", python]) == 0
    assert json.loads(out.read_text())["config"]["num_hidden_layers"] == 61
