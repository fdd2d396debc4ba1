"""The real Ascend ``send_kvcache`` of SGLang 0.5.23, patched against upstream, into the real
transfer engine's binding.

Both run in the SGLang harness (``tests/sglang``: the PyPI release on CPU torch, patched by
``runtime/install-and-patch.sh``) on a 128K-token request, page size 128, 61 layers × 2
groups (DeepSeek-V3) and × 3 groups (DeepSeek-V3.2), for two allocations: fully fragmented
(no two neighbouring pages consecutive on either side: one descriptor per page and entry)
and realistic (each side's pages in runs of 1–16, seeded; pages consecutive on both sides
coalesce into one longer descriptor).

The engine is SGLang's own ``AscendTransferEngine`` around the real ``memfabric_hybrid``
``TransferEngine`` (PyPI, installed by the harness), never initialised: its
``batch_transfer_sync_write`` converts the three int sequences (pybind11) and then fails fast
("handle is null", status -1) with no NPU or RDMA NIC. What is timed is therefore everything
``send_kvcache`` does before the wire, the engine's own argument conversion included. The
patched connector hands a long request over in several calls (``engine_batches``), so the
timed engine reports each converted call as sent and every batch gets converted. The
engine's C++ log lines of that failure go to /dev/null while timing.

Upstream runs in a process of its own on the pristine release, the patched code in another;
each figure is the calling thread's CPU time (user + system; on a dedicated prefill host the
same as wall time, and on a shared machine not inflated by other processes), the median of
``runs`` runs with min and max beside it (garbage collection is off while timing, collected
between runs; what the imports made is frozen first, ``gc.freeze``). The patched time is
set against the request's KV wire time at 25 and 50 GB/s. A table of what the binding's
conversion costs per Python representation (list, tuple, array.array, memoryview, numpy
array) is measured in the patched process; see ``bench/connector.md`` for the profile and
the before/after.
"""

from __future__ import annotations

import json
import shutil
import statistics
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
    runs: int


FULL = Sizes(tokens=128 * 1024, runs=7)
#: The test suite's smoke run: every code path, no meaningful figure.
SMOKE = Sizes(tokens=8 * PAGE_SIZE, runs=3)
#: Goals are ratios measured side by side in one process (issue 25): the layout core's
#: plan (guard, mapping, descriptors) against upstream...
GOAL_SPEEDUP = 20.0
#: ...and the whole patched send_kvcache against the binding's own conversion of the same
#: descriptors (the floor: no caller of this engine API gets under it). Shares of the wire
#: time are shown without a verdict: an absolute time measures the machine.
GOAL_VS_CONVERSION = 1.5
#: Realistic allocation: each side's pages come in runs of 1..MAX_RUN pages.
MAX_RUN = 16
MODELS = ("deepseek-v3", "deepseek-v3.2")
ALLOCATIONS = ("fully fragmented", f"realistic (runs of 1–{MAX_RUN} pages, seeded)")

#: Runs in the harness venv: times send_kvcache on every case and writes JSON to RESULTS.
_TIMER = r"""
import array, concurrent.futures, gc, json, os, sys, time
import numpy as np
sys.path.insert(0, TESTS)
import driver
import sglang.srt.disaggregation.ascend.conn as conn
from sglang.srt.disaggregation.ascend.transfer_engine import AscendTransferEngine
from memfabric_hybrid import TransferEngine

SESSION = "127.0.0.1:1"

class CountingEngine:
    def __init__(self):
        self.sent = 0
    def batch_transfer_sync(self, session_id, src, dst, lengths):
        self.sent += len(lengths)
        return 0

def real_engine():
    # SGLang's wrapper around the real binding, never initialised (no device here).
    engine = AscendTransferEngine.__new__(AscendTransferEngine)
    engine.engine = TransferEngine()
    return engine

class ConvertingEngine:
    # SGLang's wrapper around the real binding: every call is converted by the binding,
    # which then fails fast (-1); reported as sent, so a caller that hands the descriptors
    # over in several calls (the patched connector, engine_batches) gets all of them
    # converted instead of stopping at the first failure.
    def __init__(self):
        self.wrapper = real_engine()
        self.engine = self.wrapper.engine
        self.calls = 0
    def batch_transfer_sync(self, session_id, src, dst, lengths):
        status = self.wrapper.batch_transfer_sync(session_id, src, dst, lengths)
        if status != -1:
            raise AssertionError(f"the binding returned {status}, not its fail-fast -1")
        self.calls += 1
        return 0

def convert(binding, src, dst, lengths):
    # The binding converts all three sequences, then fails fast; a TypeError would mean
    # it refused the representation.
    status = binding.batch_transfer_sync_write(SESSION, src, dst, lengths)
    assert status == -1, status
    return status

def convert_batches(binding, plan):
    # As the connector hands them over: each batch dropped before the next is built.
    for lists in plan.engine_batches():
        convert(binding, *lists)
        del lists

def timed(fn):
    # CPU time of this thread (user + system): what the transfer thread spends, unmoved by
    # other processes taking the cores of a shared machine
    start = time.thread_time()
    out = fn()
    return time.thread_time() - start, out

spec = json.load(open(CASES))
patched = PATCHED
out = {"cases": {}, "representations": {}}
managers = []
devnull = os.open(os.devnull, os.O_WRONLY)
saved_stdout = os.dup(1)
gc.disable()  # a collection inside one run would be charged to whichever ran then
if patched:
    from ascend_pd_runtime import connector
# What the imports left (torch, transformers, SGLang: half a million objects) lives as long
# as the process: out of the collector's reach, a collection between runs walks only what
# the runs made (0.36 CPU s each otherwise, measured: most of a smoke run's time)
gc.freeze()
with concurrent.futures.ThreadPoolExecutor(1) as executor:
    for case in spec["cases"]:
        src = np.asarray(case["src_pages"], dtype=np.int32)
        dst = np.asarray(case["dst_pages"], dtype=np.int32)
        result = {"seconds": [], "plan_seconds": [], "lists_seconds": [], "convert_seconds": [],
                  "fresh_lists_seconds": [], "fresh_batches_seconds": []}
        counter = driver.build_manager(conn, case, (0, 5, 23), patched)
        counter.engine = CountingEngine()
        assert counter.send_kvcache(SESSION, src, case["dst_ptrs"], dst, executor) == 0
        result["descriptors"] = counter.engine.sent
        manager = driver.build_manager(conn, case, (0, 5, 23), patched)
        manager.engine = ConvertingEngine()
        binding = manager.engine.engine
        managers.append(manager)
        gc.collect()
        os.dup2(devnull, 1)
        try:
            for _ in range(RUNS):
                calls = manager.engine.calls
                seconds, status = timed(lambda: manager.send_kvcache(
                    SESSION, src, case["dst_ptrs"], dst, executor))
                assert status == 0, status  # every call converted, then reported sent
                result["engine_calls"] = manager.engine.calls - calls
                result["seconds"].append(seconds)
                if patched:
                    seconds, plan = timed(lambda: connector.plan_send(
                        manager, src, case["dst_ptrs"], dst))
                    result["plan_seconds"].append(seconds)
                    seconds, lists = timed(plan.engine_lists)
                    result["lists_seconds"].append(seconds)
                    # Untimed first: the binding's first conversion after other work can
                    # fault in fresh memory for its own vectors (up to 2 ms on 3 groups,
                    # depending on what ran before); the floor is the conversion without it.
                    convert(binding, *lists)
                    seconds, _ = timed(lambda: convert(binding, *lists))
                    result["convert_seconds"].append(seconds)
                    del lists
                    gc.collect()
                    # The floor of any caller handing the engine fresh lists: build them,
                    # have the binding convert them, free them (on return), nothing else.
                    seconds, _ = timed(lambda: convert(binding, *plan.engine_lists()))
                    result["fresh_lists_seconds"].append(seconds)
                    gc.collect()
                    # The same in the connector's batches: each built, converted, freed
                    # before the next is built.
                    seconds, _ = timed(lambda: convert_batches(binding, plan))
                    result["fresh_batches_seconds"].append(seconds)
                    del plan
                gc.collect()
        finally:
            os.dup2(saved_stdout, 1)
        out["cases"][case["name"]] = result
    if not patched:
        json.dump(out, open(RESULTS, "w"))
        sys.exit(0)
    # What the binding's conversion costs per representation, for the first case's size.
    case = spec["cases"][0]
    plan = connector.plan_send(managers[0], np.asarray(case["src_pages"], dtype=np.int32),
                               case["dst_ptrs"], np.asarray(case["dst_pages"], dtype=np.int32))
    arrays = (plan.src_addrs, plan.dst_addrs, plan.lengths)
    builders = {
        "list (ndarray.tolist)": lambda a: a.tolist(),
        "tuple": lambda a: tuple(a.tolist()),
        "array.array('q')": lambda a: array.array("q", a.tobytes()),
        "memoryview of the int64 array": memoryview,
        "numpy int64 array": lambda a: a,
    }
    os.dup2(devnull, 1)
    try:
        for label, build in builders.items():
            row = {"build_seconds": [], "convert_seconds": [], "ints": 3 * len(plan)}
            for _ in range(RUNS):
                seconds, seqs = timed(lambda: [build(a) for a in arrays])
                row["build_seconds"].append(seconds)
                seconds, _ = timed(lambda: convert(binding, *seqs))
                row["convert_seconds"].append(seconds)
                del seqs
            out["representations"][label] = row
    finally:
        os.dup2(saved_stdout, 1)
json.dump(out, open(RESULTS, "w"))
"""


def _harness() -> Any:
    sys.path.insert(0, str(SGLANG_TESTS))
    import sglang_harness

    return sglang_harness


def fragmented_pages(pages: int, rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """No two neighbouring pages consecutive on either side."""
    return (rng.permutation(pages) * 2).tolist(), (rng.permutation(pages) * 2 + 1).tolist()


def run_allocation(pages: int, rng: np.random.Generator, max_run: int = MAX_RUN) -> list[int]:
    """``pages`` page indices handed out in runs of 1..max_run consecutive pages, the runs
    at random places in a pool (a gap after each run, so two runs never touch)."""
    lengths: list[int] = []
    while sum(lengths) < pages:
        lengths.append(int(rng.integers(1, max_run + 1)))
    lengths[-1] -= sum(lengths) - pages
    slots = rng.permutation(4 * len(lengths))[: len(lengths)]
    out: list[int] = []
    for slot, length in zip(slots.tolist(), lengths, strict=True):
        out += range(slot * (max_run + 1), slot * (max_run + 1) + length)
    return out


def realistic_pages(pages: int, rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """Prefill and decode allocate independently, each in runs of 1–16 pages."""
    return run_allocation(pages, rng), run_allocation(pages, rng)


def _cases(tokens: int) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Case JSON for the harness driver, and each case's KV bytes on the wire."""
    pages = tokens // PAGE_SIZE
    allocations = {
        ALLOCATIONS[0]: fragmented_pages(pages, np.random.default_rng(0)),
        ALLOCATIONS[1]: realistic_pages(pages, np.random.default_rng(1)),
    }
    cases, wire = [], {}
    for allocation, (src_pages, dst_pages) in allocations.items():
        for model in MODELS:
            facts = load_model_facts(example_config(model))
            groups, layers = facts.kv_buf_groups, facts.total_kv_layers
            stage = StageLayout(0, 0, layers, groups)
            per_token = facts.bytes_per_token()
            name = f"{layers} layers × {groups} groups, {allocation}"
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


def _time(harness: Any, dirs: tuple[Path, ...], work: Path, runs: int, patched: bool) -> Any:
    results = work / f"bench-results-{patched}.json"
    code = (
        _TIMER.replace("TESTS", repr(str(SGLANG_TESTS)))
        .replace("CASES", repr(str(work / "bench-cases.json")))
        .replace("RESULTS", repr(str(results)))
        .replace("RUNS", str(runs))
        .replace("PATCHED", repr(patched))
    )
    out = harness.run_python(dirs, code, nice=False)
    if out.returncode != 0:
        raise RuntimeError(f"timing send_kvcache (patched={patched}) failed:\n{out.stderr[-3000:]}")
    return json.loads(results.read_text())


def _measure(sizes: Sizes) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, float]]:
    harness = _harness()
    work = harness.workdir()
    try:
        patched_dir, _ = harness.patched_copy(VERSION, work)
        pristine = harness.ensure_version(VERSION)
        memfabric = harness.ensure_memfabric()
        cases, wire = _cases(sizes.tokens)
        (work / "bench-cases.json").write_text(json.dumps({"cases": cases}))
        measured = {
            name: _time(harness, dirs, work, sizes.runs, patched)
            for name, patched, dirs in (
                ("upstream", False, (pristine, memfabric)),
                ("patched", True, (patched_dir, pristine, memfabric)),
            )
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return measured, cases, wire


def _stats(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def _ms(values: list[float]) -> str:
    med, lo, hi = _stats(values)
    return f"{med * 1e3:.2f} ms (min {lo * 1e3:.2f}, max {hi * 1e3:.2f})"


def per_run_ratio(numerators: list[float], denominators: list[float]) -> list[float]:
    """Each run's own ratio: both parts were timed one right after the other."""
    return [a / b for a, b in zip(numerators, denominators, strict=True)]


def conversion_rows(label: str, pa: dict[str, Any], runs: int) -> list[dict[str, Any]]:
    """The whole patched call, and fresh lists alone, against the binding's conversion."""
    whole = per_run_ratio(pa["seconds"], pa["convert_seconds"])
    fresh = per_run_ratio(pa["fresh_lists_seconds"], pa["convert_seconds"])
    batches = per_run_ratio(pa["fresh_batches_seconds"], pa["convert_seconds"])
    med, lo, hi = _stats(whole)
    convert_ms = _stats(pa["convert_seconds"])[0] * 1e3
    per_run = f"ratio per run, median of {runs}"
    # The denominator: the same descriptors upstream sends (the bench checks the count),
    # as one call of prebuilt lists, the representation the binding converts fastest.
    floor = "the binding's own conversion of the same descriptors (one call of prebuilt lists)"

    def ratio_row(what: str, values: list[float], numerator: str) -> dict[str, Any]:
        fmed, flo, fhi = _stats(values)
        return {
            "name": f"{what} / {floor}, {label} (medians "
            f"{_stats(pa[numerator])[0] * 1e3:.2f} ms / {convert_ms:.2f} ms; {per_run}, "
            f"min {flo:.2f}, max {fhi:.2f})",
            "value": round(fmed, 2),
            "unit": "x",
            "goal": "",
            "met": None,
        }

    return [
        {
            "name": f"whole patched send_kvcache / {floor}, {label} (medians "
            f"{_stats(pa['seconds'])[0] * 1e3:.2f} ms / {convert_ms:.2f} ms in "
            f"{pa['engine_calls']} engine calls; {per_run}, min {lo:.2f}, max {hi:.2f})",
            "value": round(med, 2),
            "unit": "x",
            "goal": f"<= {GOAL_VS_CONVERSION:g}",
            "met": med <= GOAL_VS_CONVERSION,
        },
        ratio_row(
            "fresh engine lists alone in one call (built by engine_lists, converted by the "
            "binding, freed): what a caller handing this API all of a request's new lists "
            "at once pays",
            fresh,
            "fresh_lists_seconds",
        ),
        ratio_row(
            "fresh engine batches alone (built by engine_batches, each converted by the "
            "binding and freed before the next): the patched call without guard and plan",
            batches,
            "fresh_batches_seconds",
        ),
    ]


def run(sizes: Sizes = FULL) -> list[dict[str, Any]]:
    measured, cases, wire = _measure(sizes)
    pages = len(cases[0]["src_pages"])
    entries_of = {c["name"]: len(c["src_ptrs"]) for c in cases}
    runs = sizes.runs
    tokens = f"{sizes.tokens // 1024}K" if sizes.tokens >= 1024 else str(sizes.tokens)
    rows: list[dict[str, Any]] = []
    fragmented: dict[int, int] = {}
    for name, wire_bytes in wire.items():
        up, pa = measured["upstream"]["cases"][name], measured["patched"]["cases"][name]
        if up["descriptors"] != pa["descriptors"]:
            raise RuntimeError(
                f"{name}: upstream sent {up['descriptors']}, patched {pa['descriptors']}"
            )
        descriptors = pa["descriptors"]
        entries = entries_of[name]
        is_fragmented = ALLOCATIONS[0] in name
        if is_fragmented:
            fragmented[entries] = descriptors
        up_s, pa_s = _stats(up["seconds"])[0], _stats(pa["seconds"])[0]
        plan_s = _stats(pa["plan_seconds"])[0]
        convert_s = _stats(pa["convert_seconds"])[0]
        label = f"{tokens} tokens, {name}"
        rows.append(
            {
                "name": f"upstream send_kvcache (SGLang {VERSION}) into the real engine binding, "
                f"{label}, {descriptors} descriptors, thread CPU: median of {runs} "
                f"(min {min(up['seconds']) * 1e3:.2f}, max {max(up['seconds']) * 1e3:.2f})",
                "value": round(up_s * 1e3, 2),
                "unit": "ms",
                "goal": "",
                "met": None,
            }
        )
        rows.append(
            {
                "name": f"whole patched send_kvcache into the real engine binding, {label}, "
                f"thread CPU: median of {runs} (min {min(pa['seconds']) * 1e3:.2f}, "
                f"max {max(pa['seconds']) * 1e3:.2f}); parts timed alone: plan "
                f"{_ms(pa['plan_seconds'])}, engine lists {_ms(pa['lists_seconds'])}, "
                f"the engine's own argument conversion {_ms(pa['convert_seconds'])}",
                "value": round(pa_s * 1e3, 2),
                "unit": "ms",
                "goal": "",
                "met": None,
            }
        )
        if not is_fragmented:
            frag = fragmented.get(entries)
            per_entry = descriptors / entries
            rows.append(
                {
                    "name": f"descriptors per request, {label} ({per_entry:.0f} per entry for "
                    f"{pages} pages: {pages / per_entry:.2f} pages per descriptor"
                    + (f"; fully fragmented: {frag}" if frag else "")
                    + ")",
                    "value": descriptors,
                    "unit": "descriptors",
                    "goal": "",
                    "met": None,
                }
            )
        if is_fragmented:
            plan_speedup = up_s / plan_s
            rows.append(
                {
                    "name": f"layout-core plan (guard + mapping + vectorized descriptors) vs "
                    f"upstream send_kvcache, {label} (medians)",
                    "value": round(plan_speedup, 1),
                    "unit": "x",
                    "goal": f">= {GOAL_SPEEDUP:g}x",
                    "met": plan_speedup >= GOAL_SPEEDUP,
                }
            )
            plan_share = plan_s / (wire_bytes / 50e9)
            rows.append(
                {
                    "name": f"plan share of KV wire time at 50 GB/s, {label}",
                    "value": round(plan_share * 100, 3),
                    "unit": "%",
                    "goal": "",
                    "met": None,
                }
            )
        rows += conversion_rows(label, pa, runs)
        rows.append(
            {
                "name": f"whole patched send_kvcache vs upstream, {label} (medians)",
                "value": round(up_s / pa_s, 1),
                "unit": "x",
                "goal": "",
                "met": None,
            }
        )
        for gbps in (50, 25):
            wire_s = wire_bytes / (gbps * 1e9)
            share = pa_s / wire_s
            text = (
                f"whole patched send_kvcache share of KV wire time at {gbps} GB/s, {label} "
                f"({wire_bytes / 1e9:.2f} GB, {wire_s * 1e3:.0f} ms on the wire)"
            )
            if gbps == 50:
                text += (
                    f"; the binding's own conversion of 3 × {descriptors} ints alone: "
                    f"{convert_s / wire_s * 100:.2f} % "
                    f"({convert_s / (3 * descriptors) * 1e9:.1f} ns per int)"
                )
            rows.append(
                {"name": text, "value": round(share * 100, 2), "unit": "%", "goal": "", "met": None}
            )
    for label, rep in measured["patched"]["representations"].items():
        build_s, convert_s = _stats(rep["build_seconds"])[0], _stats(rep["convert_seconds"])[0]
        rows.append(
            {
                "name": f"engine argument conversion from {label}, 3 × {rep['ints'] // 3} ints "
                f"(61 layers × 2 groups, fully fragmented): build {_ms(rep['build_seconds'])} "
                f"+ the binding's conversion {_ms(rep['convert_seconds'])}, "
                f"{convert_s / rep['ints'] * 1e9:.1f} ns per int",
                "value": round((build_s + convert_s) * 1e3, 2),
                "unit": "ms",
                "goal": "",
                "met": None,
            }
        )
    return rows
