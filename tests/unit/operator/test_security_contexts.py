"""The security contexts of the router and runtime pods: the operator's defaults, and the
user's ``podSecurityContext`` / ``containerSecurityContext`` over them.

Expectations are written out by hand (docs/security.md says what each default is for);
the API server's verdict on the rendered templates is ``tests/e2e/test_pod_security_e2e.py``.
"""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import parse_spec
from ascend_pd_operator.api.vocabulary import LABEL_LEGACY_ROUTABLE, Owner
from ascend_pd_operator.builders.router import router_deployment
from ascend_pd_operator.wiring.render_cli import render

from .conftest import load_example

RUNTIME_DEFAULT = {"type": "RuntimeDefault"}
ROUTER_POD = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
              "seccompProfile": RUNTIME_DEFAULT}  # fmt: skip
ROUTER_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                    "readOnlyRootFilesystem": True}  # fmt: skip
RUNTIME_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["NET_RAW"]},
                     "seccompProfile": RUNTIME_DEFAULT}  # fmt: skip


def _render(**spec: Any) -> dict[str, Json]:
    """The pod specs of deepseek-v3-pp2 with ``spec``'s sections updated, by child name."""
    resource = copy.deepcopy(load_example("deepseek-v3-pp2.yaml"))
    for section, fields in spec.items():
        resource["spec"].setdefault(section, {}).update(fields)
    code, manifests, message = render(resource, None, "llm")
    assert code == 0, message
    return {m["metadata"]["name"]: m for m in manifests
            if m["kind"] in ("Deployment", "StatefulSet")}  # fmt: skip


def _pod(manifest: Json) -> Json:
    spec: Json = manifest["spec"]["template"]["spec"]
    return spec


def test_the_router_meets_restricted_by_default() -> None:
    pod = _pod(_render()["dsv3-router"])
    container = pod["containers"][0]
    assert pod["securityContext"] == ROUTER_POD
    assert container["securityContext"] == ROUTER_CONTAINER
    # a writable /tmp on the read-only root filesystem
    assert pod["volumes"] == [{"name": "ascend-pd-tmp", "emptyDir": {}}]
    assert container["volumeMounts"] == [{"name": "ascend-pd-tmp", "mountPath": "/tmp"}]
    # its service discovery watches pods with the account's token
    assert pod["automountServiceAccountToken"] is True
    # no env var for every Service of the namespace: the discovery finds the workers
    assert pod["enableServiceLinks"] is False


def test_a_router_of_0_1_0_keeps_its_template() -> None:
    """The legacy discovery label: no default reaches it until its one roll."""
    resource = load_example("deepseek-v3-pp2.yaml")
    pod = _pod(router_deployment(Owner("dsv3", "llm"), parse_spec(resource["spec"]), "f",
                                 LABEL_LEGACY_ROUTABLE))  # fmt: skip
    assert "securityContext" not in pod and "volumes" not in pod
    assert "enableServiceLinks" not in pod
    assert "securityContext" not in pod["containers"][0]


@pytest.mark.parametrize(
    ("pod_context", "container_context", "pod_expected", "container_expected"),
    [
        # root, as asked: no runAsNonRoot (the kubelet would not start it), no default UID
        ({"runAsUser": 0}, {}, {"runAsUser": 0, "seccompProfile": RUNTIME_DEFAULT},
         ROUTER_CONTAINER),
        # a GID of theirs replaces the default UID too (one choice)
        ({"runAsGroup": 1000}, {},
         {"runAsNonRoot": True, "runAsGroup": 1000, "seccompProfile": RUNTIME_DEFAULT},
         ROUTER_CONTAINER),
        # root at the container: the same
        ({}, {"runAsUser": 0},
         {"seccompProfile": RUNTIME_DEFAULT},
         {**ROUTER_CONTAINER, "runAsUser": 0}),
        # a writable root filesystem, another seccomp profile: theirs, key by key
        ({"seccompProfile": {"type": "Unconfined"}}, {"readOnlyRootFilesystem": False},
         {**ROUTER_POD, "seccompProfile": {"type": "Unconfined"}},
         {**ROUTER_CONTAINER, "readOnlyRootFilesystem": False}),
        # NET_BIND_SERVICE added (restricted allows it): still every other one dropped
        ({}, {"capabilities": {"add": ["NET_BIND_SERVICE"]}}, ROUTER_POD,
         {**ROUTER_CONTAINER, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}),
        # privileged: Kubernetes refuses it beside allowPrivilegeEscalation false
        ({}, {"privileged": True}, ROUTER_POD,
         {"capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True,
          "privileged": True}),
    ],
)  # fmt: skip
def test_the_router_s_contexts_of_the_user_s_win_key_by_key(
    pod_context: Json, container_context: Json, pod_expected: Json, container_expected: Json
) -> None:
    router = {"podSecurityContext": pod_context, "containerSecurityContext": container_context}
    pod = _pod(_render(router=router)["dsv3-router"])
    assert pod.get("securityContext") == pod_expected
    assert pod["containers"][0]["securityContext"] == container_expected


def test_the_runtime_containers_drop_net_raw_and_escalate_nothing() -> None:
    children = _render()
    for name in ("dsv3-prefill-0", "dsv3-prefill-1", "dsv3-decode-0"):
        pod = _pod(children[name])
        assert pod["containers"][0]["securityContext"] == RUNTIME_CONTAINER, name
        # the pod's own context stays the user's (none here): the image's user, root
        assert "securityContext" not in pod, name
        assert pod["hostNetwork"] is True


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        # an added capability joins the default drop
        ({"capabilities": {"add": ["IPC_LOCK"]}},
         {**RUNTIME_CONTAINER, "capabilities": {"drop": ["NET_RAW"], "add": ["IPC_LOCK"]}}),
        # NET_RAW added back: not dropped (the runtime drops after it adds)
        ({"capabilities": {"add": ["NET_RAW"]}},
         {"allowPrivilegeEscalation": False, "capabilities": {"add": ["NET_RAW"]},
          "seccompProfile": RUNTIME_DEFAULT}),
        ({"capabilities": {"add": ["CAP_NET_RAW"]}},
         {"allowPrivilegeEscalation": False, "capabilities": {"add": ["CAP_NET_RAW"]},
          "seccompProfile": RUNTIME_DEFAULT}),
        # their drop replaces the default drop
        ({"capabilities": {"drop": ["ALL"]}},
         {**RUNTIME_CONTAINER, "capabilities": {"drop": ["ALL"]}}),
        # privileged or CAP_SYS_ADMIN: no allowPrivilegeEscalation (Kubernetes refuses false)
        ({"privileged": True},
         {"privileged": True, "capabilities": {"drop": ["NET_RAW"]},
          "seccompProfile": RUNTIME_DEFAULT}),
        ({"capabilities": {"add": ["CAP_SYS_ADMIN"]}},
         {"capabilities": {"drop": ["NET_RAW"], "add": ["CAP_SYS_ADMIN"]},
          "seccompProfile": RUNTIME_DEFAULT}),
        # a seccomp profile of theirs
        ({"seccompProfile": {"type": "Unconfined"}},
         {**RUNTIME_CONTAINER, "seccompProfile": {"type": "Unconfined"}}),
    ],
)  # fmt: skip
def test_a_role_s_container_context_wins_key_by_key(given: Json, expected: Json) -> None:
    children = _render(prefill={"containerSecurityContext": given})
    assert _pod(children["dsv3-prefill-0"])["containers"][0]["securityContext"] == expected
    # decode keeps the defaults
    assert _pod(children["dsv3-decode-0"])["containers"][0]["securityContext"] == (
        RUNTIME_CONTAINER
    )


def test_the_workloads_with_their_contexts_are_valid_kubernetes() -> None:
    children = _render(prefill={"containerSecurityContext": {"privileged": True}},
                       router={"containerSecurityContext": {"privileged": True}})  # fmt: skip
    for manifest in children.values():
        kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
