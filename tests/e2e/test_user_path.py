"""The user's path, as printed: the README's ``helm install``, then every command of the
chart's NOTES (real ``helm install`` output), in order, through a shell, up to a Ready
PDDeployment, its KV layout and a request to the router.

The commands run in a copy of the user's checkout (``charts/`` and ``examples/`` in a
temporary directory) with ``KUBECONFIG`` naming the dev cluster and the project's kubectl
and helm first on ``PATH``. Before step 3 the copy's examples are edited as NOTES tells
the user to: ``storageClassName`` in ``examples/models-pvc.yaml`` and ``spec.runtime.image``
in ``examples/deepseek-v2-lite.yaml``.

What differs from a real cluster, and only that (every other command runs exactly as printed):

- ``helm install`` (README, "Install the operator"): run as printed, plus
  ``--take-ownership --force-conflicts``: the PDDeployment CRD is cluster-scoped and other
  tests on the shared dev cluster own it already (helm would refuse to adopt it). The image
  value stays as printed: kubelet-sim pulls nothing.
- the operator's pod: kubelet-sim runs no container, so the chart Deployment's own args run
  here as a local process with only the chart ServiceAccount's token (as in the chart tests),
  ``--all-namespaces`` replaced by ``--namespace`` for the two namespaces the path uses (the
  release namespace, where ``helm test`` applies its PDDeployment, and the example namespace):
  other tests' PDDeployments on the shared cluster are not this operator's to reconcile.
- ``helm test <release>``: run as printed; its hook pod's command runs here (the chart
  tests' ``run_hook_pod_locally``) and its exit code becomes the pod's outcome through
  kubelet-sim's ``outcome`` annotation, so ``helm test`` passes on the hook script's verdict.
- ``kubectl wait ... job/models-download``: run as printed; nothing downloads (no container,
  no network), so once the Job's pod exists the test marks it ``succeed`` (kubelet-sim's
  ``outcome`` annotation; kubelet-sim has no namespace-level outcome), standing in for
  the finished download. The cluster administrator's part is done first: a PersistentVolume
  of the storage class step 3 names, kept for the example namespace's claim ``models``; the
  real kube-scheduler places the pods only once that claim is bound.
- ``kubectl get pdd ... -w``: run as printed in the background and stopped once the next
  command (``kubectl wait --for=condition=Ready``) returned; its output must show the
  deployment.
- ``kubectl ... port-forward svc/<name>-router 8000:8000 &``: NOT run. Port-forward needs a
  kubelet's streaming server and a running router, and neither exists here. In its place
  a stand-in HTTP server listens on the same local port (taken from the printed command;
  the test fails, naming the port, if it is busy) and answers ``/v1/completions`` with
  an OpenAI-shaped completion. The ``curl`` command then runs exactly as printed; the test
  checks the request body it sent (model = the example's ``spec.model.name``, prompt,
  max_tokens) and that curl printed the answer.

Cleanup only (no user command): the dev cluster's kube-controller-manager runs no
pvc-protection controller, so the test drops the ``kubernetes.io/pvc-protection`` finalizer
of the example's PVC before deleting its namespace (a real cluster's controller does that).

The printed timeouts (2h, 30m) stay; each command is bounded by the test's own timeout.
The release and namespace names are the README's and NOTES' own (``ascend-pd``,
``ascend-pd-system``, ``llm``), so runs of this test on one cluster take a file lock, and
each run removes what a previous, interrupted run left.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_chart import run_hook_pod_locally

from ascend_pd_dev.testtools.helm import ensure_helm
from ascend_pd_dev.testtools.kubectl import kubectl_path
from ascend_pd_dev.testtools.local_run import LocalOperator
from ascend_pd_dev.testtools.rbac import service_account_kubeconfig
from ascend_pd_dev.testtools.volumes import models_volume, volume_name
from tests.json_server import serving

pytestmark = [pytest.mark.simulated, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
OUTCOME = "kubelet-sim.ascend-pd.dev/outcome"
#: what the user sets in the copies of the examples (NOTES step 3)
STORAGE_CLASS = "nfs-rwx"
RUNTIME_IMAGE = "registry.example.com/llm/ascend-pd-runtime:0.1.0"  # README step 1's name
COMMAND_TIMEOUT = 300.0
ANSWER = " Paris. The capital of Germany is Berlin."


# --- what ships: the README's helm install, NOTES' commands ----------------------------


def readme_helm_install() -> str:
    """The README's ``helm install`` command, continuation lines included, as printed."""
    for block in re.findall(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S):
        lines = block.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("helm install "):
                command = [line]
                while command[-1].endswith("\\"):
                    i += 1
                    command.append(lines[i])
                return "\n".join(command)
    pytest.fail("README.md has no ```sh block with a `helm install` line")


def notes_of(helm_output: str) -> str:
    _, sep, notes = helm_output.partition("NOTES:\n")
    assert sep, f"helm install printed no NOTES:\n{helm_output}"
    return notes


def notes_commands(notes: str) -> list[str]:
    """NOTES' command lines: those indented by 4 or more (prose is indented by 3), a line
    ending in a backslash continued by the next, kept as printed (indentation stripped)."""
    commands: list[str] = []
    continued = False
    for line in notes.splitlines():
        if continued:
            commands[-1] += "\n" + line
        elif re.match(r" {4,}\S", line):
            commands.append(line.strip())
        else:
            continue
        continued = line.endswith("\\")
    return commands


# --- the shell the user types into --------------------------------------------------------


@pytest.fixture
def user_shell(cluster: Any, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the user's checkout, and the environment of their shell."""
    checkout = tmp_path / "ascend-pd"
    shutil.copytree(REPO / "charts", checkout / "charts")
    shutil.copytree(REPO / "examples", checkout / "examples")
    tools = [str(kubectl_path().parent), str(ensure_helm(quiet=True).parent)]
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    env["PATH"] = os.pathsep.join([*tools, env.get("PATH", "/usr/bin:/bin")])
    return checkout, env


def run(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 0, f"$ {command}\nexit {done.returncode}\n{done.stdout}{done.stderr}"
    print(f"$ {command}\n{done.stdout}{done.stderr}")  # the transcript (pytest -rP shows it)
    return done


def background(command: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip


def finish(process: subprocess.Popen[str], command: str) -> str:
    output, _ = process.communicate(timeout=COMMAND_TIMEOUT)
    assert process.returncode == 0, f"$ {command}\nexit {process.returncode}\n{output}"
    print(f"$ {command}\n{output}")
    return output


def stop(process: subprocess.Popen[str]) -> str:
    """End a background command (its process group) and return what it printed."""
    if process.poll() is None:
        os.killpg(process.pid, 15)
    output, _ = process.communicate(timeout=30)
    command = process.args[-1] if isinstance(process.args, list) else process.args
    print(f"$ {command!s}  (stopped)\n{output}")
    return output


def pod_while_waiting(
    kubectl: Any, wait_until: Any, process: subprocess.Popen[str], command: str, ns: str,
    selector: str,
) -> dict[str, Any]:  # fmt: skip
    """The one pod ``selector`` names, once it exists, while ``command`` still runs."""

    def pods() -> list[dict[str, Any]]:
        assert process.poll() is None, f"$ {command}\nexited early:\n{stop(process)}"
        got = kubectl("-n", ns, "get", "pods", "-l", selector, "-o", "json").stdout
        return list(json.loads(got)["items"])

    (pod,) = wait_until(pods, f"pod {selector} while `{command}` waits")
    return dict(pod)


def edit_examples(checkout: Path) -> None:
    """What NOTES step 3 asks of the user, done to the copy as they would, by hand."""
    pvc = checkout / "examples" / "models-pvc.yaml"
    text, n = re.subn(r"(?m)^  # storageClassName: .*$", f"  storageClassName: {STORAGE_CLASS}",
                      pvc.read_text())  # fmt: skip
    assert n == 1, "examples/models-pvc.yaml has no commented storageClassName line to set"
    pvc.write_text(text)
    example = checkout / "examples" / "deepseek-v2-lite.yaml"
    text, n = re.subn(r"(?m)^(  runtime:\n    image: ).*$", rf"\g<1>{RUNTIME_IMAGE}",
                      example.read_text())  # fmt: skip
    assert n == 1, "examples/deepseek-v2-lite.yaml has no spec.runtime.image to set"
    example.write_text(text)


# --- the stand-in router -------------------------------------------------------------------


@contextlib.contextmanager
def stand_in_router(port: int, model: str) -> Iterator[list[dict[str, Any]]]:
    """Answers ``POST /v1/completions`` on ``port`` as sglang-router serving ``model`` would;
    yields the requests it got (``json_server.serving``'s ``seen``)."""

    def answer(method: str, path: str, query: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        if (method, path) != ("POST", "/v1/completions"):
            return 404, {}, {"error": f"the stand-in router serves no {method} {path}"}
        return (
            200,
            {},
            {
                "id": "cmpl-stand-in",
                "object": "text_completion",
                "created": 0,
                "model": model,
                "choices": [
                    {"index": 0, "text": ANSWER, "logprobs": None, "finish_reason": "length"}
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 16, "total_tokens": 21},
            },
        )

    requests: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(serving(answer, port, requests))
        except OSError as err:
            pytest.fail(
                f"port {port} (NOTES' port-forward) is busy on this machine ({err}); the "
                f"stand-in router must listen there for NOTES' curl to run as printed"
            )
        yield requests


# --- the test ----------------------------------------------------------------------------------


@contextlib.contextmanager
def exclusive(cluster: Any) -> Iterator[None]:
    """One run of this test per cluster at a time: the names are the README's own."""
    with (cluster.kubeconfig.parent / "e2e-user-path.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def remove_release(kubectl: Any, helm: str, env: dict[str, str], release: str, ns: str,
                   example_ns: str) -> None:  # fmt: skip
    subprocess.run([helm, "uninstall", release, "-n", ns, "--wait", "--timeout", "2m",
                    "--ignore-not-found"], env=env, capture_output=True, check=False,
                   timeout=COMMAND_TIMEOUT)  # fmt: skip
    for name in (example_ns, ns):
        kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=true",
                "--timeout=120s", check=False)  # fmt: skip
    kubectl("delete", "pv", volume_name(example_ns), "--ignore-not-found", check=False)


def test_notes_as_printed_up_to_ready_and_a_request(
    cluster: Any, kubectl: Any, user_shell: tuple[Path, dict[str, str]], wait_until: Any,
    tmp_path: Path,
) -> None:  # fmt: skip
    checkout, env = user_shell
    helm = str(ensure_helm(quiet=True))
    install = readme_helm_install()
    argv = shlex.split(install)
    release, release_ns = argv[2], argv[argv.index("-n") + 1]
    # shipped: the example's served model name, which NOTES' curl must send
    example = yaml.safe_load_all((REPO / "examples" / "deepseek-v2-lite.yaml").read_text())
    pdd = next(d for d in example if d and d["kind"] == "PDDeployment")
    pdd_name, served_model = pdd["metadata"]["name"], pdd["spec"]["model"]["name"]

    with exclusive(cluster):
        example_ns = "llm"  # checked against NOTES below
        remove_release(kubectl, helm, env, release, release_ns, example_ns)
        edit_examples(checkout)
        # the cluster administrator's part: a volume of the class NOTES has the user name
        kubectl("apply", "-f", "-", input=yaml.safe_dump(models_volume(example_ns, STORAGE_CLASS)))
        operator: LocalOperator | None = None
        try:
            # -- README: helm install ------------------------------------------------------
            installed = run(f"{install} --take-ownership --force-conflicts", checkout, env)
            commands = notes_commands(notes_of(installed.stdout))
            assert commands, installed.stdout
            assert all(c.split()[0] in ("kubectl", "helm", "curl") for c in commands), commands
            nss = {m for c in commands for m in re.findall(r"-n (\S+)", c)} - {release_ns}
            assert nss == {example_ns}, f"NOTES' example namespace: {nss}"

            # -- the operator's pod, as a local process ----------------------------------
            (deployment,) = json.loads(
                kubectl("-n", release_ns, "get", "deployments", "-o", "json").stdout
            )["items"]
            container = deployment["spec"]["template"]["spec"]["containers"][0]
            assert "--all-namespaces" in container["args"], container["args"]
            container["args"] = [
                *(f"--namespace={ns}" for ns in (release_ns, example_ns)),
                *(a for a in container["args"] if a != "--all-namespaces"),
            ]
            token = service_account_kubeconfig(
                cluster.kubeconfig, release_ns,
                deployment["spec"]["template"]["spec"]["serviceAccountName"],
                tmp_path / "operator.kubeconfig",
            )  # fmt: skip
            operator = LocalOperator(deployment, token, tmp_path / "operator.log")
            wait_until(operator.healthy, "the operator's /healthz")

            handled: dict[str, int] = {}

            def special(kind: str) -> None:
                handled[kind] = handled.get(kind, 0) + 1

            watch: subprocess.Popen[str] | None = None
            watch_command = ""
            layout_json = ""
            router_requests: list[dict[str, Any]] | None = None
            stack = contextlib.ExitStack()
            with stack:
                for command in commands:
                    if command.startswith("helm test "):
                        special("helm test")
                        hook = background(command, checkout, env)
                        selector = f"job-name={deployment['metadata']['name']}-test"
                        pod = pod_while_waiting(kubectl, wait_until, hook, command, release_ns,
                                                selector)  # fmt: skip
                        script = run_hook_pod_locally(kubectl, cluster, release_ns, pod,
                                                      tmp_path / "hook")  # fmt: skip
                        assert script.returncode == 0, script.stdout + script.stderr
                        kubectl("-n", release_ns, "annotate", "pod", pod["metadata"]["name"],
                                f"{OUTCOME}=succeed", "--overwrite")  # fmt: skip
                        assert "Succeeded" in finish(hook, command)
                    elif "job/models-download" in command and " wait " in f" {command} ":
                        special("wait for the download")
                        waiting = background(command, checkout, env)

                        pod = pod_while_waiting(kubectl, wait_until, waiting, command,
                                                example_ns, "job-name=models-download")  # fmt: skip
                        kubectl("-n", example_ns, "annotate", "pod", pod["metadata"]["name"],
                                f"{OUTCOME}=succeed", "--overwrite")  # fmt: skip
                        assert "condition met" in finish(waiting, command)
                    elif re.search(r"\s-w$", command):
                        special("watch")
                        watch, watch_command = background(command, checkout, env), command
                    elif " port-forward " in command:
                        special("port-forward")
                        match = re.search(r" (\d+):\d+ &$", command)
                        assert match, command
                        router_requests = stack.enter_context(
                            stand_in_router(int(match.group(1)), served_model)
                        )
                        print(f"$ {command}  (not run: the stand-in router listens there)")
                    else:
                        done = run(command, checkout, env)
                        if "--for=condition=Ready" in command:
                            assert "condition met" in done.stdout
                            assert watch is not None, "NOTES waits for Ready before watching"
                            watched = stop(watch)
                            assert re.search(rf"(?m)^{pdd_name}\s", watched), (
                                f"$ {watch_command}\n{watched}"
                            )
                        if "jsonpath='{.status.kvLayout}'" in command:
                            layout_json = done.stdout
                        if command.startswith("curl "):
                            special("curl")
                            assert router_requests is not None, "NOTES curls before port-forwarding"
                            assert len(router_requests) == 1, router_requests
                            (request,) = router_requests
                            assert request["path"] == "/v1/completions"
                            assert request["headers"]["Content-Type"] == "application/json"
                            curl_argv = shlex.split(command)
                            printed = json.loads(curl_argv[curl_argv.index("-d") + 1])
                            sent = json.loads(request["body"])
                            assert sent == printed
                            assert sent["model"] == served_model
                            assert sent["prompt"] == "The capital of France is"
                            assert sent["max_tokens"] == 16
                            answer = json.loads(done.stdout)
                            assert answer["choices"][0]["text"] == ANSWER
                            assert answer["model"] == served_model

            assert handled == {
                "helm test": 1, "wait for the download": 1, "watch": 1, "port-forward": 1,
                "curl": 1,
            }, handled  # fmt: skip
            layout = json.loads(layout_json)
            assert layout["fingerprint"], layout
            assert layout["totalKvLayers"] == 27, layout  # the example's num_hidden_layers
            assert layout["kvBufGroups"] == 2, layout  # MLA: latent k and rope v
            stages = [(s["startLayer"], s["endLayer"]) for s in layout["prefillStages"]]
            assert stages == [(0, 27)], layout  # PP 1
        finally:
            if operator is not None:
                operator.stop()
                log = operator.log.read_text()
                assert "Traceback" not in log, log[-4000:]
            remove_release(kubectl, helm, env, release, release_ns, example_ns)
