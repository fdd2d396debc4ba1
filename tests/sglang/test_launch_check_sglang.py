"""The launcher's pre-exec check on the real wheels: SGLang's own parser refuses a bad
command before the model loads, with exit 5 and a termination message naming the argument.

The pod's env comes from the operator's builders (example ``deepseek-v3-pp2``); only
``ASCEND_PD_EXTRA_ARGS`` is replaced, as by a StatefulSet written before the operator's
static checks refused such extraArgs (they do now) or by a flag a release dropped.
``ascend-pd-runtime launch --check`` runs in the harness interpreter with the release on
its path, as in the runtime image (one Python holds SGLang and ascend-pd-runtime).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import sglang_harness as harness
from argv_cases import resources

from ascend_pd_operator.wiring import render_cli
from ascend_pd_runtime import env_contract
from ascend_pd_runtime.plan_cli import example_config

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(600)]


def pod_env(version: str, tmp: Path, extra_args: list[str]) -> dict[str, str]:
    """Pod dsv3-prefill-0-0's env as the operator writes it, with ``extra_args``."""
    resource, _, _ = resources(version)["example-deepseek-v3-pp2"]
    code, manifests, message = render_cli.render(resource, None, None)
    assert code == render_cli.EXIT_OK, message
    layout = next(m for m in manifests if m["metadata"]["name"].endswith("-kv-layout"))
    (tmp / "plan.json").write_text(layout["data"][env_contract.KV_LAYOUT_KEY])
    (tmp / "model").mkdir(exist_ok=True)
    (tmp / "model" / "config.json").write_text(example_config("deepseek-v3").read_text())
    sts = next(
        m
        for m in manifests
        if m["kind"] == "StatefulSet" and m["metadata"]["name"] == "dsv3-prefill-0"
    )
    container = sts["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env.update(
        {
            env_contract.MODEL_PATH: str(tmp / "model"),
            env_contract.KV_LAYOUT_FILE: str(tmp / "plan.json"),
            env_contract.POD_NAME: "dsv3-prefill-0-0",
            env_contract.EXTRA_ARGS: json.dumps(extra_args),
            env_contract.TERMINATION_LOG: str(tmp / "termination-log"),
        }
    )
    return env


def launch_check(version: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    site = harness.ensure_version(version)
    # The cluster's names resolve nowhere here: the leader and the store on localhost.
    env = {
        **env,
        env_contract.DIST_INIT_ADDR: "localhost:5757",
        env_contract.STORE_URL: "tcp://localhost:24666",
    }
    env = {**harness.venv_env(site), **env}
    return subprocess.run(
        [str(harness.PYTHON), "-m", "ascend_pd_runtime.cli", "launch", "--check",
         "--resolve-timeout", "5"],
        env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("version", "extra", "parser_says", "argument"),
    [
        ("0.5.23", ["--foo\n--tp-size 4"], "unrecognized arguments: --foo\n--tp-size 4",
         "'--foo\\n--tp-size 4'"),
        ("0.5.23", ["--cuda-graph-max-bs", "8"],
         "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
         "--cuda-graph-max-bs-prefill", "'--cuda-graph-max-bs'"),
        ("0.5.10", ["--mem-fraction-static", "most"],
         "argument --mem-fraction-static: invalid float value: 'most'",
         "'--mem-fraction-static'"),
    ],
)  # fmt: skip
def test_refused_command_exits_5_naming_the_argument(
    version: str, extra: list[str], parser_says: str, argument: str, tmp_path: Path
) -> None:
    done = launch_check(version, pod_env(version, tmp_path, extra))
    assert done.returncode == env_contract.EXIT_ARGS_REFUSED, done.stderr[-3000:]
    message = (tmp_path / "termination-log").read_text()
    assert message.startswith(f"SGLang {version} refused the command line: {parser_says}")
    assert f"Offending argument {argument}, from spec.prefill.extraArgs" in message
    assert message in done.stderr


def test_a_flag_one_release_refuses_is_accepted_by_an_older_one(tmp_path: Path) -> None:
    """--cuda-graph-max-bs: valid in 0.5.10, ambiguous in 0.5.23 (see the test above)."""
    done = launch_check("0.5.10", pod_env("0.5.10", tmp_path, ["--cuda-graph-max-bs", "8"]))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SGLang's parser accepts the command" in done.stderr
    assert not (tmp_path / "termination-log").exists()


def test_every_example_pod_passes_the_check_on_the_newest_release(tmp_path: Path) -> None:
    done = launch_check("0.5.23", pod_env("0.5.23", tmp_path, ["--mem-fraction-static", "0.8"]))
    assert done.returncode == 0, done.stderr[-3000:]


def test_an_image_with_another_release_is_refused_before_the_parser(tmp_path: Path) -> None:
    """The spec names 0.5.23, the interpreter holds the real 0.5.10 wheel: the launcher reads
    the version from its package metadata and exits 8 naming both, without asking the
    parser (which would accept this command: the test above)."""
    done = launch_check("0.5.10", pod_env("0.5.23", tmp_path, ["--mem-fraction-static", "0.8"]))
    assert done.returncode == env_contract.EXIT_SGLANG_VERSION, done.stderr[-3000:]
    message = (tmp_path / "termination-log").read_text()
    assert message.startswith(
        "SGLang version mismatch: spec.runtime.sglangVersion is 0.5.23 "
        f"(ASCEND_PD_SGLANG_VERSION), but this image's SGLang is 0.5.10 ({harness.PYTHON})"
    ), message
    assert message in done.stderr
    assert "parser" not in done.stderr.replace(message, "")
