"""``ascend-pd-dev demo``: the whole product on the local control plane, for a newcomer.

1. the local control plane with simulated Ascend nodes (``ascend-pd-dev cluster up``);
2. the Helm chart (operator Deployment, RBAC, CRD for this cluster's version);
3. the operator as a local process holding only the chart ServiceAccount's token;
4. the ``models`` volume an administrator would provide (a PersistentVolume kept for the
   namespace's claim), ``kubectl apply`` of ``examples/models-pvc.yaml`` and of the DeepSeek-V3
   prefill-PP example;
5. wait until it is Ready (the simulated kubelet reports the pods);
6. show ``kubectl get pdd -o wide``, the children and the KV layout from status.

The cluster and the operator stay up to look around; ``ascend-pd-dev demo --down`` stops both
and deletes the cluster's data, so nothing the demo created outlives it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_dev.controlplane import cluster, paths, versions
from ascend_pd_dev.testtools import volumes
from ascend_pd_dev.testtools.helm import ensure_helm
from ascend_pd_dev.testtools.kubectl import kubectl_path
from ascend_pd_dev.testtools.local_run import LocalOperator, stop_process_group
from ascend_pd_dev.testtools.rbac import service_account_kubeconfig
from ascend_pd_operator.api.vocabulary import LABEL_DEPLOYMENT

RELEASE = "ascend-pd"
RELEASE_NAMESPACE = "ascend-pd-system"
FULLNAME = f"{RELEASE}-operator"
EXAMPLE = "deepseek-v3-pp2.yaml"
DEMO_NAMESPACE = "llm"  # where the example goes; the operator watches only it
STEPS = 6


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--down", action="store_true", help="stop the demo operator and cluster")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds to wait for Ready (300)"
    )


def _step(n: int, text: str) -> None:
    print(f"\n[{n}/{STEPS}] {text}", flush=True)


def _say(text: str) -> None:
    print(f"      {text}", flush=True)


def run(args: argparse.Namespace) -> int:
    layout = cluster.Layout(paths.state_dir())
    pid_file = layout.root / "demo-operator.pid"
    if args.down:
        if pid_file.is_file():
            stop_process_group(int(pid_file.read_text()))
            pid_file.unlink()
            _say("demo operator stopped")
        # the demo's deployment holds simulated NPUs in etcd: remove it with the cluster's data
        # so nothing the demo created survives into the next ``cluster up``
        cluster.down(layout, _say, purge=True)
        _say(f"the demo's cluster and its data ({layout.root}) are removed")
        return 0
    try:
        return _demo(layout, pid_file, args.timeout)
    except (RuntimeError, subprocess.CalledProcessError, TimeoutError) as exc:
        detail = getattr(exc, "stderr", "") or ""
        print(f"\ndemo failed: {exc}\n{detail}", file=sys.stderr)
        return 1


def _demo(layout: cluster.Layout, pid_file: Path, timeout: float) -> int:
    root = paths.project_root()
    started = time.monotonic()

    plane = versions.control_plane()
    _step(1, f"local control plane, Kubernetes {plane.version} (built once: the first run "
             f"compiles it, {plane.usually})")  # fmt: skip
    state = cluster.up(layout, nodes=8, ascend_per_node=8, progress=_say)
    kubeconfig = layout.kubeconfig
    kubectl = Kubectl(kubeconfig)
    _say(f"kube-apiserver {state.server}, {state.nodes} simulated Ascend nodes")

    _step(2, "helm install the operator chart")
    kubectl.run("create", "namespace", DEMO_NAMESPACE, check=False)
    helm = str(ensure_helm(quiet=True))
    subprocess.run(
        [helm, "--kubeconfig", str(kubeconfig), "upgrade", "--install", RELEASE,
         str(root / "charts" / "ascend-pd-operator"), "--namespace", RELEASE_NAMESPACE,
         "--create-namespace", "--set", f"fullnameOverride={FULLNAME}",
         "--set", f"watch.namespaces={{{DEMO_NAMESPACE}}}", "--take-ownership", "--force-conflicts",
         "--wait", "--timeout", "5m"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    _say(f"release {RELEASE} in namespace {RELEASE_NAMESPACE}")

    _step(3, "run the operator locally as the chart's ServiceAccount")
    if pid_file.is_file():
        stop_process_group(int(pid_file.read_text()))
    deployment = kubectl.get_json("-n", RELEASE_NAMESPACE, "deployment", FULLNAME)
    token_config = service_account_kubeconfig(
        kubeconfig, RELEASE_NAMESPACE, FULLNAME, layout.root / "demo-operator.kubeconfig"
    )
    log = layout.logs / "demo-operator.log"
    operator = LocalOperator(deployment, token_config, log)
    pid_file.write_text(str(operator.pid))
    _wait(operator.healthy, 60, "the operator's health endpoint")
    _say(f"pid {operator.pid}, log {log}")

    namespace = DEMO_NAMESPACE
    _step(4, f"kubectl apply -n {namespace} -f examples/models-pvc.yaml -f examples/{EXAMPLE}")
    volume = volumes.models_volume(namespace)
    kubectl.run("apply", "-f", "-", input=yaml.safe_dump(volume))
    _say(f"PersistentVolume {volume['metadata']['name']} (what an administrator provides) is "
         f"kept for the claim {volumes.CLAIM} in {namespace}")  # fmt: skip
    kubectl.run("apply", "-n", namespace, "-f", str(root / "examples" / "models-pvc.yaml"))
    docs = [d for d in yaml.safe_load_all((root / "examples" / EXAMPLE).read_text()) if d]
    name = next(d for d in docs if d["kind"] == "PDDeployment")["metadata"]["name"]
    kubectl.run("apply", "-n", namespace, "-f", str(root / "examples" / EXAMPLE))

    _step(5, f"wait for pdd/{name} to become Ready")
    last = ""

    def ready() -> bool:
        nonlocal last
        status = kubectl.get_json("-n", namespace, "pdd", name).get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        summary = ", ".join(f"{t}={c['status']}" for t, c in conditions.items())
        line = f"phase {status['phase']}: {summary}" if status else "waiting for a first status"
        if line != last:
            _say(line)
            last = line
        invalid = [c for c in conditions.values() if c["type"] in ("Validated",
                   "KVLayoutCompatible") and c["status"] == "False"]  # fmt: skip
        if invalid:
            raise RuntimeError(f"{invalid[0]['type']}: {invalid[0]['message']}")
        return bool(conditions.get("Ready", {}).get("status") == "True")

    _wait(ready, timeout, f"pdd/{name} Ready")

    _step(6, "what the operator built")
    print(kubectl.run("get", "pdd", "-n", namespace, "-o", "wide").stdout)
    print(kubectl.run("get", "statefulsets,deployments,services,configmaps", "-n", namespace,
                      "-l", f"{LABEL_DEPLOYMENT}={name}").stdout)  # fmt: skip
    status = kubectl.get_json("-n", namespace, "pdd", name)["status"]
    print(kv_layout_table(status["kvLayout"]))
    print(f"endpoint: {status.get('endpoint', '-')}")
    print(f"\nReady in {time.monotonic() - started:.0f}s. Look around:")
    print(f"  export KUBECONFIG={kubeconfig}")
    print(f"  kubectl get pdd -n {namespace} {name} -o yaml")
    print("  kubectl explain pdd.spec.prefill.parallelism")
    print(
        f"  kubectl patch pdd -n {namespace} {name} --type merge "
        '-p \'{"spec":{"prefill":{"replicas":3}}}\''
    )
    print(f"  operator log: {log}")
    print("Tear down: ascend-pd-dev demo --down   (or: make demo-down)")
    return 0


def kv_layout_table(kv: dict[str, Any]) -> str:
    lines = [
        "KV layout (status.kvLayout):",
        f"  totalKvLayers {kv['totalKvLayers']}, kvBufGroups {kv['kvBufGroups']}, draft layers "
        f"prefill {kv['prefillDraftLayers']} / decode {kv['decodeDraftLayers']}, fingerprint "
        f"{kv['fingerprint']}",
    ]
    for stage in kv["prefillStages"]:
        lines.append(
            f"  prefill PP rank {stage['ppRank']}: layers [{stage['startLayer']}, "
            f"{stage['endLayer']}) -> decode slots of the same layers"
        )
    return "\n".join(lines)


def _wait(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(1.0)


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self.binary = str(kubectl_path())

    def run(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, "--kubeconfig", str(self.kubeconfig), *args],
            check=check, capture_output=True, text=True, input=input,
        )  # fmt: skip

    def get_json(self, *args: str) -> dict[str, Any]:
        out = self.run("get", *args, "-o", "json").stdout
        return dict(json.loads(out))
