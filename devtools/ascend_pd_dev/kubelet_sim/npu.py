"""The simulated NPUs of a launch-checked container: its device files, hccn.conf and hccn_tool.

On an Ascend node the device plugin and the Ascend Docker Runtime give a container its NPUs as
``/dev/davinci<N>`` files, the node's ``/etc/hccn.conf`` holds each NPU's RoCE address, and the
driver's ``hccn_tool`` reports each NPU's link. This machine has none of them, so for the
launcher's check (``launch_check``) kubelet-sim writes a small copy into the container's scratch
directory and names it to the launcher's NPU preflight through the env contract's path
overrides (``PREFLIGHT_DEV_DIR``, ``PREFLIGHT_HCCN_CONF``, ``PREFLIGHT_HCCN_TOOL``): as many
devices as the container's ``huawei.com/Ascend910`` limit, an address for each, and an
``hccn_tool`` that prints what the real one prints for ``-link -g`` and ``-net_health -g``.

A test makes a link fail with the knob ``npu-link-down`` (``knobs.NPU_LINK_DOWN``: device ids,
comma-separated, on the pod or its namespace): that device's ``hccn_tool -i <N> -link -g``
says ``link status: DOWN``, as a real one does for a port without carrier.
"""

from __future__ import annotations

import stat
from collections.abc import Collection, Iterable
from pathlib import Path

from ascend_pd_runtime.env_contract import (
    PREFLIGHT_DEV_DIR,
    PREFLIGHT_HCCN_CONF,
    PREFLIGHT_HCCN_TOOL,
)

#: The fake hccn_tool: ``-i <N> -<what> -g`` prints the file ``<what>.<N>`` beside it, and
#: for a device it does not know says so on stderr and exits 1, as the real tool does.
HCCN_TOOL_SCRIPT = """#!/bin/sh
# kubelet-sim's hccn_tool (ascend_pd_dev.kubelet_sim.npu): answers from files beside it.
dev=""; what=""
while [ $# -gt 0 ]; do
  case "$1" in
    -i) dev="$2"; shift 2 ;;
    -link) what=link; shift ;;
    -net_health) what=net_health; shift ;;
    *) shift ;;
  esac
done
here=$(dirname "$0")
if [ -n "$what" ] && [ -f "$here/$what.$dev" ]; then
  cat "$here/$what.$dev"
  exit 0
fi
echo "Error: device $dev (-$what) is not available" >&2
exit 1
"""


def link_output(up: bool) -> str:
    """What ``hccn_tool -i <N> -link -g`` prints."""
    return f"link status: {'UP' if up else 'DOWN'}\n"


def net_health_output(status: str) -> str:
    """What ``hccn_tool -i <N> -net_health -g`` prints (``Success`` when healthy)."""
    return f"net health status: {status}\n"


def write_node(
    root: Path,
    devices: Iterable[int],
    down: Collection[int] = (),
    unhealthy: Collection[int] = (),
    addresses: Collection[int] | None = None,
) -> dict[str, str]:
    """Write a simulated node's NPUs under ``root``; the env that points the preflight at
    them. ``down``: devices whose link is DOWN; ``unhealthy``: devices whose net health is
    ``Receive timeout``; ``addresses``: the devices hccn.conf has an address for (None:
    all)."""
    devices = list(devices)
    dev = root / "dev"
    dev.mkdir(parents=True, exist_ok=True)
    for d in devices:
        (dev / f"davinci{d}").touch()
    (dev / "davinci_manager").touch()  # not an NPU: the preflight must not count it
    with_address = devices if addresses is None else [d for d in devices if d in addresses]
    conf = root / "hccn.conf"
    lines = [f"address_{d}=192.168.{100 + d}.2\nnetmask_{d}=255.255.255.0\n" for d in with_address]
    conf.write_text("".join(lines), encoding="utf-8")
    for d in devices:
        (root / f"link.{d}").write_text(link_output(d not in down), encoding="utf-8")
        health = "Receive timeout" if d in unhealthy else "Success"
        (root / f"net_health.{d}").write_text(net_health_output(health), encoding="utf-8")
    tool = root / "hccn_tool"
    tool.write_text(HCCN_TOOL_SCRIPT, encoding="utf-8")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return {
        PREFLIGHT_DEV_DIR: str(dev),
        PREFLIGHT_HCCN_CONF: str(conf),
        PREFLIGHT_HCCN_TOOL: str(tool),
    }
