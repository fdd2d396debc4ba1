"""The pod fields of issue 26 reach the pods they are for, exactly as given, and only there.

Expectations are written out by hand from the spec below, not taken from the builders.
"""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import parse_spec
from ascend_pd_operator.api.vocabulary import Owner
from ascend_pd_operator.builders.model_source import inspector_job
from ascend_pd_operator.wiring.render_cli import render

from .conftest import load_example
from .volcano_schema import CURRENT as VOLCANO_CRD
from .volcano_schema import errors as volcano_errors

OWNER = Owner("dsv3", "llm", uid="u", generation=2)

PREFILL = {
    "imagePullSecrets": [{"name": "registry"}, {"name": "mirror"}],
    "serviceAccountName": "llm-prefill",
    "priorityClassName": "llm-high",
    "podSecurityContext": {"fsGroup": 1000, "sysctls": [{"name": "kernel.shm_rmid_forced",
                                                         "value": "1"}]},
    "containerSecurityContext": {"capabilities": {"add": ["IPC_LOCK"]}, "privileged": False},
    "volumes": [{"name": "toolkit", "hostPath": {"path": "/usr/local/Ascend/ascend-toolkit",
                                                  "type": "Directory"}},
                {"name": "cache", "emptyDir": {}}],
    "volumeMounts": [{"name": "toolkit", "mountPath": "/usr/local/Ascend/ascend-toolkit",
                      "readOnly": True},
                     {"name": "cache", "mountPath": "/root/.cache", "subPath": "prefill"}],
}  # fmt: skip
ROUTER = {
    "nodeSelector": {"node-role.kubernetes.io/infra": ""},
    "tolerations": [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}],
    "imagePullSecrets": [{"name": "registry"}],
    "serviceAccountName": "llm-router",
    "priorityClassName": "llm-router-prio",
    "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 1000},
    "containerSecurityContext": {"readOnlyRootFilesystem": True,
                                 "allowPrivilegeEscalation": False,
                                 "capabilities": {"drop": ["ALL"]},
                                 "seccompProfile": {"type": "RuntimeDefault"}},
    "volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory"}}],
    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
}  # fmt: skip


def _resource() -> Json:
    resource = copy.deepcopy(load_example("deepseek-v3-pp2.yaml"))
    resource["metadata"]["namespace"] = "llm"
    resource["spec"]["prefill"].update(copy.deepcopy(PREFILL))
    resource["spec"]["router"].update(copy.deepcopy(ROUTER))
    resource["spec"]["scheduling"] = {"gang": "volcano", "priorityClassName": "everyone"}
    return resource


def _children(resource: Json) -> dict[tuple[str, str], Json]:
    code, manifests, message = render(resource, None, "llm")
    assert code == 0, message
    return {(m["kind"], m["metadata"]["name"]): m for m in manifests}


@pytest.fixture(scope="module")
def children() -> dict[tuple[str, str], Json]:
    return _children(_resource())


def test_every_manifest_is_valid_kubernetes(children: dict[tuple[str, str], Json]) -> None:
    for (kind, _), manifest in children.items():
        if kind == "PodGroup":  # Volcano's, not in the Kubernetes schemas: Volcano's CRD
            assert volcano_errors(VOLCANO_CRD, manifest) == []
        else:
            kubernetes_validate.validate(
                manifest, kubernetes_validate.latest_version(), strict=True
            )


@pytest.mark.parametrize("instance", ["dsv3-prefill-0", "dsv3-prefill-1"])
def test_a_roles_fields_reach_its_pods(children: dict, instance: str) -> None:
    pod = children[("StatefulSet", instance)]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["imagePullSecrets"] == [{"name": "registry"}, {"name": "mirror"}]
    assert pod["serviceAccountName"] == "llm-prefill"
    # the runtime uses no Kubernetes API, whatever account it runs as
    assert pod["automountServiceAccountToken"] is False
    assert pod["priorityClassName"] == "llm-high"  # the role's, over scheduling's
    assert pod["securityContext"] == {
        "fsGroup": 1000, "sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}]
    }  # fmt: skip
    # theirs over the operator's defaults (test_security_contexts)
    assert container["securityContext"] == {
        "capabilities": {"add": ["IPC_LOCK"], "drop": ["NET_RAW"]}, "privileged": False,
        "allowPrivilegeEscalation": False, "seccompProfile": {"type": "RuntimeDefault"},
    }  # fmt: skip
    # the operator's volumes first, then the user's, as given
    assert [v["name"] for v in pod["volumes"]] == [
        "model", "dshm", "ascend-driver", "kv-layout", "toolkit", "cache"
    ]  # fmt: skip
    assert pod["volumes"][4:] == [
        {"name": "toolkit",
         "hostPath": {"path": "/usr/local/Ascend/ascend-toolkit", "type": "Directory"}},
        {"name": "cache", "emptyDir": {}},
    ]  # fmt: skip
    assert container["volumeMounts"][4:] == [
        {"name": "toolkit", "mountPath": "/usr/local/Ascend/ascend-toolkit", "readOnly": True},
        {"name": "cache", "mountPath": "/root/.cache", "subPath": "prefill"},
    ]
    # what the operator owns is untouched
    assert pod["hostNetwork"] is True
    assert pod["schedulerName"] == "volcano"


def test_a_role_without_them_has_none(children: dict) -> None:
    pod = children[("StatefulSet", "dsv3-decode-0")]["spec"]["template"]["spec"]
    for key in ("imagePullSecrets", "serviceAccountName", "securityContext"):
        assert key not in pod, key
    # the operator's defaults alone (test_security_contexts)
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["NET_RAW"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["priorityClassName"] == "everyone"  # scheduling's
    assert [v["name"] for v in pod["volumes"]] == ["model", "dshm", "ascend-driver", "kv-layout"]


def test_podgroups_take_the_roles_priority(children: dict) -> None:
    assert children[("PodGroup", "dsv3-prefill-0")]["spec"]["priorityClassName"] == "llm-high"
    assert children[("PodGroup", "dsv3-decode-0")]["spec"]["priorityClassName"] == "everyone"


def test_the_routers_fields_reach_its_pod(children: dict) -> None:
    pod = children[("Deployment", "dsv3-router")]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/infra": ""}
    assert pod["tolerations"] == [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["serviceAccountName"] == "llm-router"
    assert pod["automountServiceAccountToken"] is True  # its discovery watches pods
    assert pod["priorityClassName"] == "llm-router-prio"
    # the user's over the operator's restricted defaults: their UID replaces the default
    # UID and GID; the default seccomp profile stays
    assert pod["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}
    }  # fmt: skip
    assert container["securityContext"] == {
        "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
    }  # fmt: skip
    # their own /tmp: the operator's is left out
    assert pod["volumes"] == [{"name": "tmp", "emptyDir": {"medium": "Memory"}}]
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]


def test_the_routers_role_is_bound_to_its_account_too(children: dict) -> None:
    binding = children[("RoleBinding", "dsv3-router")]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "dsv3-router", "namespace": "llm"},
        {"kind": "ServiceAccount", "name": "llm-router", "namespace": "llm"},
    ]
    # the operator's own account still exists: a router pod may run as it meanwhile
    assert ("ServiceAccount", "dsv3-router") in children


def test_without_an_account_the_router_runs_as_its_own() -> None:
    resource = load_example("deepseek-v3-pp2.yaml")
    children = _children(resource)
    pod = children[("Deployment", "dsv3-router")]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "dsv3-router"
    for key in ("nodeSelector", "tolerations", "imagePullSecrets"):
        assert key not in pod, key
    # the operator's restricted defaults (docs/security.md)
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532,
                                      "runAsGroup": 65532,
                                      "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip
    assert pod["volumes"] == [{"name": "ascend-pd-tmp", "emptyDir": {}}]
    subjects = children[("RoleBinding", "dsv3-router")]["subjects"]
    assert subjects == [{"kind": "ServiceAccount", "name": "dsv3-router", "namespace": "llm"}]


def test_the_inspector_runs_as_a_prefill_pod() -> None:
    spec = _resource()["spec"]
    spec["model"].pop("config")
    pod = inspector_job(OWNER, parse_spec(spec))["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["imagePullSecrets"] == [{"name": "registry"}, {"name": "mirror"}]
    assert pod["serviceAccountName"] == "llm-prefill"
    assert pod["automountServiceAccountToken"] is False
    assert pod["priorityClassName"] == "llm-high"
    assert pod["securityContext"]["fsGroup"] == 1000
    assert container["securityContext"] == {
        "capabilities": {"add": ["IPC_LOCK"]}, "privileged": False
    }  # fmt: skip
    assert [v["name"] for v in pod["volumes"]] == ["model", "toolkit", "cache"]
    assert [m["mountPath"] for m in container["volumeMounts"]] == [
        "/models/DeepSeek-V3", "/usr/local/Ascend/ascend-toolkit", "/root/.cache"
    ]  # fmt: skip


def test_the_inspector_reads_a_model_on_a_volume_of_the_users() -> None:
    """No model.volume: an NFS volume of prefill's at model.path holds the model, and the
    inspector mounts it where the launcher will look."""
    spec = load_example("deepseek-v3-pp2.yaml")["spec"]
    spec["model"].pop("config")
    spec["model"].pop("volume")
    spec["prefill"]["volumes"] = [
        {"name": "weights", "nfs": {"server": "nfs.example.com", "path": "/export"}}
    ]
    spec["prefill"]["volumeMounts"] = [{"name": "weights", "mountPath": "/models/DeepSeek-V3",
                                        "readOnly": True}]  # fmt: skip
    pod = inspector_job(OWNER, parse_spec(spec))["spec"]["template"]["spec"]
    assert pod["volumes"] == [
        {"name": "weights", "nfs": {"server": "nfs.example.com", "path": "/export"}}
    ]
    assert pod["containers"][0]["volumeMounts"] == [
        {"name": "weights", "mountPath": "/models/DeepSeek-V3", "readOnly": True}
    ]
