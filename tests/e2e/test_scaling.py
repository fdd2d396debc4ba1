"""Elastic roles on the local control plane: a PDRoleScaler per scaled role, driven by
``kubectl scale`` and by the real HPA controller of kube-controller-manager, within the
P:D ratio bounds.

The oracles are the API server's objects: the StatefulSets that exist, the pods the
scaler's own ``status.selector`` matches (as ``kubectl get pods -l`` counts them), and
the HPA controller's writes to the scale subresource; never the operator's builders.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pdd_e2e import apply, example, get, pdd_doc

from ascend_pd_dev.kubelet_sim.knobs import TERMINATE_AFTER
from ascend_pd_dev.testtools.recording_router import RecordingRouter, Requests, selector_of
from ascend_pd_operator.api.vocabulary import role_status
from reliability.drain_crash import DrainSampler

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

NAME = "dsv2-lite"
SCALER = f"pdrolescaler/{NAME}-decode"
#: How long each recorded request lasts, and how long a deleted decode pod keeps serving.
REQUEST_SECONDS = 1.0
DRAIN_SECONDS = 3


def _decode_instances(kubectl: Any, namespace: str) -> list[str]:
    items = (get(kubectl, namespace, "statefulsets") or {}).get("items", [])
    return sorted(
        i["metadata"]["name"]
        for i in items
        if i["metadata"]["name"].startswith(f"{NAME}-decode-")
        and not i["metadata"].get("deletionTimestamp")
    )


def _selected(kubectl: Any, namespace: str, selector: str) -> list[str]:
    done = kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json")
    return sorted(p["metadata"]["name"] for p in json.loads(done.stdout)["items"])


def _scaler(kubectl: Any, namespace: str) -> dict[str, Any]:
    return get(kubectl, namespace, SCALER) or {}


def _settled_at(kubectl: Any, namespace: str, n: int) -> Any:
    """The decode role runs ``n`` instances, and the scaler says so: ``status.replicas``
    is what its selector matches, one leader per instance."""

    def check() -> Any:
        scaler = _scaler(kubectl, namespace)
        st = scaler.get("status") or {}
        if not st.get("selector") or st.get("replicas") != n:
            return None
        leaders = _selected(kubectl, namespace, st["selector"])
        instances = _decode_instances(kubectl, namespace)
        if len(leaders) != n or len(instances) != n:
            return None
        return scaler, leaders, instances

    return check


def _pdd_status(kubectl: Any, namespace: str) -> dict[str, Any]:
    return dict((get(kubectl, namespace, "pdd", NAME) or {}).get("status") or {})


def _prefill_and_router(kubectl: Any, namespace: str) -> dict[str, str]:
    """What a decode scaling must never touch: prefill's StatefulSet generation and the
    router pod's uid."""
    sts = get(kubectl, namespace, "statefulset", f"{NAME}-prefill-0") or {}
    pods = get(kubectl, namespace, "pods", "-l", "app.kubernetes.io/component=router") or {}
    return {
        "prefill": str(sts["metadata"]["generation"]),
        **{p["metadata"]["name"]: p["metadata"]["uid"] for p in pods.get("items", [])},
    }


def test_kubectl_scale_and_the_hpa_drive_one_role_within_the_ratio(
    kubectl: Any, namespace: str, operator: Any, wait_until: Any, api_client: Any
) -> None:
    docs = example("deepseek-v2-lite.yaml", namespace)
    spec = pdd_doc(docs)["spec"]
    spec["decode"]["scaling"] = {"mode": "External", "minReplicas": 1, "maxReplicas": 4}
    # a draining pod keeps running this long after its deletion, as SGLang finishing the
    # requests it holds (within drainTimeoutSeconds, 600 s by default)
    spec["decode"]["podAnnotations"] = {TERMINATE_AFTER: str(DRAIN_SECONDS)}
    apply(kubectl, docs)

    # The scaler starts from the role's replicas (2): nothing drains, nothing is added.
    scaler, leaders, instances = wait_until(_settled_at(kubectl, namespace, 2), "2 decode")
    assert scaler["spec"]["replicas"] == 2
    assert scaler["metadata"]["ownerReferences"][0]["kind"] == "PDDeployment"
    assert leaders == [f"{NAME}-decode-0-0", f"{NAME}-decode-1-0"]
    wait_until(lambda: (get(kubectl, namespace, "pdd", NAME) or {}).get("status", {})
               .get("phase") == "Ready", "Ready")  # fmt: skip
    untouched = _prefill_and_router(kubectl, namespace)

    # kubectl scale, through the scale subresource: whole instances of decode only.
    kubectl("scale", SCALER, "-n", namespace, "--replicas=3")
    _, leaders, instances = wait_until(_settled_at(kubectl, namespace, 3), "3 decode")
    assert instances == [f"{NAME}-decode-{i}" for i in range(3)]
    # Down to 1: two drains, one after the other; every pod deleted was marked first, and
    # a request stream routed as sglang-router routes (the selector the operator gave it)
    # loses nothing: each request lasts 1 s, a draining pod keeps serving for 3 s.
    router = get(kubectl, namespace, "deployment", f"{NAME}-router") or {}
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    per_instance = int(_pdd_status(kubectl, namespace)["roles"]["decode"]["nodesPerInstance"])
    stream = Requests(selector_of(args, "decode"), REQUEST_SECONDS, per_instance)
    recording = RecordingRouter(api_client, namespace, stream, "ascendpd.io/role=decode")
    with DrainSampler(api_client, namespace) as sampler, recording:
        wait_until(lambda: len({r.instance for r in stream.sent}) == 3, "requests to all 3")
        kubectl("scale", SCALER, "-n", namespace, "--replicas=1")
        _, leaders, instances = wait_until(_settled_at(kubectl, namespace, 1), "1 decode")

        def drained() -> Any:
            events = get(kubectl, namespace, "events", "--field-selector",
                         f"involvedObject.name={NAME},reason=InstanceDrained") or {}  # fmt: skip
            return len(events.get("items", [])) >= 2 and events["items"]

        drained_events = wait_until(drained, "two InstanceDrained Events")
    assert instances == [f"{NAME}-decode-0"]
    assert sampler.samples > 0 and not sampler.unmarked, sampler.unmarked
    assert stream.lost() == [], stream.lost()
    # requests went to all three instances and finished, the drained ones' included
    done = stream.completed(float("inf"))
    assert {r.instance for r in done} == {f"{NAME}-decode-{i}" for i in range(3)}, done
    assert sorted(e["message"].split()[0] for e in drained_events) == [
        f"{NAME}-decode-1", f"{NAME}-decode-2"]  # fmt: skip
    assert _prefill_and_router(kubectl, namespace) == untouched

    # The real HPA controller: below its minReplicas, it raises the scale (no metrics
    # needed), and the operator follows.
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": f"{NAME}-decode", "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "ascendpd.io/v1alpha1", "kind": "PDRoleScaler",
                               "name": f"{NAME}-decode"},
            "minReplicas": 3,
            "maxReplicas": 4,
            "metrics": [{"type": "Pods", "pods": {
                "metric": {"name": "sglang_token_usage"},
                "target": {"type": "AverageValue", "averageValue": "700m"}}}],
        },
    }  # fmt: skip
    apply(kubectl, [hpa])
    scaler, leaders, instances = wait_until(
        _settled_at(kubectl, namespace, 3), "the HPA raised decode to 3", timeout=180
    )
    assert scaler["spec"]["replicas"] == 3
    assert _prefill_and_router(kubectl, namespace) == untouched
    kubectl("delete", "hpa", f"{NAME}-decode", "-n", namespace)

    # Ratio bounds: prefill scaled too, at most 1 decode per prefill... and at least 2
    # decode per 3 prefill: decode 4 raises prefill to 2, and the status says so.
    kubectl("patch", "pdd", NAME, "-n", namespace, "--type=merge", "-p", json.dumps({"spec": {
        "prefill": {"scaling": {"mode": "External", "minReplicas": 1, "maxReplicas": 3}},
        "scaling": {"prefillPerDecode": {"min": "0.5", "max": "1"}}}}))  # fmt: skip
    kubectl("scale", SCALER, "-n", namespace, "--replicas=4")
    wait_until(_settled_at(kubectl, namespace, 4), "4 decode")

    def prefill_raised() -> Any:
        st = (get(kubectl, namespace, "pdd", NAME) or {}).get("status") or {}
        cond = next((c for c in st.get("conditions", []) if c["type"] == "RatioConstrained"), {})
        prefill = get(kubectl, namespace, f"pdrolescaler/{NAME}-prefill") or {}
        ok = (
            cond.get("status") == "True"
            and role_status(st, "prefill").get("effectiveReplicas") == 2
            and (prefill.get("status") or {}).get("effectiveReplicas") == 2
            and get(kubectl, namespace, "statefulset", f"{NAME}-prefill-1") is not None
        )
        return ok and (cond, prefill)

    cond, prefill = wait_until(prefill_raised, "prefill raised by the ratio")
    assert cond["reason"] == "RatioBounded"
    assert "prefill 1 -> 2" in cond["message"], cond
    # the scaler's own spec is never rewritten: the HPA (or kubectl) keeps what it set
    assert prefill["spec"]["replicas"] == 1
    events = get(kubectl, namespace, "events", "--field-selector",
                 f"involvedObject.name={NAME},reason=RatioBounded") or {}  # fmt: skip
    assert events.get("items"), "no RatioBounded Event"
