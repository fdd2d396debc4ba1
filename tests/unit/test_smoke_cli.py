import json
import subprocess
import sys


def test_plan_cli_json_exit_zero() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ascend_pd_operator.wiring.cli",
            "plan",
            "--model-config",
            "deepseek-v3",
            "--prefill-pp",
            "2",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [(s["start_layer"], s["end_layer"]) for s in doc["prefill"]["stages"]] == [
        (0, 30),
        (30, 61),
    ]
