"""The `helm test` hook: its PDDeployment is one the operator accepts and that schedules
nothing, its script reads the Validated condition right, and the hook carries exactly
the files in files/helm-test/."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from chart_env import CHART, Render

from ascend_pd_operator.api.models import check_name, parse_spec

HELM_TEST = CHART / "files" / "helm-test"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("smoke_test", HELM_TEST / "smoke_test.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hook_env(manifests: list[dict[str, Any]]) -> dict[str, str]:
    (job,) = [d for d in manifests if d["kind"] == "Job"]
    return {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_resource_is_valid_and_schedules_nothing(tmp_path: Path) -> None:
    resource = yaml.safe_load((HELM_TEST / "pddeployment.yaml").read_text())
    parse_spec(resource["spec"])  # the operator's own validation
    resource["metadata"] = {**resource["metadata"], "name": "apd-smoke", "namespace": "ns"}
    path = tmp_path / "pdd.yaml"
    path.write_text(yaml.safe_dump(resource))
    done = subprocess.run(
        [sys.executable, "-m", "ascend_pd_operator.wiring.cli", "render", "-f", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    children = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert children, "the operator renders at least the KV layout"
    for child in children:
        replicas = child.get("spec", {}).get("replicas")
        assert not replicas, f"{child['kind']}/{child['metadata']['name']} has {replicas} replicas"


@pytest.mark.parametrize("release", ["apd", "0ops", "r" * 53, "a" * 34 + "-b"])
def test_test_resource_name_is_valid(helm: Path, release: str) -> None:
    done = subprocess.run(
        [
            str(helm),
            "template",
            release,
            str(CHART),
            "--show-only",
            "templates/tests/test-validated.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    name = hook_env([d for d in yaml.safe_load_all(done.stdout) if d])["TEST_NAME"]
    check_name(name)  # raises naming the rule
    assert release[:30] in name


def test_hook_carries_the_files(render: Render) -> None:
    manifests = render()
    (config_map,) = [d for d in manifests if d["kind"] == "ConfigMap"]
    files = {p.name: p.read_text() for p in HELM_TEST.iterdir()}
    assert config_map["data"] == files
    for doc in manifests:
        if doc["metadata"]["name"].endswith("-test"):
            assert doc["metadata"]["annotations"]["helm.sh/hook"] == "test"
    env = hook_env(manifests)
    assert env["TEST_RESOURCE_FILE"] == "/helm-test/pddeployment.yaml"
    assert int(env["TEST_TIMEOUT_SECONDS"]) >= 10


def test_hook_may_only_touch_pddeployments(render: Render) -> None:
    (role,) = [d for d in render() if d["kind"] == "Role"]
    assert role["rules"] == [
        {
            "apiGroups": ["ascendpd.io"],
            "resources": ["pddeployments"],
            "verbs": ["get", "create", "delete"],
        }
    ]


def condition(status: str, generation: int = 1, observed: int | None = 1) -> dict[str, Any]:
    st: dict[str, Any] = {"conditions": [{"type": "Validated", "status": status, "reason": "R"}]}
    if observed is not None:
        st["observedGeneration"] = observed
    return {"metadata": {"generation": generation}, "status": st}


def test_script_reads_validated_of_the_current_generation() -> None:
    script = load_script()
    assert script.validated({"metadata": {"generation": 1}}) is None
    assert script.validated(condition("True"))["status"] == "True"
    assert script.validated(condition("False"))["status"] == "False"
    # a verdict about an older generation is not the verdict about this resource
    assert script.validated(condition("True", generation=2, observed=1)) is None
    assert script.validated(condition("True", observed=None))["status"] == "True"


def test_script_waits_out_rbac_propagation_but_not_a_real_denial() -> None:
    from ascend_pd_operator.kubeio.kube import KubeError

    script = load_script()
    calls: list[int] = []

    def refused_twice() -> str:
        calls.append(1)
        if len(calls) <= 2:
            raise KubeError(403, "Forbidden", "no")
        return "ok"

    assert script.retry_forbidden(refused_twice, seconds=30, pause=0) == "ok"
    assert len(calls) == 3

    def always_refused() -> None:
        raise KubeError(403, "Forbidden", "no")

    with pytest.raises(KubeError):
        script.retry_forbidden(always_refused, seconds=0, pause=0)

    def not_found() -> None:
        raise KubeError(404, "NotFound", "no")

    with pytest.raises(KubeError):  # only 403 is waited out
        script.retry_forbidden(not_found, seconds=30, pause=0)
