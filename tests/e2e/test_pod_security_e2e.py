"""Pod Security admission against the pods the operator and the chart make, judged by the
API server (the local 1.36 control plane runs the PodSecurity admission plugin; a
namespace is enforced as its ``pod-security.kubernetes.io/enforce`` label says).

- the runtime pods (host network, host ports, the driver's hostPath) start in a namespace
  labelled as docs/security.md says (``enforce=privileged``); in a ``baseline`` and a
  ``restricted`` namespace the API server refuses them when the StatefulSet controller
  creates them, and the PDDeployment's status says so in the words
  docs/troubleshooting.md promises: the API server's refusal from the StatefulSet's
  ``FailedCreate`` Event, then the fix. The expected text is built from that Event and
  from the documentation's row, not from the operator's code;
- the router pod meets ``restricted`` (docs/security.md): in the ``restricted`` namespace
  the ReplicaSet controller's create of it is admitted and it turns Ready while the
  runtime pods beside it are refused; its template, taken from the live Deployment, is
  also admitted by a server-side dry run of a pod in a ``restricted`` namespace, and the
  runtime template is not;
- the chart's operator Deployment and ``helm test`` pod meet ``restricted``: their
  ``helm template`` pod specs are admitted by a server-side dry run there.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pdd_e2e import REPO, Operator, apply, condition, example, get, status

from ascend_pd_dev.testtools.helm import ensure_helm
from ascend_pd_dev.testtools.kubectl import table_rows

pytestmark = [pytest.mark.simulated, pytest.mark.timeout(900)]

NAME = "dsv2-lite"
ENFORCE = "pod-security.kubernetes.io/enforce"
TROUBLESHOOTING = REPO / "docs" / "troubleshooting.md"
CHART = REPO / "charts" / "ascend-pd-operator"
#: The StatefulSet controller's words before the API server's refusal ("create Pod" up to
#: 1.30 at least, "Create Pod" on 1.36).
CONTROLLER_PREFIX = re.compile(r"^[Cc]reate Pod \S+ in StatefulSet \S+ failed error: ")
#: docs/troubleshooting.md: a quoted message is cut at this many characters, with "...".
QUOTE_CHARS = 240
#: The fix docs/troubleshooting.md names for a Pod Security refusal, as the status words it.
POD_SECURITY_FIX = (
    "the namespace's Pod Security level does not admit the runtime pods' host network, host "
    "ports and hostPath: label the namespace pod-security.kubernetes.io/enforce=privileged "
    "(docs/security.md)"
)


def _cut(text: str) -> str:
    """A quoted message as docs/troubleshooting.md says the status quotes it."""
    flat = " ".join(text.split())
    return flat if len(flat) <= QUOTE_CHARS else flat[: QUOTE_CHARS - 3].rstrip() + "..."


def _documented_refusal(level: str) -> str:
    """The <why> docs/troubleshooting.md promises for a Pod Security refusal at ``level``,
    as written (the row's code span that names the level)."""
    for line in TROUBLESHOOTING.read_text().splitlines():
        if line.startswith("| `StatefulSet <i> cannot create pods (FailedCreate)"):
            for span in re.findall(r"`([^`]*)`", line):
                if f'violates PodSecurity "{level}:latest"' in span:
                    return str(span)
    raise AssertionError(f"{TROUBLESHOOTING} has no row for a {level} Pod Security refusal")


def _documented_pattern(level: str, instance: str, pod: str) -> re.Pattern[str]:
    """The documented <why> as a pattern: its placeholders filled, each "..." any text."""
    parts = [re.escape(p.replace("<i>", instance).replace('"<p>"', f'"{pod}"'))
             for p in _documented_refusal(level).split("...")]  # fmt: skip
    return re.compile(".*".join(parts) + "$")


def _failed_create(kubectl: Any, namespace: str, statefulset: str) -> str:
    """The API server's refusal, as the StatefulSet controller's FailedCreate Event says it
    ("" until there is one)."""
    events = json.loads(kubectl(
        "get", "events", "-n", namespace, "-o", "json", "--field-selector",
        f"reason=FailedCreate,involvedObject.kind=StatefulSet,involvedObject.name={statefulset}",
    ).stdout)["items"]  # fmt: skip
    return CONTROLLER_PREFIX.sub("", events[-1]["message"]) if events else ""


def _label(kubectl: Any, namespace: str, level: str) -> None:
    kubectl("label", "namespace", namespace, f"{ENFORCE}={level}", "--overwrite")


def test_runtime_pods_start_where_the_namespace_is_labelled_privileged(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    _label(kubectl, namespace, "privileged")
    apply(kubectl, example("deepseek-v2-lite.yaml", namespace))
    wait_until(lambda: status(kubectl, namespace, NAME).get("phase") == "Ready", "Ready",
               timeout=300)  # fmt: skip
    pods = get(kubectl, namespace, "pods") or {}
    names = sorted(p["metadata"]["name"] for p in pods["items"])
    assert [n for n in names if not n.startswith(f"{NAME}-router-")] == [
        f"{NAME}-decode-0-0", f"{NAME}-decode-1-0", f"{NAME}-prefill-0-0"]  # fmt: skip


@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_a_namespace_below_privileged_refuses_the_runtime_pods_and_the_status_says_so(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any, level: str
) -> None:
    _label(kubectl, namespace, level)
    apply(kubectl, example("deepseek-v2-lite.yaml", namespace))
    instance, pod = f"{NAME}-prefill-0", f"{NAME}-prefill-0-0"
    refusal = wait_until(lambda: _failed_create(kubectl, namespace, instance),
                         f"{instance}'s FailedCreate Event")  # fmt: skip
    # the API server's own words: the level, and the runtime pods' host access first
    # (restricted names the hostPath among its restricted volume types, after the ports)
    head = f'pods "{pod}" is forbidden: violates PodSecurity "{level}:latest": host namespaces '
    ports = 'hostPort (container "sglang" uses hostPorts 30000, 5757, 8998)'
    host_path = {"baseline": 'hostPath volumes (volume "ascend-driver")',
                 "restricted": 'restricted volume types (volume "ascend-driver" uses restricted '
                               'volume type "hostPath")'}[level]  # fmt: skip
    assert refusal.startswith(head + "(hostNetwork=true), "), refusal
    assert ports in refusal and host_path in refusal, refusal
    if level == "restricted":
        # what the runtime container's defaults settle is not among the violations
        assert "allowPrivilegeEscalation" not in refusal, refusal
        assert "seccompProfile" not in refusal, refusal
    why = (f"StatefulSet {instance} cannot create pods (FailedCreate): {_cut(refusal)}; "
           f"{POD_SECURITY_FIX}")  # fmt: skip
    assert _documented_pattern(level, instance, pod).match(why), (why, _documented_refusal(level))
    expected = f"0/1 instances ready (1 nodes each): {instance} (0/1 pods ready): {why}"

    def prefill_says() -> dict[str, Any] | None:
        cond = condition(status(kubectl, namespace, NAME), "PrefillReady")
        return cond if cond.get("message") == expected else None

    prefill = wait_until(prefill_says, "PrefillReady quoting the refusal")
    assert (prefill["status"], prefill["reason"]) == ("False", "InstancesNotReady")

    # each decode instance names its own refusal; and the router, which meets restricted,
    # is admitted beside them and turns Ready (nothing waits for it)
    def decode_and_router() -> dict[str, Any] | None:
        st = status(kubectl, namespace, NAME)
        decode = condition(st, "DecodeReady").get("message", "")
        refused = all(f"StatefulSet {NAME}-decode-{i} cannot create pods (FailedCreate): pods "
                      f'"{NAME}-decode-{i}-0" is forbidden: violates PodSecurity "{level}:latest"'
                      in decode for i in (0, 1))  # fmt: skip
        router = condition(st, "RouterReady").get("status") == "True"
        return st if refused and router else None

    st = wait_until(decode_and_router, "DecodeReady naming both refusals, RouterReady True")
    decode = condition(st, "DecodeReady")
    assert (decode["status"], decode["reason"]) == ("False", "InstancesNotReady")
    ready = condition(st, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InstancesNotReady")
    assert ready["message"] == (
        f"waiting for PrefillReady, DecodeReady: {_cut_long(f'{instance} (0/1 pods ready): {why}')}"
    )
    assert st["phase"] != "Ready"
    # what `kubectl get pdd -o wide` prints
    (row,) = table_rows(kubectl("get", "pdd", NAME, "-n", namespace, "-o", "wide").stdout)
    assert (row["READY"], row["PREFILL"], row["DECODE"]) == ("False", "0/1", "0/2"), row
    assert row["REASON"] == "InstancesNotReady", row
    assert row["MESSAGE"] == ready["message"], row

    # the documented fix: once the namespace admits privileged pods, they are created
    _label(kubectl, namespace, "privileged")
    _nudge_statefulsets(kubectl, namespace)
    wait_until(lambda: status(kubectl, namespace, NAME).get("phase") == "Ready",
               "Ready once the namespace is privileged", timeout=300)  # fmt: skip


def _cut_long(text: str) -> str:
    """The Ready condition quotes the first instance's cause at twice ``QUOTE_CHARS``."""
    flat = " ".join(text.split())
    limit = 2 * QUOTE_CHARS
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def _nudge_statefulsets(kubectl: Any, namespace: str) -> None:
    """The StatefulSet controller retries a refused create with a growing backoff (its
    queue's, up to 1000 s); any change of the StatefulSet retries at once."""
    kubectl("annotate", "statefulsets", "--all", "-n", namespace,
            f"e2e.ascend-pd.dev/retry={uuid.uuid4().hex[:8]}", "--overwrite")  # fmt: skip


# --- the API server's verdict on the templates ---------------------------------------


@pytest.fixture
def restricted_namespace(kubectl: Any) -> Iterator[str]:
    name = f"e2e-restricted-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", name)
    _label(kubectl, name, "restricted")
    yield name
    kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


def _dry_run_pod(kubectl: Any, namespace: str, name: str, pod_spec: dict[str, Any]) -> Any:
    """The API server's verdict on a pod of ``pod_spec`` in ``namespace`` (nothing stored).
    The pod runs as the namespace's default ServiceAccount (an account of another namespace
    would only fail the lookup); nothing else changes."""
    spec = {k: v for k, v in pod_spec.items() if k not in ("serviceAccountName", "serviceAccount")}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": namespace}, "spec": spec}  # fmt: skip
    return kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)


def _default_account(kubectl: Any, namespace: str, wait_until: Any) -> None:
    wait_until(
        lambda: kubectl("get", "serviceaccount", "default", "-n", namespace,
                        check=False).returncode == 0,
        f"the default ServiceAccount of {namespace}",
    )  # fmt: skip


def test_the_router_template_meets_restricted_and_the_runtime_template_does_not(
    kubectl: Any,
    namespace: str,
    restricted_namespace: str,
    operator: Operator,
    wait_until: Any,
) -> None:
    _label(kubectl, namespace, "privileged")
    apply(kubectl, example("deepseek-v2-lite.yaml", namespace))
    router = wait_until(lambda: get(kubectl, namespace, "deployment", f"{NAME}-router"),
                        "the router Deployment")  # fmt: skip
    runtime = wait_until(lambda: get(kubectl, namespace, "statefulset", f"{NAME}-prefill-0"),
                         "the prefill StatefulSet")  # fmt: skip
    _default_account(kubectl, restricted_namespace, wait_until)
    admitted = _dry_run_pod(kubectl, restricted_namespace, "router",
                            router["spec"]["template"]["spec"])  # fmt: skip
    assert admitted.returncode == 0, admitted.stderr
    assert "Warning" not in admitted.stderr, admitted.stderr
    refused = _dry_run_pod(kubectl, restricted_namespace, "runtime",
                           runtime["spec"]["template"]["spec"])  # fmt: skip
    assert refused.returncode != 0
    assert 'violates PodSecurity "restricted:latest": host namespaces' in refused.stderr


def test_the_chart_s_pods_meet_restricted(
    kubectl: Any, restricted_namespace: str, wait_until: Any, tmp_path: Path
) -> None:
    """Every pod the chart renders (the operator Deployment, the ``helm test`` Job), as
    ``helm template`` writes it for this namespace, is admitted there."""
    import subprocess

    done = subprocess.run(
        [str(ensure_helm()), "template", "apd", str(CHART), "--namespace", restricted_namespace],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    pods = {f"{d['kind']}/{d['metadata']['name']}": d["spec"]["template"]["spec"]
            for d in docs if d["kind"] in ("Deployment", "Job")}  # fmt: skip
    assert any(k.startswith("Deployment/") for k in pods) and any(
        k.startswith("Job/") for k in pods), sorted(pods)  # fmt: skip
    _default_account(kubectl, restricted_namespace, wait_until)
    for key, spec in pods.items():
        verdict = _dry_run_pod(kubectl, restricted_namespace, "chart-pod", spec)
        assert verdict.returncode == 0, f"{key}: {verdict.stderr}"
        assert "Warning" not in verdict.stderr, f"{key}: {verdict.stderr}"


def test_the_example_download_job_meets_restricted(
    kubectl: Any, restricted_namespace: str, wait_until: Any
) -> None:
    """examples/models-download.yaml runs as non-root without a token: the API server admits
    its pod in a ``restricted`` namespace (its Job, applied there, creates it)."""
    job = yaml.safe_load((REPO / "examples" / "models-download.yaml").read_text())
    spec = job["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    _default_account(kubectl, restricted_namespace, wait_until)
    verdict = _dry_run_pod(kubectl, restricted_namespace, "models-download", spec)
    assert verdict.returncode == 0, verdict.stderr
    assert "Warning" not in verdict.stderr, verdict.stderr
