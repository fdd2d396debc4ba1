"""MindCluster's device-info ConfigMaps, read by spec.placement (``--placement-device-info``):
the parser on ConfigMaps in the device plugin's format, what placement makes of the chips
they name, and the one LIST that reads them."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_pd_operator.decisions.device_info import (
    DeviceInfoError,
    NodeDevices,
    device_info,
    node_of,
    parse,
)
from ascend_pd_operator.decisions.placement import Usage, decide
from ascend_pd_operator.kubeio.errors import KubeError
from ascend_pd_operator.wiring.reconciler import USAGE_FIELD_SELECTOR, observe_usage

from .test_placement import ALL, OWNER, node, nodes, spec

NPU = "huawei.com/Ascend910"
FIXTURE = Path(__file__).parent / "fixtures" / "mindcluster" / "deviceinfo-kube-system.yaml"


def listed() -> list[dict[str, Any]]:
    return list(yaml.safe_load(FIXTURE.read_text())["items"])


def by_name(name: str) -> dict[str, Any]:
    return next(cm for cm in listed() if cm["metadata"]["name"] == name)


def with_cfg(text: str) -> dict[str, Any]:
    cm = copy.deepcopy(by_name("mindx-dl-deviceinfo-a3-sp0-n0"))
    cm["data"]["DeviceInfoCfg"] = text
    return cm


# --- the parser -------------------------------------------------------------------------


def test_the_node_is_the_name_after_the_prefix() -> None:
    assert node_of("mindx-dl-deviceinfo-a3-sp0-n1") == "a3-sp0-n1"
    assert node_of("mindx-dl-deviceinfo-") is None
    assert node_of("kube-proxy") is None
    assert node_of("mindx-dl-nodeinfo-a3-sp0-n1") is None  # NodeD's, not the device plugin's


def test_unhealthy_and_network_unhealthy_chips_of_the_resource() -> None:
    found = parse(by_name("mindx-dl-deviceinfo-a3-sp0-n1"), NPU)
    assert found == NodeDevices(unhealthy=("Ascend910-6",), network_unhealthy=("Ascend910-2",))
    assert found.bad == ("Ascend910-2", "Ascend910-6")
    assert found.describe() == "Ascend910-6 unhealthy, Ascend910-2 network-unhealthy"
    # the keys follow the resource name: another resource's lists are not this one's
    assert parse(by_name("mindx-dl-deviceinfo-a3-sp0-n1"), "huawei.com/npu") == NodeDevices()


def test_a_chip_in_both_lists_counts_once() -> None:
    found = parse(by_name("mindx-dl-deviceinfo-a2-n3"), NPU)
    assert found.unhealthy == ("Ascend910-6", "Ascend910-7")
    assert found.network_unhealthy == ("Ascend910-7",)
    assert found.bad == ("Ascend910-6", "Ascend910-7")
    assert found.describe() == "Ascend910-6 unhealthy, Ascend910-7 unhealthy"


def test_every_device_info_configmap_of_kube_system_and_nothing_else() -> None:
    found = device_info(listed(), NPU)
    # a3-sp0-n0 reports no bad chip; kube-proxy is no device info
    assert set(found.nodes) == {"a3-sp0-n1", "a2-n3"}
    assert found.problems == ()


@pytest.mark.parametrize(
    ("cfg", "says"),
    [
        ("{not json", "data.DeviceInfoCfg is not JSON"),
        (json.dumps({"DeviceInfo": {"UpdateTime": 1}}), "no object DeviceInfo.DeviceList"),
        (json.dumps([1, 2]), "no object DeviceInfo.DeviceList"),
        (
            json.dumps({"DeviceInfo": {"DeviceList": {f"{NPU}-Unhealthy": ["Ascend910-1"]}}}),
            "DeviceInfo.DeviceList['huawei.com/Ascend910-Unhealthy'] is ['Ascend910-1']: must "
            "be a comma-joined list of chip names (text)",
        ),
    ],
)
def test_a_configmap_not_in_the_format_is_named_and_says_nothing(cfg: str, says: str) -> None:
    with pytest.raises(DeviceInfoError) as err:
        parse(with_cfg(cfg), NPU)
    assert str(err.value).startswith("ConfigMap kube-system/mindx-dl-deviceinfo-a3-sp0-n0: ")
    assert says in str(err.value)
    found = device_info([with_cfg(cfg), by_name("mindx-dl-deviceinfo-a2-n3")], NPU)
    assert set(found.nodes) == {"a2-n3"}  # the others are still read
    assert len(found.problems) == 1 and says in found.problems[0]


def test_a_configmap_without_the_key_is_named() -> None:
    cm = by_name("mindx-dl-deviceinfo-a3-sp0-n0")
    cm["data"] = {"SwitchInfoCfg": "{}"}
    with pytest.raises(DeviceInfoError, match="no data key DeviceInfoCfg"):
        parse(cm, NPU)


# --- placement --------------------------------------------------------------------------


def sick_usage(**bad: NodeDevices) -> Usage:
    return Usage(devices=bad)


def test_network_unhealthy_chips_the_kubelet_still_offers_are_not_counted() -> None:
    # sp-0 and sp-1: 6 nodes each (the deployment needs 6 with 8 free). MindCluster says
    # one sp-0 node has a chip whose network is down; the kubelet still offers all 8.
    topology = nodes(("sp-0", 6), ("sp-1", 7))
    plain = decide(OWNER, spec(), ALL, {}, topology, Usage(), {})
    assert plain.domain == "sp-0"  # the best fit without device info
    bad = sick_usage(**{"sp-0-n2": NodeDevices(network_unhealthy=("Ascend910-2",))})
    found = decide(OWNER, spec(), ALL, {}, topology, bad, {})
    assert (found.status, found.domain) == ("True", "sp-1")
    assert {"domain": "sp-0", "nodes": 6, "freeNpus": 47} in found.capacity


def test_a_chip_the_kubelet_already_withholds_is_not_subtracted_twice() -> None:
    # 16-chip node, allocatable 15 (the device plugin told the kubelet chip 6 is
    # unhealthy); MindCluster names chip 6 unhealthy and chip 2's network: 14 usable, not 13
    topology = {"n": node("n", "sp-0", 16, allocatable=15)}
    one = decide(OWNER, spec(), [("decode", 0)], {}, topology, Usage(), {})
    assert one.capacity == ({"domain": "sp-0", "nodes": 1, "freeNpus": 15},)
    bad = sick_usage(n=parse(by_name("mindx-dl-deviceinfo-a3-sp0-n1"), NPU))
    found = decide(OWNER, spec(), [("decode", 0)], {}, topology, bad, {})
    assert found.capacity == ({"domain": "sp-0", "nodes": 1, "freeNpus": 14},)


def test_unhealthy_npus_names_the_nodes_and_chips() -> None:
    # 6 nodes, one with a bad chip: only with that chip would the deployment fit
    topology = nodes(("sp-0", 6))
    bad = sick_usage(**{
        "sp-0-n4": NodeDevices(unhealthy=("Ascend910-6",), network_unhealthy=("Ascend910-2",)),
    })  # fmt: skip
    found = decide(OWNER, spec(), ALL, {}, topology, bad, {})
    assert (found.status, found.reason) == ("False", "UnhealthyNPUs")
    assert found.blocked == frozenset(ALL)
    assert found.message.endswith(
        "only unhealthy capacity would fit (sp-0: nodes not Ready, cordoned or tainted, or "
        "NPUs the device plugin reports unhealthy); MindCluster reports sp-0-n4: Ascend910-6 "
        "unhealthy, Ascend910-2 network-unhealthy"
    )


def test_the_message_names_at_most_three_nodes() -> None:
    topology = nodes(("sp-0", 6))
    chip = NodeDevices(unhealthy=("Ascend910-0",))
    found = decide(OWNER, spec(), ALL, {}, topology,
                   sick_usage(**{f"sp-0-n{i}": chip for i in range(5)}), {})  # fmt: skip
    assert found.reason == "UnhealthyNPUs"
    assert "sp-0-n2: Ascend910-0 unhealthy; and 2 more nodes" in found.message
    assert "sp-0-n3" not in found.message


def test_no_device_info_is_placement_as_before() -> None:
    topology = {**nodes(("sp-0", 5)), "x": node("x", "sp-0", allocatable=6)}
    assert decide(OWNER, spec(), ALL, {}, topology, Usage(), {}).message.endswith(
        "NPUs the device plugin reports unhealthy)"
    )


# --- the read ---------------------------------------------------------------------------


class Lister:
    """A Kube answering LISTs: pods with none, ConfigMaps with ``configmaps`` (or raising
    ``error`` for them)."""

    def __init__(self, configmaps: list[Any], error: KubeError | None = None) -> None:
        self.configmaps, self.error = configmaps, error
        self.asked: list[tuple[str, Any, str]] = []

    def list(self, kind: str, namespace: Any, selector: str = "", field_selector: str = ""):
        self.asked.append((kind, namespace, field_selector))
        if kind == "ConfigMap":
            if self.error is not None:
                raise self.error
            return iter(self.configmaps)
        return iter([])


def test_one_list_of_kube_system_only_when_asked() -> None:
    kube = Lister(listed())
    assert observe_usage(kube, NPU).devices == {}  # type: ignore[arg-type]
    assert kube.asked == [("Pod", None, USAGE_FIELD_SELECTOR)]
    kube.asked.clear()
    usage = observe_usage(kube, NPU, read_device_info=True)  # type: ignore[arg-type]
    assert kube.asked == [("Pod", None, USAGE_FIELD_SELECTOR), ("ConfigMap", "kube-system", "")]
    assert set(usage.devices) == {"a3-sp0-n1", "a2-n3"}


def test_a_refused_list_counts_what_the_nodes_report_and_a_transient_one_is_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    forbidden = KubeError(403, "Forbidden", "configmaps is forbidden")
    usage = observe_usage(Lister([], forbidden), NPU, read_device_info=True)  # type: ignore[arg-type]
    assert usage == Usage()
    assert "listing ConfigMaps in kube-system: 403 Forbidden" in caplog.text
    with pytest.raises(KubeError):
        observe_usage(Lister([], KubeError(503, "ServiceUnavailable", "later")), NPU,  # type: ignore[arg-type]
                      read_device_info=True)  # fmt: skip


def test_an_unreadable_configmap_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    usage = observe_usage(Lister([with_cfg("{oops"), *listed()]), NPU, True)  # type: ignore[arg-type]
    assert set(usage.devices) == {"a3-sp0-n1", "a2-n3"}
    assert "mindx-dl-deviceinfo-a3-sp0-n0: data.DeviceInfoCfg is not JSON" in caplog.text
