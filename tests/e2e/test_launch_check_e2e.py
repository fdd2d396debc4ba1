"""Bad ``extraArgs`` end to end: refused at admission, or refused by the real SGLang parser in
the pod, ending in the pod's termination message and the PDDeployment's status. And a spec
whose ``sglangVersion`` is not the image's SGLang: refused by the launcher before anything
else, ending in ``SGLangVersionMismatch`` naming both versions.

The local control plane runs no containers, but kubelet-sim runs the launcher's check
(``ascend-pd-runtime launch --check``) for pods in a namespace annotated
``kubelet-sim.ascend-pd.dev/run-launch-check=true``, in a local runtime registered for the
pod's image: the SGLang test harness's interpreter with pristine SGLang 0.5.23 on its path.
The pod's env is the operator's, resolved by kubelet-sim as a kubelet would (downward API,
the kv-layout ConfigMap volume, cluster DNS), and the model's ``config.json`` sits in a
hostPath volume. The oracle for the refusal is SGLang's own parser message, as
``tests/sglang/test_launch_check_sglang.py`` shows it on the wheels alone.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_pd_dev.kubelet_sim import launch_check
from ascend_pd_dev.testtools.kubectl import install_crd
from ascend_pd_dev.testtools.local_run import OperatorProcess
from ascend_pd_operator.api.vocabulary import (
    LABEL_DEPLOYMENT,
    LABEL_ROLE,
    REASON_LAUNCH_REFUSED,
    REASON_SGLANG_VERSION_MISMATCH,
)
from ascend_pd_runtime import env_contract

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "sglang"))
import sglang_harness as harness  # noqa: E402

pytestmark = [
    pytest.mark.sglang,
    pytest.mark.simulated,
    pytest.mark.local,  # registers a local runtime in the dev cluster's kubelet-sim
    pytest.mark.timeout(1200),
]

VERSION = "0.5.23"
NAME = "dsv2-lite"
#: what SGLang 0.5.23's parser says about the flag (0.5.10 accepted it)
AMBIGUOUS = (
    "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
    "--cuda-graph-max-bs-prefill"
)
TIMEOUT = 420.0  # a busy 2-core machine; nothing asserts on durations


@pytest.fixture(scope="module")
def crd(cluster: Any, kubectl: Any) -> None:
    install_crd(cluster.kubeconfig, "e2e-operator")


@pytest.fixture
def runtime_image(cluster: Any, namespace: str) -> Iterator[str]:
    """An image kubelet-sim runs locally: the harness Python with SGLang 0.5.23."""
    site = harness.ensure_version(VERSION)
    image = f"local.kubelet-sim/ascend-pd-runtime:sglang-{VERSION}-{namespace}"
    path = launch_check.register_runtime(
        cluster.layout.local_runtimes,
        image,
        str(harness.PYTHON),
        harness.pythonpath(site).split(os.pathsep),
    )
    try:
        yield image
    finally:
        path.unlink(missing_ok=True)


@pytest.fixture
def operator(cluster: Any, crd: None, namespace: str, tmp_path: Path) -> Iterator[Path]:
    log = tmp_path / "operator.log"
    op = OperatorProcess(["--namespace", namespace, "--resync-seconds", "5"],
                         cluster.kubeconfig, log)  # fmt: skip
    try:
        yield log
    finally:
        op.stop()
        assert "Traceback" not in log.read_text(), log.read_text()[-4000:]


def get(kubectl: Any, namespace: str, *what: str) -> dict[str, Any]:
    done = kubectl("get", *what, "-n", namespace, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def condition(kubectl: Any, namespace: str, type_: str) -> dict[str, Any]:
    status = get(kubectl, namespace, "pdd", NAME).get("status") or {}
    return next((c for c in status.get("conditions", []) if c["type"] == type_), {})


def pods(kubectl: Any, namespace: str, role: str) -> list[dict[str, Any]]:
    selector = f"{LABEL_DEPLOYMENT}={NAME},{LABEL_ROLE}={role}"
    items: list[dict[str, Any]] = get(kubectl, namespace, "pods", "-l", selector).get("items", [])
    return items


def events(kubectl: Any, namespace: str, reason: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = get(
        kubectl, namespace, "events", "--field-selector", f"reason={reason}"
    ).get("items", [])
    return found


def ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def refused_container(
    pod: dict[str, Any], code: int = env_contract.EXIT_ARGS_REFUSED
) -> dict[str, Any] | None:
    """The container's terminated record with the launcher's exit ``code``, now or before."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        for key in ("state", "lastState"):
            ended = (status.get(key) or {}).get("terminated") or {}
            if ended.get("exitCode") == code:
                return {"where": key, **ended, "restartCount": status.get("restartCount")}
    return None


def spec_docs(
    namespace: str, image: str, model_dir: Path, version: str = VERSION
) -> list[dict[str, Any]]:
    """The deepseek-v2-lite example with the model in a hostPath holding its config.json,
    its spec naming SGLang ``version``."""
    docs = [d for d in yaml.safe_load_all((REPO / "examples" / "deepseek-v2-lite.yaml").read_text())
            if d]  # fmt: skip
    config_map, pdd = docs
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    model_dir.mkdir()
    (model_dir / "config.json").write_text(config_map["data"]["config.json"])
    pdd["spec"]["model"]["volume"] = {"hostPath": {"path": str(model_dir)}}
    pdd["spec"]["runtime"]["image"] = image
    pdd["spec"]["runtime"]["sglangVersion"] = version
    pdd["spec"]["decode"]["replicas"] = 1
    return docs


def patch_extra_args(kubectl: Any, namespace: str, args: list[str]) -> None:
    body = json.dumps({"spec": {"prefill": {"extraArgs": args}}})
    kubectl("patch", "pdd", NAME, "-n", namespace, "--type", "merge", "-p", body)


def test_bad_extra_args_end_in_a_termination_message_and_a_status_condition(
    kubectl: Any,
    namespace: str,
    runtime_image: str,
    operator: Path,
    tmp_path: Path,
    wait_until: Any,
) -> None:
    started = time.monotonic()
    kubectl("annotate", "namespace", namespace, f"{launch_check.RUN_CHECK_ANNOTATION}=true")
    docs = spec_docs(namespace, runtime_image, tmp_path / "model")
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))

    # 1. A valid spec: every runtime pod passes the real check, then becomes Ready.
    wait_until(
        lambda: (get(kubectl, namespace, "pdd", NAME).get("status") or {}).get("phase") == "Ready",
        "the valid spec Ready after its pods' launcher checks",
        timeout=TIMEOUT,
    )
    ready_at = time.monotonic()
    runtime_pods = pods(kubectl, namespace, "prefill") + pods(kubectl, namespace, "decode")
    assert len(runtime_pods) == 2 and all(ready(p) for p in runtime_pods), runtime_pods
    passed = {e["involvedObject"]["name"] for e in events(kubectl, namespace, "LaunchCheckPassed")}
    assert {p["metadata"]["name"] for p in runtime_pods} <= passed, passed
    for pod in runtime_pods:
        (status,) = pod["status"]["containerStatuses"]
        assert "running" in status["state"] and status["restartCount"] == 0, status
    prefill_before = pods(kubectl, namespace, "prefill")[0]
    sts = f"{NAME}-prefill-0"
    generation = get(kubectl, namespace, "statefulset", sts)["metadata"]["generation"]

    # 2. The first line of defence refuses control characters, and nothing rolls: the API
    #    server's CEL rule.
    body = json.dumps({"spec": {"prefill": {"extraArgs": ["--foo\n--tp-size 4"]}}})
    done = kubectl("patch", "pdd", NAME, "-n", namespace, "--type", "merge", "-p", body,
                   check=False)  # fmt: skip
    assert done.returncode != 0 and "control characters" in done.stderr, done.stderr
    assert get(kubectl, namespace, "statefulset", sts)["metadata"]["generation"] == generation
    (prefill_now,) = pods(kubectl, namespace, "prefill")
    assert prefill_now["metadata"]["uid"] == prefill_before["metadata"]["uid"]
    assert ready(prefill_now)

    # 3. Past the static rules, refused by SGLang 0.5.23's parser inside the pod.
    patch_extra_args(kubectl, namespace, ["--cuda-graph-max-bs", "8"])
    wait_until(
        lambda: condition(kubectl, namespace, "Validated").get("status") == "True",
        "Validated=True for --cuda-graph-max-bs 8",
        timeout=TIMEOUT,
    )

    def rolled_and_refused() -> dict[str, Any] | None:
        for pod in pods(kubectl, namespace, "prefill"):
            rolled = pod["metadata"]["uid"] != prefill_before["metadata"]["uid"]
            if rolled and refused_container(pod):
                return pod
        return None

    refused_pod = wait_until(
        rolled_and_refused,
        "the rolled prefill pod's container terminated with exit code 5",
        timeout=TIMEOUT,
    )
    refused_at = time.monotonic()
    pod_name = refused_pod["metadata"]["name"]
    ended = refused_container(refused_pod)
    assert ended is not None
    assert ended["reason"] == "Error" and ended["startedAt"] and ended["finishedAt"], ended
    message = ended["message"]
    assert message.startswith(f"SGLang {VERSION} refused the command line: {AMBIGUOUS}"), message
    assert "Offending argument '--cuda-graph-max-bs', from spec.prefill.extraArgs" in message

    cond = wait_until(
        lambda: (
            (c := condition(kubectl, namespace, "PrefillReady")).get("reason")
            == REASON_LAUNCH_REFUSED
            and c
        ),
        "PrefillReady=False, LaunchRefused",
        timeout=TIMEOUT,
    )
    assert cond["status"] == "False", cond
    assert f"pod {pod_name}: " in cond["message"] and "'--cuda-graph-max-bs'" in cond["message"]
    assert AMBIGUOUS in cond["message"], cond
    warning = wait_until(
        lambda: [e for e in events(kubectl, namespace, REASON_LAUNCH_REFUSED)
                 if e["involvedObject"]["kind"] == "PDDeployment"],
        "a Warning Event LaunchRefused on the PDDeployment",
        timeout=TIMEOUT,
    )  # fmt: skip
    assert warning[0]["type"] == "Warning", warning
    assert "--cuda-graph-max-bs" in warning[0]["message"] and pod_name in warning[0]["message"]

    # The kubelet restarts it (restart policy Always): crash loop, the refusal in lastState.
    def crash_looping() -> dict[str, Any] | None:
        for pod in pods(kubectl, namespace, "prefill"):
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                waiting = status["state"].get("waiting") or {}
                if pod["metadata"]["name"] == pod_name and waiting.get("reason") == (
                    "CrashLoopBackOff"
                ):
                    return dict(status)
        return None

    looping = wait_until(crash_looping, "the refused container in CrashLoopBackOff",
                         timeout=TIMEOUT)  # fmt: skip
    assert looping["restartCount"] >= 1 and not looping["ready"], looping
    assert looping["lastState"]["terminated"]["exitCode"] == env_contract.EXIT_ARGS_REFUSED
    assert "--cuda-graph-max-bs" in looping["lastState"]["terminated"]["message"]
    # Decode was not touched and keeps serving.
    assert all(ready(p) for p in pods(kubectl, namespace, "decode"))
    print(
        f"\nlaunch-check e2e: valid spec Ready after {ready_at - started:.1f} s, "
        f"refusal in pod status after {refused_at - started:.1f} s, "
        f"whole test {time.monotonic() - started:.1f} s",
        file=sys.__stderr__,
    )


def test_an_image_whose_sglang_is_not_the_spec_s_is_refused_naming_both_versions(
    kubectl: Any,
    namespace: str,
    runtime_image: str,
    operator: Path,
    tmp_path: Path,
    wait_until: Any,
) -> None:
    """The spec says SGLang 0.5.20 (as the examples do); the image holds the real 0.5.23.
    Every runtime pod's launcher refuses before it plans anything: exit 8, the termination
    message naming both versions; the roles say SGLangVersionMismatch, with a Warning Event.
    Before the launcher checked, this pod passed its launch check and became Ready."""
    spec_version = "0.5.20"
    assert spec_version != VERSION
    kubectl("annotate", "namespace", namespace, f"{launch_check.RUN_CHECK_ANNOTATION}=true")
    docs = spec_docs(namespace, runtime_image, tmp_path / "model", version=spec_version)
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    head = (f"SGLang version mismatch: spec.runtime.sglangVersion is {spec_version} "
            f"({env_contract.SGLANG_VERSION}), but this image's SGLang is {VERSION} "
            f"({harness.PYTHON})")  # fmt: skip
    code = env_contract.EXIT_SGLANG_VERSION

    def refused() -> dict[str, Any] | None:
        found = [p for p in pods(kubectl, namespace, "prefill") if refused_container(p, code)]
        return found[0] if found else None

    refused_pod = wait_until(refused, "a prefill pod's container terminated with exit 8",
                             timeout=TIMEOUT)  # fmt: skip
    pod_name = refused_pod["metadata"]["name"]
    ended = refused_container(refused_pod, code)
    assert ended is not None and ended["reason"] == "Error", ended
    assert ended["message"].startswith(head), ended["message"]
    assert not ready(refused_pod)

    # One status read where all three say it: group recovery recreates a refused instance's
    # pods (with backoff), and a new pod says "loading weights" until its launcher refuses
    # again, so each condition read on its own may catch that moment.
    def all_say_it() -> dict[str, dict[str, Any]] | None:
        status = get(kubectl, namespace, "pdd", NAME).get("status") or {}
        conds = {c["type"]: c for c in status.get("conditions", [])}
        said = {t: conds.get(t, {}) for t in ("PrefillReady", "DecodeReady", "Ready")}
        roles = [said["PrefillReady"], said["DecodeReady"]]
        if all(c.get("reason") == REASON_SGLANG_VERSION_MISMATCH for c in roles) and head in str(
            said["Ready"].get("message", "")
        ):
            return said
        return None

    said = wait_until(all_say_it, f"PrefillReady, DecodeReady {REASON_SGLANG_VERSION_MISMATCH} "
                      "and Ready naming it, in one status", timeout=TIMEOUT)  # fmt: skip
    for role, condition_type in (("prefill", "PrefillReady"), ("decode", "DecodeReady")):
        cond = said[condition_type]
        assert cond["status"] == "False", cond
        assert cond["message"].startswith(f"pod {NAME}-{role}-"), cond
        assert head in cond["message"], cond
    assert said["Ready"]["status"] == "False", said["Ready"]
    warning = wait_until(
        lambda: [e for e in events(kubectl, namespace, REASON_SGLANG_VERSION_MISMATCH)
                 if e["involvedObject"]["kind"] == "PDDeployment"],
        f"a Warning Event {REASON_SGLANG_VERSION_MISMATCH} on the PDDeployment",
        timeout=TIMEOUT,
    )  # fmt: skip
    assert all(e["type"] == "Warning" for e in warning), warning
    assert any(head in e["message"] for e in warning), warning
    assert any(pod_name in e["message"] for e in warning), warning
    # no pod of the deployment ever passed its launch check
    passed = {e["involvedObject"]["name"] for e in events(kubectl, namespace, "LaunchCheckPassed")}
    assert not {p["metadata"]["name"] for p in pods(kubectl, namespace, "prefill")} & passed
