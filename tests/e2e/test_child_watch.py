"""Child watches on a real API server: only our objects are asked for, and edits still repair.

The operator runs behind the fault proxy (every fault rate zero: it only counts), with a resync
period far longer than the test, so a repair can only come from a child watch event. The proxy
records every watch request by path and label selector: each child watch must carry our
selector; none may ask for a kind's every object. Events carry no labels: their watch asks
for the StatefulSet controller's FailedCreate alone, by fields.
"""

from __future__ import annotations

from typing import Any

import pytest
from pdd_e2e import apply, example

#: far longer than the test: a resync must not be what repairs a child
RESYNC_SECONDS = 3600
pytestmark = [pytest.mark.local, pytest.mark.simulated, pytest.mark.timeout(600)]

CHILD_PATHS = {
    "pods": "/api/v1/namespaces/{ns}/pods",
    "configmaps": "/api/v1/namespaces/{ns}/configmaps",
    "services": "/api/v1/namespaces/{ns}/services",
    "statefulsets": "/apis/apps/v1/namespaces/{ns}/statefulsets",
    "deployments": "/apis/apps/v1/namespaces/{ns}/deployments",
    "jobs": "/apis/batch/v1/namespaces/{ns}/jobs",
}


def test_child_watches_carry_our_selector_and_edits_still_repair(
    kubectl: Any,
    namespace: str,
    proxied_operator: Any,
    proxy_stats: Any,
    get_json: Any,
    wait_until: Any,
) -> None:
    proxied_operator(RESYNC_SECONDS)
    apply(kubectl, example("deepseek-v2-lite.yaml", namespace))
    wait_until(lambda: get_json("service", "dsv2-lite-prefill-0"), "children")
    # An unrelated object in the watched namespace: not ours, never asked for.
    kubectl("create", "configmap", "unrelated", "-n", namespace, "--from-literal=a=b")

    # Deleted and edited children come back through watch events alone (no resync).
    kubectl("delete", "service", "dsv2-lite-prefill-0", "-n", namespace)
    wait_until(lambda: get_json("service", "dsv2-lite-prefill-0"), "restored")
    kubectl("scale", "statefulset", "dsv2-lite-decode-0", "-n", namespace, "--replicas=3")
    wait_until(
        lambda: get_json("statefulset", "dsv2-lite-decode-0")["spec"]["replicas"] == 1,
        "replicas restored",
    )
    layout = "dsv2-lite-kv-layout"
    kubectl("patch", "configmap", layout, "-n", namespace, "--type=merge",
            "-p", '{"data": {"plan.json": "{}"}}')  # fmt: skip
    wait_until(
        lambda: get_json("configmap", layout)["data"]["plan.json"] != "{}",
        "layout ConfigMap restored",
    )
    kubectl("delete", "deployment", "dsv2-lite-router", "-n", namespace)
    wait_until(lambda: get_json("deployment", "dsv2-lite-router"), "router back")

    watches = proxy_stats()["watches"]
    for plural, template in CHILD_PATHS.items():
        path = template.format(ns=namespace)
        asked = {k.split(" ", 1)[1] for k in watches if k.split(" ", 1)[0] == path}
        wanted = "labelSelector=ascendpd.io/deployment"
        assert asked == {wanted}, f"{plural}: watched with {asked}, every watch: {watches}"
    events = f"/api/v1/namespaces/{namespace}/events"
    asked = {k.split(" ", 1)[1] for k in watches if k.split(" ", 1)[0] == events}
    fields = "fieldSelector=involvedObject.kind=StatefulSet,reason=FailedCreate"
    assert asked == {f"labelSelector= {fields}"}, f"events: watched with {asked}"
