import json

from ascend_pd_runtime.cli import main as runtime_cli
from ascend_pd_runtime.env_contract import decode_inspect_result
from ascend_pd_runtime.model_facts import parse_model_facts
from ascend_pd_runtime.plan_cli import example_config


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
