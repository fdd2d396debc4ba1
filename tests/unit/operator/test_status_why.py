"""The not-Ready messages name, per instance, what its pods wait for.

Every pod, Event and PodGroup here is written by hand in the shape the API server (and
Volcano) report them; every expected message is spelled out, not computed.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import Owner
from ascend_pd_operator.builders.pinning import Pin, pin_annotations
from ascend_pd_operator.decisions.events import events as planned_events
from ascend_pd_operator.decisions.status import compute_status
from ascend_pd_operator.decisions.waits import (
    LISTED_INSTANCES,
    QUOTE_CHARS,
    ROLE_MESSAGE_CHARS,
)
from tests.unit.operator.findings import findings_for

OWNER = Owner("dsv3", "llm", uid="u-1", generation=1)
T0 = "2026-01-01T00:00:00Z"
STARTED = "2026-01-01T00:00:05Z"


def sts(name: str, replicas: int = 2, ready: int = 0, created: int = 2) -> Json:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1},
        "spec": {"replicas": replicas},
        "status": {"observedGeneration": 1, "replicas": created, "readyReplicas": ready,
                   "updatedReplicas": replicas},
    }  # fmt: skip


def ready_children() -> dict[tuple[str, str], Json]:
    return {
        ("StatefulSet", "dsv3-prefill-0"): sts("dsv3-prefill-0", ready=2),
        ("StatefulSet", "dsv3-prefill-1"): sts("dsv3-prefill-1", ready=2),
        ("StatefulSet", "dsv3-decode-0"): sts("dsv3-decode-0", ready=2),
        ("Deployment", "dsv3-router"): {"status": {"readyReplicas": 2}},
    }


def pod(
    name: str,
    *,
    node: str = "npu-1",
    ready: bool = False,
    phase: str = "Running",
    conditions: list[Json] | None = None,
    state: Json | None = None,
    last: Json | None = None,
    started: bool | None = None,
    **status: Any,
) -> Json:
    """A runtime pod ``<sts>-<ordinal>`` as the pod watch keeps it (``slim_pod``)."""
    sts_name, _, _ = name.rpartition("-")
    _, role, index = sts_name.rsplit("-", 2)
    running = {"running": {"startedAt": STARTED}}
    container: Json = {"name": "runtime", "ready": ready, "restartCount": 1 if last else 0,
                       "state": running if state is None else state}  # fmt: skip
    if last is not None:
        container["lastState"] = {"terminated": last}
    if started is not None:
        container["started"] = started
    ready_cond = {"type": "Ready", "status": "True" if ready else "False"}
    if not ready:
        ready_cond.update(reason="ContainersNotReady",
                          message="containers with unready status: [runtime]")  # fmt: skip
    return {
        "metadata": {"name": name, "namespace": "llm", "uid": f"uid-{name}",
                     "labels": {"ascendpd.io/deployment": "dsv3", "ascendpd.io/role": role,
                                "ascendpd.io/instance": index}},
        "spec": {"nodeName": node},
        "status": {"phase": phase, "conditions": [ready_cond, *(conditions or [])],
                   "containerStatuses": [container], **status},
    }  # fmt: skip


def unscheduled(name: str, message: str) -> Json:
    p = pod(name, node="", phase="Pending", state={})
    p["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    ]
    p["status"]["containerStatuses"] = []
    return p


def failed_create(sts_name: str, message: str, uid: str | None = None, at: str = T0) -> Json:
    """A FailedCreate Event as the Event watch keeps it (``slim_event``)."""
    return {
        "metadata": {"name": f"{sts_name}.1", "namespace": "llm",
                     "labels": {"ascendpd.io/deployment": "dsv3"}},
        "involvedObject": {"kind": "StatefulSet", "name": sts_name,
                           "uid": uid or f"uid-{sts_name}"},
        "type": "Warning", "reason": "FailedCreate", "count": 3, "lastTimestamp": at,
        "message": f"create Pod {sts_name}-0 in StatefulSet {sts_name} failed error: {message}",
    }  # fmt: skip


def status_of(
    dsv3: Json,
    children: dict[tuple[str, str], Json],
    pods: list[Json] = (),  # type: ignore[assignment]
    events: list[Json] = (),  # type: ignore[assignment]
    previous: Json | None = None,
    router_pods: list[Json] = (),  # type: ignore[assignment]
) -> Json:
    findings = findings_for(OWNER, dsv3, children, previous, pods, events, router_pods)
    return compute_status(findings, T0)


def cond(status: Json, type_: str) -> Json:
    return next(c for c in status["conditions"] if c["type"] == type_)


def prefill_message(
    deployment: Json, children: dict[tuple[str, str], Json], pods: list[Json]
) -> str:
    """The PrefillReady condition's message."""
    message: str = cond(status_of(deployment, children, pods), "PrefillReady")["message"]
    return message


def prefill_0_not_ready(*pods: Json) -> tuple[dict[tuple[str, str], Json], list[Json]]:
    children = ready_children()
    children[("StatefulSet", "dsv3-prefill-0")] = sts("dsv3-prefill-0", ready=0)
    return children, list(pods)


def test_the_scheduler_s_reason_names_the_missing_npus(dsv3: Json) -> None:
    why = "0/6 nodes are available: 6 Insufficient huawei.com/Ascend910."
    children, pods = prefill_0_not_ready(
        unscheduled("dsv3-prefill-0-0", why), unscheduled("dsv3-prefill-0-1", why)
    )
    status = status_of(dsv3, children, pods)
    prefill = cond(status, "PrefillReady")
    assert prefill["reason"] == "InstancesNotReady"
    assert prefill["message"] == (
        "1/2 instances ready (2 nodes each): dsv3-prefill-0 (0/2 pods ready): pod "
        "dsv3-prefill-0-0 not scheduled (Unschedulable): 0/6 nodes are available: 6 "
        "Insufficient huawei.com/Ascend910. (and 1 more pod not ready)"
    )
    assert cond(status, "Ready")["message"] == (
        "waiting for PrefillReady: dsv3-prefill-0 (0/2 pods ready): pod dsv3-prefill-0-0 not "
        "scheduled (Unschedulable): 0/6 nodes are available: 6 Insufficient "
        "huawei.com/Ascend910. (and 1 more pod not ready)"
    )
    assert cond(status, "DecodeReady")["message"] == "1/1 instances ready (2 nodes each)"


def test_a_missing_pvc_is_named(dsv3: Json) -> None:
    # kube-scheduler's words as recorded on 1.20 (1.36 words it otherwise: tests/e2e/
    # test_status_why.py gets them from the real one); the status quotes them whole
    why = '0/6 nodes are available: 6 persistentvolumeclaim "models" not found.'
    children, pods = prefill_0_not_ready(
        unscheduled("dsv3-prefill-0-0", why), unscheduled("dsv3-prefill-0-1", why)
    )
    message = cond(status_of(dsv3, children, pods), "Ready")["message"]
    assert f"not scheduled (Unschedulable): {why}" in message


def test_an_unschedulable_instance_gets_one_event_naming_it_and_the_scheduler_s_words(
    dsv3: Json,
) -> None:
    from ascend_pd_operator.api.models import PDDeploymentSpec
    from ascend_pd_operator.decisions.events import unscheduled_events
    from ascend_pd_operator.decisions.role_status import unscheduled_waits

    why = "0/6 nodes are available: 6 Insufficient huawei.com/Ascend910."
    children, pods = prefill_0_not_ready(
        unscheduled("dsv3-prefill-0-0", why), unscheduled("dsv3-prefill-0-1", why)
    )
    spec = PDDeploymentSpec.model_validate(dsv3["spec"])
    findings = findings_for(OWNER, dsv3, children, None, pods, [], [])
    waiting = unscheduled_waits(findings, spec)
    first = list(unscheduled_events({}, waiting))
    assert [(e.type, e.reason) for e in first] == [("Warning", "InstanceUnschedulable")]
    assert first[0].message == (
        f"dsv3-prefill-0 (0/2 pods ready): pod dsv3-prefill-0-0 not scheduled (Unschedulable): "
        f"{why} (and 1 more pod not ready)"
    )
    # told once: the next reconcile's previous status says it already
    previous = status_of(dsv3, children, pods)
    assert list(unscheduled_events(previous, waiting)) == []
    # every instance ready: nothing waits on the scheduler
    assert unscheduled_waits(findings_for(OWNER, dsv3, ready_children(), None, [], [], []),
                             spec) == {"prefill": [], "decode": []}  # fmt: skip


@pytest.mark.parametrize(
    ("waiting", "said"),
    [
        ({"reason": "ImagePullBackOff",
          "message": 'Back-off pulling image "registry.example.com/ascend-pd-runtime:9.9"'},
         'pod dsv3-prefill-0-0 ImagePullBackOff: Back-off pulling image '
         '"registry.example.com/ascend-pd-runtime:9.9"'),
        ({"reason": "ErrImagePull", "message": "rpc error: code = NotFound desc = not found"},
         "pod dsv3-prefill-0-0 ErrImagePull: rpc error: code = NotFound desc = not found"),
        ({"reason": "CreateContainerConfigError", "message": 'secret "hf" not found'},
         'pod dsv3-prefill-0-0 CreateContainerConfigError: secret "hf" not found'),
    ],
)  # fmt: skip
def test_a_container_s_waiting_reason_is_named(dsv3: Json, waiting: Json, said: str) -> None:
    children, pods = prefill_0_not_ready(
        pod("dsv3-prefill-0-0", phase="Pending", state={"waiting": waiting}, started=False),
        pod("dsv3-prefill-0-1", phase="Pending", state={"waiting": waiting}, started=False),
    )
    message = prefill_message(dsv3, children, pods)
    assert message.endswith(f"dsv3-prefill-0 (0/2 pods ready): {said} (and 1 more pod not ready)")


def test_a_crash_loop_names_the_launcher_s_exit_and_its_meaning(dsv3: Json) -> None:
    """The most telling pod is named (pod 1 crashes; pod 0 only waits for it)."""
    last = {"exitCode": 4, "reason": "Error",
            "message": "host 'dsv3-prefill-0-0.dsv3-prefill-0.llm.svc' did not resolve within "
                       "600 s: [Errno -2] Name or service not known"}  # fmt: skip
    children, pods = prefill_0_not_ready(
        pod("dsv3-prefill-0-0"),
        pod("dsv3-prefill-0-1", state={"waiting": {"reason": "CrashLoopBackOff"}}, last=last),
    )
    assert prefill_message(dsv3, children, pods).endswith(
        "dsv3-prefill-0 (0/2 pods ready): pod dsv3-prefill-0-1 CrashLoopBackOff, last exit 4 "
        "(launcher: the instance leader's or the store's host did not resolve): host "
        "'dsv3-prefill-0-0.dsv3-prefill-0.llm.svc' did not resolve within 600 s: [Errno -2] "
        "Name or service not known (and 1 more pod not ready)"
    )


@pytest.mark.parametrize(
    ("last", "said"),
    [
        ({"exitCode": 137, "reason": "OOMKilled"},
         "last exit 137 OOMKilled (killed by SIGKILL: out of memory, or killed)"),
        # exit 1 and no termination message: not the launcher's (it always leaves one)
        ({"exitCode": 1, "reason": "Error"}, "last exit 1 (and"),
        ({"exitCode": 3, "reason": "Error", "message": "KV layout mismatch: ..."},
         "last exit 3 (launcher: the model's KV layout differs from the operator's): KV layout "
         "mismatch: ..."),
    ],
)  # fmt: skip
def test_the_last_termination_s_exit_code_is_read(dsv3: Json, last: Json, said: str) -> None:
    children, pods = prefill_0_not_ready(
        pod("dsv3-prefill-0-0", state={"waiting": {"reason": "CrashLoopBackOff"}}, last=last),
        pod("dsv3-prefill-0-1"),
    )
    message = prefill_message(dsv3, children, pods)
    assert f"pod dsv3-prefill-0-0 CrashLoopBackOff, {said}" in message


def test_a_pod_security_refusal_is_named_with_its_fix(dsv3: Json) -> None:
    refusal = (
        'pods "dsv3-prefill-0-0" is forbidden: violates PodSecurity "baseline:latest": host '
        'namespaces (hostNetwork=true), hostPath volumes (volume "ascend-driver")'
    )
    children = ready_children()
    children[("StatefulSet", "dsv3-prefill-0")] = sts("dsv3-prefill-0", created=0)
    status = status_of(dsv3, children, [], [failed_create("dsv3-prefill-0", refusal)])
    assert cond(status, "PrefillReady")["message"] == (
        "1/2 instances ready (2 nodes each): dsv3-prefill-0 (0/2 pods ready): StatefulSet "
        'dsv3-prefill-0 cannot create pods (FailedCreate): pods "dsv3-prefill-0-0" is '
        'forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true), '
        'hostPath volumes (volume "ascend-driver"); the namespace\'s Pod Security level does '
        "not admit the runtime pods' host network, host ports and hostPath: label the "
        "namespace pod-security.kubernetes.io/enforce=privileged (docs/security.md)"
    )


def test_the_statefulset_controller_s_prefix_is_dropped_in_either_release_s_words(
    dsv3: Json,
) -> None:
    """The controller's words before the refusal: "create Pod ..." (1.28 to 1.30 at least),
    "Create Pod ..." (as a 1.36 controller manager wrote it): either way the status quotes the API
    server's refusal alone."""
    refusal = 'pods "dsv3-prefill-0-0" is forbidden: exceeded quota: q'
    for verb in ("create", "Create"):
        event = failed_create("dsv3-prefill-0", refusal)
        event["message"] = (
            f"{verb} Pod dsv3-prefill-0-0 in StatefulSet dsv3-prefill-0 failed error: {refusal}"
        )
        children = ready_children()
        children[("StatefulSet", "dsv3-prefill-0")] = sts("dsv3-prefill-0", created=0)
        message = cond(status_of(dsv3, children, [], [event]), "PrefillReady")["message"]
        assert message.startswith(
            "1/2 instances ready (2 nodes each): dsv3-prefill-0 (0/2 pods ready): StatefulSet "
            'dsv3-prefill-0 cannot create pods (FailedCreate): pods "dsv3-prefill-0-0" is '
            "forbidden: exceeded quota: q; a ResourceQuota"
        ), (verb, message)


def test_a_quota_refusal_is_named_and_the_latest_event_wins(dsv3: Json) -> None:
    children = ready_children()
    children[("StatefulSet", "dsv3-decode-0")] = sts("dsv3-decode-0", created=1)
    quota = ('pods "dsv3-decode-0-1" is forbidden: exceeded quota: npus, requested: '
             "requests.huawei.com/Ascend910=8, used: requests.huawei.com/Ascend910=8, limited: "
             "requests.huawei.com/Ascend910=8")  # fmt: skip
    events = [
        failed_create("dsv3-decode-0", quota, at="2026-01-01T00:02:00Z"),
        failed_create("dsv3-decode-0", "an older refusal", at="2026-01-01T00:01:00Z"),
    ]
    pods = [pod("dsv3-decode-0-0")]
    message = cond(status_of(dsv3, children, pods, events), "DecodeReady")["message"]
    assert message == (
        "0/1 instances ready (2 nodes each): dsv3-decode-0 (0/2 pods ready): StatefulSet "
        f"dsv3-decode-0 cannot create pods (FailedCreate): {quota}; a ResourceQuota of the "
        "namespace refuses the pods: raise it, or free what it counts (and 1 more pod not "
        "ready)"
    )


def test_a_failed_create_of_an_older_statefulset_or_one_with_its_pods_is_not_news(
    dsv3: Json,
) -> None:
    children = ready_children()
    children[("StatefulSet", "dsv3-prefill-0")] = sts("dsv3-prefill-0", created=0)
    older = failed_create("dsv3-prefill-0", "exceeded quota: q", uid="uid-deleted-one")
    message = cond(status_of(dsv3, children, [], [older]), "PrefillReady")["message"]
    assert message.endswith("dsv3-prefill-0 (0/2 pods ready): 2 of its pods not created yet")
    # the same StatefulSet's refusal, once its pods exist (the quota was raised), is history
    current = failed_create("dsv3-prefill-0", "exceeded quota: q")
    pods = [pod("dsv3-prefill-0-0"), pod("dsv3-prefill-0-1")]
    message = cond(status_of(dsv3, children, pods, [current]), "PrefillReady")["message"]
    assert "FailedCreate" not in message and "loading weights" in message


def test_loading_weights(dsv3: Json) -> None:
    children, pods = prefill_0_not_ready(
        pod("dsv3-prefill-0-0"), pod("dsv3-prefill-0-1", ready=True)
    )
    assert prefill_message(dsv3, children, pods).endswith(
        "dsv3-prefill-0 (1/2 pods ready): pod dsv3-prefill-0-0 loading weights: running since "
        "2026-01-01T00:00:05Z, ready once its instance leader's SGLang answers /health"
    )


def test_a_pending_podgroup_is_named_before_its_pods(dsv3: Json) -> None:
    gang = copy.deepcopy(dsv3)
    gang["spec"]["scheduling"] = {"gang": "volcano"}
    children, pods = prefill_0_not_ready(
        unscheduled("dsv3-prefill-0-0", "pod group is not ready"),
        unscheduled("dsv3-prefill-0-1", "pod group is not ready"),
    )
    children[("PodGroup", "dsv3-prefill-0")] = {
        "metadata": {"name": "dsv3-prefill-0"},
        "status": {"phase": "Inqueue", "conditions": [
            {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
             "message": "2/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, "
                        "2 minAvailable; Pending: 2 Unschedulable"}]},
    }  # fmt: skip
    assert prefill_message(gang, children, pods).endswith(
        "dsv3-prefill-0 (0/2 pods ready): PodGroup dsv3-prefill-0 Inqueue (NotEnoughResources): "
        "2/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, 2 minAvailable; "
        "Pending: 2 Unschedulable (Volcano starts an instance's pods together, once all of them "
        "fit) (and 2 more pods not ready)"
    )
    children[("PodGroup", "dsv3-prefill-0")] = {"metadata": {"name": "dsv3-prefill-0"}}
    message = prefill_message(gang, children, pods)
    assert "PodGroup dsv3-prefill-0 has no phase yet: is Volcano's scheduler running?" in message


def test_an_instance_in_the_deployment_s_gang_names_that_podgroup(dsv3: Json) -> None:
    """With placement scope Deployment on a Volcano with subgroups, the instance's pin names
    the deployment's PodGroup, which is the one Volcano holds its pods by."""
    gang = copy.deepcopy(dsv3)
    gang["spec"]["scheduling"] = {"gang": "volcano"}
    children, pods = prefill_0_not_ready(
        unscheduled("dsv3-prefill-0-0", "pod group is not ready"),
        unscheduled("dsv3-prefill-0-1", "pod group is not ready"),
    )
    pin = Pin("example.com/super-pod", ("sp-0",), gang="dsv3-gang")
    children[("StatefulSet", "dsv3-prefill-0")]["metadata"]["annotations"] = pin_annotations(pin)
    children[("PodGroup", "dsv3-gang")] = {
        "metadata": {"name": "dsv3-gang"},
        "status": {"phase": "Pending"},
    }
    message = prefill_message(gang, children, pods)
    assert "dsv3-prefill-0 (0/2 pods ready): PodGroup dsv3-gang Pending" in message


def test_a_pod_on_a_lost_node(dsv3: Json) -> None:
    lost = pod("dsv3-prefill-0-0")
    lost["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "NodeNotReady",
                                     "message": "Node is not ready"}]  # fmt: skip
    children, pods = prefill_0_not_ready(lost, pod("dsv3-prefill-0-1"))
    message = prefill_message(dsv3, children, pods)
    assert "pod dsv3-prefill-0-0 not ready (NodeNotReady): Node is not ready" in message


def test_the_message_is_bounded(dsv3: Json) -> None:
    many = copy.deepcopy(dsv3)
    many["spec"]["prefill"]["replicas"] = 6
    scheduler = "0/600 nodes are available: " + ", ".join(
        f"1 node(s) had taint {{team-{i}: x}}, that the pod didn't tolerate" for i in range(600)
    )
    children = ready_children()
    pods = []
    for i in range(6):
        children[("StatefulSet", f"dsv3-prefill-{i}")] = sts(f"dsv3-prefill-{i}")
        pods += [unscheduled(f"dsv3-prefill-{i}-{n}", scheduler) for n in range(2)]
    status = status_of(many, children, pods)
    message = cond(status, "PrefillReady")["message"]
    assert len(message) <= ROLE_MESSAGE_CHARS
    assert message.startswith("0/6 instances ready (2 nodes each): dsv3-prefill-0 ")
    assert message.endswith("; and 3 more instances not ready")
    assert message.count("dsv3-prefill-") == LISTED_INSTANCES * 2  # an instance and its pod
    quote = message.split("(Unschedulable): ", 1)[1].split(" (and 1 more", 1)[0]
    assert len(quote) == QUOTE_CHARS and quote.endswith("...")
    assert len(cond(status, "Ready")["message"]) <= 2 * QUOTE_CHARS + len("waiting for ") + 60


def test_an_env_contract_mismatch_is_its_own_reason_and_event(dsv3: Json) -> None:
    skew = ("env contract version mismatch: the operator wrote version 2 "
            "(ASCEND_PD_CONTRACT_VERSION), this runtime image's launcher speaks version 1 (the "
            "operator is newer than the image); use the runtime image of the operator's "
            "ascend-pd version, or the operator of the image's (docs/upgrade.md)")  # fmt: skip
    children, pods = prefill_0_not_ready(
        pod("dsv3-prefill-0-0", state={"waiting": {"reason": "CrashLoopBackOff"}},
            last={"exitCode": 6, "reason": "Error", "message": skew}),
        pod("dsv3-prefill-0-1", state={"waiting": {"reason": "CrashLoopBackOff"}},
            last={"exitCode": 6, "reason": "Error", "message": skew}),
    )  # fmt: skip
    status = status_of(dsv3, children, pods)
    prefill = cond(status, "PrefillReady")
    assert prefill["reason"] == "EnvContractMismatch"
    assert prefill["message"] == f"pod dsv3-prefill-0-0: {skew} (and 1 more pods)"
    assert cond(status, "Ready")["message"].startswith(
        "waiting for PrefillReady: pod dsv3-prefill-0-0: env contract version mismatch: the "
        "operator wrote version 2"
    )
    posted = planned_events({}, status)
    assert [(e.type, e.reason, e.message) for e in posted] == [
        ("Warning", "EnvContractMismatch", f"PrefillReady: pod dsv3-prefill-0-0: {skew} (and 1 "
         "more pods)")
    ]  # fmt: skip
    # once per message: the next reconcile with the same status posts nothing
    assert planned_events(status, status) == []


def test_a_ready_deployment_says_nothing_more(dsv3: Json) -> None:
    pods = [pod(f"dsv3-prefill-{i}-{n}", ready=True) for i in range(2) for n in range(2)]
    status = status_of(dsv3, ready_children(), pods, [failed_create("dsv3-prefill-0", "old")])
    assert cond(status, "PrefillReady")["message"] == "2/2 instances ready (2 nodes each)"
    assert cond(status, "Ready")["message"] == "every instance and the router ready"


# --- the router ---------------------------------------------------------------------------


def router_pod(name: str, **kwargs: Any) -> Json:
    """A router pod ``dsv3-router-<rs>-<id>`` as the pod watch keeps it."""
    p = pod("dsv3-prefill-0-0", **kwargs)
    p["metadata"].update(
        name=name,
        uid=f"uid-{name}",
        labels={"ascendpd.io/deployment": "dsv3", "app.kubernetes.io/component": "router"},
    )
    p["status"]["containerStatuses"][0]["name"] = "router"
    return p


def router_not_ready(**status: Any) -> dict[tuple[str, str], Json]:
    children = ready_children()
    children[("Deployment", "dsv3-router")] = {
        "metadata": {"name": "dsv3-router"},
        "status": {"readyReplicas": 0, **status},
    }
    return children


@pytest.mark.parametrize(
    ("waiting", "said"),
    [({"reason": "ErrImagePull",
       "message": 'rpc error: code = NotFound desc = failed to pull and unpack image '
                  '"registry.example.com/router:typo"'},
      'pod dsv3-router-5d8f-x2x ErrImagePull: rpc error: code = NotFound desc = failed to pull '
      'and unpack image "registry.example.com/router:typo"'),
     ({"reason": "ImagePullBackOff",
       "message": 'Back-off pulling image "registry.example.com/router:typo"'},
      'pod dsv3-router-5d8f-x2x ImagePullBackOff: Back-off pulling image '
      '"registry.example.com/router:typo"')],
)  # fmt: skip
def test_the_router_s_condition_names_its_pod_s_image_pull(
    dsv3: Json, waiting: Json, said: str
) -> None:
    pods = [router_pod("dsv3-router-5d8f-x2x", phase="Pending", state={"waiting": waiting})]
    status = status_of(dsv3, router_not_ready(), router_pods=pods)
    router = cond(status, "RouterReady")
    assert (router["status"], router["reason"]) == ("False", "RouterNotReady")
    assert router["message"] == f"0/2 replicas ready: {said}"
    # the instances are ready: Ready names the router's cause
    assert cond(status, "Ready")["message"] == (
        f"waiting for RouterReady: router 0/2 replicas ready: {said}"
    )


def test_an_instance_s_cause_comes_first_in_ready(dsv3: Json) -> None:
    children = router_not_ready()
    children[("StatefulSet", "dsv3-prefill-0")] = sts("dsv3-prefill-0", ready=0)
    crash = {"waiting": {"reason": "CrashLoopBackOff"}}
    pods = [pod("dsv3-prefill-0-0", state=crash, last={"exitCode": 137, "reason": "OOMKilled"})]
    routers = [router_pod("dsv3-router-5d8f-x2x", state=crash,
                          last={"exitCode": 1, "reason": "Error"})]  # fmt: skip
    status = status_of(dsv3, children, pods, router_pods=routers)
    assert cond(status, "RouterReady")["message"] == (
        "0/2 replicas ready: pod dsv3-router-5d8f-x2x CrashLoopBackOff, last exit 1"
    )
    assert cond(status, "Ready")["message"].startswith(
        "waiting for PrefillReady, RouterReady: dsv3-prefill-0 (0/2 pods ready): pod "
        "dsv3-prefill-0-0 CrashLoopBackOff, last exit 137 OOMKilled"
    )


def test_a_running_router_waits_for_its_probe_not_for_weights(dsv3: Json) -> None:
    pods = [router_pod("dsv3-router-5d8f-x2x"), router_pod("dsv3-router-5d8f-y3y", ready=True)]
    message = cond(status_of(dsv3, router_not_ready(), router_pods=pods), "RouterReady")["message"]
    assert message == (
        "0/2 replicas ready: pod dsv3-router-5d8f-x2x starting: running since "
        "2026-01-01T00:00:05Z, ready once the router answers /health"
    )


def test_a_refused_router_pod_is_named_from_the_deployment_s_replica_failure(
    dsv3: Json,
) -> None:
    refusal = ('pods "dsv3-router-5d8f-" is forbidden: violates PodSecurity '
               '"restricted:latest": allowPrivilegeEscalation != false')  # fmt: skip
    children = router_not_ready(conditions=[
        {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
         "message": refusal}])  # fmt: skip
    message = cond(status_of(dsv3, children), "RouterReady")["message"]
    assert message == (
        f"0/2 replicas ready: Deployment dsv3-router cannot create pods (FailedCreate): "
        f"{refusal}; the namespace's Pod Security level refuses the router pod: give "
        "spec.router.podSecurityContext and containerSecurityContext what the level asks, or "
        "label the namespace for a level that admits it (docs/security.md)"
    )
    # its pods exist: the old failure is history
    pods = [router_pod("dsv3-router-5d8f-x2x"), router_pod("dsv3-router-5d8f-y3y")]
    message = cond(status_of(dsv3, children, router_pods=pods), "RouterReady")["message"]
    assert "FailedCreate" not in message and "starting: running since" in message


def test_a_router_with_no_word_yet(dsv3: Json) -> None:
    message = cond(status_of(dsv3, router_not_ready()), "RouterReady")["message"]
    assert message == "0/2 replicas ready: 2 of its pods not created yet"
    children = ready_children()
    del children[("Deployment", "dsv3-router")]
    message = cond(status_of(dsv3, children), "RouterReady")["message"]
    assert message == "0/2 replicas ready: Deployment dsv3-router not created yet"
