"""``kept`` is the one place that decides what the cache holds of each kind: hand-written
objects in, the fields the decisions read out, and keeping a kept object changes nothing
(a watch's DELETED event and a resync both pass objects through it again)."""

from __future__ import annotations

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.kubeio.kept import kept

MANAGED = [{"manager": "ascend-pd", "operation": "Apply"}]

POD: Json = {
    "kind": "Pod",
    "metadata": {"name": "d-prefill-0-1", "namespace": "llm", "uid": "u1",
                 "resourceVersion": "7", "labels": {"ascendpd.io/deployment": "d"},
                 "managedFields": MANAGED, "annotations": {"big": "x" * 1000}},
    "spec": {"nodeName": "npu-1", "containers": [{"name": "sglang", "image": "i"}]},
    "status": {"phase": "Running",
               "conditions": [{"type": "Ready", "status": "False"},
                              {"type": "Initialized", "status": "True"}],
               "containerStatuses": [{"name": "sglang", "ready": False, "restartCount": 2,
                                      "image": "i", "imageID": "sha"}]},
}  # fmt: skip
NODE: Json = {
    "kind": "Node",
    "metadata": {"name": "npu-1", "resourceVersion": "9", "labels": {"a": "b"}},
    "spec": {"taints": [{"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}],
             "podCIDR": "10.0.0.0/24"},
    "status": {"conditions": [{"type": "Ready", "status": "Unknown",
                               "lastTransitionTime": "2026-01-01T00:00:00Z"},
                              {"type": "MemoryPressure", "status": "False"}],
               "capacity": {"cpu": "192"}},
}  # fmt: skip
EVENT: Json = {
    "kind": "Event",
    "metadata": {"name": "d-prefill-0.1", "namespace": "llm", "resourceVersion": "3",
                 "managedFields": MANAGED},
    "involvedObject": {"kind": "StatefulSet", "name": "d-prefill-0", "uid": "s1",
                       "apiVersion": "apps/v1"},
    "type": "Warning", "reason": "FailedCreate", "message": "forbidden", "count": 4,
    "source": {"component": "statefulset-controller"},
}  # fmt: skip
STATEFULSET: Json = {
    "kind": "StatefulSet",
    "metadata": {"name": "d-prefill-0", "namespace": "llm", "managedFields": MANAGED},
    "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}}, "template": {"x": 1}},
    "status": {"readyReplicas": 2},
}  # fmt: skip
CONFIGMAP: Json = {
    "kind": "ConfigMap",
    "metadata": {"name": "d-kv-layout", "namespace": "llm"},
    "data": {"kv-layout.json": "{}" * 1000},
}


def test_each_kind_keeps_what_the_decisions_read() -> None:
    pod = kept(POD)
    assert pod["metadata"].keys() == {"name", "namespace", "uid", "resourceVersion", "labels"}
    assert pod["spec"] == {"nodeName": "npu-1"}
    assert pod["status"]["conditions"] == [{"type": "Ready", "status": "False"}]
    assert pod["status"]["containerStatuses"] == [
        {"name": "sglang", "ready": False, "restartCount": 2}
    ]
    node = kept(NODE)
    assert node["spec"]["taints"] == [
        {"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}
    ]
    assert [c["type"] for c in node["status"]["conditions"]] == ["Ready"]
    assert "capacity" not in node["status"]
    event = kept(EVENT)
    assert event["metadata"]["labels"] == {"ascendpd.io/deployment": "d"}
    assert "managedFields" not in event["metadata"] and "source" not in event
    sts = kept(STATEFULSET)
    assert sts["spec"] == {"replicas": 2, "selector": {"matchLabels": {"a": "b"}}}
    assert sts["status"] == {"readyReplicas": 2} and "managedFields" not in sts["metadata"]
    assert "data" not in kept(CONFIGMAP)


def test_keeping_a_kept_object_changes_nothing() -> None:
    for obj in (POD, NODE, EVENT, STATEFULSET, CONFIGMAP):
        once = kept(obj)
        assert kept(once) == once, obj["kind"]
        assert once["kind"] == obj["kind"]
