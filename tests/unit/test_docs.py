"""The user docs against the code: troubleshooting names every condition reason and launcher
exit code, the W8A8 change in docs/models.md is a valid PDDeployment, every relative link
and `make` target exists, and the images' settings are the script's."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import ascend_pd_runtime.env_contract as ec
from ascend_pd_operator.api import vocabulary
from ascend_pd_operator.api.rules import limits
from ascend_pd_operator.wiring.render_cli import EXIT_OK, render
from ascend_pd_runtime import launcher

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
USER_DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]
TROUBLESHOOTING = (DOCS / "troubleshooting.md").read_text()


def test_troubleshooting_names_every_reason() -> None:
    reasons = {v for k, v in vars(vocabulary).items() if k.startswith("REASON_")}
    missing = sorted(r for r in reasons if f"`{r}`" not in TROUBLESHOOTING)
    assert not missing, f"docs/troubleshooting.md does not explain {missing}"


def test_troubleshooting_names_every_condition_and_phase() -> None:
    for name, value in vars(vocabulary).items():
        if name.startswith(("COND_", "PHASE_")):
            heading = re.search(rf"^### .*\b{value}\b", TROUBLESHOOTING, flags=re.M)
            assert f"`{value}`" in TROUBLESHOOTING or heading, value


def test_troubleshooting_names_every_launcher_exit_code() -> None:
    codes = {
        launcher.EXIT_BAD_INPUT,
        launcher.EXIT_LAYOUT_MISMATCH,
        launcher.EXIT_UNRESOLVED,
        ec.EXIT_ARGS_REFUSED,
        ec.EXIT_CONTRACT_VERSION,
        launcher.EXIT_PREFLIGHT,
        ec.EXIT_SGLANG_VERSION,
    }
    assert codes == set(ec.LAUNCHER_EXITS)  # the status names each one's meaning
    table = TROUBLESHOOTING.split("## Launcher exit codes", 1)[1].split("\n## ", 1)[0]
    rows = {int(m) for m in re.findall(r"^\| (\d+) \|", table, flags=re.M)}
    assert rows == codes


def _w8a8_fragment() -> dict[str, Any]:
    text = (DOCS / "models.md").read_text().split("## W8A8", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", text, flags=re.S)
    assert block, "docs/models.md: no YAML under ## W8A8"
    return dict(yaml.safe_load(block.group(1)))


def _merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        return {k: _merge(base.get(k), v) if k in base else v for k, v in patch.items()} | {
            k: v for k, v in base.items() if k not in patch
        }
    return patch


def test_the_w8a8_change_is_a_valid_pddeployment() -> None:
    """docs/models.md's change to examples/deepseek-v3-pp2.yaml renders, and its flags reach
    both roles' pods as given, none of them a managed one."""
    docs = list(yaml.safe_load_all((ROOT / "examples" / "deepseek-v3-pp2.yaml").read_text()))
    pdd = copy.deepcopy(next(d for d in docs if d["kind"] == "PDDeployment"))
    fragment = _w8a8_fragment()
    pdd = _merge(pdd, fragment)
    code, manifests, message = render(pdd, None, "llm")
    assert code == EXIT_OK, message
    for role in ("prefill", "decode"):
        args = fragment["spec"][role]["extraArgs"]
        assert args[:2] == ["--quantization", "modelslim"]
        assert not re.search(limits.MANAGED_FLAG_PATTERN.replace("\\\\", "\\"), " ".join(args))
        for sts in (m for m in manifests if m["kind"] == "StatefulSet"):
            container = sts["spec"]["template"]["spec"]["containers"][0]
            env = {e["name"]: e.get("value") for e in container["env"]}
            if env[ec.ROLE] == role:
                assert json.loads(env[ec.EXTRA_ARGS]) == args
                assert env[ec.MODEL_PATH] == fragment["spec"]["model"]["path"]


def test_models_md_lists_the_managed_flags() -> None:
    text = (DOCS / "models.md").read_text()
    assert "MANAGED_FLAGS" in text and "rules/limits.py" in text
    for flag in ("nccl-init-addr", "served-model-name", "host", "port", "node-rank"):
        assert flag in limits.MANAGED_FLAGS
        assert f"--{flag}" in text


LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: p.name)
def test_relative_links_point_at_files(doc: Path) -> None:
    for target, _anchor in LINK.findall(doc.read_text()):
        if "://" in target:
            continue
        assert (doc.parent / target).exists(), f"{doc.name} links to a missing {target}"


def test_every_make_target_the_docs_name_exists() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", makefile, flags=re.M))
    for doc in (*USER_DOCS, ROOT / "charts" / "ascend-pd-operator" / "README.md"):
        for target in re.findall(r"`make ([a-z][a-z0-9-]*)", doc.read_text()):
            assert target in targets, f"{doc.name}: make {target}"


def test_the_image_settings_the_docs_name_are_the_script_s() -> None:
    script = (ROOT / "devtools" / "images.sh").read_text()
    documented = set()
    for doc in USER_DOCS:
        for line in re.findall(r"make images(?:[^`\n\\]|\\\n)*", doc.read_text()):
            documented |= set(re.findall(r"\b([A-Z][A-Z_]+)=", line))
    assert documented >= {"REGISTRY", "BASE_IMAGE", "SGLANG_VERSION", "PUSH"}
    for name in documented:
        assert f"#   {name} " in script, f"devtools/images.sh does not document {name}"


def _pod(phase: str = "Running", node: str = "n1", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p-0"}, "spec": {"nodeName": node},
            "status": {"phase": phase, **status}}  # fmt: skip


def _running(**container: Any) -> dict[str, Any]:
    state = {"running": {"startedAt": "t"}}
    return _pod(containerStatuses=[{"name": "c", "state": state, **container}])


def _waiting(reason: str, **container: Any) -> dict[str, Any]:
    return _pod(containerStatuses=[{"name": "c", "state": {"waiting": {"reason": reason}},
                                    **container}])  # fmt: skip


#: What the status says an instance waits for: one example per shape, and the words of the
#: shape that docs/troubleshooting.md must show (with its meaning and fix beside them).
def _why_shapes() -> list[tuple[str, str]]:
    from ascend_pd_operator.decisions import waits as st

    sched = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "m"}  # fmt: skip
    lost = {"type": "Ready", "status": "False", "reason": "NodeNotReady"}
    crashed = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
    going = {"metadata": {"name": "p-0", "deletionTimestamp": "t"}}
    sts = {"metadata": {"name": "s", "uid": "u"}, "spec": {"replicas": 2}}
    refused = 'pods "p" is forbidden: violates PodSecurity "baseline:latest"'
    event = {"reason": "FailedCreate", "involvedObject": {"name": "s", "uid": "u"},
             "message": refused}  # fmt: skip
    waits = [
        st.pod_wait(_pod("Pending", node="", conditions=[sched])),
        st.pod_wait(_pod("Pending", node="")),
        st.pod_wait(_waiting("ErrImagePull")),
        st.pod_wait(_waiting("ImagePullBackOff")),
        st.pod_wait(_waiting("CreateContainerConfigError")),
        st.pod_wait(_waiting("ContainerCreating")),
        st.pod_wait(_waiting("CrashLoopBackOff", lastState=crashed)),
        st.pod_wait(_pod("Failed", reason="Evicted")),
        st.pod_wait(_pod(conditions=[lost])),
        st.pod_wait(_running()),
        st.pod_wait(going),
    ]
    said = [w[1] for w in waits if w is not None]
    said += [
        st.instance_wait("s", 2, sts, [], None, [event]),
        st.instance_wait("s", 2, sts, [], None, []),
        st.instance_wait("s", 2, None, []),
        st.instance_wait("s", 0, sts, []),
        st.podgroup_wait({"metadata": {"name": "g"}}),
        st.podgroup_wait({"metadata": {"name": "g"}, "status": {"phase": "Inqueue"}}),
        st.exit_text({"exitCode": 137, "reason": "OOMKilled"}),
        # the router's: its pods as an instance's, its Deployment's refused create
        st.pods_wait("Deployment", 1, [_running()], running=st.ROUTER_STARTING),
        st.pods_wait("Deployment", 0, []),
        st.replica_failure(
            {
                "metadata": {"name": "r"},
                "status": {
                    "conditions": [{"type": "ReplicaFailure", "status": "True", "message": refused}]
                },
            }
        ),
    ]
    shapes = [
        "not scheduled (Unschedulable)", "not scheduled yet", "ErrImagePull",
        "ImagePullBackOff", "CreateContainerConfigError", "ContainerCreating",
        "CrashLoopBackOff, last exit", "failed (", "not ready (NodeNotReady)",
        "loading weights: running since",
        "terminating", "cannot create pods (FailedCreate)",
        "pod-security.kubernetes.io/enforce=privileged", "of its pods not created yet",
        "StatefulSet not created yet", "its StatefulSet's status has not caught up yet",
        "has no phase yet: is Volcano's scheduler running?", "Inqueue",
        "killed by SIGKILL: out of memory, or killed",
        "ready once the router answers /health", "its Deployment's status has not caught up yet",
        "refuses the router pod",
    ]  # fmt: skip
    return [(shape, next((s for s in said if shape in s), "")) for shape in shapes]


def test_troubleshooting_shows_every_shape_of_what_an_instance_waits_for() -> None:
    text = " ".join(TROUBLESHOOTING.split())  # words wrap across lines
    for shape, said in _why_shapes():
        assert said, f"the status never says {shape!r}: update this test and the docs"
        assert shape in text, (
            f"docs/troubleshooting.md does not show {shape!r} (the status says {said!r})"
        )


def test_no_file_holds_a_merge_conflict_marker() -> None:
    """A merge that committed its conflict (it happened to CHANGELOG.md once)."""
    folders = ("operator", "runtime", "devtools", "tests", "reliability", "bench", "docs",
               "charts", "examples", "crds")  # fmt: skip
    paths = [*ROOT.glob("*.md"), *(p for f in folders for p in (ROOT / f).rglob("*"))]
    marked = []
    for path in paths:
        if path.suffix not in (".md", ".py", ".yaml", ".yml", ".txt", ".json", ".tpl", ".toml"):
            continue
        lines = path.read_text(errors="replace").splitlines()
        if any(line.startswith(("<<<<<<< ", ">>>>>>> ")) for line in lines):
            marked.append(str(path.relative_to(ROOT)))
    assert not marked, f"merge conflict markers in {marked}"
