import pytest

from ascend_pd_runtime.errors import BadInput, LayoutMismatch
from ascend_pd_runtime.layout import (
    LayoutRequest,
    StageLayout,
    check_decode_pointer_count,
    compute_layout,
    parse_sglang_version,
    stage_transfers,
    supported_sglang_versions,
)


def test_decode_pp1_indices():
    decode = StageLayout(pp_rank=0, start_layer=0, end_layer=61, kv_buf_groups=2, draft_layers=1)
    assert decode.kv_pointer_count == 124
    assert decode.target_index(0, 0) == 0
    assert decode.target_index(1, 0) == 61
    assert decode.target_index(1, 60) == 121
    assert decode.draft_index(0, 0) == 122
    assert decode.draft_index(1, 0) == 123
    with pytest.raises(IndexError):
        decode.target_index(2, 0)


def test_prefill_stage_indices():
    stage = StageLayout(pp_rank=1, start_layer=30, end_layer=61, kv_buf_groups=3, draft_layers=2)
    assert stage.kv_pointer_count == 3 * (31 + 2)
    assert stage.target_index(0, 30) == 0
    assert stage.target_index(2, 60) == 2 * 31 + 30
    assert stage.draft_index(0, 1) == 93 + 1
    assert stage.draft_index(2, 0) == 93 + 4
    with pytest.raises(IndexError):
        stage.target_index(0, 29)


def test_dsv3_pp2_decode_nextn_mapping(dsv3):
    layout = compute_layout(
        dsv3, LayoutRequest(prefill_pp=2, speculative="nextn", speculative_roles=("decode",))
    )
    assert layout.compatible, layout.problems
    first, last = layout.prefill.stages
    assert (first.start_layer, first.end_layer, last.start_layer, last.end_layer) == (0, 30, 30, 61)
    assert layout.prefill.draft_layers == 0
    assert layout.decode.draft_layers == 1
    assert layout.decode.stages[0].kv_pointer_count == 124
    t0 = layout.transfers(first)
    # group 0 layers 0..29 -> 0..29; group 1 layers 0..29 -> 61..90
    assert [s for s, _ in t0] == list(range(60))
    assert [d for _, d in t0] == list(range(30)) + list(range(61, 91))
    t1 = layout.transfers(last)
    assert [d for _, d in t1] == list(range(30, 61)) + list(range(91, 122))
    # decode's draft slots 122, 123 receive nothing: decode computes them
    assert not {122, 123} & {d for _, d in t0 + t1}


def test_draft_on_both_sides_maps_draft_to_draft(dsv3):
    layout = compute_layout(dsv3, LayoutRequest(prefill_pp=1, speculative="nextn"))
    (stage,) = layout.prefill.stages
    pairs = layout.transfers(stage)
    assert pairs[-2:] == ((122, 122), (123, 123))


def test_pp_prefill_draft_from_last_stage_on_0_5_20(dsv32):
    layout = compute_layout(
        dsv32, LayoutRequest(prefill_pp=2, speculative="eagle", sglang_version="0.5.20")
    )
    assert layout.compatible, layout.problems
    first, last = layout.prefill.stages
    assert first.draft_layers == 0 and last.draft_layers == 1
    pairs = layout.transfers(last)
    # 3 groups × 31 layers, then draft (g, 0) -> decode 3·61 + g
    assert pairs[-3:] == ((93, 183), (94, 184), (95, 185))


def test_equal_decode_pp_maps_identity(dsv3):
    layout = compute_layout(
        dsv3,
        LayoutRequest(prefill_pp=2, decode_pp=2, layer_partition=(20, 41), speculative="nextn"),
    )
    assert layout.compatible, layout.problems
    for p_stage, d_stage in zip(layout.prefill.stages, layout.decode.stages, strict=True):
        assert (p_stage.start_layer, p_stage.end_layer) == (d_stage.start_layer, d_stage.end_layer)
        pairs = layout.transfers(p_stage)
        assert all(s == d for s, d in pairs)
        assert len(pairs) == p_stage.kv_pointer_count


@pytest.mark.parametrize(
    ("request_kwargs", "fragment"),
    [
        ({"sglang_version": "0.5.9"}, "'0.5.9' is an unsupported SGLang version"),
        ({"sglang_version": "0.5.24"}, "unsupported SGLang version"),
        ({"sglang_version": "0.6.0"}, "unsupported SGLang version"),
        ({"sglang_version": "latest"}, "unsupported SGLang version"),
        ({"decode_pp": 3, "prefill_pp": 2}, "decode pipeline size 3 is incompatible"),
        (
            {"prefill_pp": 2, "transfer_backend": "mooncake"},
            "mooncake with prefill pipeline size 2 on an MLA model",
        ),
        (
            {"prefill_pp": 2, "speculative": "nextn", "sglang_version": "0.5.15"},
            "SGLang 0.5.15 refuses speculative decoding on a prefill with pipeline size 2",
        ),
        (
            {"prefill_pp": 2, "speculative": "nextn", "sglang_version": "0.5.10"},
            "refuses speculative decoding",
        ),
        (
            {"prefill_pp": 1, "speculative": "nextn", "speculative_roles": ("prefill",)},
            "prefill holds 1 draft layer(s) but decode holds none",
        ),
    ],
)
def test_incompatible_pairings(dsv3, request_kwargs, fragment):
    kwargs = {"prefill_pp": 1, **request_kwargs}
    layout = compute_layout(dsv3, LayoutRequest(**kwargs))
    assert not layout.compatible
    assert any(fragment in p for p in layout.problems), layout.problems


def test_speculative_without_mtp_is_incompatible(v2lite):
    layout = compute_layout(v2lite, LayoutRequest(prefill_pp=1, speculative="nextn"))
    assert any("num_nextn_predict_layers 0" in p for p in layout.problems)


def test_problems_are_all_reported(dsv3):
    layout = compute_layout(
        dsv3,
        LayoutRequest(
            prefill_pp=2, decode_pp=4, transfer_backend="mooncake", sglang_version="0.4.0"
        ),
    )
    assert len(layout.problems) == 3


@pytest.mark.parametrize(
    ("version", "prefill_pp", "ok"),
    [
        ("0.5.12", 1, True),
        ("0.5.19", 2, False),
        ("0.5.20", 2, True),
        ("0.5.23", 4, True),
        ("0.5.11", 1, True),
        ("0.5.11", 2, False),
    ],
)
def test_prefill_speculative_by_version(dsv3, version, prefill_pp, ok):
    layout = compute_layout(
        dsv3, LayoutRequest(prefill_pp=prefill_pp, speculative="nextn", sglang_version=version)
    )
    assert layout.compatible is ok, layout.problems


def test_mooncake_is_fine_without_pp_or_for_mha(dsv3, mha):
    assert compute_layout(dsv3, LayoutRequest(prefill_pp=1, transfer_backend="mooncake")).compatible
    assert compute_layout(mha, LayoutRequest(prefill_pp=2, transfer_backend="mooncake")).compatible


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prefill_pp": 0}, "pipeline size 0 is invalid"),
        ({"prefill_pp": 62}, "must not exceed the model's 61 layers"),
        ({"prefill_pp": 1, "decode_pp": 0}, "pipeline size 0 is invalid"),
        ({"prefill_pp": 2, "layer_partition": (30, 30)}, "sums to 60"),
        ({"prefill_pp": 1, "speculative": "medusa"}, "speculative algorithm 'medusa' is invalid"),
        ({"prefill_pp": 1, "speculative_roles": ("router",)}, "speculative roles"),
        ({"prefill_pp": 1, "transfer_backend": "nixl"}, "transfer backend 'nixl' is invalid"),
    ],
)
def test_bad_requests_raise(dsv3, kwargs, message):
    with pytest.raises(BadInput, match=message):
        compute_layout(dsv3, LayoutRequest(**kwargs))


def test_version_parsing():
    assert parse_sglang_version("0.5.23") == (0, 5, 23)
    assert parse_sglang_version("0.5.10.post1") == (0, 5, 10)
    assert parse_sglang_version("v0.5.12") == (0, 5, 12)
    assert parse_sglang_version("five") is None
    assert supported_sglang_versions()[0] == "0.5.10"
    assert supported_sglang_versions()[-1] == "0.5.23"
    assert len(supported_sglang_versions()) == 14


def test_stage_transfers_refuses_mismatches():
    src = StageLayout(0, 0, 30, 2, 0)
    with pytest.raises(LayoutMismatch, match=r"has 2 buffer groups but decode .* has 3"):
        stage_transfers(src, StageLayout(0, 0, 61, 3))
    with pytest.raises(LayoutMismatch, match="does not hold"):
        stage_transfers(StageLayout(1, 30, 61, 2), StageLayout(0, 0, 30, 2))
    with pytest.raises(LayoutMismatch, match="sends 1 draft layers but decode"):
        stage_transfers(StageLayout(0, 0, 61, 2, 1), StageLayout(0, 0, 61, 2, 0))


def test_pointer_count_guard():
    stage = StageLayout(1, 30, 61, 2, 0)
    kwargs = {"prefill_stage": stage, "total_kv_layers": 61, "num_nextn_predict_layers": 1}
    assert check_decode_pointer_count(decode_pointer_count=122, **kwargs) == 0
    assert check_decode_pointer_count(decode_pointer_count=124, **kwargs) == 1
    with pytest.raises(LayoutMismatch) as err:
        check_decode_pointer_count(decode_pointer_count=183, **kwargs)
    message = str(err.value)
    assert "decode registered 183 KV pointers, expected 122 or 124" in message
    assert "PP rank 1 layers [30, 61)" in message


def test_pointer_count_guard_requires_decode_draft_when_prefill_sends_draft():
    stage = StageLayout(0, 0, 61, 2, 1)
    with pytest.raises(LayoutMismatch):
        check_decode_pointer_count(
            prefill_stage=stage,
            decode_pointer_count=122,
            total_kv_layers=61,
            num_nextn_predict_layers=1,
        )


def test_transfers_are_int_pairs_source_ordered(dsv3):
    layout = compute_layout(dsv3, LayoutRequest(prefill_pp=4))
    for stage in layout.prefill.stages:
        pairs = layout.transfers(stage)
        assert all(isinstance(i, int) for pair in pairs for i in pair)
        sources = [s for s, _ in pairs]
        assert sources == sorted(set(sources))
