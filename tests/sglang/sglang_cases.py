"""The layouts the SGLang connector tests drive, and what each must send.

A case is one prefill PP stage sending one request to one decode: its pointer
lists (fake, widely spaced addresses), item lengths, fragmented page indices and
the model's config.json. ``expected`` is the layout core's plan; ``oracle``
derives the same descriptors independently, straight from the pointer-layout
rules in the README, one page run at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ascend_pd_runtime.layout import LayoutRequest, StageLayout, compute_layout, stage_transfers
from ascend_pd_runtime.model_facts import ModelFacts, load_model_facts
from ascend_pd_runtime.plan_cli import example_config
from ascend_pd_runtime.transfer_plan import build_transfer_descriptors, per_block_loop_reference

SRC_BASE = 0x10_0000_0000
DST_BASE = 0x900_0000_0000
ENTRY_SPAN = 0x1_0000_0000
PAGE_SIZE = 16
_EXPECTED: dict[str, list[list[int]]] = {}


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    prefill: StageLayout
    decode: StageLayout
    pp_size: int
    total_kv_layers: int
    mla: bool
    item_lens_by_group: tuple[int, ...]
    src_pages: tuple[int, ...]
    dst_pages: tuple[int, ...]
    custom_mem_pool: bool = False
    tags: frozenset[str] = field(default_factory=frozenset)

    @property
    def src_ptrs(self) -> list[int]:
        return [SRC_BASE + i * ENTRY_SPAN for i in range(self.prefill.kv_pointer_count)]

    @property
    def dst_ptrs(self) -> list[int]:
        return [DST_BASE + i * ENTRY_SPAN for i in range(self.decode.kv_pointer_count)]

    @property
    def item_lens(self) -> list[int]:
        stage = self.prefill
        lens = [w for w in self.item_lens_by_group for _ in range(stage.num_layers)]
        lens += [w for w in self.item_lens_by_group for _ in range(stage.draft_layers)]
        return lens

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model_path": str(example_config(self.model)),
            "mla": self.mla,
            "groups": self.prefill.kv_buf_groups,
            "total_kv_layers": self.total_kv_layers,
            "pp_size": self.pp_size,
            "pp_rank": self.prefill.pp_rank,
            "start_layer": self.prefill.start_layer,
            "end_layer": self.prefill.end_layer,
            "prefill_draft_layers": self.prefill.draft_layers,
            "src_ptrs": self.src_ptrs,
            "dst_ptrs": self.dst_ptrs,
            "item_lens": self.item_lens,
            "src_pages": list(self.src_pages),
            "dst_pages": list(self.dst_pages),
            "custom_mem_pool": self.custom_mem_pool,
        }

    def expected(self) -> list[list[int]]:
        """The layout core's plan for this stage pair."""
        if self.name not in _EXPECTED:
            _EXPECTED[self.name] = self._expected()
        return _EXPECTED[self.name]

    def _expected(self) -> list[list[int]]:
        plan = build_transfer_descriptors(
            self.src_ptrs,
            self.dst_ptrs,
            self.item_lens,
            self.src_pages,
            self.dst_pages,
            stage_transfers(self.prefill, self.decode),
        )
        return [list(t) for t in plan.as_tuples()]

    def oracle(self) -> list[list[int]]:
        """Straight from the README's rules, without the layout core's mapping code."""
        p, d = self.prefill, self.decode
        groups, n, m = p.kv_buf_groups, p.num_layers, d.num_layers
        pairs = [
            (g * n + (layer - p.start_layer), g * m + (layer - d.start_layer))
            for g in range(groups)
            for layer in range(p.start_layer, p.end_layer)
        ]
        pairs += [
            (groups * n + g * p.draft_layers + k, groups * m + g * d.draft_layers + k)
            for g in range(groups)
            for k in range(p.draft_layers)
        ]
        src, dst = self.src_ptrs, self.dst_ptrs
        lens = self.item_lens
        return [
            list(t)
            for t in per_block_loop_reference(
                [src[i] for i, _ in pairs],
                [dst[j] for _, j in pairs],
                [lens[i] for i, _ in pairs],
                self.src_pages,
                self.dst_pages,
            )
        ]


def fragmented_pages(seed: int, count: int, space: int = 1 << 14) -> tuple[int, ...]:
    """``count`` distinct page indices in runs of 1–8 consecutive pages, scattered."""
    rng = np.random.default_rng(seed)
    pages: list[int] = []
    for block in rng.permutation(space // 8):
        run = int(rng.integers(1, 9))
        pages.extend(range(int(block) * 8, int(block) * 8 + run))
        if len(pages) >= count:
            break
    return tuple(pages[:count])


def _item_lens(facts: ModelFacts) -> tuple[int, ...]:
    return tuple(b * PAGE_SIZE for b in facts.bytes_per_token())


def stage_cases(
    name: str,
    model: str,
    request: LayoutRequest,
    pages: int = 120,
    seed: int = 0,
    tags: frozenset[str] = frozenset(),
    custom_mem_pool: bool = False,
) -> list[Case]:
    """One case per prefill stage of a deployment, from the layout core."""
    facts = load_model_facts(example_config(model))
    layout = compute_layout(facts, request)
    cases = []
    for stage in layout.prefill.stages:
        cases.append(
            Case(
                name=f"{name}/rank{stage.pp_rank}",
                model=model,
                prefill=stage,
                decode=layout.decode_stage_for(stage),
                pp_size=request.prefill_pp,
                total_kv_layers=facts.total_kv_layers,
                mla=facts.attention == "mla",
                item_lens_by_group=_item_lens(facts),
                src_pages=fragmented_pages(seed + stage.pp_rank, pages),
                dst_pages=fragmented_pages(seed + 100 + stage.pp_rank, pages),
                custom_mem_pool=custom_mem_pool,
                tags=tags | ({"pp"} if request.prefill_pp > 1 else set()),
            )
        )
    return cases


def layout_cases(version: tuple[int, int, int]) -> list[Case]:
    """Every layout a version can serve, across PP, groups, draft and fragmentation."""
    v3, v32, mha = "deepseek-v3", "deepseek-v3.2", "qwen2-7b"
    decode_spec = {"speculative": "nextn", "speculative_roles": ("decode",)}
    both_spec = {"speculative": "nextn", "speculative_roles": ("prefill", "decode")}
    cases = [
        *stage_cases("v3-pp1", v3, LayoutRequest(prefill_pp=1), seed=1),
        *stage_cases("v3-pp1-draft-decode", v3, LayoutRequest(prefill_pp=1, **decode_spec)),
        *stage_cases("v3-pp1-draft-both", v3, LayoutRequest(prefill_pp=1, **both_spec)),
        *stage_cases("v32-pp1-draft-decode", v32, LayoutRequest(prefill_pp=1, **decode_spec)),
        *stage_cases("v3-pp2", v3, LayoutRequest(prefill_pp=2), seed=2),
        *stage_cases("v3-pp2-draft-decode", v3, LayoutRequest(prefill_pp=2, **decode_spec)),
        *stage_cases(
            "v3-pp3-explicit-draft-decode",
            v3,
            LayoutRequest(prefill_pp=3, layer_partition=(19, 21, 21), **decode_spec),
            seed=3,
        ),
        *stage_cases("v32-pp2", v32, LayoutRequest(prefill_pp=2), seed=4),
        *stage_cases("v32-pp4-draft-decode", v32, LayoutRequest(prefill_pp=4, **decode_spec)),
        *stage_cases(
            "v32-pp3-explicit", v32, LayoutRequest(prefill_pp=3, layer_partition=(30, 16, 15))
        ),
        *stage_cases("v3-pp2-decode-pp2", v3, LayoutRequest(prefill_pp=2, decode_pp=2), seed=5),
        *stage_cases(
            "v3-pp2-decode-pp2-draft-decode",
            v3,
            LayoutRequest(prefill_pp=2, decode_pp=2, **decode_spec),
            tags=frozenset({"decode-pp-draft"}),
        ),
        *stage_cases(
            "v3-pp2-custom-pool", v3, LayoutRequest(prefill_pp=2), custom_mem_pool=True, pages=64
        ),
        *stage_cases("v3-pp2-empty", v3, LayoutRequest(prefill_pp=2), pages=0),
        *stage_cases("v3-pp2-one-page", v3, LayoutRequest(prefill_pp=2), pages=1),
        *stage_cases("mha-pp1", mha, LayoutRequest(prefill_pp=1), tags=frozenset({"mha"})),
        *stage_cases("mha-pp2", mha, LayoutRequest(prefill_pp=2), tags=frozenset({"mha"})),
    ]
    if version >= (0, 5, 20):
        cases += [
            *stage_cases("v3-pp2-draft-both", v3, LayoutRequest(prefill_pp=2, **both_spec), seed=6),
            *stage_cases(
                "v32-pp3-explicit-draft-both",
                v32,
                LayoutRequest(prefill_pp=3, layer_partition=(20, 20, 21), **both_spec),
            ),
        ]
    return cases


def mismatch_cases() -> list[Case]:
    """Decodes whose pointer count no correct layout explains: the guard must refuse."""
    v3, v32 = "deepseek-v3", "deepseek-v3.2"
    facts = {model: load_model_facts(example_config(model)) for model in (v3, v32)}
    pages = fragmented_pages(7, 40)
    dst_pages = fragmented_pages(8, 40)

    def case(name: str, model: str, prefill: StageLayout, decode: StageLayout, pp: int) -> Case:
        return Case(
            name,
            model,
            prefill,
            decode,
            pp,
            facts[model].total_kv_layers,
            True,
            _item_lens(facts[model]),
            pages,
            dst_pages,
            tags=frozenset({"mismatch"}),
        )

    last = StageLayout(1, 30, 61, 2)
    return [
        # decode runs another model with two more layers (one more would look exactly
        # like the model's MTP layer: no pointer count can tell those apart)
        case("decode-63-layers", v3, last, StageLayout(0, 0, 63, 2), 2),
        # decode holds two draft layers; the model has one MTP layer
        case("decode-2-draft", v3, last, StageLayout(0, 0, 61, 2, 2), 2),
        # decode has no index buffer but prefill's model has one
        case("decode-2-groups", v32, StageLayout(0, 0, 30, 3), StageLayout(0, 0, 61, 2), 2),
        # a PP 1 prefill against a decode missing a layer
        case("pp1-decode-60-layers", v3, StageLayout(0, 0, 61, 2), StageLayout(0, 0, 60, 2), 1),
    ]
