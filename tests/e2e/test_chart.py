"""The Helm chart on a real API server: install, helm test, upgrade, uninstall.

The local control plane runs no containers (kubelet-sim only reports pod states), so the
two programs the chart runs in pods are run here as local processes, each with exactly the
rights the chart gives its pod, so a missing RBAC verb fails here as it would in a pod:

- the operator: the live Deployment's own args, as its ServiceAccount (a token minted or
  read for it, in a kubeconfig of its own);
- the `helm test` hook: while `helm test` waits on the hook Job, the hook pod's command
  runs locally from the hook ConfigMap (its mount), with the pod's env and the hook
  ServiceAccount's token; its exit code becomes the pod's outcome through kubelet-sim's
  ``kubelet-sim.ascend-pd.dev/outcome`` annotation, so the Job, and `helm test`, pass or
  fail on the script's own verdict.

The PDDeployment CRD is cluster-scoped and other tests on the shared dev cluster install it
too (helm releases, or server-side apply under other field managers), so installs and
upgrades pass ``--take-ownership --force-conflicts``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_pd_dev.testtools import volumes
from ascend_pd_dev.testtools.helm import ensure_helm
from ascend_pd_dev.testtools.local_run import LocalOperator
from ascend_pd_dev.testtools.rbac import service_account_kubeconfig
from ascend_pd_operator.api import access

pytestmark = [pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "ascend-pd-operator"
RELEASE = "apd"
FULLNAME = f"{RELEASE}-ascend-pd-operator"
CRD_NAME = "pddeployments.ascendpd.io"
OUTCOME = "kubelet-sim.ascend-pd.dev/outcome"
OLD_SCHEMA_MARK = "ascend-pd e2e: the schema of the previous chart version"


class Helm:
    def __init__(self, kubeconfig: Path) -> None:
        self.binary = str(ensure_helm())
        self.kubeconfig = kubeconfig

    def command(self, *args: str) -> list[str]:
        return [self.binary, "--kubeconfig", str(self.kubeconfig), *args]

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.command(*args), capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done


@pytest.fixture
def helm(cluster: Any) -> Helm:
    return Helm(cluster.kubeconfig)


@pytest.fixture
def release_ns(kubectl: Any) -> Iterator[str]:
    name = f"e2e-chart-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", name)
    # the install test applies the v2-lite example here: the models volume and claim it mounts
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(volumes.for_namespace(REPO, name)))
    yield name
    kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)
    kubectl("delete", "pv", volumes.volume_name(name), "--wait=false", check=False)


def get_json(kubectl: Any, *args: str) -> Any:
    done = kubectl("get", *args, "-o", "yaml")
    return yaml.safe_load(done.stdout)


def old_chart(tmp_path: Path) -> Path:
    """The chart as a previous version: same templates, a different CRD schema."""
    copy = tmp_path / "previous-chart"
    shutil.copytree(CHART, copy)
    for crd_file in (copy / "files" / "crds").glob("*.yaml"):
        crd = yaml.safe_load(crd_file.read_text())
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] = OLD_SCHEMA_MARK
        crd_file.write_text(yaml.safe_dump(crd, sort_keys=False))
    return copy


def schema_description(kubectl: Any) -> str:
    crd = get_json(kubectl, "crd", CRD_NAME)
    return str(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].get("description", ""))


def run_hook_pod_locally(
    kubectl: Any, cluster: Any, ns: str, pod: dict[str, Any], workdir: Path
) -> subprocess.CompletedProcess[str]:
    """Run the hook pod's container as a local process: its command, env, mount and token."""
    spec = pod["spec"]
    (container,) = spec["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    mapped: dict[str, str] = {}
    for mount_path, volume_name in mounts.items():
        local = workdir / volume_name
        local.mkdir(parents=True, exist_ok=True)
        source = volumes[volume_name]
        if "configMap" in source:
            config_map = get_json(kubectl, "-n", ns, "configmap", source["configMap"]["name"])
            for key, value in config_map["data"].items():
                (local / key).write_text(value)
        mapped[mount_path] = str(local)

    def local_path(value: str) -> str:
        for mount_path, local in mapped.items():
            if value.startswith(mount_path + "/"):
                return local + value[len(mount_path) :]
        return value

    token_config = service_account_kubeconfig(
        cluster.kubeconfig, ns, spec["serviceAccountName"], workdir / "hook.kubeconfig"
    )
    env = {**os.environ, "KUBECONFIG": str(token_config)}
    env |= {e["name"]: local_path(e["value"]) for e in container["env"]}
    command = [local_path(part) for part in container["command"]]
    assert command[0] == "python"
    command[0] = sys.executable
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


def helm_test_with_hook_run_locally(
    helm: Helm, kubectl: Any, cluster: Any, ns: str, wait_until: Any, workdir: Path
) -> tuple[subprocess.CompletedProcess[str], bool, str]:
    """`helm test`, its hook pod's command run here; (script result, helm passed, output)."""
    helm_test = subprocess.Popen(
        helm.command("test", RELEASE, "--namespace", ns, "--timeout", "5m"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    selector = f"job-name={FULLNAME}-test"

    def hook_pods() -> list[dict[str, Any]]:
        if helm_test.poll() is not None:
            output = helm_test.stdout.read() if helm_test.stdout else ""
            pytest.fail(f"helm test exited {helm_test.returncode} early:\n{output}")
        return list(get_json(kubectl, "-n", ns, "pods", "-l", selector)["items"])

    (pod,) = wait_until(hook_pods, "the helm test hook pod")
    script = run_hook_pod_locally(kubectl, cluster, ns, pod, workdir)
    outcome = "succeed" if script.returncode == 0 else "fail"
    kubectl("-n", ns, "annotate", "pod", pod["metadata"]["name"], f"{OUTCOME}={outcome}",
            "--overwrite")  # fmt: skip
    output, _ = helm_test.communicate(timeout=600)
    return script, helm_test.returncode == 0, output


@pytest.mark.simulated
def test_install_test_upgrade_uninstall(
    cluster: Any, kubectl: Any, helm: Helm, release_ns: str, wait_until: Any, tmp_path: Path
) -> None:
    ns = release_ns
    # the optional objects on too: the API server must take the chart's PDB
    common = ["--namespace", ns, "--set", f"watch.namespaces={{{ns}}}"]
    common += ["--set", "podDisruptionBudget.enabled=true", "--set", "metrics.enabled=true"]

    # -- install the "previous version" ----------------------------------------------
    helm("install", RELEASE, str(old_chart(tmp_path)), *common, "--take-ownership",
         "--force-conflicts", "--wait", "--timeout", "5m")  # fmt: skip
    crd = get_json(kubectl, "crd", CRD_NAME)
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert schema_description(kubectl) == OLD_SCHEMA_MARK
    deployment = get_json(kubectl, "-n", ns, "deployment", FULLNAME)
    assert deployment["status"].get("readyReplicas") == 1
    pdb = get_json(kubectl, "-n", ns, "pdb", FULLNAME)
    assert pdb["apiVersion"] == "policy/v1"
    service = get_json(kubectl, "-n", ns, "service", f"{FULLNAME}-metrics")
    # the operator's /metrics port (the container port the chart names "metrics")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"

    # -- the operator, as the chart's ServiceAccount ---------------------------------
    operator_config = service_account_kubeconfig(
        cluster.kubeconfig, ns, FULLNAME, tmp_path / "operator.kubeconfig"
    )
    operator = LocalOperator(deployment, operator_config, tmp_path / "operator.log")
    try:
        wait_until(operator.healthy, "the operator's /healthz")

        # -- helm test ---------------------------------------------------------------
        script, passed, helm_output = helm_test_with_hook_run_locally(
            helm, kubectl, cluster, ns, wait_until, tmp_path / "hook"
        )
        assert script.returncode == 0, script.stdout + script.stderr
        assert "Validated=True (" in script.stdout
        assert passed, helm_output
        assert "Succeeded" in helm_output

        # -- a live PDDeployment -----------------------------------------------------
        docs = list(yaml.safe_load_all((REPO / "examples" / "deepseek-v2-lite.yaml").read_text()))
        for doc in docs:
            doc["metadata"]["namespace"] = ns
        kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
        pdd_name = next(d for d in docs if d["kind"] == "PDDeployment")["metadata"]["name"]

        def ready() -> list[str]:
            status = get_json(kubectl, "-n", ns, "pdd", pdd_name).get("status") or {}
            conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
            return ["Ready"] if conditions.get("Ready") == "True" else []

        wait_until(ready, f"pdd/{pdd_name} Ready=True")

        # -- its metrics, as the chart's ServiceMonitor would scrape them --------------
        from prometheus_client.parser import text_string_to_metric_families

        def info_fingerprint() -> str:
            for family in text_string_to_metric_families(operator.metrics_text()):
                for sample in family.samples:
                    if (sample.name == "ascend_pd_deployment_info"
                            and sample.labels.get("pddeployment") == pdd_name):  # fmt: skip
                        return sample.labels["fingerprint"]
            return ""

        layout = (get_json(kubectl, "-n", ns, "pdd", pdd_name).get("status") or {})["kvLayout"]
        wait_until(lambda: info_fingerprint() == layout["fingerprint"], "the fingerprint metric")
        uid = get_json(kubectl, "-n", ns, "pdd", pdd_name)["metadata"]["uid"]
    finally:
        operator.stop()
    # with the chart's rights the operator never met a 403 (kopf's discovery included)
    forbidden = [line for line in operator.log.read_text().splitlines() if "Forbidden" in line]
    assert forbidden == []

    # -- upgrade to the current chart with a changed value -------------------------------
    helm("upgrade", RELEASE, str(CHART), *common, "--set", "logLevel=debug",
         "--force-conflicts", "--wait", "--timeout", "5m")  # fmt: skip
    assert schema_description(kubectl) != OLD_SCHEMA_MARK, "helm upgrade left the old CRD schema"
    args = get_json(kubectl, "-n", ns, "deployment", FULLNAME)["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert "--debug" in args
    assert get_json(kubectl, "-n", ns, "pdd", pdd_name)["metadata"]["uid"] == uid

    # -- uninstall: the operator goes, the CRD and the PDDeployment stay -------------------
    helm("uninstall", RELEASE, "--namespace", ns, "--wait", "--timeout", "5m")
    gone = kubectl("-n", ns, "get", "deployment", FULLNAME, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    assert kubectl("-n", ns, "get", "role", FULLNAME, check=False).returncode != 0
    assert get_json(kubectl, "crd", CRD_NAME)["metadata"]["name"] == CRD_NAME
    assert get_json(kubectl, "-n", ns, "pdd", pdd_name)["metadata"]["uid"] == uid


def can_i(api_client: Any, user: str, verb: str, group: str, resource: str) -> bool:
    """The API server's authorizer on one cluster-wide request (a SubjectAccessReview)."""
    from kubernetes import client

    name, _, sub = resource.partition("/")
    attributes = client.V1ResourceAttributes(
        verb=verb, group=group, resource=name, subresource=sub or None
    )
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(user=user, resource_attributes=attributes)
    )
    answer = client.AuthorizationV1Api(api_client).create_subject_access_review(review)
    return bool(answer.status.allowed)


def test_all_namespaces_rbac_on_the_api_server(
    api_client: Any, helm: Helm, release_ns: str
) -> None:
    """The ClusterRole mode, judged by the API server's own authorizer."""
    ns = release_ns
    release = "apd-cw"
    helm("install", release, str(CHART), "--namespace", ns, "--set", "crds.install=false")
    user = f"system:serviceaccount:{ns}:{release}-ascend-pd-operator"
    try:
        for group, resource, verbs in access.RBAC_RULES:
            if resource.startswith(("podgroups", "leases")):
                continue  # granted only with gangScheduling / leaderElection
            for verb in verbs:
                assert can_i(api_client, user, verb, group, resource), (verb, resource)
        # PodGroups: listed for pruning always, written only with gangScheduling.enabled
        assert can_i(api_client, user, "list", "scheduling.volcano.sh", "podgroups")
        assert not can_i(api_client, user, "create", "scheduling.volcano.sh", "podgroups")
        for verb, group, resource in (
            ("get", "", "secrets"),
            ("create", "", "pods"),  # pods come from its workloads, never from it
            ("patch", "", "nodes"),  # nodes are read (group recovery), never written
            ("create", "rbac.authorization.k8s.io", "clusterroles"),
            ("create", "coordination.k8s.io", "leases"),
            ("delete", "apiextensions.k8s.io", "customresourcedefinitions"),
        ):
            assert not can_i(api_client, user, verb, group, resource), (verb, resource)
    finally:
        helm("uninstall", release, "--namespace", ns)


@pytest.mark.simulated
def test_helm_test_fails_without_a_working_operator(
    cluster: Any, kubectl: Any, helm: Helm, release_ns: str, wait_until: Any, tmp_path: Path
) -> None:
    """No operator watches the namespace: the hook's verdict is a failure, and so is helm's."""
    ns = release_ns
    helm("install", RELEASE, str(CHART), "--namespace", ns, "--set", f"watch.namespaces={{{ns}}}",
         "--set", "crds.install=false", "--set", "test.timeoutSeconds=10")  # fmt: skip
    try:
        script, passed, output = helm_test_with_hook_run_locally(
            helm, kubectl, cluster, ns, wait_until, tmp_path / "hook"
        )
        assert "Validated=True (" not in script.stdout, (
            "an operator outside this test watches every namespace (a leftover process?)"
        )
        assert script.returncode == 1, script.stdout + script.stderr
        assert "is the operator running?" in script.stdout
        assert not passed, output
        # the resource it applied is cleaned up on failure too
        left = get_json(kubectl, "-n", ns, "pdd")["items"]
        assert left == []
    finally:
        helm("uninstall", RELEASE, "--namespace", ns)
