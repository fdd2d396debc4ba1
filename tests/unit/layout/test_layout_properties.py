"""Property tests: every target (g, l) lands exactly once on decode (g, l); draft rules hold."""

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_pd_runtime.layout import LayoutRequest, compute_layout

from .conftest import deepseek_shaped


@st.composite
def layouts(draw):
    layers = draw(st.integers(1, 128))
    pp = draw(st.integers(1, layers))
    explicit = layers > 1 and draw(st.booleans())
    partition: tuple[int, ...] = ()
    if explicit:
        cuts = sorted(draw(st.sets(st.integers(1, layers - 1), min_size=pp - 1, max_size=pp - 1)))
        bounds = [0, *cuts, layers]
        partition = tuple(b - a for a, b in pairwise(bounds))
    groups = draw(st.sampled_from([2, 3]))
    draft = draw(st.integers(0, 3))
    speculative = draw(st.sampled_from(["none", "nextn", "eagle"]))
    roles = draw(st.sampled_from([("decode",), ("prefill", "decode"), ("prefill",)]))
    decode_pp = draw(st.sampled_from([1, pp]))
    facts = deepseek_shaped(layers, draft, groups)
    request = LayoutRequest(
        prefill_pp=pp,
        decode_pp=decode_pp,
        layer_partition=partition,
        speculative=speculative,
        speculative_roles=roles,
        sglang_version="0.5.23",
    )
    return facts, request


def _decode_target(stage, index):
    n = stage.num_layers
    groups_total = stage.kv_buf_groups * n
    if index < groups_total:
        return ("target", index // n, stage.start_layer + index % n)
    within = index - groups_total
    return ("draft", within // stage.draft_layers, within % stage.draft_layers)


@settings(max_examples=400, deadline=None)
@given(layouts())
def test_every_target_slot_lands_exactly_once(case):
    facts, request = case
    layout = compute_layout(facts, request)
    groups, layers = facts.kv_buf_groups, facts.total_kv_layers
    if not layout.compatible:
        # The only incompatibility this generator can produce: prefill holds draft, decode not,
        # or speculative on a model without MTP layers.
        assert layout.prefill.draft_layers > layout.decode.draft_layers or (
            facts.num_nextn_predict_layers == 0 and request.speculative != "none"
        )
        return
    # the prefill stages cover [0, L) in order, and so do the decode stages
    assert layout.prefill.stages[0].start_layer == 0
    assert layout.prefill.stages[-1].end_layer == layers
    for a, b in pairwise(layout.prefill.stages):
        assert a.end_layer == b.start_layer
    written: dict[tuple[int, int], tuple] = {}
    for p_stage in layout.prefill.stages:
        d_stage = layout.decode_stage_for(p_stage)
        pairs = layout.transfers(p_stage)
        assert len(pairs) == p_stage.kv_pointer_count  # every prefill entry is sent
        for src, dst in pairs:
            assert 0 <= src < p_stage.kv_pointer_count
            assert 0 <= dst < d_stage.kv_pointer_count
            key = (d_stage.pp_rank, dst)
            assert key not in written, f"decode slot {key} written twice"
            src_slot = _decode_target(p_stage, src)
            dst_slot = _decode_target(d_stage, dst)
            assert src_slot == dst_slot
            written[key] = dst_slot
    targets = {slot for slot in written.values() if slot[0] == "target"}
    assert targets == {("target", g, layer) for g in range(groups) for layer in range(layers)}
    drafts = {slot for slot in written.values() if slot[0] == "draft"}
    if layout.prefill.draft_layers:
        draft_count = facts.num_nextn_predict_layers
        assert drafts == {("draft", g, d) for g in range(groups) for d in range(draft_count)}
        assert layout.prefill.stages[-1].draft_layers == draft_count
        assert all(s.draft_layers == 0 for s in layout.prefill.stages[:-1])
    else:
        assert drafts == set()
    decode_last = layout.decode.stages[-1]
    assert decode_last.draft_layers == layout.decode.draft_layers
