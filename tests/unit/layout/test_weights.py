"""Parameter counts from config.json, against the published counts and hand-made sums.

The oracles: the DeepSeek-V3 model card ("671B of the Main Model weights and 14B of the
Multi-Token Prediction (MTP) Module weights", 685B in all), DeepSeek-V3.2's (685B, MTP
included), the DeepSeek-V2 paper (V2-Lite: 15.7B); the sharding rules of SGLang that
``weights.py``'s docstring states, applied by hand to a tiny model whose every sum is
written out below.
"""

from __future__ import annotations

import json

import pytest

from ascend_pd_runtime.model_facts import parse_model_facts
from ascend_pd_runtime.plan_cli import example_config
from ascend_pd_runtime.weights import (
    Sharding,
    WeightShape,
    model_parameters,
    parse_weight_shape,
    rank_parameters,
)


def shape_of(name: str) -> tuple[WeightShape, dict]:
    raw = json.loads(example_config(name).read_text())
    shape = parse_weight_shape(raw)
    assert shape is not None
    return shape, raw


@pytest.mark.parametrize(
    ("name", "main", "with_mtp"),
    [
        ("deepseek-v3", 671e9, 685e9),
        ("deepseek-v3.2", None, 685e9),
        ("deepseek-v2-lite", 15.7e9, None),
    ],
)
def test_published_parameter_counts(name: str, main: float | None, with_mtp: float | None):
    shape, raw = shape_of(name)
    layers, mtp = raw["num_hidden_layers"], raw.get("num_nextn_predict_layers", 0)
    if main is not None:  # the published figures are rounded to the unit shown
        assert model_parameters(shape, layers) == pytest.approx(main, rel=0.005)
    if with_mtp is not None:
        assert model_parameters(shape, layers, mtp) == pytest.approx(with_mtp, rel=0.005)


def test_qwen2_7b_by_hand():
    shape, _ = shape_of("qwen2-7b")
    h, inter, vocab, kv = 3584, 18944, 152064, 4 * 128  # its config.json
    layer = 2 * h * h + 2 * h * kv + 3 * h * inter + 2 * h  # q, o; k, v; MLP; 2 norms
    assert model_parameters(shape, 28) == 28 * layer + 2 * vocab * h + h


def test_the_facts_carry_the_shape_but_compare_without_it():
    raw = json.loads(example_config("deepseek-v3").read_text())
    full = parse_model_facts(raw)
    layout_only = parse_model_facts({k: raw[k] for k in (
        "architectures", "model_type", "num_hidden_layers", "num_nextn_predict_layers",
        "kv_lora_rank", "qk_rope_head_dim", "num_attention_heads", "num_key_value_heads",
        "torch_dtype")})  # fmt: skip
    assert full.weights is not None and layout_only.weights is None
    assert full == layout_only  # the same KV layout


#: A tiny DeepSeek-shaped model: every number small enough to sum by hand.
TINY = WeightShape(
    hidden_size=8, vocab_size=100, num_attention_heads=4, intermediate_size=12,
    q_lora_rank=6, kv_lora_rank=4, qk_nope_head_dim=2, qk_rope_head_dim=2, v_head_dim=2,
    n_routed_experts=8, n_shared_experts=1, moe_intermediate_size=3, first_k_dense_replace=1,
)  # fmt: skip
#: Per layer, by hand. Attention: q_a 8·6 + kv_a 8·(4+2) = 96 whole on every rank;
#: q_b 6·4·4 + kv_b 4·4·(2+2) + o 4·2·8 = 96 + 64 + 64 = 224 split over attention TP;
#: norms q_a 6 + kv_a 4 + 2·8 = 26. Dense MLP 3·8·12 = 288. MoE: 8 experts of 3·8·3 = 72
#: (576), 1 shared of 72, router 8·8 = 64.
ATTN_WHOLE, ATTN_SPLIT, NORMS, DENSE, ROUTED, SHARED, ROUTER = 96, 224, 26, 288, 576, 72, 64
TABLE = 100 * 8


def test_tiny_model_on_one_rank():
    whole = rank_parameters(TINY, Sharding(), range(3), first=True, last=True)
    layers = 3 * (ATTN_WHOLE + ATTN_SPLIT + NORMS) + DENSE + 2 * (ROUTED + SHARED + ROUTER)
    assert whole.total == layers + 2 * TABLE + 8  # embedding, head, final norm


def test_tiny_model_tp4_stage_of_moe_layers():
    # TP 4, no DP attention: attention split 4, experts and shared split 4, head split 4
    sh = Sharding(tp=4, attn_tp=4, dense_tp=4, shared_tp=4, embed_tp=4, head_tp=4)
    got = rank_parameters(TINY, sh, range(1, 3), first=False, last=True)
    per_layer_q = ATTN_WHOLE + ATTN_SPLIT / 4 + ROUTED / 4 + SHARED / 4
    assert got.quantizable == 2 * per_layer_q
    assert got.kept == 2 * (NORMS + ROUTER) + TABLE / 4 + 8


def test_tiny_model_dp_attention_keeps_attention_and_embedding_whole():
    # TP 4 = DP 4 with DP attention: attention TP 1, the embedding whole (SGLang < 0.5.23
    # replicates it; 0.5.23 splits it over attention TP, 1 here); a DeepEP-class all-to-all
    # keeps the shared expert whole; --enable-dp-lm-head splits the head over attention TP
    sh = Sharding(tp=4, attn_tp=1, dense_tp=4, shared_tp=1, embed_tp=1, head_tp=1)
    got = rank_parameters(TINY, sh, range(2), first=True, last=False)
    assert got.quantizable == (ATTN_WHOLE + ATTN_SPLIT) * 2 + DENSE / 4 + ROUTED / 4 + SHARED
    assert got.kept == 2 * NORMS + ROUTER + TABLE


def test_tiny_model_draft_layer_is_a_moe_layer_on_the_last_stage():
    sh = Sharding(tp=2, attn_tp=2, dense_tp=2, shared_tp=2, embed_tp=2, head_tp=2)
    plain = rank_parameters(TINY, sh, range(3), first=True, last=True)
    drafted = rank_parameters(TINY, sh, range(3), first=True, last=True, draft_layers=1)
    moe_layer = ATTN_WHOLE + ATTN_SPLIT / 2 + ROUTED / 2 + SHARED / 2 + NORMS + ROUTER
    # plus eh_proj (2·8 × 8, whole) and enorm, hnorm, the shared head's norm
    assert drafted.total - plain.total == moe_layer + 2 * 8 * 8 + 3 * 8


def test_mha_keeps_a_kv_head_per_rank():
    shape, _ = shape_of("qwen2-7b")  # 4 KV heads of 128
    h = 3584
    one = rank_parameters(shape, Sharding(tp=8, attn_tp=8, dense_tp=8), range(1),
                          first=False, last=False)  # fmt: skip
    # q and o split 8 ways; k and v: 4 heads over 8 ranks, each rank keeps one
    attention = 2 * h * h / 8 + 2 * h * 128
    assert one.quantizable == attention + 3 * h * 18944 / 8


def test_a_config_without_the_sizes_has_no_shape():
    assert parse_weight_shape({"num_hidden_layers": 61, "kv_lora_rank": 512}) is None
