"""What the e2e tests share: the operator as a local process, the CRD fixture's install,
and small kubectl helpers (examples in a namespace, apply, get, status)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_dev.testtools.local_run import OperatorProcess

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


class Operator(OperatorProcess):
    """``ascend-pd run --namespace NS`` as a local process; ``stop`` checks it exits on
    SIGTERM and left no traceback."""

    def __init__(self, kubeconfig: Path, namespace: str, log: Path, *extra: str,
                 env: dict[str, str] | None = None) -> None:  # fmt: skip
        args = ["--namespace", namespace, "--resync-seconds", "5", *extra]
        super().__init__(args, kubeconfig, log, env=env)

    def stop(self, timeout: float = 30.0) -> bool:
        exited = self.process.poll() is not None
        stopped = super().stop(timeout)
        text = self.log.read_text()
        assert "Traceback" not in text, text[-4000:]
        # a pod would be SIGKILLed after its grace period
        assert exited or stopped, "the operator did not stop on SIGTERM within 30 s"
        return stopped


def example(name: str, namespace: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    return docs


def apply(kubectl: Any, docs: list[dict[str, Any]]) -> None:
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))


def get(kubectl: Any, namespace: str, *what: str) -> dict[str, Any] | None:
    done = kubectl("get", *what, "-n", namespace, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def status(kubectl: Any, namespace: str, name: str) -> dict[str, Any]:
    obj = get(kubectl, namespace, "pdd", name) or {}
    return obj.get("status") or {}


def condition(st: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions", []) if c["type"] == type_), {})


def versions(kubectl: Any, namespace: str) -> dict[str, str]:
    items = get(kubectl, namespace, "statefulsets,services,deployments,configmaps")
    # Workloads: their generation (controllers keep changing their status, not their spec).
    return {
        f"{i['kind']}/{i['metadata']['name']}": str(
            i["metadata"].get("generation") or i["metadata"]["resourceVersion"]
        )
        for i in (items or {}).get("items", [])
        if i["kind"] != "ConfigMap" or i["metadata"]["name"].endswith("-kv-layout")
    }


def pdd_doc(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == "PDDeployment")
