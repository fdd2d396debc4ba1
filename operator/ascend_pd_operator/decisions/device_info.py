"""MindCluster's per-node NPU health, from its device plugin's ConfigMaps: pure parsing.

What the device plugin publishes (verified against MindCluster's own source and docs,
github.com/Ascend/mind-cluster and github.com/Ascend/ascend-device-plugin, 2026-12):

- one ConfigMap per node, named ``mindx-dl-deviceinfo-<nodeName>``, in ``kube-system``
  (ascend-device-plugin ``pkg/common/constants.go``: ``DeviceInfoCMNamePrefix``,
  ``DeviceInfoCMNameSpace``; mind-cluster ``component/ascend-device-plugin/pkg/kubeclient``
  writes it under that name). Newer releases label it ``mx-consumer-cim: "true"``, older
  ones do not, so the name is what identifies it;
- data key ``DeviceInfoCfg`` (``DeviceInfoCMDataKey``): JSON of the plugin's
  ``NodeDeviceInfoCache`` (``pkg/common/proto.go``): ``{"DeviceInfo": {"DeviceList":
  {<key>: <text>, ...}, "UpdateTime": <unix seconds>}, "CheckCode": <hash>}``, plus
  ``SuperPodID`` and ``ServerIndex`` on A3 releases
  (mind-cluster ``docs/en/scheduling/06_api/02_ascend_device_plugin.md``, "Chip Resources");
- in ``DeviceList``, for the resource ``huawei.com/Ascend910``: ``huawei.com/Ascend910``
  (available chips), ``huawei.com/Ascend910-Unhealthy`` (unhealthy chips) and
  ``huawei.com/Ascend910-NetworkUnhealthy`` (chips whose network is unhealthy), each a
  comma-joined list of chip names such as ``Ascend910-4`` (empty when none); also
  ``-Recovering`` and ``-Fault`` (a JSON array of fault objects). The same suffixes follow
  ``huawei.com/Ascend310P`` and, on Atlas 350/850/950, ``huawei.com/npu``: so the keys
  here are the spec's ``ascend.resourceName`` plus the suffix.

Only ``-Unhealthy`` and ``-NetworkUnhealthy`` are read: the available list is being
retired upstream (Volcano keeps it), and a fault that makes a chip unusable puts it in one
of the two. A chip with a bad network can still be allocated by the kubelet (the device
plugin reports it healthy to the kubelet), but the KV transfer and HCCL would fail on it,
so placement must not count it; an unhealthy chip is usually withheld from allocatable
already, which ``placement.slots`` takes into account so it is not subtracted twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import (
    DEVICE_INFO_KEY,
    DEVICE_INFO_NAMESPACE,
    DEVICE_INFO_PREFIX,
)

UNHEALTHY_SUFFIX = "-Unhealthy"
NETWORK_UNHEALTHY_SUFFIX = "-NetworkUnhealthy"


@dataclass(frozen=True)
class NodeDevices:
    """One node's NPUs MindCluster reports bad: chip names, sorted."""

    unhealthy: tuple[str, ...] = ()
    network_unhealthy: tuple[str, ...] = ()

    @property
    def bad(self) -> tuple[str, ...]:
        """Every chip not to be counted (a chip may be in both lists)."""
        return tuple(sorted(set(self.unhealthy) | set(self.network_unhealthy)))

    def describe(self) -> str:
        """``Ascend910-4 unhealthy, Ascend910-0 network-unhealthy``."""
        parts = [f"{chip} unhealthy" for chip in self.unhealthy]
        parts += [f"{chip} network-unhealthy" for chip in self.network_unhealthy
                  if chip not in self.unhealthy]  # fmt: skip
        return ", ".join(parts)


class DeviceInfoError(ValueError):
    """A device-info ConfigMap that does not hold what MindCluster writes."""


def node_of(configmap_name: str) -> str | None:
    """The node a device-info ConfigMap describes, or None for any other ConfigMap."""
    if configmap_name.startswith(DEVICE_INFO_PREFIX) and len(configmap_name) > len(
        DEVICE_INFO_PREFIX
    ):
        return configmap_name[len(DEVICE_INFO_PREFIX) :]
    return None


def _chips(where: str, key: str, value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, str):
        raise DeviceInfoError(
            f"{where}: DeviceInfo.DeviceList[{key!r}] is {value!r}: must be a comma-joined "
            "list of chip names (text)"
        )
    return tuple(sorted({c.strip() for c in value.split(",") if c.strip()}))


def parse(configmap: Json, resource: str) -> NodeDevices:
    """The bad chips of ``resource`` (e.g. ``huawei.com/Ascend910``) one device-info
    ConfigMap reports. Raises ``DeviceInfoError`` naming the ConfigMap, the field, the
    value and what it must be."""
    meta = configmap.get("metadata") or {}
    where = f"ConfigMap {meta.get('namespace', DEVICE_INFO_NAMESPACE)}/{meta.get('name', '')}"
    text = (configmap.get("data") or {}).get(DEVICE_INFO_KEY)
    if text is None:
        raise DeviceInfoError(f"{where}: no data key {DEVICE_INFO_KEY}")
    try:
        cfg = json.loads(text)
    except ValueError as exc:
        raise DeviceInfoError(
            f"{where}: data.{DEVICE_INFO_KEY} is not JSON ({exc}): {str(text)[:80]!r}"
        ) from None
    info = cfg.get("DeviceInfo") if isinstance(cfg, dict) else None
    devices = info.get("DeviceList") if isinstance(info, dict) else None
    if not isinstance(devices, dict):
        raise DeviceInfoError(
            f"{where}: data.{DEVICE_INFO_KEY} has no object DeviceInfo.DeviceList "
            f"(got {str(text)[:80]!r})"
        )
    return NodeDevices(
        unhealthy=_chips(where, resource + UNHEALTHY_SUFFIX,
                         devices.get(resource + UNHEALTHY_SUFFIX)),
        network_unhealthy=_chips(where, resource + NETWORK_UNHEALTHY_SUFFIX,
                                 devices.get(resource + NETWORK_UNHEALTHY_SUFFIX)),
    )  # fmt: skip


@dataclass(frozen=True)
class DeviceInfo:
    """Per node, the chips MindCluster reports bad (only nodes with any), and the
    ConfigMaps that could not be read (each a ``DeviceInfoError``'s message)."""

    nodes: Mapping[str, NodeDevices]
    problems: tuple[str, ...] = ()


def device_info(configmaps: Iterable[Json], resource: str) -> DeviceInfo:
    """``DeviceInfo`` from the ConfigMaps of ``kube-system`` (any others are skipped). A
    ConfigMap that cannot be parsed says nothing about its node: that node is counted as
    the node itself reports (as without device info), and the problem is returned."""
    nodes: dict[str, NodeDevices] = {}
    problems: list[str] = []
    for cm in configmaps:
        node = node_of(str((cm.get("metadata") or {}).get("name", "")))
        if node is None:
            continue
        try:
            found = parse(cm, resource)
        except DeviceInfoError as exc:
            problems.append(str(exc))
            continue
        if found.bad:
            nodes[node] = found
    return DeviceInfo(nodes, tuple(problems))
