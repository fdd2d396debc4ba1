"""The launcher's NPU preflight, run for real on this machine: fake device files, a fake
``hccn_tool`` (a shell script printing what the real one prints), local sockets, and the
launcher's own entry point writing its termination message."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ascend_pd_dev.kubelet_sim.npu import write_node
from ascend_pd_runtime import env_contract as ec
from ascend_pd_runtime.cli import main as runtime_cli
from ascend_pd_runtime.env_contract import LaunchEnv, read_launch_env
from ascend_pd_runtime.preflight import (
    PreflightFailed,
    Targets,
    judge_devices,
    parse_device_files,
    parse_hccn_conf,
    parse_link_status,
    parse_net_health,
    parse_visible_devices,
    run_preflight,
    tcp_answer,
    wait_reachable,
)
from tests.unit.runtime.fake_sglang import sglang_site
from tests.unit.runtime.test_launcher import _env

# --- what the real tools print, and parsing it -----------------------------------------

HCCN_CONF = """\
# written by the node's NPU network setup
address_0=192.168.100.2
netmask_0=255.255.255.0
netdetect_0=192.168.100.1
address_1 = 192.168.101.2
gateway_1=192.168.101.1
address_3=192.168.103.2
"""


def test_hccn_conf_addresses_by_device() -> None:
    assert parse_hccn_conf(HCCN_CONF) == {0: "192.168.100.2", 1: "192.168.101.2",
                                          3: "192.168.103.2"}  # fmt: skip
    assert parse_hccn_conf("") == {}


def test_link_and_net_health_outputs() -> None:
    assert parse_link_status("link status: UP\n") == "UP"
    assert parse_link_status("Link Status: down") == "DOWN"
    assert parse_link_status("Error: device 9 not found") == ""
    assert parse_net_health("net health status: Success\n") == "Success"
    assert parse_net_health("net health status: Receive timeout\n") == "Receive timeout"
    assert parse_net_health("nothing") == ""


def test_device_files_are_the_davinci_numbers_only() -> None:
    names = ["davinci3", "davinci_manager", "davinci10", "null", "davinci1", "hisi_hdc"]
    assert parse_device_files(names) == [1, 3, 10]


def test_visible_devices_are_logical_ascending_ids() -> None:
    assert parse_visible_devices("0,2,3") == [0, 2, 3]
    with pytest.raises(ValueError, match="not a device id"):
        parse_visible_devices("0, x")
    with pytest.raises(ValueError, match="ascending"):
        parse_visible_devices("3,1")


def test_device_judgement_names_the_absent_device() -> None:
    assert judge_devices([0, 1, 2, 3], None, 4, "/dev") == [0, 1, 2, 3]
    assert judge_devices([0, 1, 2, 3, 4, 5, 6, 7], None, 4, "/dev") == [0, 1, 2, 3]
    with pytest.raises(PreflightFailed) as info:
        judge_devices([0, 1, 2, 4, 5, 6, 7], None, 8, "/dev")
    assert info.value.reason == "DeviceMissing"
    assert "ASCEND_PD_DEVICES_PER_NODE (devicesPerNode) is 8" in info.value.message
    assert "/dev holds 7 NPU device files" in info.value.message
    assert "absent: davinci3" in info.value.message
    # ASCEND_RT_VISIBLE_DEVICES selects by logical id among the device files
    assert judge_devices([4, 5, 6, 7], "1,3", 2, "/dev") == [5, 7]
    with pytest.raises(PreflightFailed, match="names logical device 4"):
        judge_devices([4, 5, 6, 7], "0,4", 2, "/dev")
    with pytest.raises(PreflightFailed, match="makes 3 devices visible"):
        judge_devices([0, 1, 2, 3], "0,1,2", 2, "/dev")


# --- the checks on a fake node -----------------------------------------------------------


def contract(**overrides: object) -> LaunchEnv:
    values: dict[str, object] = dict(
        role="decode", deployment="d", namespace="n", instance=0, pod_name="d-decode-0-1",
        pod_ip="10.0.0.9", model_path="/m", served_model_name="", nnodes=2,
        dist_init_addr="d-decode-0-0.d-decode-0.n.svc:5757", tp_size=8, pp_size=1, dp_size=1,
        devices_per_node=4, port=30000, bootstrap_port=None, transfer_backend="ascend",
        transfer_protocol="sdma", store_url="tcp://store:24666", hccl_socket_ifname="",
        prefill_pp=1, decode_pp=1, layer_partition=(), sglang_version="0.5.23",
        speculative_algorithm="NONE", speculative_roles=(), speculative_num_steps=0,
        speculative_eagle_topk=0, speculative_num_draft_tokens=0, kv_layout_file="/k",
        kv_fingerprint="", total_kv_layers=61, kv_buf_groups=2,
        preflight_checks=ec.PREFLIGHT_CHECKS, preflight_timeout=3,
    )  # fmt: skip
    values.update(overrides)
    return LaunchEnv(**values)  # type: ignore[arg-type]


def answering(host: str, port: int, timeout: float) -> str | None:
    return None


NOWHERE = Targets()


def test_a_healthy_node_passes_every_check(tmp_path: Path) -> None:
    env = write_node(tmp_path, range(4))
    report = run_preflight(contract(), Targets(("10.0.0.5", 5757), ("10.0.0.6", 24666)), env,
                           connect=answering)  # fmt: skip
    assert report.passed == [
        "devices (davinci0, davinci1, davinci2, davinci3)",
        f"hccnConf ({tmp_path / 'hccn.conf'})",
        "links (davinci0, davinci1, davinci2, davinci3 UP)",
        "leader (10.0.0.5:5757)",
        "store (10.0.0.6:24666)",
    ]
    assert report.skipped == []


def test_a_link_down_names_the_device_and_the_value(tmp_path: Path) -> None:
    env = write_node(tmp_path, range(4), down={2})
    with pytest.raises(PreflightFailed) as info:
        run_preflight(contract(), NOWHERE, env)
    assert info.value.check == "links" and info.value.reason == "LinkDown"
    assert info.value.message.startswith("NPU preflight failed (LinkDown, check links): ")
    assert "device davinci2: hccn_tool -i 2 -link -g says link status DOWN" in info.value.message
    assert ec.preflight_reason(info.value.message) == "LinkDown"


def test_net_health_must_be_success_when_asked_for(tmp_path: Path) -> None:
    env = write_node(tmp_path, range(4), unhealthy={1})
    with pytest.raises(PreflightFailed, match="net health status Receive timeout"):
        run_preflight(contract(), NOWHERE, env)
    # without spec.preflight it is only reported: a node without a detection address says
    # something else than Success
    report = run_preflight(contract(preflight_checks=None), NOWHERE, env)
    assert "links (davinci0, davinci1, davinci2, davinci3 UP)" in report.passed
    assert any("Receive timeout" in s for s in report.skipped), report.skipped


def test_a_device_the_tool_does_not_know_fails_with_its_words(tmp_path: Path) -> None:
    env = write_node(tmp_path, range(4))
    (tmp_path / "link.3").unlink()
    with pytest.raises(PreflightFailed, match=r"davinci3: .* says exit 1: Error: device 3"):
        run_preflight(contract(), NOWHERE, env)


def test_missing_device_and_missing_address(tmp_path: Path) -> None:
    env = write_node(tmp_path, [0, 1, 3])
    with pytest.raises(PreflightFailed) as info:
        run_preflight(contract(), NOWHERE, env)
    assert info.value.reason == "DeviceMissing" and "absent: davinci2" in info.value.message
    env = write_node(tmp_path / "b", range(4), addresses={0, 1, 3})
    with pytest.raises(PreflightFailed) as info:
        run_preflight(contract(), NOWHERE, env)
    assert info.value.reason == "HccnConfMissing"
    assert "has no address_2= line for device davinci2" in info.value.message


def test_checks_switched_off_do_not_run(tmp_path: Path) -> None:
    env = write_node(tmp_path, [0, 1, 3], down={0})
    checks = ("leader", "store")
    report = run_preflight(contract(preflight_checks=checks), NOWHERE, env)
    assert report.passed == [] and report.skipped == []
    report = run_preflight(contract(preflight_checks=("hccnConf",)), NOWHERE, env)
    assert report.passed == [f"hccnConf ({tmp_path / 'hccn.conf'})"]


def test_absent_tools_are_a_message_when_on_and_skipped_when_unasked(tmp_path: Path) -> None:
    env = {
        ec.PREFLIGHT_DEV_DIR: str(tmp_path / "nodev"),
        ec.PREFLIGHT_HCCN_CONF: str(tmp_path / "no-hccn.conf"),
        ec.PREFLIGHT_HCCN_TOOL: str(tmp_path / "no-hccn_tool"),
        "PATH": str(tmp_path),
    }
    with pytest.raises(PreflightFailed, match=r"holds 0 NPU device files \(none\)"):
        run_preflight(contract(), NOWHERE, env)
    with pytest.raises(PreflightFailed) as info:
        run_preflight(contract(preflight_checks=("hccnConf",)), NOWHERE, env)
    assert "no-hccn.conf is not in the container" in info.value.message
    assert "spec.preflight.hccnConf: false" in info.value.message
    with pytest.raises(PreflightFailed) as info:
        run_preflight(contract(preflight_checks=("links",)), NOWHERE, env)
    assert info.value.reason == "LinkDown"
    assert "hccn_tool is not in the container" in info.value.message
    # the operator said nothing (no spec.preflight, or an older operator): skipped, said
    report = run_preflight(contract(preflight_checks=None), NOWHERE, env)
    assert report.passed == []
    assert [s.split(" ")[0] for s in report.skipped] == ["devices", "hccnConf", "links"]


def test_unasked_checks_still_fail_on_what_is_there(tmp_path: Path) -> None:
    env = write_node(tmp_path, range(4), down={0})
    with pytest.raises(PreflightFailed, match="LinkDown"):
        run_preflight(contract(preflight_checks=None), NOWHERE, env)


# --- reachability ---------------------------------------------------------------------------


def test_a_listening_port_and_a_refusing_one_both_answer() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert tcp_answer("127.0.0.1", port, 2.0) is None
    # nothing listens now: the host refuses, which proves the path
    assert tcp_answer("127.0.0.1", port, 2.0) is None


def test_retries_with_backoff_until_the_budget() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    def unreachable(host: str, port: int, timeout: float) -> str:
        now[0] += 0.5
        return "No route to host"

    error, attempts = wait_reachable("10.0.0.5", 5757, 40, unreachable, sleep, lambda: now[0])
    assert error == "No route to host"
    assert slept[:5] == [1.0, 2.0, 4.0, 8.0, 15.0] and max(slept) == 15.0
    assert now[0] >= 40 and attempts == len(slept) + 1

    calls = iter(["timed out", "timed out", None])
    error, attempts = wait_reachable("h", 1, 40, lambda h, p, t: next(calls), lambda s: None)
    assert error is None and attempts == 3


def test_leader_unreachable_names_address_budget_and_error(tmp_path: Path) -> None:
    env = write_node(tmp_path, range(4))

    def unreachable(host: str, port: int, timeout: float) -> str:
        return "Network is unreachable"

    with pytest.raises(PreflightFailed) as info:
        run_preflight(contract(preflight_timeout=0), Targets(("10.0.0.5", 5757), None), env,
                      connect=unreachable, sleep=lambda s: None)  # fmt: skip
    message = info.value.message
    assert message.startswith("NPU preflight failed (LeaderUnreachable, check leader): ")
    assert "d-decode-0-0.d-decode-0.n.svc:5757 (10.0.0.5:5757)" in message
    assert "within 0 s (1 attempts; last: Network is unreachable)" in message
    with pytest.raises(PreflightFailed, match="StoreUnreachable"):
        run_preflight(contract(preflight_timeout=0), Targets(None, ("10.0.0.6", 24666)), env,
                      connect=unreachable, sleep=lambda s: None)  # fmt: skip
    # the pod that serves the store does not wait for itself
    report = run_preflight(contract(), Targets(None, ("10.0.0.9", 24666)), env,
                           connect=unreachable)  # fmt: skip
    assert "store (this pod serves it)" in report.skipped


# --- the contract and the launcher's exit ---------------------------------------------------


def test_the_contract_carries_the_checks_only_when_given() -> None:
    base = contract(preflight_checks=None)
    env = ec.launch_env(base)
    assert ec.PREFLIGHT_CHECKS_VAR not in env and ec.PREFLIGHT_TIMEOUT not in env
    env = ec.launch_env(contract(preflight_checks=("devices", "store"), preflight_timeout=90))
    assert env[ec.PREFLIGHT_CHECKS_VAR] == "devices,store"
    assert env[ec.PREFLIGHT_TIMEOUT] == "90"
    env[ec.POD_NAME] = "d-decode-0-1"
    back = read_launch_env(env)
    assert back.preflight_checks == ("devices", "store") and back.preflight_timeout == 90
    env[ec.PREFLIGHT_CHECKS_VAR] = ""
    assert read_launch_env(env).preflight_checks == ()
    env[ec.PREFLIGHT_CHECKS_VAR] = "devices,links,wires"
    with pytest.raises(ec.BadInput, match="wires is not a check"):
        read_launch_env(env)


def _launch_env(tmp_path: Path, checks: str | None, npus: dict[str, str]) -> dict[str, str]:
    environ = _env(tmp_path, role="decode", pod="dsv3-decode-0-1", tp_size=16, dp_size=16,
                   dist_init_addr="127.0.0.1:5757", store_url="tcp://127.0.0.1:24666")  # fmt: skip
    environ[ec.DEVICES_PER_NODE] = "8"
    environ[ec.TERMINATION_LOG] = str(tmp_path / "termination-log")
    # the image's SGLang, which the launcher checks first: the spec's version
    environ["PYTHONPATH"] = str(sglang_site(tmp_path / "image", environ[ec.SGLANG_VERSION]))
    if checks is not None:
        environ[ec.PREFLIGHT_CHECKS_VAR] = checks
        environ[ec.PREFLIGHT_TIMEOUT] = "5"
    return {**environ, **npus}


def test_the_launcher_exits_7_with_the_termination_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    npus = write_node(tmp_path / "node", range(8), down={5})
    for key, value in _launch_env(tmp_path, "devices,hccnConf,links", npus).items():
        monkeypatch.setenv(key, value)
    code = runtime_cli(["launch", "--check", "--no-parser-check", "--resolve-timeout", "1"])
    assert code == ec.EXIT_PREFLIGHT == 7
    message = (tmp_path / "termination-log").read_text()
    assert message.startswith("NPU preflight failed (LinkDown, check links): device davinci5")
    assert "link status DOWN" in message
    assert message in capsys.readouterr().err

    # the link back up: the same launch passes, saying what it checked
    (tmp_path / "node" / "link.5").write_text("link status: UP\n")
    (tmp_path / "termination-log").unlink()
    code = runtime_cli(["launch", "--check", "--no-parser-check", "--resolve-timeout", "1"])
    assert code == 0
    assert "NPU preflight passed: devices (davinci0" in capsys.readouterr().err
    assert not (tmp_path / "termination-log").exists()
    # --no-preflight skips it
    (tmp_path / "node" / "link.5").write_text("link status: DOWN\n")
    code = runtime_cli(["launch", "--check", "--no-parser-check", "--no-preflight"])
    assert code == 0


def test_the_launcher_exports_both_store_names_and_the_hccl_timeout(tmp_path: Path) -> None:
    from ascend_pd_runtime.launcher import exec_environment, plan_launch

    environ = _launch_env(tmp_path, None, {})
    launch = plan_launch(environ, lambda host: host, python="python3")
    assert launch.env[ec.MF_STORE_URL] == launch.env[ec.MF_CONFIG_STORE_URL]
    assert launch.env[ec.MF_CONFIG_STORE_URL] == "tcp://127.0.0.1:24666"
    assert ec.HCCL_CONNECT_TIMEOUT not in launch.env
    environ[ec.HCCL_CONNECT_TIMEOUT_SECONDS] = "1800"
    launch = plan_launch(environ, lambda host: host, python="python3")
    assert launch.env[ec.HCCL_CONNECT_TIMEOUT] == "1800"
    assert exec_environment({}, launch.env)[ec.HCCL_CONNECT_TIMEOUT] == "1800"
    # a role's own env entry wins (and stderr says so)
    mine = exec_environment({ec.HCCL_CONNECT_TIMEOUT: "600"}, launch.env)
    assert mine[ec.HCCL_CONNECT_TIMEOUT] == "600"
