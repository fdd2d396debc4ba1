import json

import pytest

from ascend_pd_runtime.cli import main as runtime_cli
from ascend_pd_runtime.env_contract import (
    CONTRACT_VERSION,
    INSPECT_OUTPUT,
    decode_inspect_result,
    inspector_env,
)
from ascend_pd_runtime.model_facts import parse_model_facts
from ascend_pd_runtime.plan_cli import example_config
from tests.unit.runtime.contract_skews import SKEWS


def test_inspector_publishes_the_facts(tmp_path):
    (tmp_path / "config.json").write_text(example_config("deepseek-v3.2").read_text())
    out = tmp_path / "termination-log"
    assert runtime_cli(["inspect", "--model-path", str(tmp_path), "--output", str(out)]) == 0
    config, error = decode_inspect_result(out.read_text())
    assert error == ""
    facts = parse_model_facts(config)
    assert (facts.num_hidden_layers, facts.kv_buf_groups, facts.num_nextn_predict_layers) == (
        61,
        3,
        1,
    )
    assert len(out.read_text()) < 4096  # fits a termination message


def test_inspector_reports_the_exact_error(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": "61"}))
    out = tmp_path / "termination-log"
    assert runtime_cli(["inspect", "--model-path", str(tmp_path), "--output", str(out)]) == 1
    config, error = decode_inspect_result(out.read_text())
    assert config is None
    assert "key 'num_hidden_layers' has value '61'; expected an integer" in error
    assert "expected an integer" in capsys.readouterr().err


def test_inspector_missing_config(tmp_path):
    out = tmp_path / "log"
    assert runtime_cli(["inspect", "--model-path", str(tmp_path / "m"), "--output", str(out)]) == 1
    assert "model config file not found" in decode_inspect_result(out.read_text())[1]


def test_inspector_reports_a_config_that_is_not_text(tmp_path):
    # it used to die with a UnicodeDecodeError traceback and no termination message
    (tmp_path / "config.json").write_bytes(b"\xff\xfe\x00{")
    out = tmp_path / "log"
    assert runtime_cli(["inspect", "--model-path", str(tmp_path), "--output", str(out)]) == 1
    config, error = decode_inspect_result(out.read_text())
    assert config is None
    assert "config.json: cannot read model config: not UTF-8 text (byte 0" in error


# --- the env contract's version (the Job's env, as the operator writes it) ---------------


def _job_env(tmp_path, monkeypatch, version):
    """The inspector Job's env for a DeepSeek-V3.2 model in ``tmp_path``, its contract
    version replaced by ``version`` (None: removed); the termination log's path."""
    (tmp_path / "config.json").write_text(example_config("deepseek-v3.2").read_text())
    out = tmp_path / "termination-log"
    for key, value in inspector_env(str(tmp_path)).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(INSPECT_OUTPUT, str(out))
    if version is None:
        monkeypatch.delenv(CONTRACT_VERSION)
    else:
        monkeypatch.setenv(CONTRACT_VERSION, version)
    return out


@pytest.mark.parametrize(
    ("written", "named"),
    SKEWS,
)
def test_inspector_refuses_an_env_contract_it_does_not_speak(
    tmp_path, monkeypatch, capsys, written, named
):
    """As the launcher: exit 6, the message naming the Job's version and the image's, as
    the inspector's result, before the model is read."""
    out = _job_env(tmp_path, monkeypatch, written)
    assert runtime_cli(["inspect"]) == 6
    config, error = decode_inspect_result(out.read_text())
    assert config is None
    assert error.startswith("env contract version mismatch: ")
    assert named in error
    assert "this runtime image's inspector speaks version 1" in error
    assert error in capsys.readouterr().err


def test_inspector_reads_the_job_env_the_operator_writes(tmp_path, monkeypatch):
    out = _job_env(tmp_path, monkeypatch, "1")
    assert runtime_cli(["inspect"]) == 0
    config, error = decode_inspect_result(out.read_text())
    assert error == "" and config is not None and config["num_hidden_layers"] == 61


def test_a_model_path_given_by_hand_needs_no_contract(tmp_path, monkeypatch):
    """A person running the inspector gives --model-path; no operator wrote an env."""
    out = _job_env(tmp_path, monkeypatch, None)
    assert runtime_cli(["inspect", "--model-path", str(tmp_path)]) == 0
    assert decode_inspect_result(out.read_text())[1] == ""
