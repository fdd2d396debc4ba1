"""Parameter counts of a checkpoint from its ``config.json``, and how SGLang shards them.

``WeightShape`` holds the ``config.json`` numbers a model's size follows from (the Hugging
Face keys of DeepSeek-V2/V3/V3.2 and Qwen2-style models). ``rank_parameters`` counts what
one rank of one pipeline stage loads, in groups that SGLang shards alike:

* MLA attention (``DeepseekV2AttentionMLA``): ``q_a_proj`` and ``kv_a_proj_with_mqa`` are
  ``ReplicatedLinear`` (whole on every rank); ``q_b_proj`` (or ``q_proj``), ``kv_b_proj``
  and ``o_proj`` are split over the attention-TP group: TP, or TP / DP with
  ``--enable-dp-attention``, so at TP = DP every rank holds the whole attention.
* MHA attention (Qwen2): q and o split over attention TP; k and v too, but a rank keeps at
  least one KV head (SGLang replicates KV heads when attention TP exceeds them).
* The DSA indexer (V3.2): ``wq_b``, ``wk``, ``weights_proj`` are ``ReplicatedLinear``.
* The dense MLP (the first ``first_k_dense_replace`` layers): split over TP, or over
  ``--moe-dense-tp-size``.
* Routed experts: ``n_routed_experts`` × (gate, up, down) per MoE layer; expert parallelism
  (EP experts per rank) and tensor parallelism inside each expert (TP / EP) split them
  TP-fold in total either way. Redundant experts (``--ep-num-redundant-experts``) and
  padding are not counted.
* Shared experts: split over TP, except with a DeepEP-class ``--moe-a2a-backend``, where
  SGLang keeps them whole (``_shared_expert_use_tp1`` in deepseek_v2.py).
* The router gate and the norms: whole on every rank.
* The input embedding (first stage): split over TP; with DP attention counted whole
  (SGLang before 0.5.23 replicates it, 0.5.23 splits it over attention TP: whole when
  attention TP is 1); the LM head (last stage) split over TP, or over attention TP with
  ``--enable-dp-lm-head``.
* NEXTN/EAGLE drafts (the MTP layer, on the last stage of a role that runs them): one MoE
  decoder layer sharded as the others, ``eh_proj`` (2·hidden × hidden, replicated) and
  three norms; the draft's embedding and head are the target's (``set_embed_and_head``).

Approximations, all small against a DeepSeek-V3 rank: biases (Qwen2's qkv bias) and the
MoE gate's correction bias are left out; quantization scales (per output channel) too.
The source of each number is SGLang 0.5.23's ``models/deepseek_v2.py``,
``models/deepseek_nextn.py``, ``layers/attention/dsa/dsa_indexer.py`` and
``layers/vocab_parallel_embedding.py``; the totals are checked against the published
parameter counts in ``tests/unit/layout/test_weights.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WeightShape:
    """The ``config.json`` numbers a checkpoint's size follows from."""

    hidden_size: int
    vocab_size: int
    num_attention_heads: int
    intermediate_size: int
    #: transformers' DeepseekV2/V3 and Qwen2 configs default to untied embeddings
    tie_word_embeddings: bool = False
    # MHA
    num_key_value_heads: int = 0
    head_dim: int = 0
    # MLA (kv_lora_rank 0: MHA)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # MoE (n_routed_experts 0: every layer dense)
    n_routed_experts: int = 0
    n_shared_experts: int = 0
    moe_intermediate_size: int = 0
    first_k_dense_replace: int = 0
    moe_layer_freq: int = 1
    # DSA indexer (V3.2; 0: none)
    index_n_heads: int = 0
    index_head_dim: int = 0

    def is_moe_layer(self, layer: int) -> bool:
        """DeepSeek's rule (``DeepseekV2DecoderLayer._is_layer_sparse``)."""
        return (
            self.n_routed_experts > 0
            and layer >= self.first_k_dense_replace
            and layer % max(self.moe_layer_freq, 1) == 0
        )


#: The keys ``parse_weight_shape`` reads (the inspector publishes them with the rest).
WEIGHT_KEYS = (
    "hidden_size", "vocab_size", "num_attention_heads", "intermediate_size",
    "tie_word_embeddings", "num_key_value_heads", "head_dim", "q_lora_rank",
    "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
    "n_routed_experts", "n_shared_experts", "moe_intermediate_size",
    "first_k_dense_replace", "moe_layer_freq", "index_n_heads", "index_head_dim",
)  # fmt: skip


def parse_weight_shape(raw: Mapping[str, Any]) -> WeightShape | None:
    """The shape of ``raw`` (a parsed ``config.json``); None when it lacks the sizes
    (e.g. the few facts ``spec.model.config`` gives): the size is then not known."""

    def num(key: str) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    required = ("hidden_size", "vocab_size", "num_attention_heads")
    if not all(num(k) > 0 for k in required):
        return None
    mla = num("kv_lora_rank") > 0
    if not mla and num("intermediate_size") <= 0:
        return None
    heads = num("num_attention_heads")
    return WeightShape(
        hidden_size=num("hidden_size"),
        vocab_size=num("vocab_size"),
        num_attention_heads=heads,
        intermediate_size=num("intermediate_size"),
        tie_word_embeddings=raw.get("tie_word_embeddings") is True,
        num_key_value_heads=num("num_key_value_heads") or heads,
        head_dim=num("head_dim") or num("hidden_size") // heads,
        q_lora_rank=num("q_lora_rank"),
        kv_lora_rank=num("kv_lora_rank"),
        qk_nope_head_dim=num("qk_nope_head_dim"),
        qk_rope_head_dim=num("qk_rope_head_dim"),
        v_head_dim=num("v_head_dim"),
        n_routed_experts=num("n_routed_experts"),
        n_shared_experts=num("n_shared_experts"),
        moe_intermediate_size=num("moe_intermediate_size"),
        first_k_dense_replace=num("first_k_dense_replace"),
        moe_layer_freq=num("moe_layer_freq") or 1,
        index_n_heads=num("index_n_heads"),
        index_head_dim=num("index_head_dim"),
    )


@dataclass(frozen=True)
class Sharding:
    """How one rank's role splits the weights: the divisor of each group."""

    tp: int = 1
    attn_tp: int = 1
    #: the dense MLP layers: TP, or --moe-dense-tp-size
    dense_tp: int = 1
    #: shared experts: TP, or 1 with a DeepEP-class all-to-all backend
    shared_tp: int = 1
    embed_tp: int = 1
    head_tp: int = 1


@dataclass(frozen=True)
class Params:
    """Parameters one rank holds: ``quantizable`` (the linear layers a W8A8 checkpoint
    stores in 8 bits) and ``kept`` (embedding, head, router, norms, the indexer: 16 bits)."""

    quantizable: float = 0.0
    kept: float = 0.0

    def __add__(self, other: Params) -> Params:
        return Params(self.quantizable + other.quantizable, self.kept + other.kept)

    @property
    def total(self) -> float:
        return self.quantizable + self.kept


def attention_params(s: WeightShape, sh: Sharding) -> Params:
    """One layer's attention on one rank (norms included)."""
    h, heads = s.hidden_size, s.num_attention_heads
    if s.kv_lora_rank:
        qk = s.qk_nope_head_dim + s.qk_rope_head_dim
        if s.q_lora_rank:
            replicated = h * s.q_lora_rank + h * (s.kv_lora_rank + s.qk_rope_head_dim)
            split = s.q_lora_rank * heads * qk
            norms = s.q_lora_rank + s.kv_lora_rank
        else:
            replicated = h * (s.kv_lora_rank + s.qk_rope_head_dim)
            split = h * heads * qk
            norms = s.kv_lora_rank
        split += s.kv_lora_rank * heads * (s.qk_nope_head_dim + s.v_head_dim)
        split += heads * s.v_head_dim * h
        indexer = 0.0
        if s.index_n_heads and s.index_head_dim:
            q_in = s.q_lora_rank or h
            indexer = (q_in * s.index_n_heads * s.index_head_dim + h * s.index_head_dim
                       + h * s.index_n_heads + 2 * s.index_head_dim)  # fmt: skip
        return Params(replicated + split / sh.attn_tp, norms + 2 * h + indexer)
    kv_per_rank = max(s.num_key_value_heads / sh.attn_tp, 1.0)
    q_o = 2 * h * heads * s.head_dim / sh.attn_tp
    kv = 2 * h * kv_per_rank * s.head_dim
    return Params(q_o + kv, 2 * h)


def mlp_params(s: WeightShape, sh: Sharding, layer: int) -> Params:
    """One layer's MLP on one rank: dense, or routed and shared experts and the router."""
    h = s.hidden_size
    if not s.is_moe_layer(layer):
        return Params(3 * h * s.intermediate_size / sh.dense_tp)
    expert = 3 * h * s.moe_intermediate_size
    routed = s.n_routed_experts * expert / sh.tp
    shared = s.n_shared_experts * expert / sh.shared_tp
    return Params(routed + shared, h * s.n_routed_experts)


def layer_params(s: WeightShape, sh: Sharding, layer: int) -> Params:
    return attention_params(s, sh) + mlp_params(s, sh, layer)


def rank_parameters(
    s: WeightShape,
    sh: Sharding,
    layers: range,
    *,
    first: bool,
    last: bool,
    draft_layers: int = 0,
) -> Params:
    """What one rank of the stage owning ``layers`` loads (``first``/``last``: it is the
    role's first/last stage; ``draft_layers``: the MTP layers it runs, on the last stage)."""
    out = Params()
    for layer in layers:
        out += layer_params(s, sh, layer)
    table = s.vocab_size * s.hidden_size
    if first:
        out += Params(0, table / sh.embed_tp)
    if last:
        tied_here = s.tie_word_embeddings and first
        out += Params(0, (0 if tied_here else table / sh.head_tp) + s.hidden_size)
    for _ in range(draft_layers):
        # the MTP layer is a MoE layer (is_nextn); eh_proj is replicated; 3 norms
        moe_layer = max(s.first_k_dense_replace, 0)
        out += layer_params(s, sh, moe_layer if s.n_routed_experts else 0)
        out += Params(2 * s.hidden_size * s.hidden_size, 3 * s.hidden_size)
    return out


def model_parameters(s: WeightShape, num_hidden_layers: int, draft_layers: int = 0) -> float:
    """Every parameter of the checkpoint (one rank, nothing split), the MTP layers' own
    embedding and head included, as a published count has them."""
    whole = rank_parameters(s, Sharding(), range(num_hidden_layers), first=True, last=True,
                            draft_layers=draft_layers)  # fmt: skip
    # a checkpoint's MTP module carries its own embedding and head (SGLang shares them)
    return whole.total + draft_layers * 2 * s.vocab_size * s.hidden_size
