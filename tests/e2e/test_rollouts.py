"""Day-2 operations on the local control plane, checked by sampled invariants.

A sampler thread reads the runtime pods (and the PDDeployment's status) every ~200 ms
while a change rolls out, straight from the API server, and records what a user would
see: how many instances of a role were Ready, whether an instance ever had Ready pods of
two templates, and which KV-layout generations the router could discover. The
expectations come from the issue's rules, not from the operator's own code.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client
from pdd_e2e import Operator, apply, example, pdd_doc

from ascend_pd_dev.kubelet_sim.knobs import READY_AFTER as READY_AFTER_ANNOTATION
from ascend_pd_dev.kubelet_sim.testing import crash_pod, set_node_ready
from ascend_pd_dev.testtools.faultproxy import FaultProxy
from ascend_pd_operator.api.vocabulary import LABEL_FINGERPRINT, role_status
from reliability.rollout_watch import Sampler, pod_ready

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def _patch(kubectl: Any, namespace: str, name: str, spec: dict[str, Any]) -> None:
    kubectl("patch", "pdd", name, "-n", namespace, "--type=merge",
            "-p", json.dumps({"spec": spec}))  # fmt: skip


def _rolled_out(kubectl: Any, namespace: str, name: str) -> Callable[[], Any]:
    def done() -> Any:
        cr = json.loads(kubectl("get", "pdd", name, "-n", namespace, "-o", "json").stdout)
        st = cr.get("status") or {}
        return (
            st.get("observedGeneration") == cr["metadata"]["generation"]
            and st.get("phase") == "Ready"
            and (st.get("rollout") or {}).get("phase") == "Complete"
            and st
        )

    return done


def _sampled_rollout(
    kubectl: Any, namespace: str, api_client: Any, wait_until: Any, spec: dict[str, Any]
) -> tuple[Any, Any, Sampler]:
    """Once dsv3 is Ready, patch ``spec`` into it and wait for the rollout, sampled
    throughout: (status before, status after, the sampler)."""
    before = wait_until(_rolled_out(kubectl, namespace, "dsv3"), "Ready before the change")
    with Sampler(api_client, namespace, "dsv3", {"prefill": 2, "decode": 2}) as sampler:
        _patch(kubectl, namespace, "dsv3", spec)
        final = wait_until(_rolled_out(kubectl, namespace, "dsv3"), "rolled out", timeout=300)
    return before, final, sampler


def _within_bounds(sampler: Sampler, when: str) -> int:
    """Check the samples of a rollout of 3 prefill instances with maxUnavailable 1: no
    sampling error, never fewer than 2 Ready, never a mixed instance. Returns the fewest
    Ready."""
    assert not sampler.errors
    worst = min(s.ready["prefill"] for s in sampler.samples)
    assert worst >= 2, f"prefill Ready instances fell to {worst} {when}"
    assert [s.mixed for s in sampler.samples if s.mixed] == []
    return worst


#: kubelet-sim turns a pod Ready this long after its container started (a model loading).
READY_AFTER = {READY_AFTER_ANNOTATION: "2"}


def _three_prefill_instances_of_two_nodes(namespace: str) -> list[dict[str, Any]]:
    docs = example("deepseek-v3-pp2.yaml", namespace)
    spec = pdd_doc(docs)["spec"]
    # TP 4 × PP 2 on 4 NPUs per node: 2 nodes per prefill instance
    spec["prefill"].update(replicas=3, devicesPerNode=4, podAnnotations=READY_AFTER)
    spec["prefill"]["parallelism"]["tensor"] = 4
    spec["decode"]["podAnnotations"] = READY_AFTER
    spec["rollout"] = {"maxUnavailable": 1}
    return docs


def test_an_image_change_rolls_whole_instances_within_max_unavailable(
    kubectl: Any, namespace: str, operator: Operator, api_client: Any, wait_until: Any
) -> None:
    apply(kubectl, _three_prefill_instances_of_two_nodes(namespace))
    image = "registry.example.com/ascend-pd-runtime:0.2.0"
    _, final, sampler = _sampled_rollout(
        kubectl, namespace, api_client, wait_until, {"runtime": {"image": image}}
    )
    samples = sampler.samples
    assert len(samples) >= 10 and not sampler.errors
    worst = min(s.ready["prefill"] for s in samples)
    updated = sorted({role_status(s.status, "prefill").get("updatedReplicas", 0) for s in samples})
    print(f"image rollout: {len(samples)} samples, worst Ready prefill instances {worst}/3, "
          f"updated prefill instances seen {updated}")  # fmt: skip
    assert worst >= 2, f"prefill Ready instances fell to {worst} (maxUnavailable 1 of 3)"
    assert [s.mixed for s in samples if s.mixed] == []
    assert all(not s.labelled_non_leaders for s in samples)
    # the status showed the rollout while it ran, then its end
    progressing = [s.status for s in samples
                   if (s.status.get("rollout") or {}).get("phase") == "Progressing"]  # fmt: skip
    assert progressing, "the status never showed the rollout in progress"
    assert any(st["roles"]["prefill"].get("updatedReplicas", 0) in (1, 2) for st in progressing)
    assert all(st["phase"] != "Ready" for st in progressing)
    roles = final["roles"]
    assert roles["prefill"]["updatedReplicas"] == 3 and roles["decode"]["updatedReplicas"] == 1
    assert _runtime_images(api_client, namespace) == {image}


def test_a_layout_change_starts_a_new_generation_never_mixed_in_the_router(
    kubectl: Any, namespace: str, operator: Operator, api_client: Any, wait_until: Any
) -> None:
    apply(kubectl, _three_prefill_instances_of_two_nodes(namespace))
    before, final, sampler = _sampled_rollout(
        kubectl, namespace, api_client, wait_until, {"prefill": {"layerPartition": [31, 30]}}
    )
    old = before["kvLayout"]["fingerprint"]
    new = final["kvLayout"]["fingerprint"]
    assert new != old and final["rollout"]["servingFingerprint"] == new
    samples = sampler.samples
    assert len(samples) >= 10 and not sampler.errors
    # every router pod's two selectors name one generation: it never pairs two
    named = [gens for s in samples for _, gens in s.routers]
    assert named and all(len(g) == 2 and len(set(g)) == 1 for g in named), set(named)
    # The generations Ready routers serve, per sample: the old one, then both while the
    # router's Deployment rolls (its old and new pods Ready at once, listed in any order),
    # then the new one, never back. (Flattening the pods of a sample into one list read
    # "new, old" as going back whenever the new pod was listed first.)
    served = [{g[0] for ready, g in s.routers if ready} for s in samples]
    served = [gens for gens in served if gens]
    assert served[0] == {old} and served[-1] == {new}, served
    phase = {frozenset({old}): 0, frozenset({old, new}): 1, frozenset({new}): 2}
    steps = [phase[frozenset(gens)] for gens in served]
    assert steps == sorted(steps), f"went back to the old generation: {served}"
    # the router switched only once the new generation had a Ready prefill and decode leader
    first = next(s for s in samples if any(g[0] == new for _, g in s.routers))
    assert first.discoverable.get(("prefill", new)) and first.discoverable.get(("decode", new))
    assert all(not s.labelled_non_leaders for s in samples)
    switch = samples.index(first) * sampler.period
    print(
        f"generation switch: {len(samples)} samples; the router moved to {new} after "
        f"~{switch:.1f} s; worst Ready prefill {min(s.ready['prefill'] for s in samples)}/3"
    )
    pods = _runtime_pods(api_client, namespace)
    assert {(p.metadata.labels or {}).get(LABEL_FINGERPRINT) for p in pods} == {new}
    routers = (
        client.CoreV1Api(api_client)
        .list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=router")
        .items
    )
    assert all((p.metadata.labels or {}).get(LABEL_FINGERPRINT) == new for p in routers)


def _runtime_pods(api_client: Any, namespace: str) -> list[Any]:
    return list(
        client.CoreV1Api(api_client)
        .list_namespaced_pod(
            namespace, label_selector="ascendpd.io/deployment=dsv3,ascendpd.io/role"
        )
        .items
    )


def _runtime_images(api_client: Any, namespace: str) -> set[str]:
    return {c.image for p in _runtime_pods(api_client, namespace) for c in p.spec.containers}


def _uids(api_client: Any, namespace: str) -> dict[str, str]:
    return {
        p.metadata.name: p.metadata.uid
        for p in _runtime_pods(api_client, namespace)
        if p.metadata.deletion_timestamp is None
    }


def test_a_deleted_worker_restarts_its_whole_instance_and_only_it(
    kubectl: Any, namespace: str, operator: Operator, api_client: Any, wait_until: Any
) -> None:
    apply(kubectl, _three_prefill_instances_of_two_nodes(namespace))
    wait_until(_rolled_out(kubectl, namespace, "dsv3"), "Ready")
    before = _uids(api_client, namespace)
    started = time.monotonic()
    kubectl("delete", "pod", "dsv3-prefill-1-1", "-n", namespace, "--wait=false")
    sick = {"dsv3-prefill-1-0", "dsv3-prefill-1-1"}

    def restarted() -> bool:
        now = _uids(api_client, namespace)
        return sick <= set(now) and all(now[p] != before[p] for p in sick)

    wait_until(restarted, "every pod of dsv3-prefill-1 replaced", timeout=120)
    took = time.monotonic() - started
    after = wait_until(_rolled_out(kubectl, namespace, "dsv3"), "Ready again")
    now = _uids(api_client, namespace)
    assert {p: u for p, u in now.items() if p not in sick} == {
        p: u for p, u in before.items() if p not in sick
    }, "another instance was touched"
    print(json.dumps(after, indent=1)[:3000])
    (record,) = after["recovery"]
    assert record["instance"] == "dsv3-prefill-1" and record["restarts"] == 1
    assert record["firstFailure"]["reason"] == "Deleted"
    assert record["firstFailure"]["pod"] == "dsv3-prefill-1-1"
    events = json.loads(kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
    assert any(e["reason"] == "InstanceRestarted" and "dsv3-prefill-1" in e["message"]
               for e in events)  # fmt: skip
    print(f"group recovery: every pod of the instance replaced {took:.1f} s after the delete")


def test_an_operator_killed_mid_restart_leaves_no_instance_half_restarted(
    kubectl: Any, namespace: str, api_client: Any, wait_until: Any, counting_proxy: FaultProxy,
    proxied_operator: Any, proxy_stats: Any,
) -> None:  # fmt: skip
    """The worst moment for the operator to die in group recovery is right after the first
    pod deletion of a restart. Sent as one request per pod, the restart left the instance's
    other pod on its old generation: a mixed group that serves nothing until an operator
    comes back. One request for the whole instance cannot be cut in half."""
    docs = _three_prefill_instances_of_two_nodes(namespace)
    pdd_doc(docs)["spec"]["prefill"]["replicas"] = 2
    operator = proxied_operator(30.0)
    apply(kubectl, docs)
    wait_until(_rolled_out(kubectl, namespace, "dsv3"), "Ready")
    before = _uids(api_client, namespace)
    sick = {"dsv3-prefill-1-0", "dsv3-prefill-1-1"}
    # every pod deletion the operator sends: the first passes, nothing after it
    counting_proxy.plan = replace(
        counting_proxy.plan, sever_after=r"DELETE /api/v1/namespaces/[^/]+/pods(/[^/]+)?"
    )
    crash_pod(api_client, namespace, "dsv3-prefill-1-1", exit_code=137, message="NPU fault")
    wait_until(lambda: proxy_stats()["severed_after"], "the operator's first pod deletion")
    operator.kill()
    print(f"severed after {proxy_stats()['severed_after']}; the operator SIGKILLed")

    def replaced() -> bool:
        now = _uids(api_client, namespace)
        return sick <= set(now) and all(now[p] != before[p] for p in sick)

    # with no operator left, only what that one request deleted is ever recreated
    wait_until(replaced, "every pod of dsv3-prefill-1 replaced, no operator running", timeout=90)
    now = _uids(api_client, namespace)
    assert {p: u for p, u in now.items() if p not in sick} == {
        p: u for p, u in before.items() if p not in sick
    }, "another instance was touched"


def test_repeated_crashes_back_off_and_end_in_a_restart_loop_condition(
    cluster: Any, crd: None, kubectl: Any, namespace: str, api_client: Any, tmp_path: Any,
    wait_until: Any,
) -> None:  # fmt: skip
    """A worker's container crashes again and again: each crash restarts the whole instance,
    restarts wait out a doubling backoff, and the third one within the window sets
    InstancesHealthy=False naming the instance and the first crash's termination message."""
    op = Operator(cluster.kubeconfig, namespace, tmp_path / "operator.log",
                  "--restart-backoff-seconds", "2", "--restart-loop-limit", "3")  # fmt: skip
    try:
        apply(kubectl, _three_prefill_instances_of_two_nodes(namespace))
        wait_until(_rolled_out(kubectl, namespace, "dsv3"), "Ready")
        restarts_at: list[float] = []
        for n in range(1, 4):
            before = _uids(api_client, namespace)
            crash_pod(api_client, namespace, "dsv3-prefill-2-1", exit_code=137,
                      message=f"HCCL timeout on rank 1 (crash {n})")  # fmt: skip

            def replaced(b: dict[str, str] = before) -> bool:
                now = _uids(api_client, namespace)
                sick = ("dsv3-prefill-2-0", "dsv3-prefill-2-1")
                return all(p in now and now[p] != b[p] for p in sick)

            wait_until(replaced, f"instance restarted after crash {n}", timeout=120)
            restarts_at.append(time.monotonic())
            others = {p: u for p, u in _uids(api_client, namespace).items()
                      if not p.startswith("dsv3-prefill-2-")}  # fmt: skip
            assert others == {p: u for p, u in before.items()
                              if not p.startswith("dsv3-prefill-2-")}  # fmt: skip
            wait_until(lambda: _ready_pods(api_client, namespace, "dsv3-prefill-2") == 2,
                       "the restarted instance Ready")  # fmt: skip
        # restart n waits 2 * 2**(n-2) s after restart n-1 (the crash itself comes later)
        gaps = [b - a for a, b in itertools.pairwise(restarts_at)]
        assert gaps[1] >= 4.0 - 1.0, gaps  # 1 s slack: the API server's whole-second times

        def looping() -> Any:
            st = json.loads(kubectl("get", "pdd", "dsv3", "-n", namespace, "-o", "json").stdout)
            cond = next((c for c in (st.get("status") or {}).get("conditions", [])
                         if c["type"] == "InstancesHealthy"), {})  # fmt: skip
            return cond.get("status") == "False" and cond

        cond = wait_until(looping, "the RestartLoop condition")
        assert cond["reason"] == "RestartLoop"
        assert "dsv3-prefill-2" in cond["message"]
        assert "HCCL timeout on rank 1 (crash 1)" in cond["message"]
        assert "exit code 137" in cond["message"]
        st = json.loads(kubectl("get", "pdd", "dsv3", "-n", namespace, "-o", "json").stdout)
        (record,) = st["status"]["recovery"]
        assert record["instance"] == "dsv3-prefill-2" and record["restarts"] == 3
        print(f"crash loop: restarts at +{[round(t - restarts_at[0], 1) for t in restarts_at]} s")
    finally:
        op.stop()


def _ready_pods(api_client: Any, namespace: str, instance: str) -> int:
    pods = client.CoreV1Api(api_client).list_namespaced_pod(namespace).items
    return sum(1 for p in pods if p.metadata.name.startswith(instance + "-") and pod_ready(p))


def test_an_operator_killed_mid_rollout_resumes_within_its_bounds(
    cluster: Any, crd: None, kubectl: Any, namespace: str, api_client: Any, tmp_path: Any,
    wait_until: Any,
) -> None:  # fmt: skip
    first = Operator(cluster.kubeconfig, namespace, tmp_path / "first.log")
    second = None
    try:
        apply(kubectl, _three_prefill_instances_of_two_nodes(namespace))
        wait_until(_rolled_out(kubectl, namespace, "dsv3"), "Ready before the change")
        image = "registry.example.com/ascend-pd-runtime:0.3.0"
        with Sampler(api_client, namespace, "dsv3", {"prefill": 2, "decode": 2}) as sampler:
            _patch(kubectl, namespace, "dsv3", {"runtime": {"image": image}})
            # SIGKILL once the first instance is down for its update
            wait_until(lambda: any(s.ready["prefill"] < 3 for s in sampler.samples[-3:]),
                       "the rollout under way")  # fmt: skip
            first.kill()
            second = Operator(cluster.kubeconfig, namespace, tmp_path / "second.log")
            wait_until(_rolled_out(kubectl, namespace, "dsv3"), "rolled out", timeout=300)
        worst = _within_bounds(sampler, "across the restart")
        print(
            f"operator killed mid-rollout: {len(sampler.samples)} samples, "
            f"worst Ready prefill {worst}/3"
        )
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_a_change_mid_rollout_wins_and_the_bounds_hold(
    kubectl: Any, namespace: str, operator: Operator, api_client: Any, wait_until: Any
) -> None:
    apply(kubectl, _three_prefill_instances_of_two_nodes(namespace))
    wait_until(_rolled_out(kubectl, namespace, "dsv3"), "Ready before the change")
    first, newest = (f"registry.example.com/ascend-pd-runtime:0.{v}.0" for v in (4, 5))
    with Sampler(api_client, namespace, "dsv3", {"prefill": 2, "decode": 2}) as sampler:
        _patch(kubectl, namespace, "dsv3", {"runtime": {"image": first}})
        wait_until(lambda: any(s.ready["prefill"] < 3 for s in sampler.samples[-3:]),
                   "the first rollout under way")  # fmt: skip
        _patch(kubectl, namespace, "dsv3", {"runtime": {"image": newest}})
        wait_until(_rolled_out(kubectl, namespace, "dsv3"), "rolled out", timeout=300)
    _within_bounds(sampler, "when the spec changed again")
    assert _runtime_images(api_client, namespace) == {newest}


def test_a_node_turning_not_ready_restarts_the_instances_on_it_and_only_them(
    kubectl: Any, namespace: str, operator: Operator, api_client: Any, wait_until: Any
) -> None:
    apply(kubectl, _three_prefill_instances_of_two_nodes(namespace))
    wait_until(_rolled_out(kubectl, namespace, "dsv3"), "Ready")
    core = client.CoreV1Api(api_client)
    pods = core.list_namespaced_pod(namespace, label_selector="ascendpd.io/role").items
    node = next(p.spec.node_name for p in pods if p.metadata.name == "dsv3-prefill-1-1")
    hit = {p.metadata.labels["ascendpd.io/instance"] + p.metadata.labels["ascendpd.io/role"]
           for p in pods if p.spec.node_name == node}  # fmt: skip
    sick = {p.metadata.name for p in pods
            if p.metadata.labels["ascendpd.io/instance"] + p.metadata.labels["ascendpd.io/role"]
            in hit}  # fmt: skip
    before = _uids(api_client, namespace)
    set_node_ready(api_client, node, ready=False)
    try:

        def restarted() -> bool:
            now = _uids(api_client, namespace)
            return all(p in now and now[p] != before[p] for p in sick)

        wait_until(restarted, f"the instances on {node} restarted", timeout=120)
        now = _uids(api_client, namespace)
        assert {p: u for p, u in now.items() if p not in sick} == {
            p: u for p, u in before.items() if p not in sick
        }, "an instance with no pod on the node was touched"
        st = json.loads(kubectl("get", "pdd", "dsv3", "-n", namespace, "-o", "json").stdout)
        records = {r["instance"]: r for r in st["status"]["recovery"]}
        first = records["dsv3-prefill-1"]["firstFailure"]
        assert first["reason"] == "NodeNotReady" and node in first["message"]
    finally:
        set_node_ready(api_client, node, ready=True)


def test_with_surge_the_old_generation_serves_at_full_size_until_the_switch(
    kubectl: Any, namespace: str, operator: Operator, api_client: Any, wait_until: Any
) -> None:
    docs = _three_prefill_instances_of_two_nodes(namespace)
    spec = pdd_doc(docs)["spec"]
    spec["prefill"]["replicas"] = 2
    spec["rollout"] = {"maxUnavailable": 0, "maxSurge": 1}
    apply(kubectl, docs)
    before, final, sampler = _sampled_rollout(
        kubectl, namespace, api_client, wait_until, {"prefill": {"layerPartition": [31, 30]}}
    )
    old = before["kvLayout"]["fingerprint"]
    new = final["kvLayout"]["fingerprint"]
    samples = sampler.samples
    assert not sampler.errors
    switch = next(i for i, s in enumerate(samples) if any(g[0] == new for _, g in s.routers))
    # until the router moved, the old generation kept every instance Ready and discoverable
    short = [(i, s.discoverable) for i, s in enumerate(samples[:switch])
             if s.discoverable.get(("prefill", old), 0) < 2
             or s.discoverable.get(("decode", old), 0) < 1]  # fmt: skip
    assert short == [], short[:3]
    assert any(role_status(s.status, "prefill").get("surgeReplicas") for s in samples)
    # the surge is gone at the end: the role's own instances, all of the new generation
    prefill = final["roles"]["prefill"]
    assert prefill["replicas"] == 2 and prefill["surgeReplicas"] == 0
    sts = client.AppsV1Api(api_client).list_namespaced_stateful_set(namespace).items
    assert sorted(s.metadata.name for s in sts) == [
        "dsv3-decode-0", "dsv3-prefill-0", "dsv3-prefill-1"]  # fmt: skip
    print(
        f"surge generation switch: {len(samples)} samples, switch at ~{switch * 0.2:.1f} s, "
        f"old generation at full size until then"
    )
