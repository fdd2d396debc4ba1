"""Pointer layouts of prefill and decode, the prefill→decode mapping, and compatibility.

A role's flat ``kv_data_ptrs`` list (what SGLang registers with the transfer
engine) is laid out as follows, G = kv_buf_groups, D = draft (MTP) layers held:

* for each buffer group g in order, one entry per target layer the stage owns,
  in ascending layer order; then, if the stage holds draft layers, for each g
  one entry per draft layer.
* decode at PP 1 with L layers: target (g, l) is at g·L + l, draft (g, d) at
  G·L + g·D + d.
* a prefill stage owning [a, b), n = b − a: target (g, l) at g·n + (l − a); if it
  holds draft layers, draft (g, d) at G·n + g·D + d. Only the last stage of a
  role holds draft layers, and only when speculative decoding runs on that role.

Mapping: every target entry (g, l) of a prefill stage goes to the decode slot of
the same (g, l), in the decode stage that owns layer l (decode PP is 1 or equal
to prefill PP, with the same partition). Draft (g, d) maps to (g, d) when both
sides hold draft layers; when only decode holds them nothing maps there (decode
computes them); prefill holding draft that decode does not is incompatible.

``compatibility_problems`` lists every reason a pairing cannot be served by the
chosen SGLang version and transfer backend, each phrased so a user can act.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from .errors import BadInput, LayoutMismatch
from .model_facts import ModelFacts
from .partition import format_partition, layer_partition

SUPPORTED_SGLANG_MIN = (0, 5, 10)
SUPPORTED_SGLANG_MAX = (0, 5, 23)
DEFAULT_SGLANG_VERSION = "0.5.23"
#: From this version a PP prefill with speculative decoding sends draft KV from
#: its last stage, and ``total_kv_layers`` became ``hidden_kv_layers`` + ``draft_kv_layers``.
SGLANG_PP_PREFILL_DRAFT = (0, 5, 20)

#: SGLang's ``--speculative-algorithm`` values in its spelling: the one list the API, the env
#: contract and this core accept (the core and ``ascend-pd plan`` also take lower case).
SpeculativeAlgorithm = Literal["NONE", "NEXTN", "EAGLE"]
SPECULATIVE_ALGORITHMS: tuple[str, ...] = get_args(SpeculativeAlgorithm)
ROLES = ("prefill", "decode")
TRANSFER_BACKENDS = ("ascend", "mooncake")

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[.+-]?(?:post|rc|dev)?\d*)?$")


def parse_sglang_version(text: str) -> tuple[int, int, int] | None:
    """``"0.5.23"`` → ``(0, 5, 23)``; None when it is not a release version string."""
    m = _VERSION_RE.match(text.strip())
    if not m:
        return None
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)))


def supported_sglang_versions() -> list[str]:
    lo, hi = SUPPORTED_SGLANG_MIN, SUPPORTED_SGLANG_MAX
    return [f"0.5.{p}" for p in range(lo[2], hi[2] + 1)]


@dataclass(frozen=True)
class StageLayout:
    """The flat pointer layout of one PP stage of one role."""

    pp_rank: int
    start_layer: int
    end_layer: int
    kv_buf_groups: int
    draft_layers: int = 0

    @property
    def num_layers(self) -> int:
        return self.end_layer - self.start_layer

    @property
    def kv_pointer_count(self) -> int:
        return self.kv_buf_groups * (self.num_layers + self.draft_layers)

    def target_index(self, group: int, layer: int) -> int:
        if not (0 <= group < self.kv_buf_groups and self.start_layer <= layer < self.end_layer):
            raise IndexError(f"(group {group}, layer {layer}) is not held by {self}")
        return group * self.num_layers + (layer - self.start_layer)

    def draft_index(self, group: int, draft: int) -> int:
        if not (0 <= group < self.kv_buf_groups and 0 <= draft < self.draft_layers):
            raise IndexError(f"(group {group}, draft {draft}) is not held by {self}")
        return self.kv_buf_groups * self.num_layers + group * self.draft_layers + draft

    def describe(self) -> str:
        draft = f" + {self.draft_layers} draft" if self.draft_layers else ""
        return (
            f"PP rank {self.pp_rank} layers [{self.start_layer}, {self.end_layer}){draft} × "
            f"{self.kv_buf_groups} groups = {self.kv_pointer_count} pointers"
        )


@dataclass(frozen=True)
class RoleLayout:
    role: str
    draft_layers: int
    #: One per PP rank, in rank order.
    stages: tuple[StageLayout, ...]

    @property
    def pp(self) -> int:
        """The role's pipeline size: its stages' count."""
        return len(self.stages)


def role_layout(
    role: str,
    total_kv_layers: int,
    kv_buf_groups: int,
    pp: int,
    partition: Sequence[int] | None,
    draft_layers: int,
) -> RoleLayout:
    """Stages of one role; draft layers sit on the last stage only."""
    ranges = layer_partition(total_kv_layers, pp, partition)
    stages = tuple(
        StageLayout(
            pp_rank=rank,
            start_layer=start,
            end_layer=end,
            kv_buf_groups=kv_buf_groups,
            draft_layers=draft_layers if rank == pp - 1 else 0,
        )
        for rank, (start, end) in enumerate(ranges)
    )
    return RoleLayout(role=role, draft_layers=draft_layers, stages=stages)


#: ``[src_index, dst_index]`` pairs of one prefill stage, in source-index order.
Transfers = tuple[tuple[int, int], ...]


def stage_transfers(src: StageLayout, dst: StageLayout) -> Transfers:
    """Every ``(src_index, dst_index)`` pair, in source-index order.

    Plain tuples, not an array: the operator imports this module, and numpy would cost
    it 20 MiB of memory for at most a few hundred pairs (the connector turns them into an
    array per request, microseconds beside the descriptors).
    Raises ``LayoutMismatch`` when ``dst`` cannot receive everything ``src`` sends.
    """
    if src.kv_buf_groups != dst.kv_buf_groups:
        raise LayoutMismatch(
            f"prefill {src.describe()} has {src.kv_buf_groups} buffer groups but decode "
            f"{dst.describe()} has {dst.kv_buf_groups}"
        )
    if not (dst.start_layer <= src.start_layer and src.end_layer <= dst.end_layer):
        raise LayoutMismatch(
            f"prefill {src.describe()} sends layers decode {dst.describe()} does not hold"
        )
    if src.draft_layers and src.draft_layers != dst.draft_layers:
        raise LayoutMismatch(
            f"prefill {src.describe()} sends {src.draft_layers} draft layers but decode "
            f"{dst.describe()} holds {dst.draft_layers}"
        )
    shift = src.start_layer - dst.start_layer
    pairs = [
        (g * src.num_layers + i, g * dst.num_layers + shift + i)
        for g in range(src.kv_buf_groups)
        for i in range(src.num_layers)
    ]
    src_base = src.kv_buf_groups * src.num_layers
    dst_base = dst.kv_buf_groups * dst.num_layers
    within = range(src.kv_buf_groups * src.draft_layers)  # (g, d) at g·D + d on both sides
    pairs += [(src_base + w, dst_base + w) for w in within]
    return tuple(pairs)


@dataclass(frozen=True)
class LayoutRequest:
    """How a deployment pairs prefill and decode (the ``ascend-pd plan`` options)."""

    prefill_pp: int
    decode_pp: int = 1
    layer_partition: tuple[int, ...] = ()
    speculative: str = "none"
    speculative_roles: tuple[str, ...] = ROLES
    sglang_version: str = DEFAULT_SGLANG_VERSION
    transfer_backend: str = "ascend"
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    def validated(self, facts: ModelFacts) -> LayoutRequest:
        """Check every rule that makes the request malformed (``BadInput``)."""
        speculative = self.speculative.lower()
        if speculative.upper() not in SPECULATIVE_ALGORITHMS:
            raise BadInput(
                f"speculative algorithm {self.speculative!r} is invalid: "
                f"expected one of {', '.join(a.lower() for a in SPECULATIVE_ALGORITHMS)}"
            )
        roles = tuple(dict.fromkeys(r.lower() for r in self.speculative_roles))
        bad = [r for r in roles if r not in ROLES]
        if bad or not roles:
            raise BadInput(
                f"speculative roles {list(self.speculative_roles)!r} are invalid: expected a "
                "non-empty subset of prefill, decode"
            )
        if self.transfer_backend not in TRANSFER_BACKENDS:
            raise BadInput(
                f"transfer backend {self.transfer_backend!r} is invalid: "
                f"expected one of {', '.join(TRANSFER_BACKENDS)}"
            )
        layer_partition(facts.total_kv_layers, self.prefill_pp, self.layer_partition or None)
        layer_partition(facts.total_kv_layers, self.decode_pp)
        return LayoutRequest(
            prefill_pp=self.prefill_pp,
            decode_pp=self.decode_pp,
            layer_partition=tuple(self.layer_partition),
            speculative=speculative,
            speculative_roles=roles,
            sglang_version=self.sglang_version,
            transfer_backend=self.transfer_backend,
        )


def draft_layers_held(facts: ModelFacts, request: LayoutRequest, role: str) -> int:
    """Draft layers a role holds: the model's MTP layers when speculative runs there."""
    if request.speculative.lower() == "none" or role not in request.speculative_roles:
        return 0
    return facts.num_nextn_predict_layers


def compatibility_problems(facts: ModelFacts, request: LayoutRequest) -> list[str]:
    """Every reason this pairing cannot be served correctly; empty when it can."""
    problems: list[str] = []
    version = parse_sglang_version(request.sglang_version)
    lo = ".".join(map(str, SUPPORTED_SGLANG_MIN))
    hi = ".".join(map(str, SUPPORTED_SGLANG_MAX))
    if version is None or not (SUPPORTED_SGLANG_MIN <= version <= SUPPORTED_SGLANG_MAX):
        problems.append(
            f"sglangVersion {request.sglang_version!r} is an unsupported SGLang version: "
            f"ascend-pd supports {lo} to {hi}"
        )
    speculative = request.speculative.lower()
    if speculative != "none" and facts.num_nextn_predict_layers == 0:
        problems.append(
            f"speculative decoding {speculative.upper()} uses the model's MTP layers, but "
            f"{facts.architecture or 'this model'} has num_nextn_predict_layers 0; "
            "set speculative to none"
        )
    prefill_draft = draft_layers_held(facts, request, "prefill")
    decode_draft = draft_layers_held(facts, request, "decode")
    if (
        speculative != "none"
        and "prefill" in request.speculative_roles
        and request.prefill_pp > 1
        and version is not None
        and version < SGLANG_PP_PREFILL_DRAFT
    ):
        problems.append(
            f"SGLang {request.sglang_version} refuses speculative decoding on a prefill with "
            f"pipeline size {request.prefill_pp} (allowed from 0.5.20); remove prefill from "
            "the speculative roles, use prefill pipeline size 1, or use SGLang >= 0.5.20"
        )
    if prefill_draft and not decode_draft:
        problems.append(
            f"prefill holds {prefill_draft} draft layer(s) but decode holds none, so the "
            "prefill's draft KV has no destination; add decode to the speculative roles"
        )
    if request.decode_pp not in (1, request.prefill_pp):
        problems.append(
            f"decode pipeline size {request.decode_pp} is incompatible with prefill pipeline "
            f"size {request.prefill_pp}: decode pipeline must be 1 or equal to the prefill's"
        )
    if (
        request.transfer_backend == "mooncake"
        and request.prefill_pp > 1
        and (facts.attention == "mla")
    ):
        problems.append(
            f"transfer backend mooncake with prefill pipeline size {request.prefill_pp} on an "
            "MLA model is refused: upstream's mooncake path slices the pointer list without "
            "regard to buffer groups and silently corrupts KV; use transfer backend ascend"
        )
    return problems


@dataclass(frozen=True)
class KVLayout:
    """The whole layout of one deployment: both roles and the per-stage mapping."""

    facts: ModelFacts
    request: LayoutRequest
    prefill: RoleLayout
    decode: RoleLayout
    problems: tuple[str, ...]

    @property
    def compatible(self) -> bool:
        return not self.problems

    def decode_stage_for(self, prefill_stage: StageLayout) -> StageLayout:
        """The decode stage that receives a prefill stage's KV."""
        if self.decode.pp == 1:
            return self.decode.stages[0]
        return self.decode.stages[prefill_stage.pp_rank]

    def transfers(self, prefill_stage: StageLayout) -> Transfers:
        return stage_transfers(prefill_stage, self.decode_stage_for(prefill_stage))


def compute_layout(facts: ModelFacts, request: LayoutRequest) -> KVLayout:
    """Validate the request (``BadInput``) and compute both roles' layouts and problems."""
    request = request.validated(facts)
    problems = compatibility_problems(facts, request)
    partition = request.layer_partition or None
    prefill = role_layout(
        "prefill",
        facts.total_kv_layers,
        facts.kv_buf_groups,
        request.prefill_pp,
        partition,
        draft_layers_held(facts, request, "prefill"),
    )
    decode = role_layout(
        "decode",
        facts.total_kv_layers,
        facts.kv_buf_groups,
        request.decode_pp,
        partition if request.decode_pp == request.prefill_pp else None,
        draft_layers_held(facts, request, "decode"),
    )
    return KVLayout(facts, request, prefill, decode, tuple(problems))


def expected_decode_pointer_count(
    kv_buf_groups: int, total_kv_layers: int, decode_draft_layers: int
) -> int:
    return kv_buf_groups * (total_kv_layers + decode_draft_layers)


def check_decode_pointer_count(
    *,
    prefill_stage: StageLayout,
    decode_pointer_count: int,
    total_kv_layers: int,
    num_nextn_predict_layers: int,
) -> int:
    """The connector's guard: decode (PP 1) must have registered a layout we understand.

    Returns decode's draft-layer count; raises ``LayoutMismatch`` naming both sides.
    """
    groups = prefill_stage.kv_buf_groups
    allowed = sorted({0, num_nextn_predict_layers})
    for draft in allowed:
        if decode_pointer_count == expected_decode_pointer_count(groups, total_kv_layers, draft):
            if prefill_stage.draft_layers and draft != prefill_stage.draft_layers:
                break
            return draft
    expected = " or ".join(
        str(expected_decode_pointer_count(groups, total_kv_layers, d)) for d in allowed
    )
    raise LayoutMismatch(
        f"KV layout mismatch: decode registered {decode_pointer_count} KV pointers, expected "
        f"{expected} (= {groups} buffer groups × ({total_kv_layers} target layers + "
        f"{' or '.join(map(str, allowed))} draft layers)); prefill "
        f"{prefill_stage.describe()}. Refusing to transfer: KV would land in the wrong layer."
    )


__all__ = [
    "DEFAULT_SGLANG_VERSION",
    "KVLayout",
    "LayoutRequest",
    "RoleLayout",
    "StageLayout",
    "Transfers",
    "check_decode_pointer_count",
    "compatibility_problems",
    "compute_layout",
    "format_partition",
    "parse_sglang_version",
    "role_layout",
    "stage_transfers",
]
