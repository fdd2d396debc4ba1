import json
import shutil
from pathlib import Path

import pytest

from ascend_pd_runtime import env_contract
from ascend_pd_runtime.cli import main as runtime_cli
from ascend_pd_runtime.env_contract import LaunchEnv, launch_env
from ascend_pd_runtime.errors import BadInput, LayoutMismatch
from ascend_pd_runtime.launcher import plan_launch, retrying_resolver
from ascend_pd_runtime.layout import LayoutRequest, compute_layout
from ascend_pd_runtime.model_facts import load_model_facts
from ascend_pd_runtime.plan import plan_document
from ascend_pd_runtime.plan_cli import example_config
from tests.unit.runtime.contract_skews import SKEWS

HOSTS = {"dsv3-prefill-0-0.dsv3-prefill-0.llm.svc": "10.0.0.5", "store": "10.0.0.5"}


def resolver(host):
    return HOSTS.get(host, "10.9.9.9")


def _write_model(tmp_path, example):
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(example_config(example), model / "config.json")
    return model


def _env(
    tmp_path,
    *,
    role="prefill",
    pod="dsv3-prefill-0-1",
    example="deepseek-v3",
    plan_example=None,
    request=None,
    **overrides,
):
    request = request or LayoutRequest(
        prefill_pp=2, speculative="nextn", speculative_roles=("decode",)
    )
    model = _write_model(tmp_path, example)
    facts = load_model_facts(example_config(plan_example or example))
    plan = plan_document(compute_layout(facts, request))
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan))
    values = dict(
        role=role,
        deployment="dsv3",
        namespace="llm",
        instance=0,
        pod_name=pod,
        pod_ip="",
        model_path=str(model),
        served_model_name="deepseek-v3",
        nnodes=2,
        dist_init_addr="dsv3-prefill-0-0.dsv3-prefill-0.llm.svc:5000",
        tp_size=8 if role == "prefill" else 16,
        pp_size=request.prefill_pp if role == "prefill" else request.decode_pp,
        dp_size=1 if role == "prefill" else 16,
        devices_per_node=8,
        port=30000,
        bootstrap_port=8998 if role == "prefill" else None,
        transfer_backend="ascend",
        transfer_protocol="sdma",
        store_url="tcp://store:24666",
        hccl_socket_ifname="",
        prefill_pp=request.prefill_pp,
        decode_pp=request.decode_pp,
        layer_partition=request.layer_partition,
        sglang_version=request.sglang_version,
        speculative_algorithm=request.speculative.upper(),
        speculative_roles=request.speculative_roles,
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
        kv_layout_file=str(plan_file),
        kv_fingerprint=plan["fingerprint"],
        total_kv_layers=plan["total_kv_layers"],
        kv_buf_groups=plan["model"]["kv_buf_groups"],
        extra_args=("--mem-fraction-static", "0.8"),
    )
    values.update(overrides)
    env = launch_env(LaunchEnv(**values))
    env[env_contract.POD_NAME] = pod
    return env


def _flag(argv, name):
    return argv[argv.index(name) + 1]


def test_prefill_second_node_command(tmp_path):
    launch = plan_launch(_env(tmp_path), resolver, python="python3")
    argv = launch.argv
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    assert _flag(argv, "--disaggregation-mode") == "prefill"
    assert _flag(argv, "--disaggregation-bootstrap-port") == "8998"
    assert _flag(argv, "--node-rank") == "1"
    assert _flag(argv, "--nnodes") == "2"
    assert _flag(argv, "--pp-size") == "2"
    assert _flag(argv, "--dist-init-addr") == "10.0.0.5:5000"
    assert "--speculative-algorithm" not in argv  # speculative runs on decode only
    assert argv[-2:] == ["--mem-fraction-static", "0.8"]
    assert launch.env["ASCEND_MF_STORE_URL"] == "tcp://10.0.0.5:24666"
    assert launch.env["ASCEND_MF_TRANSFER_PROTOCOL"] == "sdma"
    assert "SGLANG_PP_LAYER_PARTITION" not in launch.env
    assert "pp1[30,61)" in launch.summary
    assert "total_kv_layers=61" in launch.summary


def test_decode_runs_speculative(tmp_path):
    launch = plan_launch(
        _env(tmp_path, role="decode", pod="dsv3-decode-0-0"), resolver, python="py"
    )
    argv = launch.argv
    assert _flag(argv, "--speculative-algorithm") == "NEXTN"
    assert _flag(argv, "--speculative-num-steps") == "3"
    assert _flag(argv, "--dp-size") == "16"
    assert "--disaggregation-bootstrap-port" not in argv
    assert "draft=1" in launch.summary


def test_explicit_partition_is_exported(tmp_path):
    request = LayoutRequest(prefill_pp=2, layer_partition=(31, 30))
    launch = plan_launch(_env(tmp_path, request=request), resolver, python="py")
    assert launch.env["SGLANG_PP_LAYER_PARTITION"] == "31,30"
    assert "pp1[31,61)" in launch.summary


def test_wrong_model_on_this_side_names_both_values(tmp_path):
    env = _env(tmp_path, example="deepseek-v3.2", plan_example="deepseek-v3")
    with pytest.raises(LayoutMismatch) as err:
        plan_launch(env, resolver, python="py")
    message = str(err.value)
    assert "kv_buf_groups: the model here gives 3, the operator expects 2" in message


def test_stale_layout_configmap_is_refused(tmp_path):
    env = _env(tmp_path)
    plan_file = Path(env[env_contract.KV_LAYOUT_FILE])
    doc = json.loads(plan_file.read_text())
    doc["prefill"]["stages"][0]["end_layer"] = 31
    doc["prefill"]["stages"][1]["start_layer"] = 31
    plan_file.write_text(json.dumps(doc))
    with pytest.raises(LayoutMismatch, match=r"prefill stages: the model here gives \[\[0, 30\]"):
        plan_launch(env, resolver, python="py")


def test_incompatible_layout_refuses_to_start(tmp_path):
    env = _env(tmp_path, transfer_backend="mooncake")
    with pytest.raises(LayoutMismatch, match="mooncake"):
        plan_launch(env, resolver, python="py")


def test_missing_layout_file_is_bad_input(tmp_path):
    env = _env(tmp_path)
    env[env_contract.KV_LAYOUT_FILE] = str(tmp_path / "nope.json")
    with pytest.raises(BadInput, match="KV layout file is missing"):
        plan_launch(env, resolver, python="py")


def test_dry_run_cli_and_mismatch_exit_code(tmp_path, monkeypatch, capsys):
    for key, value in _env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr("ascend_pd_runtime.launcher.retrying_resolver", lambda timeout: resolver)
    assert runtime_cli(["launch", "--dry-run", "--python", "py"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["command"][0] == "py"
    assert doc["env"]["ASCEND_MF_STORE_URL"] == "tcp://10.0.0.5:24666"
    monkeypatch.setenv(env_contract.TOTAL_KV_LAYERS, "60")
    assert runtime_cli(["launch", "--dry-run"]) == 3
    assert (
        "ASCEND_PD_TOTAL_KV_LAYERS (total_kv_layers): the model here gives 61, the operator "
        "expects 60" in capsys.readouterr().err
    )


def test_resolver_times_out_with_host_named():
    resolve = retrying_resolver(timeout=0.0, interval=0.0)
    with pytest.raises(TimeoutError, match=r"'no-such-host\.invalid' did not resolve"):
        resolve("no-such-host.invalid")
    assert resolve("localhost") in ("127.0.0.1", "::1")


@pytest.mark.parametrize(
    ("written", "named"),
    SKEWS,
)
def test_launcher_refuses_an_env_contract_it_does_not_speak(
    tmp_path, monkeypatch, capsys, written, named
):
    """The real entry point exits 6 naming the pod's version and the launcher's, before it
    reads any other variable, and leaves the reason as the termination message."""
    env = _env(tmp_path)
    # A variable a newer contract might have renamed: the version must be judged first.
    del env[env_contract.MODEL_PATH]
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if written is None:
        monkeypatch.delenv("ASCEND_PD_CONTRACT_VERSION")
    else:
        monkeypatch.setenv("ASCEND_PD_CONTRACT_VERSION", written)
    termination = tmp_path / "termination-log"
    monkeypatch.setenv("ASCEND_PD_TERMINATION_LOG", str(termination))
    monkeypatch.setattr("ascend_pd_runtime.launcher.retrying_resolver", lambda timeout: resolver)
    assert runtime_cli(["launch", "--python", "py"]) == 6
    err = capsys.readouterr().err
    message = termination.read_text()
    assert message.startswith("env contract version mismatch: ")
    assert message in err
    assert named in message
    assert "this runtime image's launcher speaks version 1" in message
    assert "ASCEND_PD_MODEL_PATH" not in message


def test_the_operator_side_writes_the_version_the_launcher_speaks(tmp_path):
    env = _env(tmp_path)
    assert env["ASCEND_PD_CONTRACT_VERSION"] == "1"
    assert plan_launch(env, resolver, python="py").argv[0] == "py"
