"""KV lands in the right layer: real bytes between real NPU MLA pools (on CPU).

Per version, two prefill PP stages (layers [0, 3) and [3, 7)) and a decode
holding all 7 layers plus one MTP draft layer are real ``NPUMLATokenToKVPool``s;
``KVArgs`` come from SGLang's own set-up code (``setup_state_kv_args``; the
start-up hook on 0.5.10/11). Every prefill page holds a value naming its layer,
buffer group and page. The patched ``send_kvcache`` sends a fragmented request
through a transfer engine that copies the bytes; afterwards every decode page of
the request must hold exactly the prefill value of the same layer and group, and
nothing else (other pages, the draft layer) may have changed.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import sglang_harness as harness
from release_checks import Job, ReleaseChecks, release_check

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(1800)]

SCRIPT = r"""
import concurrent.futures, ctypes, json, sys
import torch
sys.path.insert(0, TESTS)
import driver
from mla_pools import KVArgs, buffers, conn, pointers, pool, version_setup

LAYERS, STAGES, PAGES = 7, [(0, 3), (3, 7)], 16
SRC_PAGES = [3, 4, 5, 9, 1, 12, 13, 7]
DST_PAGES = [2, 3, 11, 12, 13, 5, 6, 15]
VERSION = driver.version_tuple(VERSION_TEXT)

def kv_args_for(p, draft=None):
    args = KVArgs()
    args.kv_data_ptrs, args.kv_data_lens, args.kv_item_lens = pointers(p, draft)
    args.prefill_start_layer = p.start_layer
    return version_setup(args, p, None, LAYERS, VERSION)

try:  # the real Ascend engine binding, where the test put it on the path
    from memfabric_hybrid import TransferEngine
    BINDING = TransferEngine()
except ImportError:
    BINDING = None

class CopyEngine:
    descriptors = 0
    calls = 0
    def batch_transfer_sync(self, session_id, src, dst, lengths):
        CopyEngine.calls += 1
        if BINDING is not None:
            # the binding converts the three sequences (pybind11), then fails fast with no
            # device: a TypeError here means the real engine would refuse the request
            assert BINDING.batch_transfer_sync_write(session_id, src, dst, lengths) == -1
        CopyEngine.descriptors += len(lengths)
        for s, d, n in zip(src, dst, lengths, strict=True):
            ctypes.memmove(d, s, n)
        return 0

report = {}
DST_TO_SRC = dict(zip(DST_PAGES, SRC_PAGES, strict=True))
for index in (None, 2):
    decode, draft = pool(0, LAYERS, index, PAGES), pool(LAYERS, 1, index, PAGES)
    dst_ptrs = kv_args_for(decode, draft).kv_data_ptrs
    for rank, (start, end) in enumerate(STAGES):
        prefill = pool(start, end - start, index, PAGES)
        for group, buf in enumerate(buffers(prefill)):
            for local in range(end - start):
                for page in range(PAGES + 1):
                    buf[local][page].fill_((start + local) * 1000 + group * 100 + page)
        case = {"pp_size": 2, "pp_rank": rank, "mla": True, "custom_mem_pool": False,
                "model_path": MODEL_PATHS[str(index)], "src_ptrs": [], "item_lens": [],
                "start_layer": start, "end_layer": end, "groups": 0, "total_kv_layers": 0,
                "prefill_draft_layers": 0}
        manager = driver.build_manager(conn, case, VERSION, True)
        manager.kv_args = kv_args_for(prefill)
        manager.kv_args.pp_rank = rank
        manager.engine = CopyEngine()
        with concurrent.futures.ThreadPoolExecutor(1) as executor:
            status = manager.send_kvcache(
                "decode-session", torch.tensor(SRC_PAGES, dtype=torch.int32).numpy(),
                dst_ptrs, torch.tensor(DST_PAGES, dtype=torch.int32).numpy(), executor)
        assert status == 0, status
    wrong = []
    for group, buf in enumerate(buffers(decode)):
        for layer in range(LAYERS):
            for page in range(PAGES + 1):
                want = 0.0
                if page in DST_TO_SRC:
                    want = layer * 1000 + group * 100 + DST_TO_SRC[page]
                got = buf[layer][page]
                if not bool((got == want).all()):
                    wrong.append([group, layer, page, want, float(got.flatten()[0])])
    for group, buf in enumerate(buffers(draft)):
        if bool(buf.abs().sum() != 0):
            wrong.append(["draft", group])
    report[str(index)] = {"groups": len(buffers(decode)), "wrong": wrong[:20],
                          "wrong_count": len(wrong)}
report["descriptors"] = CopyEngine.descriptors
report["calls"] = CopyEngine.calls
print("REPORT " + json.dumps(report))
"""


_PAGES_LINES = """LAYERS, STAGES, PAGES = 7, [(0, 3), (3, 7)], 16
SRC_PAGES = [3, 4, 5, 9, 1, 12, 13, 7]
DST_PAGES = [2, 3, 11, 12, 13, 5, 6, 15]
"""


def run_allocation(rng: random.Random, pages: int, pool: int, max_run: int = 16) -> list[int]:
    """``pages`` distinct pages of a ``pool``, handed out in runs of 1..max_run consecutive
    pages at random places (a gap after each run, so two runs never touch)."""
    lengths: list[int] = []
    while sum(lengths) < pages:
        lengths.append(rng.randint(1, max_run))
    lengths[-1] -= sum(lengths) - pages
    slots = rng.sample(range(pool // (max_run + 1)), len(lengths))
    return [
        p for slot, n in zip(slots, lengths, strict=True) for p in range(slot * 17, slot * 17 + n)
    ]


#: the releases whose upstream send_kvcache misplaces MLA KV under PP
UPSTREAM_MISPLACES = ("0.5.10", "0.5.11")


def _model_paths(root: Path) -> dict[str, str]:
    """The two models' directories under ``root``: MLA (DeepSeek-V3) and with an index
    head (V3.2), keyed as ``SCRIPT``'s loop names them."""
    root.mkdir(parents=True, exist_ok=True)
    return {
        "None": harness.mla_model(root / "mla", 7, 1, index=False),
        "2": harness.mla_model(root / "dsa", 7, 1, index=True),
    }


def _job(env: harness.SGLangEnv, mode: str) -> Job:
    paths = _model_paths(env.workdir / f"kv-lands-{mode}")
    return Job("kv-lands", SCRIPT, {"VERSION_TEXT": env.version, "MODEL_PATHS": paths})


@release_check("patched")
def _patched_jobs(env: harness.SGLangEnv) -> list[Job]:
    return [_job(env, "patched")]


@release_check("upstream")
def _upstream_jobs(env: harness.SGLangEnv) -> list[Job]:
    return [_job(env, "upstream")] if env.version in UPSTREAM_MISPLACES else []


def _report(checks: ReleaseChecks, version: str, mode: str) -> dict[str, Any]:
    result = checks.result(version, mode, "kv-lands")
    if result.report is None:
        return {"error": {"stderr": (result.error or result.stdout)[-3000:]}}
    return dict(result.report)


def test_patched_send_puts_every_page_in_the_same_layer_and_group(
    env: harness.SGLangEnv, release_checks: ReleaseChecks
) -> None:
    report = _report(release_checks, env.version, "patched")
    assert "error" not in report, report
    assert report["None"] == {"groups": 2, "wrong": [], "wrong_count": 0}
    assert report["2"] == {"groups": 3, "wrong": [], "wrong_count": 0}


@pytest.mark.parametrize("version", UPSTREAM_MISPLACES)
def test_upstream_0_5_10_and_0_5_11_misplace_mla_kv_under_pp(
    version: str, release_checks: ReleaseChecks
) -> None:
    report = _report(release_checks, version, "upstream")
    misplaced = "error" in report or any(r["wrong_count"] for r in report.values())
    assert misplaced, report


def _lands(
    env: harness.SGLangEnv, tmp_path: Path, pool: int, src: list[int], dst: list[int]
) -> dict[str, Any]:
    """``SCRIPT`` with a pool of ``pool`` pages and the request's pages ``src`` (prefill)
    and ``dst`` (decode), in its own interpreter with the real memfabric-hybrid binding on
    the path: asserts every byte landed in the same layer, group and page as page-by-page
    copying would put it, in both models; returns the report."""
    memfabric = harness.ensure_memfabric()
    script = SCRIPT.replace(
        _PAGES_LINES,
        f"LAYERS, STAGES, PAGES = 7, [(0, 3), (3, 7)], {pool}\n"
        f"SRC_PAGES = {src!r}\nDST_PAGES = {dst!r}\n",
    )
    assert script != SCRIPT
    out, report = harness.run_report(
        (env.patched, env.pristine, memfabric),
        script,
        VERSION_TEXT=env.version,
        MODEL_PATHS=_model_paths(tmp_path),
    )
    assert report is not None, out.stderr[-3000:]
    assert report["None"] == {"groups": 2, "wrong": [], "wrong_count": 0}
    assert report["2"] == {"groups": 3, "wrong": [], "wrong_count": 0}
    return dict(report)


def test_patched_send_coalesces_realistic_runs_and_every_byte_lands_via_the_real_binding(
    sglang_envs: harness.Envs, tmp_path: Path
) -> None:
    """Pages in runs of 1–16 on both sides (seeded): adjacent pages go as one longer
    descriptor, the real memfabric-hybrid binding accepts every batch, and every byte
    lands in the same layer, group and page as page-by-page copying would put it."""
    env = sglang_envs.get("0.5.23")
    rng = random.Random(14)
    pool, request = 220, 60
    src, dst = run_allocation(rng, request, pool), run_allocation(rng, request, pool)
    runs_on_both = 1 + sum(
        1 for i in range(1, request) if (src[i], dst[i]) != (src[i - 1] + 1, dst[i - 1] + 1)
    )
    assert runs_on_both < request / 2  # the allocation really coalesces
    report = _lands(env, tmp_path, pool, src, dst)
    # per model: each PP stage sends its layers' entries once per run (2 and 3 groups)
    assert report["descriptors"] == runs_on_both * 7 * (2 + 3)


def test_a_request_sent_in_several_engine_batches_lands_every_byte_via_the_real_binding(
    sglang_envs: harness.Envs, tmp_path: Path
) -> None:
    """A fully fragmented request of 3,000 pages is more descriptors per PP stage than one
    engine batch holds (``BATCH_DESCRIPTORS``): the patched connector hands it over in
    several batches, the real binding accepts each, and every byte lands where
    page-by-page copying would put it."""
    from ascend_pd_runtime.transfer_plan import BATCH_DESCRIPTORS

    env = sglang_envs.get("0.5.23")
    rng = random.Random(25)
    request, pool = 3000, 6000
    src = rng.sample(range(0, pool, 2), request)  # no two neighbours consecutive
    dst = rng.sample(range(1, pool, 2), request)
    report = _lands(env, tmp_path, pool, src, dst)
    # one descriptor per page and entry; each stage's entries in batches of whole entries
    entries = [groups * layers for groups in (2, 3) for layers in (3, 4)]
    assert report["descriptors"] == request * sum(entries)
    per_batch = BATCH_DESCRIPTORS // request
    assert report["calls"] == sum(-(-e // per_batch) for e in entries) > len(entries)
