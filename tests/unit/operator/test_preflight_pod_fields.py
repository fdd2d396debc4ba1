"""``spec.preflight`` and ``spec.ascend.hcclConnectTimeoutSeconds`` reach the runtime pods
through the env contract, and only when a spec sets them: a spec without them keeps its pod
templates (``test_pod_template_stability`` holds the examples to 0.1.0's digests), so an
operator upgrade restarts nothing. The rendered env is read back by the launcher's own
reader, as the pod would read it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import ascend_pd_runtime.env_contract as ec
from ascend_pd_operator.api.crd import openapi_schema
from ascend_pd_operator.api.models import parse_spec
from ascend_pd_operator.wiring.render_cli import render

from .conftest import apply_defaults, load_example

Json = dict[str, Any]
NEW = (ec.PREFLIGHT_CHECKS_VAR, ec.PREFLIGHT_TIMEOUT, ec.HCCL_CONNECT_TIMEOUT_SECONDS)


def _envs(preflight: Json | None = None, hccl: int | None = None) -> dict[str, dict[str, str]]:
    """The literal env of each runtime StatefulSet's container, by StatefulSet."""
    cr = copy.deepcopy(load_example("deepseek-v3-pp2.yaml"))
    cr["metadata"]["namespace"] = "llm"
    if preflight is not None:
        cr["spec"]["preflight"] = preflight
    if hccl is not None:
        cr["spec"]["ascend"] = {"hcclConnectTimeoutSeconds": hccl}
    code, manifests, message = render(cr, None, "llm")
    assert code == 0, message
    return {
        m["metadata"]["name"]: {e["name"]: e["value"] for e in
                                m["spec"]["template"]["spec"]["containers"][0]["env"]
                                if "value" in e}
        for m in manifests if m["kind"] == "StatefulSet"
    }  # fmt: skip


def test_unset_nothing_new_reaches_the_pods() -> None:
    for env in _envs().values():
        assert not set(NEW) & set(env), env


@pytest.mark.parametrize(
    ("preflight", "checks", "timeout"),
    [
        ({}, "devices,hccnConf,links,leader,store", "600"),
        ({"links": False, "networkTimeoutSeconds": 90}, "devices,hccnConf,leader,store", "90"),
        ({"devices": False, "hccnConf": False, "links": False, "leader": False,
          "store": False}, "", "600"),
    ],
)  # fmt: skip
def test_set_the_checks_reach_every_pod_and_read_back(
    preflight: Json, checks: str, timeout: str
) -> None:
    envs = _envs(preflight)
    assert set(envs) == {"dsv3-prefill-0", "dsv3-prefill-1", "dsv3-decode-0"}
    for env in envs.values():
        assert (env[ec.PREFLIGHT_CHECKS_VAR], env[ec.PREFLIGHT_TIMEOUT]) == (checks, timeout)
        read = ec.read_launch_env({**env, ec.POD_NAME: "dsv3-decode-0-1"})
        assert read.preflight_checks == tuple(c for c in checks.split(",") if c)
        assert read.preflight_timeout == int(timeout)
        assert ec.HCCL_CONNECT_TIMEOUT_SECONDS not in env


def test_the_hccl_connect_timeout_reaches_the_launcher() -> None:
    for env in _envs(hccl=1800).values():
        assert env[ec.HCCL_CONNECT_TIMEOUT_SECONDS] == "1800"
        assert ec.PREFLIGHT_CHECKS_VAR not in env
        read = ec.read_launch_env({**env, ec.POD_NAME: "dsv3-decode-0-1"})
        assert read.hccl_connect_timeout == 1800


def apply_crd_defaults(spec: Json) -> Json:
    schema = openapi_schema()["properties"]["spec"]
    out: Json = apply_defaults(schema, copy.deepcopy(spec))
    return out


def test_the_server_leaves_an_unset_preflight_unset() -> None:
    """The CRD has no default for either field, so the API server stores a spec without them
    as it came, and the operator sees them unset (no env, no rollout)."""
    cr = load_example("deepseek-v3-pp2.yaml")
    stored = apply_crd_defaults(cr["spec"])
    assert "preflight" not in stored
    assert "hcclConnectTimeoutSeconds" not in stored["ascend"]
    assert parse_spec(stored).preflight is None
    # {} is filled in by the server: every check on, the default timeout
    stored = apply_crd_defaults({**cr["spec"], "preflight": {}})
    assert stored["preflight"] == {"devices": True, "hccnConf": True, "links": True,
                                   "leader": True, "store": True,
                                   "networkTimeoutSeconds": 600}  # fmt: skip
