"""What a drain needs of the runtime pods: a grace period that follows
``spec.scaling.drainTimeoutSeconds`` and a preStop hook that keeps a leader serving until
the router has dropped it and a worker until its leader is gone.

The hook is run here as the kubelet would run it (``python3 -c``, the pod's env), on the
command the rendered StatefulSet carries; the name lookups it makes are real: the
sandbox's resolver answers "no such name" for a cluster-local name, as cluster DNS does
once the leader's pod has left its headless Service.
"""

from __future__ import annotations

import copy
import os
import subprocess
import time

import pytest

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.wiring.render_cli import render

from .conftest import load_example


def _runtime_templates(drain_timeout: int | None) -> dict[str, Json]:
    cr = copy.deepcopy(load_example("deepseek-v3-pp2.yaml"))
    cr["metadata"]["namespace"] = "llm"
    if drain_timeout is not None:
        cr["spec"]["scaling"] = {"drainTimeoutSeconds": drain_timeout}
    code, manifests, message = render(cr, None, "llm")
    assert code == 0, message
    out = {m["metadata"]["name"]: m["spec"]["template"] for m in manifests
           if m["kind"] == "StatefulSet"}  # fmt: skip
    assert set(out) == {"dsv3-prefill-0", "dsv3-prefill-1", "dsv3-decode-0"}
    return out


def test_unset_the_pods_keep_the_grace_period_and_no_hook_of_before() -> None:
    for name, template in _runtime_templates(None).items():
        assert template["spec"]["terminationGracePeriodSeconds"] == 60, name
        assert "lifecycle" not in template["spec"]["containers"][0], name


def test_set_every_runtime_pod_follows_it_and_carries_the_hook() -> None:
    for name, template in _runtime_templates(900).items():
        assert template["spec"]["terminationGracePeriodSeconds"] == 900, name
        command = template["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
        assert command[:2] == ["python3", "-c"], name
        # the worker waits on its own instance's leader
        assert f"'{name}-0.{name}.llm.svc'" in command[2], name


def _hook(instance: str, drain_timeout: int = 900) -> list[str]:
    template = _runtime_templates(drain_timeout)[instance]
    command: list[str] = template["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"][
        "command"
    ]
    return command


def _run(command: list[str], pod: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "ASCEND_PD_POD_NAME": pod}
    return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)


def test_the_leader_keeps_serving_until_the_router_has_dropped_it() -> None:
    began = time.monotonic()
    hook = _run(_hook("dsv3-decode-0"), "dsv3-decode-0-0")
    assert hook.wait(timeout=120) == 0
    assert time.monotonic() - began >= 5


def test_a_short_drain_timeout_bounds_the_leaders_wait() -> None:
    began = time.monotonic()
    hook = _run(_hook("dsv3-decode-0", drain_timeout=1), "dsv3-decode-0-0")
    assert hook.wait(timeout=120) == 0
    assert time.monotonic() - began >= 1


def test_a_worker_whose_leader_is_gone_stops_at_once() -> None:
    # its leader's cluster name does not resolve here: the leader pod has left the Service
    hook = _run(_hook("dsv3-prefill-1"), "dsv3-prefill-1-1")
    assert hook.wait(timeout=120) == 0


def test_a_worker_waits_while_its_leader_is_there() -> None:
    command = _hook("dsv3-prefill-1")
    # the same program, its leader a name that resolves (the leader pod still exists)
    program = command[2].replace("'dsv3-prefill-1-0.dsv3-prefill-1.llm.svc'", "'localhost'")
    assert program != command[2]
    hook = _run([*command[:2], program], "dsv3-prefill-1-1")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            hook.wait(timeout=3)
    finally:
        hook.kill()
        hook.wait()
