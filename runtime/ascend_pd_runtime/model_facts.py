"""Model facts: the few numbers of a Hugging Face ``config.json`` the KV layout depends on.

Everything downstream (layer partition, pointer layouts, the operator's status,
the launcher's checks) starts from ``ModelFacts``; nothing else reads
``config.json``. Bad input raises ``ModelConfigError`` naming the file, the key,
the value and what was expected.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from .errors import ModelConfigError
from .weights import WeightShape, parse_weight_shape

Attention = Literal["mla", "mha"]

#: Bytes per element of the KV cache for the dtypes SGLang serves on Ascend.
DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int8": 1,
}

#: Buffer-group names in pointer-list order. MLA on NPU keeps latent k and rope v
#: (and index_k on DSA models) as separate buffers; MHA keeps K and V.
MLA_GROUPS = ("latent_k", "rope_v", "index_k")
MHA_GROUPS = ("k", "v")


@dataclass(frozen=True)
class ModelFacts:
    """Typed facts of one model. ``total_kv_layers`` never counts draft (MTP) layers."""

    num_hidden_layers: int
    attention: Attention = "mla"
    num_nextn_predict_layers: int = 0
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    index_head_dim: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    architectures: tuple[str, ...] = ()
    model_type: str = ""
    torch_dtype: str = "bfloat16"
    source: str = field(default="<model facts>", compare=False)
    #: the sizes the weights follow from (``weights.py``); None when the source gives only
    #: the layout's facts. Not part of the layout: two facts that differ only here are equal.
    weights: WeightShape | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        _require_positive(self.source, "num_hidden_layers", self.num_hidden_layers)
        _require_non_negative(
            self.source, "num_nextn_predict_layers", self.num_nextn_predict_layers
        )
        if self.attention == "mla":
            _require_positive(self.source, "kv_lora_rank", self.kv_lora_rank)
            _require_positive(self.source, "qk_rope_head_dim", self.qk_rope_head_dim)
            if self.index_head_dim is not None:
                _require_positive(self.source, "index_head_dim", self.index_head_dim)
        elif self.attention != "mha":
            raise ModelConfigError(
                f"{self.source}: attention is {self.attention!r}; expected 'mla' or 'mha'"
            )

    @property
    def architecture(self) -> str:
        return self.architectures[0] if self.architectures else ""

    @property
    def has_index_buffer(self) -> bool:
        return self.attention == "mla" and bool(self.index_head_dim)

    @property
    def kv_buf_groups(self) -> int:
        return 3 if self.has_index_buffer else 2

    @property
    def kv_buf_group_names(self) -> tuple[str, ...]:
        if self.attention == "mha":
            return MHA_GROUPS
        return MLA_GROUPS[: self.kv_buf_groups]

    @property
    def total_kv_layers(self) -> int:
        return self.num_hidden_layers

    def group_widths(self) -> tuple[int, ...]:
        """Elements per token per layer in each buffer group, in pointer-list order."""
        if self.attention == "mla":
            assert self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
            widths = [self.kv_lora_rank, self.qk_rope_head_dim]
            if self.has_index_buffer:
                assert self.index_head_dim is not None
                widths.append(self.index_head_dim)
            return tuple(widths)
        if self.num_key_value_heads is None or self.head_dim is None:
            raise ModelConfigError(
                f"{self.source}: MHA KV sizing needs num_key_value_heads and head_dim "
                f"(got {self.num_key_value_heads!r} and {self.head_dim!r})"
            )
        width = self.num_key_value_heads * self.head_dim
        return (width, width)

    def bytes_per_token(self, dtype: str | None = None) -> tuple[int, ...]:
        """Bytes per token per layer for each buffer group at ``dtype`` (default: torch_dtype)."""
        name = dtype or self.torch_dtype
        if name not in DTYPE_BYTES:
            raise ModelConfigError(
                f"dtype {name!r} is not supported; expected one of {sorted(DTYPE_BYTES)}"
            )
        return tuple(w * DTYPE_BYTES[name] for w in self.group_widths())


def load_model_facts(path: str | Path) -> ModelFacts:
    """Read ``config.json`` (a file, or a model directory holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ModelConfigError(f"{p}: model config file not found") from None
    except OSError as exc:
        raise ModelConfigError(f"{p}: cannot read model config: {exc.strerror}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelConfigError(
            f"{p}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    return parse_model_facts(raw, source=str(p))


def parse_model_facts(raw: Any, source: str = "config.json") -> ModelFacts:
    """Turn a parsed ``config.json`` mapping into ``ModelFacts``."""
    if not isinstance(raw, Mapping):
        raise ModelConfigError(
            f"{source}: top level is {type(raw).__name__}; expected a JSON object"
        )
    # Multimodal and wrapper configs keep the language model under text_config.
    if "num_hidden_layers" not in raw and isinstance(raw.get("text_config"), Mapping):
        raw = raw["text_config"]
    layers = _int(raw, "num_hidden_layers", source, required=True)
    assert layers is not None
    kv_lora_rank = _int(raw, "kv_lora_rank", source)
    attention: Attention = "mla" if kv_lora_rank is not None else "mha"
    architectures = raw.get("architectures") or []
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise ModelConfigError(
            f"{source}: key 'architectures' has value {architectures!r}; expected a list of strings"
        )
    num_heads = _int(raw, "num_attention_heads", source)
    head_dim = _int(raw, "head_dim", source)
    if head_dim is None and attention == "mha" and num_heads:
        hidden = _int(raw, "hidden_size", source)
        head_dim = hidden // num_heads if hidden else None
    kv_heads = _int(raw, "num_key_value_heads", source)
    return ModelFacts(
        num_hidden_layers=layers,
        attention=attention,
        num_nextn_predict_layers=_int(raw, "num_nextn_predict_layers", source) or 0,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=_int(raw, "qk_rope_head_dim", source, required=attention == "mla"),
        index_head_dim=_int(raw, "index_head_dim", source) or None,
        num_key_value_heads=kv_heads if kv_heads is not None else num_heads,
        head_dim=head_dim,
        architectures=tuple(architectures),
        model_type=_str(raw, "model_type", source),
        torch_dtype=_str(raw, "torch_dtype", source) or "bfloat16",
        source=source,
        weights=parse_weight_shape(raw),
    )


#: The model configs shipped with the runtime (``ascend_pd_runtime/examples/<name>.json``):
#: ``ascend-pd plan`` and ``ascend-pd render`` take their names for ``--model-config``.
BUNDLED_MODELS = ("deepseek-v3", "deepseek-v3.2", "deepseek-v2-lite", "qwen2-7b")


def bundled_config(name: str) -> Path:
    """Path of the bundled ``config.json`` of ``name`` (one of ``BUNDLED_MODELS``)."""
    return Path(str(resources.files("ascend_pd_runtime") / "examples" / f"{name}.json"))


def config_path(given: str) -> Path:
    """``given`` as a path (a config.json or a model directory), or a bundled model's name
    when no such path exists."""
    path = Path(given)
    if not path.exists() and given in BUNDLED_MODELS:
        return bundled_config(given)
    return path


def bundled_weights(facts: ModelFacts) -> tuple[str, WeightShape] | None:
    """The bundled model whose layout facts are ``facts``' (architecture, layers, MTP
    layers, MLA widths), and its weight shape: the size of a model whose facts were given
    without its sizes (``spec.model.config``). None when no bundled model matches."""

    def key(f: ModelFacts) -> tuple[object, ...]:
        return (f.architecture, f.attention, f.num_hidden_layers, f.num_nextn_predict_layers,
                f.kv_lora_rank, f.qk_rope_head_dim, f.index_head_dim)  # fmt: skip

    for name in BUNDLED_MODELS:
        known = load_model_facts(bundled_config(name))
        if key(known) == key(facts) and facts.architecture and known.weights:
            return name, known.weights
    return None


def _int(raw: Mapping[str, Any], key: str, source: str, required: bool = False) -> int | None:
    if key not in raw or raw[key] is None:
        if required:
            raise ModelConfigError(f"{source}: missing key {key!r}; expected an integer")
        return None
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelConfigError(f"{source}: key {key!r} has value {value!r}; expected an integer")
    return value


def _str(raw: Mapping[str, Any], key: str, source: str) -> str:
    value = raw.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ModelConfigError(f"{source}: key {key!r} has value {value!r}; expected a string")
    return value


def _require_positive(source: str, key: str, value: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelConfigError(
            f"{source}: key {key!r} has value {value!r}; expected an integer >= 1"
        )


def _require_non_negative(source: str, key: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelConfigError(
            f"{source}: key {key!r} has value {value!r}; expected an integer >= 0"
        )
