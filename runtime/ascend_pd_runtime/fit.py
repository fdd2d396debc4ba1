"""Whether a deployment's weights fit its NPUs: bytes per rank against NPU memory.

For each role and each of its pipeline stages, ``check_fit`` counts the weights one rank
loads (``weights.rank_parameters``: the model's sizes, the stage's layers, TP, DP
attention, expert and shared-expert sharding as SGLang does them) at the bytes the
checkpoint stores them in, and requires room beside them for the KV cache of
``KV_MARGIN_TOKENS`` tokens, all within what SGLang gives weights and KV cache:
``--mem-fraction-static`` of the NPU's memory, or, when not given, the memory less the
reserve SGLang then keeps (``DEFAULT_RESERVED_BYTES``).

It is an estimate, not SGLang's allocator: activations, NPU graphs and HCCL buffers live in
the reserve, and the count leaves out what ``weights`` says it does. It is meant to catch a
deployment that cannot load (BF16 DeepSeek-V3 on 16 A2 NPUs needs about 84 GB a rank),
not to tune ``--mem-fraction-static``. ``ascend-pd plan`` and ``ascend-pd render`` print
its warnings; every example is held to it (tests/unit/layout/test_fit.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .layout import KVLayout, StageLayout
from .model_facts import DTYPE_BYTES, ModelFacts, bundled_weights
from .weights import Sharding, WeightShape, rank_parameters

GIB = 1 << 30
#: HBM of one NPU as the device plugin counts them: 64 GB on the A2's Ascend 910B, and on
#: each die of an A3's chips (128 GB a chip of two dies; a node's 16 NPUs are 8 chips).
#: ``npu-smi info`` shows a node's; ``--npu-memory-gib`` sets another.
NPU_MEMORY_BYTES = 64 * GIB
#: What SGLang keeps outside weights and KV cache when ``--mem-fraction-static`` is not
#: given: at least 10 GiB on a device of more than 60 GB (SGLang 0.5.23,
#: ``arg_groups/memory_hook.py``: ``reserved_mem = max(reserved_mem, 10 * 1024)``); larger
#: activation or graph settings reserve more.
DEFAULT_RESERVED_BYTES = 10 * GIB
#: Room for the KV cache of this many tokens on every rank, beyond the weights: one 32K
#: context, or 32 requests of 1K (with DP attention each rank holds its own requests' KV).
KV_MARGIN_TOKENS = 32768
#: Bytes per weight of the linear layers for the ``--quantization`` methods whose size is
#: known. ``modelslim`` (msModelSlim checkpoints, how SGLang on Ascend loads W8A8) is
#: counted as W8A8; a W4A8 checkpoint is smaller, so what fits as W8A8 fits as W4A8.
#: Embedding, head, router, norms and the DSA indexer stay 16-bit in each.
QUANTIZED_BYTES: Mapping[str, int] = {"modelslim": 1, "w8a8_int8": 1, "w8a8_fp8": 1, "fp8": 1}
#: ``--kv-cache-dtype`` values and their bytes ("auto": the model's dtype).
KV_DTYPE_BYTES: Mapping[str, int] = {
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1,
    "int8": 1,
}  # fmt: skip
#: ``--moe-a2a-backend`` values with which SGLang keeps shared experts whole on each rank.
NO_A2A = ("none", "")


def flag(args: Sequence[str], name: str) -> str | None:
    """The value of SGLang flag ``name`` in ``args`` (``--x v`` or ``--x=v``); the last wins,
    as in argparse."""
    found = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(name + "="):
            found = arg.split("=", 1)[1]
    return found


@dataclass(frozen=True)
class RoleParallel:
    """One role's parallel sizes and the SGLang flags of its ``extraArgs`` that shard or
    size the weights."""

    tp: int
    dp: int = 1
    extra_args: tuple[str, ...] = ()

    @property
    def dp_attention(self) -> bool:
        return "--enable-dp-attention" in self.extra_args and self.dp > 1

    def sharding(self) -> Sharding:
        attn_tp = max(self.tp // self.dp, 1) if self.dp_attention else self.tp
        dense = flag(self.extra_args, "--moe-dense-tp-size")
        a2a = flag(self.extra_args, "--moe-a2a-backend") or ""
        return Sharding(
            tp=self.tp,
            attn_tp=attn_tp,
            dense_tp=int(dense) if dense and dense.isdigit() and int(dense) > 0 else self.tp,
            shared_tp=self.tp if a2a in NO_A2A else 1,
            embed_tp=1 if self.dp_attention else self.tp,
            head_tp=attn_tp if "--enable-dp-lm-head" in self.extra_args else self.tp,
        )


@dataclass(frozen=True)
class StageFit:
    """One rank of one stage: what it loads and what it may use."""

    role: str
    stage: StageLayout
    weight_bytes: int
    kv_bytes: int
    usable_bytes: int
    memory_bytes: int
    #: where ``usable_bytes`` comes from
    usable_from: str

    @property
    def needed_bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.usable_bytes

    def describe(self) -> str:
        """What the rank needs and may use (the role not named)."""
        s = self.stage
        draft = f" + {s.draft_layers} draft" if s.draft_layers else ""
        return (
            f"PP rank {s.pp_rank} (layers [{s.start_layer}, {s.end_layer}){draft}): "
            f"weights {gib(self.weight_bytes)} + KV cache for {KV_MARGIN_TOKENS} tokens "
            f"{gib(self.kv_bytes)} = {gib(self.needed_bytes)} per NPU, "
            f"{gib(self.usable_bytes)} usable ({self.usable_from})"
        )


@dataclass(frozen=True)
class FitReport:
    """Every stage of both roles; ``unknown``: why nothing could be judged; ``notes``: what
    was assumed."""

    stages: tuple[StageFit, ...] = ()
    unknown: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def fits(self) -> bool:
        return not self.unknown and all(s.fits for s in self.stages)

    def worst(self, role: str) -> StageFit | None:
        """The role's rank with the least room left."""
        mine = [s for s in self.stages if s.role == role]
        return max(mine, key=lambda s: s.needed_bytes - s.usable_bytes, default=None)

    def warnings(self) -> list[str]:
        """One line per role that does not fit (or one saying why nothing was judged)."""
        if self.unknown:
            return [f"the weights' fit was not checked: {self.unknown}"]
        out = []
        for role in ("prefill", "decode"):
            worst = self.worst(role)
            if worst is not None and not worst.fits:
                out.append(
                    f"{role} does not fit its NPUs: {worst.describe()}; give the instance "
                    "more NPUs (tensor or pipeline), quantized weights (W8A8: --quantization "
                    "modelslim), or less DP attention (--enable-dp-attention keeps the "
                    "whole attention on every rank)" + _assumed(self.notes)
                )
        return out


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _assumed(notes: Sequence[str]) -> str:
    return f" (assumed: {'; '.join(notes)})" if notes else ""


def check_fit(
    facts: ModelFacts,
    layout: KVLayout,
    roles: Mapping[str, RoleParallel],
    memory_bytes: int = NPU_MEMORY_BYTES,
) -> FitReport:
    """The fit of every stage of both roles (``roles``: each role's parallel sizes)."""
    notes: list[str] = []
    shape = facts.weights
    if shape is None:
        found = bundled_weights(facts)
        if found is None:
            return FitReport(unknown=(
                "the model's sizes are not known (spec.model.config gives only the layout's "
                "facts, and no bundled model has them): give its config.json "
                "(--model-config)"))  # fmt: skip
        name, shape = found
        notes.append(f"the sizes of the bundled {name}, which has the same layout facts")
    stages: list[StageFit] = []
    for role_layout in (layout.prefill, layout.decode):
        par = roles[role_layout.role]
        args = par.extra_args
        quant = flag(args, "--quantization")
        dtype = DTYPE_BYTES.get(facts.torch_dtype, 2)
        if quant in (None, "unquant"):
            qbytes = dtype
        elif quant in QUANTIZED_BYTES:
            qbytes = QUANTIZED_BYTES[quant]
            if quant == "modelslim":
                notes.append("modelslim weights are W8A8")
        else:
            return FitReport(unknown=(
                f"{role_layout.role} --quantization {quant}: its weight size is not known "
                f"here (known: none, {', '.join(QUANTIZED_BYTES)})"))  # fmt: skip
        usable, usable_from = _usable(args, memory_bytes)
        kv_dtype = flag(args, "--kv-cache-dtype") or "auto"
        kv_bytes = KV_DTYPE_BYTES.get(kv_dtype, dtype)
        sharding = par.sharding()
        last = len(role_layout.stages) - 1
        for stage in role_layout.stages:
            params = rank_parameters(
                shape, sharding, range(stage.start_layer, stage.end_layer),
                first=stage.pp_rank == 0, last=stage.pp_rank == last,
                draft_layers=stage.draft_layers,
            )  # fmt: skip
            weight = params.quantizable * qbytes + params.kept * dtype
            kv = _kv_per_token(facts, shape, sharding, kv_bytes) * KV_MARGIN_TOKENS
            kv *= stage.num_layers + stage.draft_layers
            stages.append(StageFit(role_layout.role, stage, round(weight), round(kv), usable,
                                   memory_bytes, usable_from))  # fmt: skip
    return FitReport(tuple(stages), notes=tuple(dict.fromkeys(notes)))


def _usable(args: Sequence[str], memory: int) -> tuple[int, str]:
    fraction = flag(args, "--mem-fraction-static")
    try:
        value = float(fraction) if fraction is not None else None
    except ValueError:
        value = None
    if value is not None and 0 < value <= 1:
        return round(memory * value), f"--mem-fraction-static {fraction} of {gib(memory)}"
    return memory - DEFAULT_RESERVED_BYTES, (
        f"{gib(memory)} less SGLang's default reserve of {gib(DEFAULT_RESERVED_BYTES)}"
    )


def _kv_per_token(facts: ModelFacts, shape: WeightShape, sh: Sharding, kv_bytes: int) -> float:
    """KV bytes of one token in one layer on one rank. MLA keeps the whole latent (and
    rope, and index_k) on every rank; MHA splits the KV heads over attention TP, at least
    one a rank."""
    width = sum(facts.group_widths()) if facts.attention == "mla" else 0.0
    if facts.attention == "mha":
        heads = shape.num_key_value_heads
        width = 2 * max(heads / sh.attn_tp, 1.0) * shape.head_dim
    return width * kv_bytes
