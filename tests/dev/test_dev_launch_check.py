"""kubelet-sim's launcher check without an API server: what a kubelet would give the container
(env, volumes, DNS, termination message) and the run/restart/back-off lifecycle.

The expectations are written from the Kubernetes documentation of each field (fieldRef paths,
``$(VAR)`` expansion, ``terminationMessagePath``, crash-loop back-off of 10 s doubling to
5 min), not from this code's output.
"""

from __future__ import annotations

import base64
import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from ascend_pd_dev.kubelet_sim import check_runs as lcr
from ascend_pd_dev.kubelet_sim import knobs
from ascend_pd_dev.kubelet_sim import launch_check as lc
from ascend_pd_dev.kubelet_sim.pod_status import desired_status, status_signature
from ascend_pd_runtime import env_contract

NOW = "2026-01-01T00:00:00Z"


def cluster(
    config_maps: dict[tuple[str, str], dict[str, Any]] | None = None,
    services: dict[tuple[str, str], dict[str, Any]] | None = None,
    pods: list[dict[str, Any]] | None = None,
    secrets: dict[tuple[str, str], dict[str, Any]] | None = None,
) -> lc.Cluster:
    return lc.Cluster(
        config_map=lambda ns, n: (config_maps or {}).get((ns, n)),
        secret=lambda ns, n: (secrets or {}).get((ns, n)),
        service=lambda ns, n: (services or {}).get((ns, n)),
        pods=pods or [],
    )


def runtime_pod(
    env: list[dict[str, Any]],
    mounts: list[dict[str, Any]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    container = {
        "name": "sglang",
        "image": "img:1",
        "command": ["ascend-pd-runtime", "launch"],
        "env": env,
        "volumeMounts": mounts or [],
    }
    return {
        "metadata": {"name": "d-prefill-0-0", "namespace": "ns", "uid": "u1",
                     "labels": {"app": "x"}, "annotations": {}},
        "spec": {"containers": [container], "volumes": volumes or [], "nodeName": "sim-ascend-0",
                 "hostname": "d-prefill-0-0", "subdomain": "d-prefill-0", **spec},
        "status": {},
    }  # fmt: skip


def test_env_resolves_literals_expansion_field_refs_and_key_refs() -> None:
    secret = base64.b64encode(b"s3cret").decode()
    env = [
        {"name": "A", "value": "x"},
        {"name": "B", "value": "$(A)-$(MISSING)-$$(A)"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
        {"name": "LBL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
        {"name": "SEC", "valueFrom": {"secretKeyRef": {"name": "s", "key": "p"}}},
        {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "no", "key": "k",
                                                          "optional": True}}},
    ]  # fmt: skip
    pod = runtime_pod(env)
    got = lc.container_env(
        pod, pod["spec"]["containers"][0], "127.1.0.5", "127.0.1.1",
        cluster({("ns", "c"): {"data": {"k": "v"}}},
                secrets={("ns", "s"): {"data": {"p": secret}}}),
    )  # fmt: skip
    assert got == {
        "A": "x", "B": "x-$(MISSING)-$(A)", "POD": "d-prefill-0-0", "IP": "127.1.0.5",
        "HOST": "127.0.1.1", "LBL": "x", "CM": "v", "SEC": "s3cret",
    }  # fmt: skip


def test_a_missing_config_map_key_is_a_create_container_config_error() -> None:
    pod = runtime_pod([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}])
    with pytest.raises(lc.NotStartable) as err:
        lc.container_env(pod, pod["spec"]["containers"][0], "", "", cluster())
    assert err.value.reason == "CreateContainerConfigError" and "'c'" in err.value.message


def test_cluster_dns_names_resolve_to_the_pod_or_the_service_ip() -> None:
    leader = runtime_pod([])
    leader["status"] = {"podIP": "127.1.0.9"}
    c = cluster(
        services={("ns", "d-prefill-0"): {"spec": {"clusterIP": "None"}},
                  ("ns", "router"): {"spec": {"clusterIP": "10.0.0.7"}}},
        pods=[leader],
    )  # fmt: skip

    def resolve(name: str) -> str:
        return lc.resolve_name(name, c.pods, c)

    value = "d-prefill-0-0.d-prefill-0.ns.svc:5757 tcp://router.ns.svc.cluster.local:80"
    assert lc.substitute_dns(value, resolve) == "127.1.0.9:5757 tcp://10.0.0.7:80"
    assert lc.substitute_dns("/models/a.b/c", resolve) == "/models/a.b/c"  # not a DNS name
    with pytest.raises(lc.Unresolved):  # a headless service has no cluster IP
        resolve("d-prefill-0.ns.svc")
    with pytest.raises(lc.Unresolved):  # the pod has no IP yet
        lc.resolve_name("d-prefill-0-0.d-prefill-0.ns.svc", [runtime_pod([])], c)


def test_prepare_maps_volumes_paths_dns_and_the_termination_log(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    volumes = [
        {"name": "model", "hostPath": {"path": str(model), "type": "Directory"}},
        {"name": "driver", "hostPath": {"path": "/no/such/ascend/driver"}},
        {"name": "kv-layout", "configMap": {"name": "d-kv-layout"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]
    mounts = [
        {"name": "model", "mountPath": "/models/M"},
        {"name": "driver", "mountPath": "/usr/local/Ascend/driver"},
        {"name": "kv-layout", "mountPath": "/etc/ascend-pd/kv-layout"},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    env = [
        {"name": "MODEL", "value": "/models/M"},
        {"name": "PLAN", "value": "/etc/ascend-pd/kv-layout/plan.json"},
        {"name": "DIST", "value": "d-prefill-0-0.d-prefill-0.ns.svc:5757"},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    pod = runtime_pod(env, mounts, volumes)
    c = cluster({("ns", "d-kv-layout"): {"data": {"plan.json": "{}"}}},
                {("ns", "d-prefill-0"): {"spec": {"clusterIP": "None"}}}, [pod])  # fmt: skip
    runtime = lc.LocalRuntime("img:1", "/py", ("/site", "/src"), {"X": "1"})
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    prepared = lc.prepare(pod, pod["spec"]["containers"][0], runtime, "127.1.0.3", "127.0.1.1",
                          c, scratch)  # fmt: skip
    assert prepared.argv == ["/py", "-m", "ascend_pd_runtime.cli", "launch", "--check"]
    env_out = prepared.env
    assert env_out["MODEL"] == str(model)
    assert Path(env_out["PLAN"]).read_text() == "{}" and env_out["PLAN"].startswith(str(scratch))
    assert env_out["DIST"] == "127.1.0.3:5757"  # the pod's own name: its IP of this cycle
    assert env_out[env_contract.TERMINATION_LOG] == str(prepared.termination_file)
    assert env_out["PYTHONPATH"] == "/site:/src" and env_out["X"] == "1"
    assert env_out["HOME"] == str(scratch)


def test_a_pvc_cannot_be_mounted_on_a_simulated_node(tmp_path: Path) -> None:
    pvc = {"name": "m", "persistentVolumeClaim": {"claimName": "models"}}
    pod = runtime_pod([], [{"name": "m", "mountPath": "/models"}], [pvc])
    with pytest.raises(lc.NotStartable) as err:
        lc.prepare(pod, pod["spec"]["containers"][0], lc.LocalRuntime("img:1", "/py"), "", "",
                   cluster(), tmp_path)  # fmt: skip
    assert err.value.reason == "ContainerCreating"
    assert "persistentVolumeClaim" in err.value.message


def test_run_reads_the_termination_message_or_falls_back_to_the_log(tmp_path: Path) -> None:
    script = "import os,sys; open(os.environ['TL'],'w').write('why '*2000); sys.exit(5)"
    term = tmp_path / "termination-log"
    prepared = lc.Prepared([sys.executable, "-c", script], {"TL": str(term)}, str(tmp_path),
                           term, False)  # fmt: skip
    ended = lc.run(prepared)
    assert ended.exit_code == 5 and len(ended.message.encode()) == 4096
    silent = lc.Prepared([sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], {},
                         str(tmp_path), tmp_path / "none", True)  # fmt: skip
    assert lc.run(silent).message == "boom" and lc.run(silent).exit_code == 3


def test_register_and_load_runtimes_and_who_asks(tmp_path: Path) -> None:
    lc.register_runtime(tmp_path, "reg/img:1", "/py", ["/a"])
    (tmp_path / "broken.json").write_text("{")
    assert lc.load_runtimes(tmp_path) == {"reg/img:1": lc.LocalRuntime("reg/img:1", "/py", ("/a",))}
    pod = runtime_pod([])
    assert not lc.asks_for_check(pod, {})
    assert lc.asks_for_check(pod, {lc.RUN_CHECK_ANNOTATION: "true"})
    pod["metadata"]["annotations"][lc.RUN_CHECK_ANNOTATION] = "false"  # the pod's word wins
    assert not lc.asks_for_check(pod, {lc.RUN_CHECK_ANNOTATION: "true"})
    assert lc.is_launcher(pod["spec"]["containers"][0])
    assert not lc.is_launcher({"command": ["python3", "-m", "sglang_router.launch_router"]})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Runner:
    """Stands in for the subprocess: the test ends each run with the code it chooses."""

    def __init__(self) -> None:
        self.runs: list[Future[lc.Ended]] = []

    def finish(self, code: int, message: str = "") -> None:
        self.runs[-1].set_result(lc.Ended(code, message, ""))


def lifecycle(tmp_path: Path) -> tuple[lcr.LaunchChecks, Clock, Runner]:
    clock, runner = Clock(), Runner()
    checks = lcr.LaunchChecks(tmp_path / "runtimes", tmp_path / "scratch", clock=clock)

    def submit(fn: Any, prepared: lc.Prepared) -> Future[lc.Ended]:
        future: Future[lc.Ended] = Future()
        runner.runs.append(future)
        return future

    checks.pool.submit = submit  # type: ignore[method-assign]
    lc.register_runtime(tmp_path / "runtimes", "img:1", "/py")
    return checks, clock, runner


def test_a_refused_launch_terminates_then_crash_loops_with_kubelet_back_off(
    tmp_path: Path,
) -> None:
    checks, clock, runner = lifecycle(tmp_path)
    pod = runtime_pod([])

    def view() -> lcr.View:
        return checks.views(pod, "127.1.0.1", "127.0.1.1", cluster(), asked=True)["sglang"]

    first = view()
    assert "running" in first.state and not first.ready and first.restart_count == 0
    runner.finish(5, "SGLang refused --x")
    ended = view()
    assert ended.state["terminated"]["exitCode"] == 5
    assert ended.state["terminated"]["reason"] == "Error"
    assert ended.state["terminated"]["message"] == "SGLang refused --x"
    assert ended.restart_count == 0 and ended.last_state == {}
    assert [e[1:3] for e in checks.events] == [("Warning", "LaunchCheckFailed")]
    clock.now += lcr.TERMINATED_SHOWN
    looping = view()
    assert looping.state["waiting"]["reason"] == "CrashLoopBackOff"
    assert looping.last_state["terminated"]["exitCode"] == 5 and looping.restart_count == 1
    clock.now += 10.0 - lcr.TERMINATED_SHOWN  # the first back-off: 10 s after the exit
    rerun = view()
    assert "running" in rerun.state and rerun.restart_count == 1 and len(runner.runs) == 2
    assert rerun.last_state["terminated"]["exitCode"] == 5
    runner.finish(5, "again")
    again = view()
    assert again.state["terminated"]["message"] == "again" and again.restart_count == 1
    assert again.last_state["terminated"]["message"] == "SGLang refused --x"
    clock.now += lcr.TERMINATED_SHOWN
    assert view().restart_count == 2
    clock.now += 19.0 - lcr.TERMINATED_SHOWN  # the second back-off is 20 s
    assert "waiting" in view().state and len(runner.runs) == 2
    clock.now += 1.0
    assert "running" in view().state and len(runner.runs) == 3
    assert [lcr.backoff(n) for n in (1, 2, 3, 6, 20)] == [10, 20, 40, 300, 300]


def test_an_accepted_launch_runs_on_and_is_never_checked_again(tmp_path: Path) -> None:
    checks, clock, runner = lifecycle(tmp_path)
    pod = runtime_pod([])
    checks.views(pod, "127.1.0.1", "127.0.1.1", cluster(), asked=True)
    runner.finish(0)
    clock.now += 1000
    passed = checks.views(pod, "127.1.0.1", "127.0.1.1", cluster(), asked=True)["sglang"]
    assert "running" in passed.state and passed.ready and passed.restart_count == 0
    assert len(runner.runs) == 1
    assert [e[1:3] for e in checks.events] == [("Normal", "LaunchCheckPassed")]
    checks.forget(set())
    assert not checks.records


def test_never_restart_policy_leaves_it_terminated_and_the_pod_failed(tmp_path: Path) -> None:
    checks, clock, runner = lifecycle(tmp_path)
    pod = runtime_pod([], restartPolicy="Never")
    checks.views(pod, "127.1.0.1", "127.0.1.1", cluster(), asked=True)
    runner.finish(5, "no")
    clock.now += 1000
    views = checks.views(pod, "127.1.0.1", "127.0.1.1", cluster(), asked=True)
    assert views["sglang"].final and len(runner.runs) == 1
    status = desired_status(pod, "127.0.1.1", "127.1.0.1", NOW, views)
    assert status["phase"] == "Failed"
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 5


def test_an_unregistered_image_waits_in_err_image_pull(tmp_path: Path) -> None:
    checks, _, runner = lifecycle(tmp_path)
    pod = runtime_pod([])
    pod["spec"]["containers"][0]["image"] = "elsewhere/img:2"
    view = checks.views(pod, "127.1.0.1", "127.0.1.1", cluster(), asked=True)["sglang"]
    assert view.state["waiting"]["reason"] == "ErrImagePull" and not runner.runs
    assert checks.views(pod, "", "", cluster(), asked=False) == {}


def test_pod_status_while_checking_is_running_but_not_ready() -> None:
    pod = runtime_pod([])
    view = lcr.View({"running": {"startedAt": NOW}}, {}, 0, ready=False, started=True)
    status = desired_status(pod, "127.0.1.1", "127.1.0.1", NOW, {"sglang": view})
    assert status["phase"] == "Running"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (
        ready["status"] == "False"
        and ready["message"] == "containers with unready status: [sglang]"
    )
    # a running pod carries no pod-level message (null: the patch deletes an earlier one)
    assert status["message"] is None
    done = lcr.View({"running": {"startedAt": NOW}}, {}, 0, ready=True, started=True)
    status = desired_status(pod, "127.0.1.1", "127.1.0.1", NOW, {"sglang": done})
    assert status["containerStatuses"][0]["ready"] is True
    # the outcome annotation still has the last word on readiness
    pod["metadata"]["annotations"][knobs.OUTCOME] = "unready"
    status = desired_status(pod, "127.0.1.1", "127.1.0.1", NOW, {"sglang": done})
    assert status["containerStatuses"][0]["ready"] is False


def test_signature_sees_restarts_and_last_state() -> None:
    pod = runtime_pod([])
    term = {"terminated": {"exitCode": 5, "reason": "Error", "startedAt": NOW, "finishedAt": NOW}}
    a = desired_status(pod, "h", "p", NOW, {"sglang": lcr.View(term, {}, 0, False, False)})
    wait = {"waiting": {"reason": "CrashLoopBackOff"}}
    b = desired_status(pod, "h", "p", NOW, {"sglang": lcr.View(wait, term, 1, False, False)})
    c = desired_status(pod, "h", "p", NOW, {"sglang": lcr.View(wait, term, 2, False, False)})
    assert len({status_signature(s) for s in (a, b, c)}) == 3


def test_the_container_gets_its_npus_and_a_link_down_on_request(tmp_path: Path) -> None:
    """As the device plugin, the Ascend Docker Runtime and the driver would: one device file per
    NPU of the container's limit, their addresses, and an hccn_tool that answers as the real
    one (checked here by running it, as the launcher's preflight does)."""
    import subprocess

    pod = runtime_pod([])
    pod["spec"]["containers"][0]["resources"] = {"limits": {"huawei.com/Ascend910": "4"}}
    pod["metadata"]["annotations"][knobs.NPU_LINK_DOWN] = "2"
    prepared = lc.prepare(pod, pod["spec"]["containers"][0], lc.LocalRuntime("img:1", "/py"),
                          "127.1.0.3", "127.0.1.1", cluster(), tmp_path)  # fmt: skip
    env = prepared.env
    dev = Path(env[env_contract.PREFLIGHT_DEV_DIR])
    assert sorted(p.name for p in dev.iterdir()) == [
        "davinci0", "davinci1", "davinci2", "davinci3", "davinci_manager"]  # fmt: skip
    conf = Path(env[env_contract.PREFLIGHT_HCCN_CONF]).read_text()
    assert [line.split("=")[0] for line in conf.splitlines() if line.startswith("address_")] == [
        "address_0", "address_1", "address_2", "address_3"]  # fmt: skip
    tool = env[env_contract.PREFLIGHT_HCCN_TOOL]

    def hccn(*args: str) -> tuple[int, str]:
        done = subprocess.run([tool, *args], capture_output=True, text=True, check=False)
        return done.returncode, done.stdout + done.stderr

    assert hccn("-i", "1", "-link", "-g") == (0, "link status: UP\n")
    assert hccn("-i", "2", "-link", "-g") == (0, "link status: DOWN\n")
    assert hccn("-i", "3", "-net_health", "-g") == (0, "net health status: Success\n")
    code, said = hccn("-i", "7", "-link", "-g")
    assert code == 1 and "device 7" in said

    # a container without NPUs gets none; a malformed knob is the pod's config error
    pod["spec"]["containers"][0]["resources"] = {}
    bare = lc.prepare(pod, pod["spec"]["containers"][0], lc.LocalRuntime("img:1", "/py"),
                      "127.1.0.3", "127.0.1.1", cluster(), tmp_path / "b")  # fmt: skip
    assert env_contract.PREFLIGHT_DEV_DIR not in bare.env
    pod["spec"]["containers"][0]["resources"] = {"limits": {"huawei.com/Ascend910": 2}}
    pod["metadata"]["annotations"][knobs.NPU_LINK_DOWN] = "two"
    with pytest.raises(lc.NotStartable) as err:
        lc.prepare(pod, pod["spec"]["containers"][0], lc.LocalRuntime("img:1", "/py"),
                   "127.1.0.3", "127.0.1.1", cluster(), tmp_path / "c")  # fmt: skip
    assert err.value.reason == "CreateContainerConfigError"
    assert knobs.NPU_LINK_DOWN in err.value.message


def test_the_real_launcher_fails_its_preflight_on_a_link_down(tmp_path: Path) -> None:
    """The operator's own pod (``ascend-pd render``), prepared as kubelet-sim prepares it, run
    with the real launcher (SGLang's parser skipped: this venv has no SGLang): the simulated
    hccn_tool reports davinci1 DOWN, the launcher exits 7 with the termination message the
    operator reads; without the knob the same pod passes every check."""
    import copy

    import yaml

    from ascend_pd_operator.wiring.render_cli import render
    from tests.unit.runtime.fake_sglang import sglang_site

    repo = Path(__file__).resolve().parents[2]
    config_map, pdd = [d for d in yaml.safe_load_all(
        (repo / "examples" / "deepseek-v2-lite.yaml").read_text()) if d]  # fmt: skip
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(config_map["data"]["config.json"])
    pdd["spec"]["model"]["volume"] = {"hostPath": {"path": str(model)}}
    pdd["spec"]["preflight"] = {"networkTimeoutSeconds": 5}
    code, manifests, message = render(pdd, None, "llm", [config_map])
    assert code == 0, message
    named = {(m["kind"], m["metadata"]["name"]): m for m in manifests}
    sts = named["StatefulSet", "dsv2-lite-prefill-0"]
    layout = named["ConfigMap", "dsv2-lite-kv-layout"]
    template = copy.deepcopy(sts["spec"]["template"])
    container = template["spec"]["containers"][0]
    container["args"] = ["--no-parser-check"]
    pod = {
        "metadata": {**template["metadata"], "name": "dsv2-lite-prefill-0-0",
                     "namespace": "llm", "uid": "u-preflight",
                     "annotations": {**template["metadata"].get("annotations", {}),
                                     knobs.NPU_LINK_DOWN: "1"}},
        "spec": {**template["spec"], "nodeName": "sim-ascend-0",
                 "hostname": "dsv2-lite-prefill-0-0", "subdomain": "dsv2-lite-prefill-0"},
        "status": {"podIP": "127.1.0.3"},
    }  # fmt: skip
    c = cluster({("llm", "dsv2-lite-kv-layout"): layout},
                {("llm", "dsv2-lite-prefill-0"): {"spec": {"clusterIP": "None"}}},
                [pod])  # fmt: skip
    # the image's SGLang, which the launcher checks first: the spec's version (metadata only)
    site = sglang_site(tmp_path / "image", pdd["spec"]["runtime"]["sglangVersion"])
    runtime = lc.LocalRuntime("img:1", sys.executable, (str(site),))

    def run(scratch: Path) -> lc.Ended:
        scratch.mkdir()
        prepared = lc.prepare(pod, container, runtime, "127.1.0.3", "127.0.1.1", c, scratch)
        return lc.run(prepared, timeout=120)

    ended = run(tmp_path / "down")
    assert ended.exit_code == env_contract.EXIT_PREFLIGHT, ended
    assert ended.message.startswith(
        "NPU preflight failed (LinkDown, check links): device davinci1: hccn_tool -i 1 -link "
        "-g says link status DOWN"
    ), ended
    assert env_contract.preflight_reason(ended.message) == "LinkDown"

    del pod["metadata"]["annotations"][knobs.NPU_LINK_DOWN]
    ended = run(tmp_path / "up")
    assert ended.exit_code == 0, ended
    assert "NPU preflight passed: devices (davinci0, davinci1)" in ended.log_tail
    assert "store (this pod serves it)" in ended.log_tail, ended.log_tail
