import json

import pytest

from ascend_pd_operator.wiring.cli import main as ascend_pd
from ascend_pd_runtime.cli import main as ascend_pd_runtime
from ascend_pd_runtime.plan_cli import example_config


def run(capsys, *args, cli=ascend_pd):
    code = cli(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_contract_keys_and_values(capsys):
    code, out, err = run(
        capsys,
        "--model-config",
        str(example_config("deepseek-v3")),
        "--prefill-pp",
        "2",
        "--speculative",
        "nextn",
        "--speculative-roles",
        "decode",
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["model"] == {
        "architecture": "DeepseekV3ForCausalLM",
        "attention": "mla",
        "num_hidden_layers": 61,
        "num_nextn_predict_layers": 1,
        "kv_buf_groups": 2,
    }
    assert doc["total_kv_layers"] == 61
    assert doc["prefill"]["pp"] == 2 and doc["prefill"]["draft_layers"] == 0
    stages = doc["prefill"]["stages"]
    assert [
        (s["pp_rank"], s["start_layer"], s["end_layer"], s["kv_pointer_count"]) for s in stages
    ] == [(0, 0, 30, 60), (1, 30, 61, 62)]
    assert stages[1]["transfers"][0] == [0, 30]
    assert stages[1]["transfers"][31] == [31, 91]
    assert doc["decode"] == {
        "pp": 1,
        "draft_layers": 1,
        "stages": [{"pp_rank": 0, "start_layer": 0, "end_layer": 61, "kv_pointer_count": 124}],
    }
    assert doc["compatible"] is True and doc["problems"] == []
    assert len(doc["fingerprint"]) == 16


def test_both_entry_points_agree(capsys):
    args = ("--model-config", "deepseek-v3.2", "--prefill-pp", "4")
    assert run(capsys, *args) == run(capsys, *args, cli=ascend_pd_runtime)


def test_incompatible_exits_2_and_still_prints(capsys):
    code, out, _ = run(
        capsys,
        "--model-config",
        "deepseek-v3",
        "--prefill-pp",
        "2",
        "--speculative",
        "nextn",
        "--sglang-version",
        "0.5.15",
    )
    assert code == 2
    doc = json.loads(out)
    assert doc["compatible"] is False
    assert "refuses speculative decoding" in doc["problems"][0]
    assert all(s["transfers"] == [] for s in doc["prefill"]["stages"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--model-config", "/nonexistent/config.json", "--prefill-pp", "1"), "not found"),
        (("--model-config", "deepseek-v3", "--prefill-pp", "0"), "pipeline size 0 is invalid"),
        (
            ("--model-config", "deepseek-v3", "--prefill-pp", "2", "--layer-partition", "30,30"),
            "sums to 60 but the model has 61 layers",
        ),
        (
            ("--model-config", "deepseek-v3", "--prefill-pp", "2", "--layer-partition", "a,b"),
            "expected comma-separated integers",
        ),
    ],
)
def test_bad_input_exits_1_with_message_on_stderr_only(capsys, args, message):
    code, out, err = run(capsys, *args)
    assert code == 1
    assert out == ""
    assert message in err


def test_table_output_for_people(capsys):
    code, out, _ = run(
        capsys, "--model-config", "deepseek-v3.2", "--prefill-pp", "2", "--output", "table"
    )
    assert code == 0
    assert "3 KV buffer groups" in out
    assert "[30, 61)" in out
    assert "compatible: yes" in out


def test_fingerprint_tracks_layout_not_transfers(capsys):
    def fingerprint(*extra):
        _, out, _ = run(capsys, "--model-config", "deepseek-v3", *extra)
        return json.loads(out)["fingerprint"]

    base = fingerprint("--prefill-pp", "2")
    assert base == fingerprint("--prefill-pp", "2", "--layer-partition", "30,31")
    assert base != fingerprint("--prefill-pp", "2", "--layer-partition", "31,30")
    assert base != fingerprint(
        "--prefill-pp", "2", "--speculative", "nextn", "--speculative-roles", "decode"
    )
