"""The SGLang harness venv, built from PyPI alone (``sglang_harness.venv_steps``).

What it must be on a machine with no GPU and only PyPI: torch runs the CPU ops SGLang's
pools and the connector use, every NVIDIA wheel it holds is one ``import torch`` loads
(nothing of the several GB torch's metadata would pull), and pip, asked again for the
pinned set, wants nothing more (no resolution reads torch's metadata).
"""

from __future__ import annotations

import json
import subprocess

import pytest
import sglang_harness as harness

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(900)]

TORCH_ON_CPU = """
import json, os, re, importlib.metadata as md
import torch
a = torch.arange(6, dtype=torch.bfloat16).view(2, 3)
product = (a @ a.T).float().tolist()
pool = torch.zeros((4, 8), dtype=torch.bfloat16)
pool[1:3] = torch.full((2, 8), 1.5, dtype=torch.bfloat16)
loaded = {os.path.realpath(line.split()[-1]) for line in open("/proc/self/maps")
          if "/site-packages/" in line}
wheels = {}
for dist in md.distributions():
    name = dist.metadata["Name"]
    if name.startswith(("nvidia-", "cuda-")):
        files = {os.path.realpath(dist.locate_file(f)) for f in dist.files or ()}
        wheels[name] = sorted(os.path.basename(f) for f in files & loaded)
triton = [r for r in md.requires("torch") or () if re.match(r"triton\\b", r)]
print("REPORT " + json.dumps({
    "product": product, "pool": float(pool.sum()), "cuda_build": torch.version.cuda,
    "wheels": wheels, "torch_triton": triton, "triton": md.version("triton"),
    "torch": torch.__version__,
}))
"""


def test_torch_runs_on_cpu_with_only_the_nvidia_wheels_it_loads() -> None:
    harness.ensure_venv()
    out, report = harness.run_report((), TORCH_ON_CPU)
    assert report is not None, out.stderr[-3000:]
    # [[0, 1, 2], [3, 4, 5]] times its transpose, by hand
    assert report["product"] == [[5.0, 14.0], [14.0, 50.0]]
    assert report["pool"] == 2 * 8 * 1.5
    # each NVIDIA wheel is there for a library the import maps; a CPU wheel needs none
    unused = sorted(name for name, files in report["wheels"].items() if not files)
    assert unused == [], report["wheels"]
    if report["cuda_build"] is None:
        assert report["wheels"] == {}
    # torch's own triton pin, where it has one
    for pin in report["torch_triton"]:
        assert pin.split(";")[0].strip() == f"triton=={report['triton']}", pin
    built = harness.BUILD_RECORD.read_text() if harness.BUILD_RECORD.exists() else "no record"
    harness.SUMMARY.append(
        f"harness venv: torch {report['torch']} with {len(report['wheels'])} NVIDIA wheels, "
        f"triton {report['triton']}; {built}"
    )


def test_pip_asked_again_for_the_pinned_set_wants_nothing() -> None:
    harness.ensure_venv()
    resolved = harness.venv_steps(harness.WHEELS)[-1]
    cmd = [str(harness.PYTHON), "-m", "pip", "install", "--dry-run", "-q", "--report", "-"]
    done = subprocess.run([*cmd, *resolved], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    wanted = [i["metadata"]["name"] for i in json.loads(done.stdout)["install"]]
    assert wanted == []
