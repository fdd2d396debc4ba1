"""The real Ascend ``send_kvcache`` of SGLang 0.5.23: patched against upstream.

Both run in the SGLang harness (``tests/sglang``: the PyPI release on CPU torch,
patched by ``runtime/install-and-patch.sh``) on a 128K-token request, page size
128, fully fragmented (no two neighbouring pages consecutive on either side),
61 layers × 2 groups (DeepSeek-V3) and × 3 groups (DeepSeek-V3.2), sending to a
transfer engine that does nothing. What is timed is everything ``send_kvcache``
does before the wire: upstream's per-block loop and tuple unzipping, or the
patched layout guard, mapping and vectorized plan. The patched time is also set
against the request's KV wire time at 25 and 50 GB/s. Both figures come from one
run (best of a few repeats, interleaved); the first run builds the harness cache.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ascend_pd_runtime.layout import StageLayout
from ascend_pd_runtime.model_facts import load_model_facts
from ascend_pd_runtime.plan_cli import example_config

REPO = Path(__file__).resolve().parents[1]
SGLANG_TESTS = REPO / "tests" / "sglang"
VERSION = "0.5.23"
PAGE_SIZE = 128


@dataclass(frozen=True)
class Sizes:
    tokens: int
    repeats: int


FULL = Sizes(tokens=128 * 1024, repeats=3)
#: The test suite's smoke run: every code path, no meaningful figure.
SMOKE = Sizes(tokens=8 * PAGE_SIZE, repeats=1)
#: Issue goals for the layout core's plan (guard, mapping, vectorized descriptors).
GOAL_SPEEDUP = 20.0
GOAL_WIRE_SHARE = 0.01

#: Runs in the harness venv: time send_kvcache on every case, print JSON.
_TIMER = """
import concurrent.futures, json, sys, time
import numpy as np
sys.path.insert(0, {tests!r})
import driver
import sglang.srt.disaggregation.ascend.conn as conn

class NullEngine:
    def __init__(self):
        self.sent = 0
    def batch_transfer_sync(self, session_id, src, dst, lengths):
        self.sent += len(lengths)
        return 0

spec = json.load(open({cases!r}))
out = {{}}
with concurrent.futures.ThreadPoolExecutor(1) as executor:
    for case in spec["cases"]:
        manager = driver.build_manager(conn, case, (0, 5, 23), {patched!r})
        manager.engine = NullEngine()
        src = np.asarray(case["src_pages"], dtype=np.int32)
        dst = np.asarray(case["dst_pages"], dtype=np.int32)
        best = float("inf")
        for _ in range({repeats}):
            start = time.perf_counter()
            status = manager.send_kvcache("decode-session", src, case["dst_ptrs"], dst, executor)
            best = min(best, time.perf_counter() - start)
            assert status == 0, status
        plan_best = float("inf")
        if {patched!r}:
            from ascend_pd_runtime import connector
            for _ in range({repeats}):
                start = time.perf_counter()
                connector.plan_send(manager, src, case["dst_ptrs"], dst)
                plan_best = min(plan_best, time.perf_counter() - start)
        out[case["name"]] = {{"seconds": best, "plan_seconds": plan_best,
                              "descriptors": manager.engine.sent // {repeats}}}
print(json.dumps(out))
"""


def _harness() -> Any:
    sys.path.insert(0, str(SGLANG_TESTS))
    import sglang_harness

    return sglang_harness


def _cases(tokens: int) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Case JSON for the harness driver, and each case's KV bytes on the wire."""
    rng = np.random.default_rng(0)
    pages = tokens // PAGE_SIZE
    src_pages = (rng.permutation(pages) * 2).tolist()
    dst_pages = (rng.permutation(pages) * 2 + 1).tolist()
    cases, wire = [], {}
    for model in ("deepseek-v3", "deepseek-v3.2"):
        facts = load_model_facts(example_config(model))
        groups, layers = facts.kv_buf_groups, facts.total_kv_layers
        stage = StageLayout(0, 0, layers, groups)
        per_token = facts.bytes_per_token()
        name = f"{layers} layers × {groups} groups"
        cases.append(
            {
                "name": name,
                "model_path": str(example_config(model)),
                "mla": True,
                "groups": groups,
                "total_kv_layers": layers,
                "pp_size": 1,
                "pp_rank": 0,
                "start_layer": 0,
                "end_layer": layers,
                "prefill_draft_layers": 0,
                "src_ptrs": [
                    0x10_0000_0000 + i * 0x1_0000_0000 for i in range(stage.kv_pointer_count)
                ],
                "dst_ptrs": [
                    0x900_0000_0000 + i * 0x1_0000_0000 for i in range(stage.kv_pointer_count)
                ],
                "item_lens": [b * PAGE_SIZE for b in per_token for _ in range(layers)],
                "src_pages": src_pages,
                "dst_pages": dst_pages,
                "custom_mem_pool": False,
            }
        )
        wire[name] = float(tokens * sum(per_token) * layers)
    return cases, wire


def _time(
    harness: Any, dirs: tuple[Path, ...], cases_path: Path, patched: bool, repeats: int
) -> Any:
    code = _TIMER.format(
        tests=str(SGLANG_TESTS), cases=str(cases_path), patched=patched, repeats=repeats
    )
    out = harness.run_python(dirs, code)
    if out.returncode != 0:
        raise RuntimeError(f"timing send_kvcache failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(sizes: Sizes = FULL) -> list[dict[str, Any]]:
    harness = _harness()
    work = harness.workdir()
    try:
        patched_dir, _ = harness.patched_copy(VERSION, work)
        pristine = harness.ensure_version(VERSION)
        cases, wire = _cases(sizes.tokens)
        cases_path = work / "bench-cases.json"
        cases_path.write_text(json.dumps({"cases": cases}))
        upstream_t = _time(harness, (pristine,), cases_path, False, sizes.repeats)
        patched_t = _time(harness, (patched_dir, pristine), cases_path, True, sizes.repeats)
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    rows: list[dict[str, Any]] = []
    for name, wire_bytes in wire.items():
        up, pa = upstream_t[name], patched_t[name]
        if up["descriptors"] != pa["descriptors"]:
            raise RuntimeError(
                f"{name}: upstream sent {up['descriptors']}, patched {pa['descriptors']}"
            )
        plan_speedup = up["seconds"] / pa["plan_seconds"]
        send_speedup = up["seconds"] / pa["seconds"]
        rows.append(
            {
                "name": f"layout-core plan (guard + mapping + vectorized descriptors) vs upstream "
                f"send_kvcache (SGLang {VERSION}), {sizes.tokens // 1024}K tokens fragmented, "
                f"{name} "
                f"({pa['descriptors']} descriptors)",
                "value": round(plan_speedup, 1),
                "unit": "x",
                "goal": f">= {GOAL_SPEEDUP:g}x",
                "met": plan_speedup >= GOAL_SPEEDUP,
            }
        )
        rows.append(
            {
                "name": f"whole patched send_kvcache vs upstream, {name} (includes turning the "
                "plan into the Python lists the transfer engine's API takes)",
                "value": round(send_speedup, 1),
                "unit": "x",
                "goal": "",
                "met": None,
            }
        )
        rows.append(
            {
                "name": f"send_kvcache before the wire, upstream → patched (of which plan), {name}",
                "value": f"{up['seconds'] * 1e3:.1f} → {pa['seconds'] * 1e3:.1f} "
                f"({pa['plan_seconds'] * 1e3:.1f})",
                "unit": "ms",
                "goal": "",
                "met": None,
            }
        )
        for gbps in (25, 50):
            plan_share = pa["plan_seconds"] / (wire_bytes / (gbps * 1e9))
            send_share = pa["seconds"] / (wire_bytes / (gbps * 1e9))
            rows.append(
                {
                    "name": f"plan share of KV wire time at {gbps} GB/s, {name} "
                    f"({wire_bytes / 1e9:.2f} GB; whole patched send_kvcache: "
                    f"{send_share * 100:.2f} %)",
                    "value": round(plan_share * 100, 3),
                    "unit": "%",
                    # the goal is set at 50 GB/s; the 25 GB/s row is shown without a verdict
                    "goal": f"< {GOAL_WIRE_SHARE * 100:g} %" if gbps == 50 else "",
                    "met": plan_share < GOAL_WIRE_SHARE if gbps == 50 else None,
                }
            )
    return rows
