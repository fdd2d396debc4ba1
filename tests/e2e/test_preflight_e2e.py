"""NPU preflight end to end: a link that is down on a node ends the pod's launcher before
SGLang would start, and the PDDeployment says so as ``NPUPreflight=False, LinkDown`` naming the
pod and its node, with a Warning Event; fixed, the instance comes back and the condition turns
True.

The local control plane runs no containers, but kubelet-sim runs the launcher's check
(``ascend-pd-runtime launch --check``: the plan, SGLang's own parser, then the NPU preflight)
for pods in a namespace annotated ``kubelet-sim.ascend-pd.dev/run-launch-check=true``, in a
local runtime registered for the pod's image (the SGLang test harness's interpreter). It gives
each container the NPUs of its ``huawei.com/Ascend910`` limit as device files, an hccn.conf and
an ``hccn_tool`` that answers as the real one (``kubelet_sim.npu``); the pod annotation
``kubelet-sim.ascend-pd.dev/npu-link-down`` makes that tool report a device's link DOWN. The
preflight code that runs is the image's own, unchanged: only the paths it reads point at the
simulated node. Prefill runs one instance of two nodes, so its worker's leader check and every
pod's store check run too (the simulated pods' addresses answer).
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_pd_dev.kubelet_sim import knobs, launch_check
from ascend_pd_operator.api.vocabulary import COND_NPU_PREFLIGHT, REASON_LINK_DOWN
from ascend_pd_runtime import env_contract
from tests.e2e.test_launch_check_e2e import (  # noqa: F401  (fixtures)
    NAME,
    TIMEOUT,
    condition,
    crd,
    events,
    get,
    operator,
    pods,
    ready,
    runtime_image,
    spec_docs,
)

pytestmark = [
    pytest.mark.sglang,
    pytest.mark.simulated,
    pytest.mark.local,  # registers a local runtime in the dev cluster's kubelet-sim
    pytest.mark.timeout(1500),
]


def preflight_exit(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The container's terminated record with the launcher's preflight exit, now or before."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        for key in ("state", "lastState"):
            ended = (status.get(key) or {}).get("terminated") or {}
            if ended.get("exitCode") == env_contract.EXIT_PREFLIGHT:
                return dict(ended)
    return None


def test_a_link_down_is_npu_preflight_false_naming_the_pod(
    kubectl: Any,
    namespace: str,
    runtime_image: str,  # noqa: F811
    operator: Path,  # noqa: F811
    tmp_path: Path,
    wait_until: Any,
) -> None:
    started = time.monotonic()
    kubectl("annotate", "namespace", namespace, f"{launch_check.RUN_CHECK_ANNOTATION}=true")
    docs = spec_docs(namespace, runtime_image, tmp_path / "model")
    pdd = docs[1]
    # every check on; prefill: one instance of two nodes (a worker checks its leader)
    pdd["spec"]["preflight"] = {"networkTimeoutSeconds": 60}
    pdd["spec"]["prefill"]["parallelism"] = {"tensor": 4}
    pdd["spec"]["prefill"]["podAnnotations"] = {knobs.NPU_LINK_DOWN: "1"}
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))

    # 1. Prefill's launchers find davinci1's link down: NPUPreflight=False, LinkDown, naming
    #    a prefill pod and its node; decode passes every check and becomes ready.
    cond = wait_until(
        lambda: (
            (c := condition(kubectl, namespace, COND_NPU_PREFLIGHT)).get("status") == "False" and c
        ),
        "NPUPreflight=False",
        timeout=TIMEOUT,
    )
    assert cond["reason"] == REASON_LINK_DOWN, cond
    named = re.match(
        r"pod (dsv2-lite-prefill-0-[01]) on node (sim-ascend-\d+): NPU preflight failed "
        r"\(LinkDown, check links\): device davinci1: hccn_tool -i 1 -link -g says link "
        r"status DOWN",
        cond["message"],
    )
    assert named, cond
    # the pod's own status says it (group recovery may have replaced it meanwhile: poll)
    ended = wait_until(
        lambda: next((e for p in pods(kubectl, namespace, "prefill")
                      if (e := preflight_exit(p))), None),
        "a prefill pod whose container ended with exit 7",
        timeout=TIMEOUT,
    )  # fmt: skip
    assert ended["message"].startswith("NPU preflight failed (LinkDown, check links)"), ended
    warning = wait_until(
        lambda: [e for e in events(kubectl, namespace, REASON_LINK_DOWN)
                 if e["involvedObject"]["kind"] == "PDDeployment"],
        "a Warning Event LinkDown on the PDDeployment",
        timeout=TIMEOUT,
    )  # fmt: skip
    assert warning[0]["type"] == "Warning" and "NPUPreflight: pod " in warning[0]["message"]
    wait_until(
        lambda: condition(kubectl, namespace, "DecodeReady").get("status") == "True",
        "decode Ready: its pods pass every check",
        timeout=TIMEOUT,
    )
    status = get(kubectl, namespace, "pdd", NAME).get("status") or {}
    assert status.get("phase") != "Ready", status
    failed_at = time.monotonic()

    # 2. The link is back (the knob is gone): the instance rolls, passes, and the condition
    #    turns True once every instance is ready.
    body = json.dumps({"spec": {"prefill": {"podAnnotations": {knobs.NPU_LINK_DOWN: None}}}})
    kubectl("patch", "pdd", NAME, "-n", namespace, "--type", "merge", "-p", body)
    wait_until(
        lambda: (get(kubectl, namespace, "pdd", NAME).get("status") or {}).get("phase") == "Ready",
        "Ready once prefill's links are up",
        timeout=TIMEOUT,
    )
    cond = condition(kubectl, namespace, COND_NPU_PREFLIGHT)
    assert (cond["status"], cond["reason"]) == ("True", "NoPreflightFailure"), cond
    runtime_pods = pods(kubectl, namespace, "prefill") + pods(kubectl, namespace, "decode")
    assert len(runtime_pods) == 3 and all(ready(p) for p in runtime_pods), runtime_pods
    print(
        f"\npreflight e2e: LinkDown in status after {failed_at - started:.1f} s, "
        f"whole test {time.monotonic() - started:.1f} s",
        file=sys.__stderr__,
    )
