"""NPU preflight: what the launcher checks on the node before SGLang starts.

A bad NPU, a node without ``/etc/hccn.conf``, a RoCE link that is down or a leader or
memfabric store that cannot be reached shows up, without these checks, as a hang or an HCCL
timeout once the weights have loaded: 20 to 60 minutes later for a 671B model. This module
owns the checks that find them first, in seconds, and the words that name them. The launcher
(``launcher.run``) calls ``run_preflight`` after its plan and SGLang's parser have accepted
the command; a failure raises ``PreflightFailed``, which the launcher turns into exit
``env_contract.EXIT_PREFLIGHT`` and a termination message (``env_contract.preflight_message``:
the reason, the check, the device and the value), which the operator reads back into the
``NPUPreflight`` condition.

The checks, in order (``env_contract.PREFLIGHT_CHECKS``):

- ``devices``: the NPU device files ``/dev/davinci<N>`` hold at least ``devicesPerNode``
  devices, and ``ASCEND_RT_VISIBLE_DEVICES``, if set, selects exactly that many of them
  (its ids are logical: indices into the sorted device files, as CANN reads them). More
  device files than asked for is fine (a privileged container sees the node's); SGLang takes
  the first ones;
- ``hccnConf``: ``/etc/hccn.conf`` has an ``address_<N>=`` line for each device ``N`` used;
- ``links``: ``hccn_tool -i <N> -link -g`` says ``link status: UP`` and
  ``hccn_tool -i <N> -net_health -g`` says ``net health status: Success`` for each device;
- ``leader`` (workers only): the instance leader's dist-init ``host:port`` answers over TCP;
- ``store``: the memfabric store's ``host:port`` answers over TCP (skipped on the pod that
  serves it).

"Answers" means the TCP handshake completes or is refused by the host: either proves the
path. Both ports open only later (the leader's once its SGLang starts, the store's once
prefill instance 0's leader has loaded its weights), so waiting for a listener would
serialise every instance behind one model load. A connection that times out, or a network or
host that is unreachable, is retried with backoff for ``preflight_timeout`` seconds (the
leader's pod may start well after a worker's).

Which checks run: those the operator lists (``spec.preflight``; a check that is on and
lacks its tool or file on the node fails with a message saying so, never a traceback). With
no list at all (``PREFLIGHT_AUTO``: a spec without ``spec.preflight``, or an operator older
than the checks) each check runs where the node has what it reads: the device and HCCN
checks are skipped, with a line on stderr, on a node without device files, without
``/etc/hccn.conf`` or without ``hccn_tool``, and ``net_health`` is only reported (a node
without a detection address says something other than Success). So a new runtime image
under an old operator fails only on what would have failed SGLang anyway.

Parsing and judging are pure functions (``parse_*``, ``judge_*``); reading files, running
``hccn_tool`` and connecting are the few functions that take an ``environ`` or a
``connect``, so tests run the real checks against fake device files, a fake ``hccn_tool``
and local sockets.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import env_contract as ec
from .env_contract import LaunchEnv
from .errors import AscendPDError

#: What a device file of an NPU is called (``davinci_manager`` and the like are not NPUs).
_DEVICE_FILE = re.compile(r"^davinci(\d+)$")
_ADDRESS_LINE = re.compile(r"^\s*address_(\d+)\s*=\s*(\S+)\s*$")
_LINK_STATUS = re.compile(r"link status\s*:\s*(\S+)", re.IGNORECASE)
_NET_HEALTH = re.compile(r"net health status\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
#: How long one ``hccn_tool`` call may take, and one TCP connect attempt.
TOOL_TIMEOUT_SECONDS = 30.0
CONNECT_TIMEOUT_SECONDS = 5.0
#: The backoff between reachability attempts: from the first to the cap, doubling.
BACKOFF_FIRST_SECONDS, BACKOFF_CAP_SECONDS = 1.0, 15.0

#: ``connect(host, port, timeout)``: None when the host answered, else why not.
Connect = Callable[[str, int, float], str | None]


class PreflightFailed(AscendPDError):
    """A check failed: ``message`` is the termination message (``preflight_message``)."""

    def __init__(self, check: str, detail: str) -> None:
        self.check = check
        self.reason = ec.PREFLIGHT_REASONS[check]
        self.message = ec.preflight_message(check, detail)
        super().__init__(self.message)


# --------------------------------------------------------------------------- pure parsing


def parse_device_files(names: Iterable[str]) -> list[int]:
    """The NPU ids among device file names (``davinci3`` -> 3), sorted."""
    return sorted(int(m.group(1)) for n in names if (m := _DEVICE_FILE.match(n)))


def parse_visible_devices(value: str) -> list[int]:
    """``ASCEND_RT_VISIBLE_DEVICES`` as logical ids; ``ValueError`` names what is wrong."""
    ids = []
    for part in value.split(","):
        if not part.strip().isdigit():
            raise ValueError(f"{part!r} is not a device id (comma-separated integers)")
        ids.append(int(part))
    if ids != sorted(set(ids)):
        raise ValueError("device ids must be distinct and ascending, as CANN reads them")
    return ids


def parse_hccn_conf(text: str) -> dict[int, str]:
    """The ``address_<N>=<ip>`` lines of an hccn.conf, by device (the last one wins)."""
    found = {}
    for line in text.splitlines():
        m = _ADDRESS_LINE.match(line)
        if m:
            found[int(m.group(1))] = m.group(2)
    return found


def parse_link_status(output: str) -> str:
    """``UP``, ``DOWN``... from ``hccn_tool -link -g`` ("" when it says none)."""
    m = _LINK_STATUS.search(output)
    return m.group(1).upper() if m else ""


def parse_net_health(output: str) -> str:
    """``Success``, ``Receive timeout``... from ``hccn_tool -net_health -g`` ("" if none)."""
    m = _NET_HEALTH.search(output)
    return m.group(1) if m else ""


# --------------------------------------------------------------------------- pure judging


def _names(ids: Iterable[int]) -> str:
    return ", ".join(f"davinci{i}" for i in ids) or "none"


def judge_devices(found: list[int], visible: str | None, want: int, dev_dir: str) -> list[int]:
    """The physical ids of the devices this pod uses; ``PreflightFailed`` when there are
    fewer than ``want`` or ``visible`` (``ASCEND_RT_VISIBLE_DEVICES``) selects another
    number of them, or one that does not exist."""
    per_node = f"{ec.DEVICES_PER_NODE} (devicesPerNode) is {want}"
    if len(found) < want:
        gaps = sorted(set(range(max(found, default=-1) + 1)) - set(found))
        absent = f"; absent: {_names(gaps)}" if gaps else ""
        raise PreflightFailed(
            "devices",
            f"{per_node} but {dev_dir} holds {len(found)} NPU device files "
            f"({_names(found)}){absent}. The device plugin gave this pod fewer NPUs than it "
            "asked for, or an NPU dropped off the bus: check `npu-smi info` on the node",
        )
    if visible is None:
        return found[:want]
    try:
        logical = parse_visible_devices(visible)
    except ValueError as exc:
        raise PreflightFailed(
            "devices", f"{ec.ASCEND_VISIBLE} {visible!r} is invalid: {exc}"
        ) from None
    missing = [i for i in logical if i >= len(found)]
    if missing:
        raise PreflightFailed(
            "devices",
            f"{ec.ASCEND_VISIBLE} {visible!r} names logical device "
            f"{', '.join(map(str, missing))}, but {dev_dir} holds only {len(found)} NPU "
            f"device files ({_names(found)})",
        )
    if len(logical) != want:
        raise PreflightFailed(
            "devices",
            f"{per_node} but {ec.ASCEND_VISIBLE} {visible!r} makes {len(logical)} devices "
            "visible: unset it or make it list devicesPerNode devices",
        )
    return [found[i] for i in logical]


def judge_hccn_conf(addresses: Mapping[int, str], devices: list[int], path: str) -> None:
    """``PreflightFailed`` naming the first device without an address in ``path``."""
    missing = [d for d in devices if d not in addresses]
    if missing:
        raise PreflightFailed(
            "hccnConf",
            f"{path} has no address_{missing[0]}= line for device davinci{missing[0]}"
            + (f" (nor for {_names(missing[1:])})" if len(missing) > 1 else "")
            + ": configure the NPU's RoCE address (hccn_tool -i "
            f"{missing[0]} -ip -s address <ip> netmask <mask>) on the node",
        )


def judge_link(device: int, rc: int, output: str) -> None:
    """``PreflightFailed`` unless ``hccn_tool -i <device> -link -g`` says UP."""
    status = parse_link_status(output)
    if rc != 0 or status != "UP":
        said = f"link status {status}" if status else f"exit {rc}: {_tail(output)}"
        raise PreflightFailed(
            "links",
            f"device davinci{device}: hccn_tool -i {device} -link -g says {said} (expected "
            "UP): check the NPU's network port, cable and switch port",
        )


def judge_net_health(device: int, rc: int, output: str) -> str:
    """The net health status; ``PreflightFailed`` unless it is Success."""
    health = parse_net_health(output)
    if rc != 0 or health.lower() != "success":
        said = f"net health status {health}" if health else f"exit {rc}: {_tail(output)}"
        raise PreflightFailed(
            "links",
            f"device davinci{device}: hccn_tool -i {device} -net_health -g says {said} "
            "(expected Success): the NPU cannot reach its detection address (hccn_tool -i "
            f"{device} -netdetect -g); check its address, gateway and the switch",
        )
    return health


def _tail(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat[-limit:] or "no output"


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (or ``tcp://host:port``) as (host, port)."""
    rest = address.partition("://")[2] or address
    host, _, port = rest.rpartition(":")
    return host.strip("[]"), int(port)


# --------------------------------------------------------------------------- I/O


@dataclass(frozen=True)
class NodePaths:
    """Where the checks look (``env_contract.PREFLIGHT_DEV_DIR`` and friends override)."""

    dev_dir: str = ec.DEFAULT_DEV_DIR
    hccn_conf: str = ec.DEFAULT_HCCN_CONF
    hccn_tool: str = ec.DEFAULT_HCCN_TOOL

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> NodePaths:
        tool = environ.get(ec.PREFLIGHT_HCCN_TOOL) or shutil.which(
            "hccn_tool", path=environ.get("PATH")
        )
        return cls(
            dev_dir=environ.get(ec.PREFLIGHT_DEV_DIR) or ec.DEFAULT_DEV_DIR,
            hccn_conf=environ.get(ec.PREFLIGHT_HCCN_CONF) or ec.DEFAULT_HCCN_CONF,
            hccn_tool=tool or ec.DEFAULT_HCCN_TOOL,
        )


def device_files(dev_dir: str) -> list[int]:
    try:
        return parse_device_files(os.listdir(dev_dir))
    except OSError:
        return []


def run_tool(tool: str, device: int, what: str) -> tuple[int, str]:
    """``hccn_tool -i <device> -<what> -g``: its exit code and output (stdout and stderr)."""
    try:
        done = subprocess.run(
            [tool, "-i", str(device), f"-{what}", "-g"],
            capture_output=True, text=True, timeout=TOOL_TIMEOUT_SECONDS, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return 124, f"no answer within {TOOL_TIMEOUT_SECONDS:g} s"
    except OSError as exc:
        return 127, str(exc)
    return done.returncode, (done.stdout or "") + (done.stderr or "")


#: Connection errors that mean the host answered (nothing listens yet, or it said no).
_ANSWERED = (errno.ECONNREFUSED, errno.ECONNRESET)


def tcp_answer(host: str, port: int, timeout: float) -> str | None:
    """None when ``host`` answers a TCP connect on ``port`` (accepted or refused), else
    why not (timed out, no route, network unreachable...)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as exc:
        if exc.errno in _ANSWERED:
            return None
        return exc.strerror or str(exc)


def wait_reachable(
    host: str,
    port: int,
    budget: float,
    connect: Connect = tcp_answer,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[str | None, int]:
    """Try ``connect`` until it succeeds or ``budget`` seconds have passed (backoff from
    ``BACKOFF_FIRST_SECONDS`` doubling to ``BACKOFF_CAP_SECONDS``); (the last error or
    None, the attempts made)."""
    deadline = clock() + budget
    pause, attempts = BACKOFF_FIRST_SECONDS, 0
    while True:
        attempts += 1
        left = deadline - clock()
        error = connect(host, port, max(0.1, min(CONNECT_TIMEOUT_SECONDS, left)))
        if error is None:
            return None, attempts
        left = deadline - clock()
        if left <= 0:
            return error, attempts
        sleep(min(pause, left))
        pause = min(pause * 2, BACKOFF_CAP_SECONDS)


@dataclass
class Report:
    """What ran, what was skipped and why (the launcher logs it)."""

    passed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = "NPU preflight passed: " + (", ".join(self.passed) or "no check ran")
        return text + (f"; skipped: {'; '.join(self.skipped)}" if self.skipped else "")


@dataclass(frozen=True)
class Targets:
    """The resolved addresses the network checks try: the leader (None on the leader
    itself) and the store (None without one)."""

    leader: tuple[str, int] | None = None
    store: tuple[str, int] | None = None


def run_preflight(
    env: LaunchEnv,
    targets: Targets,
    environ: Mapping[str, str],
    connect: Connect = tcp_answer,
    sleep: Callable[[float], None] = time.sleep,
) -> Report:
    """Run the checks ``env`` asks for (see the module's docstring); ``PreflightFailed`` on
    the first that fails."""
    explicit = env.preflight_checks is not ec.PREFLIGHT_AUTO
    enabled = set(ec.PREFLIGHT_CHECKS if env.preflight_checks is None else env.preflight_checks)
    paths = NodePaths.from_environ(environ)
    report = Report()
    found = device_files(paths.dev_dir)
    visible = environ.get(ec.ASCEND_VISIBLE) or None
    # The devices the HCCN checks are about: those the devices check finds, else the
    # device files (or 0..devicesPerNode-1 when there are none to read).
    devices = found[: env.devices_per_node] or list(range(env.devices_per_node))
    if "devices" in enabled:
        if explicit or found or visible is not None:
            devices = judge_devices(found, visible, env.devices_per_node, paths.dev_dir)
            report.passed.append(f"devices ({_names(devices)})")
        else:
            report.skipped.append(f"devices (no NPU device files in {paths.dev_dir})")
    if "hccnConf" in enabled:
        _check_hccn_conf(paths.hccn_conf, devices, explicit, report)
    if "links" in enabled:
        _check_links(paths.hccn_tool, devices, explicit, report)
    budget = float(env.preflight_timeout)

    def reach(check: str, target: tuple[str, int], what: str, advice: str) -> None:
        host, port = target
        error, attempts = wait_reachable(host, port, budget, connect, sleep)
        if error is not None:
            raise PreflightFailed(
                check,
                f"{what} ({host}:{port}) did not answer over TCP within {budget:g} s "
                f"({attempts} attempts; last: {error}): {advice}",
            )
        report.passed.append(f"{check} ({host}:{port})")

    if "leader" in enabled and targets.leader is not None:
        reach("leader", targets.leader, f"the instance leader {env.dist_init_addr}",
              "is its pod running, and may this node reach its node (firewall, routes, "
              "ascend.hcclSocketIfname)?")  # fmt: skip
    if "store" in enabled and targets.store is not None:
        if targets.store[0] == env.pod_ip:
            report.skipped.append("store (this pod serves it)")
        else:
            reach("store", targets.store, f"the memfabric store {env.store_url}",
                  "it is prefill instance 0's leader; may this node reach that node?")  # fmt: skip
    return report


def _check_hccn_conf(path: str, devices: list[int], explicit: bool, report: Report) -> None:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        if not explicit:
            report.skipped.append(f"hccnConf ({path} not in the container)")
            return
        raise PreflightFailed(
            "hccnConf",
            f"{path} is not in the container, so no device's RoCE address can be checked: "
            "mount the node's /etc/hccn.conf (spec.ascend.hostMounts: [{name: hccnConf}]) "
            "or set spec.preflight.hccnConf: false",
        ) from None
    except OSError as exc:
        raise PreflightFailed("hccnConf", f"{path} cannot be read: {exc}") from None
    judge_hccn_conf(parse_hccn_conf(text), devices, path)
    report.passed.append(f"hccnConf ({path})")


def _check_links(tool: str, devices: list[int], explicit: bool, report: Report) -> None:
    if not os.access(tool, os.X_OK):
        if not explicit:
            report.skipped.append(f"links (no hccn_tool at {tool})")
            return
        raise PreflightFailed(
            "links",
            f"hccn_tool is not in the container (not on PATH, not at {tool}), so no link can "
            "be checked: mount the driver's tools (ascend.driverHostPath) or set "
            "spec.preflight.links: false",
        )
    unhealthy = []
    for device in devices:
        judge_link(device, *run_tool(tool, device, "link"))
        rc, output = run_tool(tool, device, "net_health")
        try:
            judge_net_health(device, rc, output)
        except PreflightFailed as exc:
            if explicit:
                raise
            unhealthy.append(exc.message)
    report.passed.append(f"links ({_names(devices)} UP)")
    if unhealthy:
        report.skipped.append("net health, only reported without spec.preflight: "
                              + "; ".join(unhealthy))  # fmt: skip
