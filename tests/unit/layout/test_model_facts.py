import json

import pytest

from ascend_pd_runtime.errors import ModelConfigError
from ascend_pd_runtime.model_facts import load_model_facts, parse_model_facts


def test_deepseek_v3(dsv3):
    assert dsv3.attention == "mla"
    assert dsv3.num_hidden_layers == 61
    assert dsv3.total_kv_layers == 61
    assert dsv3.num_nextn_predict_layers == 1
    assert dsv3.kv_buf_groups == 2
    assert dsv3.kv_buf_group_names == ("latent_k", "rope_v")
    assert dsv3.architecture == "DeepseekV3ForCausalLM"
    assert dsv3.model_type == "deepseek_v3"
    assert dsv3.bytes_per_token() == (512 * 2, 64 * 2)
    assert dsv3.bytes_per_token("float8_e4m3fn") == (512, 64)


def test_deepseek_v32_has_index_group(dsv32):
    assert dsv32.index_head_dim == 128
    assert dsv32.kv_buf_groups == 3
    assert dsv32.kv_buf_group_names == ("latent_k", "rope_v", "index_k")
    assert dsv32.bytes_per_token() == (1024, 128, 256)


def test_v2_lite_without_mtp(v2lite):
    assert v2lite.num_hidden_layers == 27
    assert v2lite.num_nextn_predict_layers == 0
    assert v2lite.kv_buf_groups == 2


def test_mha_model(mha):
    assert mha.attention == "mha"
    assert mha.kv_buf_groups == 2
    assert mha.kv_buf_group_names == ("k", "v")
    # 4 KV heads × (3584 / 28 = 128) head dim, bf16
    assert mha.bytes_per_token() == (1024, 1024)


@pytest.mark.parametrize("value", [None, 0])
def test_null_or_zero_index_head_dim_means_two_groups(value):
    facts = parse_model_facts(
        {
            "num_hidden_layers": 4,
            "kv_lora_rank": 512,
            "qk_rope_head_dim": 64,
            "index_head_dim": value,
        }
    )
    assert facts.kv_buf_groups == 2


def test_null_kv_lora_rank_is_mha_and_null_mtp_is_zero():
    facts = parse_model_facts(
        {
            "num_hidden_layers": 4,
            "kv_lora_rank": None,
            "num_nextn_predict_layers": None,
            "num_attention_heads": 8,
            "hidden_size": 512,
        }
    )
    assert facts.attention == "mha"
    assert facts.num_nextn_predict_layers == 0
    assert facts.head_dim == 64


def test_missing_file_names_the_file(tmp_path, write_config):
    with pytest.raises(ModelConfigError, match=r"config\.json: model config file not found"):
        load_model_facts(tmp_path)


def test_not_json_names_file_and_position(tmp_path, write_config):
    path = write_config("{not json")
    with pytest.raises(ModelConfigError, match=rf"{path}: not valid JSON \(line 1, column 2"):
        load_model_facts(path)


def test_top_level_not_object(tmp_path, write_config):
    with pytest.raises(ModelConfigError, match="top level is list; expected a JSON object"):
        load_model_facts(write_config("[1, 2]"))


def test_missing_layer_count_names_key(tmp_path, write_config):
    path = write_config(json.dumps({"kv_lora_rank": 512}))
    with pytest.raises(
        ModelConfigError, match=rf"{path}: missing key 'num_hidden_layers'; expected an integer"
    ):
        load_model_facts(path)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("num_hidden_layers", "61", "expected an integer"),
        ("num_hidden_layers", 61.0, "expected an integer"),
        ("num_hidden_layers", True, "expected an integer"),
        ("num_hidden_layers", 0, "expected an integer >= 1"),
        ("num_hidden_layers", -3, "expected an integer >= 1"),
        ("num_nextn_predict_layers", -1, "expected an integer >= 0"),
        ("kv_lora_rank", 0, "expected an integer >= 1"),
        ("qk_rope_head_dim", "64", "expected an integer"),
        ("index_head_dim", -128, "expected an integer >= 1"),
        ("architectures", "DeepseekV3ForCausalLM", "expected a list of strings"),
        ("model_type", 3, "expected a string"),
    ],
)
def test_bad_values_name_key_value_and_rule(tmp_path, write_config, key, value, expected):
    raw = {"num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64, key: value}
    path = write_config(json.dumps(raw))
    with pytest.raises(ModelConfigError) as err:
        load_model_facts(path)
    message = str(err.value)
    assert str(path) in message
    assert repr(key) in message
    assert repr(value) in message
    assert expected in message


def test_mla_without_rope_dim_is_rejected():
    with pytest.raises(ModelConfigError, match="missing key 'qk_rope_head_dim'"):
        parse_model_facts({"num_hidden_layers": 4, "kv_lora_rank": 512})


def test_text_config_is_used_for_wrapped_models():
    facts = parse_model_facts(
        {
            "architectures": ["KimiVL"],
            "text_config": {"num_hidden_layers": 8, "kv_lora_rank": 512, "qk_rope_head_dim": 64},
        }
    )
    assert facts.num_hidden_layers == 8
    assert facts.attention == "mla"


def test_unknown_dtype_is_rejected(dsv3):
    with pytest.raises(ModelConfigError, match="dtype 'int3' is not supported"):
        dsv3.bytes_per_token("int3")
