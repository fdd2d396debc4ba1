"""The not-Ready message names its cause, on a real API server and controller manager.

Each test breaks one thing a first deployment typically gets wrong, as the user would
(a missing PVC, a bad image, a namespace that refuses the pods), and waits until the
PDDeployment's Ready condition names it; the expected words are Kubernetes' own (the
scheduler's, the kubelet's, the quota admission's), not the operator's.

- a missing PVC: the namespace has the volume but not the claim (``no_models_claim``); the
  real kube-scheduler keeps the pods Pending: ``0/8 nodes are available: 8 persistentvolumeclaim
  "models" not found.``;
- a bad image: kubelet-sim is told the registry lacks it (``unpullable-images``, through the
  roles' ``podAnnotations``, or for the router, which has none, its namespace's
  annotations): ErrImagePull, then ImagePullBackOff;
- a refused pod: a ResourceQuota refuses the pods. The refusal is the real one: the API
  server's quota
  admission refuses the StatefulSet controller's create, which reports it only as a
  ``FailedCreate`` Warning Event, the path a Pod Security refusal takes. (The quota
  controller is not run here, so the test writes the quota's status itself.) A Pod
  Security refusal on the 1.36 control plane: ``test_pod_security_e2e.py``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from pdd_e2e import Operator, apply, condition, example, pdd_doc, status

from ascend_pd_dev.kubelet_sim import knobs
from ascend_pd_dev.testtools.kubectl import table_rows

pytestmark = [pytest.mark.simulated, pytest.mark.timeout(600)]

NAME = "dsv2-lite"


def ready_saying(kubectl: Any, namespace: str, *words: str) -> str:
    """The Ready condition's message while it is False and has any of ``words``, else ""."""
    ready = condition(status(kubectl, namespace, NAME), "Ready")
    message = str(ready.get("message", "")) if ready.get("status") == "False" else ""
    return message if any(w in message for w in words) else ""


@pytest.mark.no_models_claim
def test_a_missing_pvc_is_named_and_creating_it_makes_the_deployment_ready(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    apply(kubectl, example("deepseek-v2-lite.yaml", namespace))
    nodes = len(json.loads(kubectl("get", "nodes", "-o", "json").stdout)["items"])
    # kube-scheduler's own words (kubelet-sim's former scheduler left out the counts): 1.36
    # gives its PreFilter's reason once, then its preemption's ("not found")
    claim = 'persistentvolumeclaim "models" not found'
    why = f"not scheduled (Unschedulable): 0/{nodes} nodes are available: {claim}. not found"
    message = wait_until(
        lambda: ready_saying(kubectl, namespace, why),
        "the Ready condition naming the missing PVC",
    )
    assert message.startswith("waiting for PrefillReady, DecodeReady")
    assert f"{NAME}-prefill-0 (0/1 pods ready): pod {NAME}-prefill-0-0 {why}" in message
    expected = (
        f"0/2 instances ready (1 nodes each): {NAME}-decode-0 (0/1 pods ready): pod "
        f"{NAME}-decode-0-0 {why}; {NAME}-decode-1 (0/1 pods ready): pod {NAME}-decode-1-0 {why}"
    )
    decode = wait_until(
        lambda: (
            (c := condition(status(kubectl, namespace, NAME), "DecodeReady"))
            and c.get("message") == expected
            and c
        ),
        "DecodeReady naming the claim for each instance",
    )
    assert decode["reason"] == "InstancesNotReady" and decode["status"] == "False"
    # and an Event per instance, in the same words, once each
    told = wait_until(
        lambda: [e["message"] for e in json.loads(kubectl(
            "get", "events", "-n", namespace, "--field-selector",
            "reason=InstanceUnschedulable", "-o", "json").stdout)["items"]],
        "InstanceUnschedulable Events",
    )  # fmt: skip
    assert f"{NAME}-decode-1 (0/1 pods ready): pod {NAME}-decode-1-0 {why}" in told, told
    assert len(told) == len(set(told)), told
    apply(kubectl, example("models-pvc.yaml", namespace))
    wait_until(lambda: status(kubectl, namespace, NAME).get("phase") == "Ready", "Ready")


def test_a_bad_image_is_named(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    docs = example("deepseek-v2-lite.yaml", namespace)
    bad = "registry.example.com/ascend-pd-runtime:0.1.0-typo"
    spec = pdd_doc(docs)["spec"]
    spec["runtime"]["image"] = bad
    for role in ("prefill", "decode"):
        spec[role]["podAnnotations"] = {knobs.UNPULLABLE_IMAGES: bad}
    apply(kubectl, docs)
    pulling = (f'ImagePullBackOff: Back-off pulling image "{bad}"',
               f'ErrImagePull: rpc error: code = NotFound desc = failed to pull and unpack '
               f'image "{bad}"')  # fmt: skip
    message = wait_until(
        lambda: ready_saying(kubectl, namespace, *pulling),
        "the Ready condition naming the image",
    )
    assert f"{NAME}-prefill-0 (0/1 pods ready): pod {NAME}-prefill-0-0 " in message
    # the kubelet's back-off follows the pull's error; the message follows the kubelet
    wait_until(
        lambda: (
            pulling[0]
            in condition(status(kubectl, namespace, NAME), "PrefillReady").get("message", "")
        ),
        "ImagePullBackOff in PrefillReady",
    )


def test_a_bad_router_image_is_named_in_router_ready(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    bad = "registry.example.com/sglang-router:0.3.2-typo"
    kubectl("annotate", "namespace", namespace, f"{knobs.UNPULLABLE_IMAGES}={bad}")
    docs = example("deepseek-v2-lite.yaml", namespace)
    pdd_doc(docs)["spec"]["router"] = {"image": bad}
    apply(kubectl, docs)
    pulling = (f'ImagePullBackOff: Back-off pulling image "{bad}"',
               f'ErrImagePull: rpc error: code = NotFound desc = failed to pull and unpack '
               f'image "{bad}"')  # fmt: skip

    def router_says(*words: str) -> dict[str, Any] | None:
        router = condition(status(kubectl, namespace, NAME), "RouterReady")
        message = str(router.get("message", ""))
        return router if any(w in message for w in words) else None

    router = wait_until(lambda: router_says(*pulling), "RouterReady naming the image")
    assert (router["status"], router["reason"]) == ("False", "RouterNotReady")
    assert router["message"].startswith(f"0/2 replicas ready: pod {NAME}-router-"), router
    # the kubelet's back-off follows the pull's error; the message follows the kubelet
    wait_until(lambda: router_says(pulling[0]), "ImagePullBackOff in RouterReady")
    # the instances become ready (their image is pulled): Ready names the router's cause
    message = wait_until(
        lambda: ready_saying(kubectl, namespace, f"waiting for RouterReady: router 0/2 "
                             f"replicas ready: pod {NAME}-router-"),
        "the Ready condition naming the router's image",
    )  # fmt: skip
    assert pulling[0] in message, message


def test_a_pod_the_api_server_refuses_is_named_from_the_statefulset_s_failed_create(
    kubectl: Any, api_client: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    quota = {"apiVersion": "v1", "kind": "ResourceQuota",
             "metadata": {"name": "no-pods", "namespace": namespace},
             "spec": {"hard": {"pods": "0"}}}  # fmt: skip
    core.create_namespaced_resource_quota(namespace, quota)
    # What the quota controller would write (the dev cluster does not run it); until a
    # quota has a status, its admission refuses every pod as "status unknown".
    core.patch_namespaced_resource_quota_status(
        "no-pods", namespace, {"status": {"hard": {"pods": "0"}, "used": {"pods": "0"}}}
    )
    docs = example("deepseek-v2-lite.yaml", namespace)
    apply(kubectl, copy.deepcopy(docs))
    refused = (
        f"{NAME}-prefill-0 (0/1 pods ready): StatefulSet {NAME}-prefill-0 cannot create pods "
        f'(FailedCreate): pods "{NAME}-prefill-0-0" is forbidden: exceeded quota: no-pods, '
        "requested: pods=1, used: pods=0, limited: pods=0; a ResourceQuota of the namespace "
        "refuses the pods: raise it, or free what it counts"
    )
    message = wait_until(
        lambda: ready_saying(kubectl, namespace, refused),
        "the Ready condition naming the FailedCreate",
    )
    assert message.startswith("waiting for PrefillReady, DecodeReady")
    # each StatefulSet's refusal is its own Event, told when the controller gets to it: on a
    # busy machine decode-1's may come after prefill's is already named
    decode_refused = f"StatefulSet {NAME}-decode-1 cannot create pods (FailedCreate)"

    def decode_says() -> str | None:
        said = condition(status(kubectl, namespace, NAME), "DecodeReady").get("message", "")
        return said if decode_refused in said else None

    wait_until(decode_says, "DecodeReady naming decode-1's FailedCreate")


def test_kubectl_get_wide_shows_the_ready_counts_and_why_not(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    """The printer columns as the real kubectl prints them from the API server: each
    role's ready/effective instances, the reason of the first condition Ready waits for,
    and with -o wide the endpoint and the Ready message. Only decode's pods cannot pull the
    image (kubelet-sim's registry lacks it for them alone): prefill 1/1, decode 0/2."""
    docs = example("deepseek-v2-lite.yaml", namespace)
    spec = pdd_doc(docs)["spec"]
    spec["decode"]["podAnnotations"] = {knobs.UNPULLABLE_IMAGES: spec["runtime"]["image"]}
    apply(kubectl, docs)

    def listed() -> dict[str, str] | None:
        rows = table_rows(kubectl("get", "pdd", NAME, "-n", namespace, "-o", "wide").stdout)
        row = rows[0] if rows else {}
        pulling = any(w in row.get("MESSAGE", "") for w in ("ErrImagePull", "ImagePullBackOff"))
        # the router and prefill ready, decode waiting for its image
        waits = row.get("MESSAGE", "").startswith("waiting for DecodeReady: ")
        return row if row.get("PREFILL") == "1/1" and pulling and waits else None

    row = wait_until(listed, "kubectl get pdd -o wide: prefill 1/1, decode's image named")
    assert list(row) == ["NAME", "READY", "PHASE", "PREFILL", "DECODE", "REASON", "UPDATES",
                         "AGE", "PP", "LAYERS", "ROUTER", "ENDPOINT", "MESSAGE"]  # fmt: skip
    assert row["ROUTER"] == "2/2"
    assert (row["READY"], row["DECODE"], row["REASON"]) == ("False", "0/2", "InstancesNotReady")
    assert row["PHASE"] in ("Pending", "Progressing"), row
    assert row["ENDPOINT"] == f"http://{NAME}-router.{namespace}.svc:8000"
    assert row["MESSAGE"].startswith(f"waiting for DecodeReady: {NAME}-decode-0 (0/1 pods "
                                     f"ready): pod {NAME}-decode-0-0 "), row  # fmt: skip
    # without -o wide: the counts and the reason, no message
    (short,) = table_rows(kubectl("get", "pdd", NAME, "-n", namespace).stdout)
    assert list(short) == ["NAME", "READY", "PHASE", "PREFILL", "DECODE", "REASON", "UPDATES",
                           "AGE"]  # fmt: skip
    assert (short["PREFILL"], short["DECODE"]) == ("1/1", "0/2")
