"""The operator process loads only what it needs: its memory goal (< 100 MiB with 100
deployments, bench/results.md) has no room for numpy, which only the runtime's
connector uses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROGRAM = """
import sys, yaml
from ascend_pd_operator.wiring import run_cli
from ascend_pd_operator.wiring import handlers
from ascend_pd_operator.wiring import reconciler
from ascend_pd_operator.kubeio import leader
from ascend_pd_operator.kubeio import health
from ascend_pd_operator.kubeio import metrics
from ascend_pd_operator.wiring.render_cli import render

docs = list(yaml.safe_load_all(open(sys.argv[1])))
resource = next(d for d in docs if d and d.get("kind") == "PDDeployment")
configmaps = [d for d in docs if d and d.get("kind") == "ConfigMap"]
code, manifests, message = render(resource, None, "default", configmaps)
assert code == 0, message
layout_cm = [m for m in manifests if m["kind"] == "ConfigMap" and "transfers" in str(m)]
assert layout_cm, "the kv-layout ConfigMap (with its transfers) was not built"
print(sorted(m for m in sys.modules if m == "numpy" or m.startswith("numpy.")))
"""


def test_the_operator_builds_a_whole_plan_without_numpy():
    example = ROOT / "examples" / "deepseek-v3-pp2.yaml"
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(example)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"the operator imported numpy: {done.stdout[:200]}"
