"""Speculative decoding on both roles, prefill PP 1, small models: KV lands, nothing refused.

SGLang 0.5.12–0.5.21 record ``kv_buf_groups = len(kv_data_ptrs) // layer_num``
after the draft pool's pointers were appended to the prefill's list. When buffer
groups × draft layers reaches the target layers, that quotient is higher than the
real group count (2 layers + 1 MTP with 2 groups records 3). Per version, real
``NPUMLATokenToKVPool``s (target and draft, on CPU) of such models get ``KVArgs``
from SGLang's own set-up code (``setup_state_kv_args``; the start-up hook on
0.5.10/11); the patched ``send_kvcache`` copies a fragmented request's bytes into a
decode holding the same target and draft layers. Every decode page of the request,
in every target and draft layer and buffer group, must hold the prefill value of the
same layer, group and page, and nothing else may change.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sglang_harness as harness
from release_checks import Job, ReleaseChecks, release_check

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(1800)]

#: (target layers, MTP layers, buffer groups): all but the last break SGLang's quotient
#: (groups × (layers + MTP) // layers exceeds groups); the last is a control.
MODELS = ((2, 1, 2), (3, 1, 3), (1, 1, 2), (4, 2, 2), (2, 2, 3), (7, 1, 2))


def test_the_small_models_break_sglangs_quotient() -> None:
    broken = [m for m in MODELS if m[2] * (m[0] + m[1]) // m[0] > m[2]]
    assert broken == list(MODELS[:-1])


SCRIPT = r"""
import concurrent.futures, ctypes, json, sys
import torch
sys.path.insert(0, TESTS)
import driver
from mla_pools import KVArgs, buffers, conn, pointers, pool, version_setup

PAGES = 16
SRC_PAGES = [3, 4, 5, 9, 1, 12, 13, 7]
DST_PAGES = [2, 3, 11, 12, 13, 5, 6, 15]
VERSION = driver.version_tuple(VERSION_TEXT)

def kv_args_for(target, draft, layers):
    # As SGLang's prefill (and decode) set up KVArgs: the draft pool's pointers are
    # appended to the target's, then the version's own set-up code runs.
    args = KVArgs()
    args.kv_data_ptrs, args.kv_data_lens, args.kv_item_lens = pointers(target, draft)
    args.prefill_start_layer = target.start_layer
    args.prefill_end_layer = target.end_layer
    return version_setup(args, target, draft, layers, VERSION)

class CopyEngine:
    def batch_transfer_sync(self, session_id, src, dst, lengths):
        for s, d, n in zip(src, dst, lengths, strict=True):
            ctypes.memmove(d, s, n)
        return 0

report = {}
for name, (layers, mtp, groups, model_path) in MODELS.items():
    index = 2 if groups == 3 else None
    decode, decode_draft = pool(0, layers, index, PAGES), pool(layers, mtp, index, PAGES)
    dst_ptrs = kv_args_for(decode, decode_draft, layers).kv_data_ptrs
    prefill, prefill_draft = pool(0, layers, index, PAGES), pool(layers, mtp, index, PAGES)
    for offset, p in ((0, prefill), (layers, prefill_draft)):
        for group, buf in enumerate(buffers(p)):
            for local in range(p.layer_num):
                for page in range(PAGES + 1):
                    buf[local][page].fill_((offset + local) * 1000 + group * 100 + page)
    case = {"pp_size": 1, "pp_rank": 0, "mla": True, "custom_mem_pool": False,
            "model_path": model_path, "src_ptrs": [], "item_lens": [], "start_layer": 0,
            "end_layer": layers, "groups": 0, "total_kv_layers": 0, "prefill_draft_layers": 0}
    manager = driver.build_manager(conn, case, VERSION, True)
    manager.kv_args = kv_args_for(prefill, prefill_draft, layers)
    manager.kv_args.pp_rank = 0
    manager.engine = CopyEngine()
    errors = driver.Collect()
    import logging
    logging.getLogger("ascend_pd_runtime").addHandler(errors)
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        try:
            status = manager.send_kvcache(
                "decode-session", torch.tensor(SRC_PAGES, dtype=torch.int32).numpy(),
                dst_ptrs, torch.tensor(DST_PAGES, dtype=torch.int32).numpy(), executor)
        except Exception as exc:
            status = f"raised {type(exc).__name__}: {exc}"
    logging.getLogger("ascend_pd_runtime").removeHandler(errors)
    wrong = []
    for offset, p in ((0, decode), (layers, decode_draft)):
        for group, buf in enumerate(buffers(p)):
            for local in range(p.layer_num):
                for page in range(PAGES + 1):
                    want = 0.0
                    if page in DST_PAGES:
                        src = SRC_PAGES[DST_PAGES.index(page)]
                        want = (offset + local) * 1000 + group * 100 + src
                    got = buf[local][page]
                    if not bool((got == want).all()):
                        wrong.append([group, offset + local, page, want, float(got.flatten()[0])])
    report[name] = {"status": status, "recorded_groups": manager.kv_args.kv_buf_groups,
                    "pointers": len(manager.kv_args.kv_data_ptrs), "groups": len(buffers(decode)),
                    "wrong": wrong[:10], "wrong_count": len(wrong),
                    "logged_errors": errors.messages}
print("REPORT " + json.dumps(report))
"""


def _name(layers: int, mtp: int, groups: int) -> str:
    return f"{layers}L+{mtp}MTP×{groups}g"


def _model_dir(root: Path, layers: int, mtp: int, groups: int) -> str:
    path = root / _name(layers, mtp, groups).replace("×", "x")
    return harness.mla_model(path, layers, mtp, index=groups == 3)


@release_check("patched")
def _jobs(env: harness.SGLangEnv) -> list[Job]:
    root = env.workdir / "spec-small-models"
    root.mkdir(exist_ok=True)
    models = {_name(*m): [*m, _model_dir(root, *m)] for m in MODELS}
    return [Job("spec-small-models", SCRIPT, {"VERSION_TEXT": env.version, "MODELS": models})]


def test_pp1_prefill_with_draft_sends_every_layer_of_small_models(
    env: harness.SGLangEnv, release_checks: ReleaseChecks
) -> None:
    job = release_checks.result(env.version, "patched", "spec-small-models")
    assert job.report is not None, (job.error or job.stdout)[-3000:]
    report = job.report
    quotient_versions = (0, 5, 12) <= env.version_tuple <= (0, 5, 21)
    for layers, mtp, groups in MODELS:
        result = report[_name(layers, mtp, groups)]
        pointers = groups * (layers + mtp)
        assert (result["pointers"], result["groups"]) == (pointers, groups)
        # The test drives the defect: what this version records is SGLang's own value.
        recorded = pointers // layers if quotient_versions else groups
        assert result["recorded_groups"] == recorded, result
        assert result["status"] == 0, f"{env.version} {_name(layers, mtp, groups)}: {result}"
        assert result["logged_errors"] == []
        assert result["wrong_count"] == 0, result
