"""The env contract round-trips and rejects malformed values by name."""

from __future__ import annotations

import pytest

from ascend_pd_runtime import env_contract as ec
from ascend_pd_runtime.errors import BadInput


def sample() -> ec.LaunchEnv:
    return ec.LaunchEnv(
        role="prefill",
        deployment="dsv3",
        namespace="llm",
        instance=1,
        pod_name="dsv3-prefill-1-1",
        pod_ip="10.0.0.5",
        model_path="/models/DeepSeek-V3",
        served_model_name="deepseek-v3",
        nnodes=2,
        dist_init_addr="dsv3-prefill-1-0.dsv3-prefill-1.llm.svc:5757",
        tp_size=8,
        pp_size=2,
        dp_size=1,
        devices_per_node=8,
        port=30000,
        bootstrap_port=8999,
        transfer_backend="ascend",
        transfer_protocol="sdma",
        store_url="tcp://dsv3-prefill-0-0.dsv3-prefill-0.llm.svc:24666",
        hccl_socket_ifname="",
        prefill_pp=2,
        decode_pp=1,
        layer_partition=(30, 31),
        sglang_version="0.5.23",
        speculative_algorithm="NEXTN",
        speculative_roles=("decode",),
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
        kv_layout_file="/etc/ascend-pd/kv-layout/plan.json",
        kv_fingerprint="abc",
        total_kv_layers=61,
        kv_buf_groups=2,
        extra_args=("--mem-fraction-static", "0.8", "--x=a,b"),
    )


def environ_of(values: ec.LaunchEnv) -> dict[str, str]:
    env = ec.launch_env(values)
    env[ec.POD_NAME] = values.pod_name
    env[ec.POD_IP] = values.pod_ip
    return env


def test_round_trip() -> None:
    values = sample()
    assert ec.read_launch_env(environ_of(values)) == values
    assert all(k.startswith(ec.PREFIX) for k in ec.launch_env(values))


def test_node_rank_from_pod_name_and_speculative_per_role() -> None:
    got = ec.read_launch_env(environ_of(sample()))
    assert got.node_rank == 1 and not got.is_leader
    assert not got.speculative_here  # prefill is not among the roles
    request = got.layout_request()
    assert request.prefill_pp == 2 and request.layer_partition == (30, 31)
    assert request.speculative == "nextn" and request.speculative_roles == ("decode",)


@pytest.mark.parametrize(
    ("name", "value", "needle"),
    [
        (ec.TP_SIZE, "eight", "ASCEND_PD_TP_SIZE 'eight' is invalid"),
        (ec.ROLE, "router", "ASCEND_PD_ROLE 'router' is invalid"),
        (ec.BOOTSTRAP_PORT, "70000", "at most 65535"),
        (ec.DIST_INIT_ADDR, "nohost", "expected host:port"),
        (ec.EXTRA_ARGS, '{"a": 1}', "JSON array of strings"),
        (ec.LAYER_PARTITION, "30;31", "ASCEND_PD_LAYER_PARTITION"),
        (ec.POD_NAME, "leader", "<statefulset>-<ordinal>"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str, needle: str) -> None:
    env = environ_of(sample())
    env[name] = value
    with pytest.raises(BadInput, match=needle):
        ec.read_launch_env(env).node_rank  # noqa: B018


def test_missing_variable() -> None:
    env = environ_of(sample())
    del env[ec.NNODES]
    with pytest.raises(BadInput, match="ASCEND_PD_NNODES is not set"):
        ec.read_launch_env(env)


def test_inspect_result_round_trip() -> None:
    raw = {"num_hidden_layers": 61, "kv_lora_rank": 512, "vocab_size": 129280}
    subset = ec.model_config_subset(raw)
    assert subset == {"num_hidden_layers": 61, "kv_lora_rank": 512}
    assert ec.decode_inspect_result(ec.encode_inspect_result(config=subset)) == (subset, "")
    msg = "/models/x/config.json: model config file not found"
    assert ec.decode_inspect_result(ec.encode_inspect_result(error=msg)) == (None, msg)
    assert ec.decode_inspect_result("Error: boom") == (None, "Error: boom")


def test_every_variable_is_documented() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "operator.md").read_text()
    names = [
        v
        for k, v in vars(ec).items()
        if isinstance(v, str) and v.startswith(ec.PREFIX) and k != "PREFIX"
    ]
    assert len(names) > 30
    missing = [n for n in names if f"`{n}`" not in doc]
    assert not missing, f"docs/operator.md does not document {missing}"
