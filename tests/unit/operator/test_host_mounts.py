"""spec.ascend.hostMounts: node paths of the Ascend software mounted read-only into the
runtime pods, and nothing at all without them."""

from __future__ import annotations

import copy

import celpy
import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_pd_operator.api import host_mounts as hm
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import HostMount, parse_spec
from ascend_pd_operator.api.vocabulary import HOST_FILES, Owner, host_mount_volume
from ascend_pd_operator.builders.model_source import inspector_job
from ascend_pd_operator.wiring.render_cli import render

from .conftest import ROOT, load_example

#: The operator's own volumes of a dsv3 runtime pod, in the order the builder puts them.
OPERATOR_VOLUMES = ["model", "dshm", "ascend-driver", "kv-layout"]


def _children(resource: Json) -> list[Json]:
    code, manifests, message = render(resource, None, "llm", [])
    assert code == 0, message
    return manifests


def _runtime_pods(resource: Json) -> dict[str, Json]:
    """The pod spec of each runtime StatefulSet."""
    return {
        m["metadata"]["name"]: m["spec"]["template"]["spec"]
        for m in _children(resource)
        if m["kind"] == "StatefulSet"
    }


def _with(resource: Json, entries: list[Json]) -> Json:
    out = copy.deepcopy(resource)
    out["spec"].setdefault("ascend", {})["hostMounts"] = entries
    return out


def test_without_entries_nothing_changes_in_any_child() -> None:
    """An empty list (the CRD's default) builds exactly the children of a spec that never
    heard of the field: no pod template changes, so no instance restarts on upgrade."""
    dsv3 = load_example("deepseek-v3-pp2.yaml")
    assert "hostMounts" not in dsv3["spec"].get("ascend", {})
    assert _children(_with(dsv3, [])) == _children(dsv3)
    for pod in _runtime_pods(dsv3).values():
        assert [v["name"] for v in pod["volumes"]] == OPERATOR_VOLUMES


def test_entries_become_read_only_host_paths_in_every_runtime_pod() -> None:
    dsv3 = load_example("deepseek-v3-pp2.yaml")
    dsv3["spec"]["decode"]["volumes"] = [{"name": "cache", "emptyDir": {}}]
    dsv3["spec"]["decode"]["volumeMounts"] = [{"name": "cache", "mountPath": "/root/.cache"}]
    entries = [
        {"name": "firmware"},
        {"name": "hccnConf"},
        {"name": "npuSmi", "hostPath": "/usr/local/sbin/npu-smi"},
        {"name": "weak-dict", "hostPath": "/etc/hccn_weak_dict.conf"},
        {"name": "cann", "hostPath": "/opt/cann", "mountPath": "/usr/local/cann",
         "type": "Directory"},
    ]  # fmt: skip
    # Written out by hand from the paths SGLang's recipe and the Ascend docs give, not
    # from the vocabulary: the builder's answer is judged against them.
    volumes = [
        {"name": "ascend-firmware",
         "hostPath": {"path": "/usr/local/Ascend/firmware", "type": "Directory"}},
        {"name": "ascend-hccn-conf", "hostPath": {"path": "/etc/hccn.conf", "type": "File"}},
        {"name": "ascend-npu-smi", "hostPath": {"path": "/usr/local/sbin/npu-smi", "type": "File"}},
        {"name": "host-weak-dict", "hostPath": {"path": "/etc/hccn_weak_dict.conf"}},
        {"name": "host-cann", "hostPath": {"path": "/opt/cann", "type": "Directory"}},
    ]  # fmt: skip
    mounts = [
        {"name": "ascend-firmware", "mountPath": "/usr/local/Ascend/firmware", "readOnly": True},
        {"name": "ascend-hccn-conf", "mountPath": "/etc/hccn.conf", "readOnly": True},
        {"name": "ascend-npu-smi", "mountPath": "/usr/local/sbin/npu-smi", "readOnly": True},
        {"name": "host-weak-dict", "mountPath": "/etc/hccn_weak_dict.conf", "readOnly": True},
        {"name": "host-cann", "mountPath": "/usr/local/cann", "readOnly": True},
    ]
    pods = _runtime_pods(_with(dsv3, entries))
    assert sorted(pods) == ["dsv3-decode-0", "dsv3-prefill-0", "dsv3-prefill-1"]
    for name, pod in pods.items():
        mine = [{"name": "cache", "emptyDir": {}}] if "decode" in name else []
        mine_mounts = [{"name": "cache", "mountPath": "/root/.cache"}] if mine else []
        # after the operator's own, before the role's
        assert pod["volumes"][len(OPERATOR_VOLUMES) :] == volumes + mine, name
        container = pod["containers"][0]
        assert container["volumeMounts"][len(OPERATOR_VOLUMES) :] == mounts + mine_mounts, name


def test_the_router_and_the_inspector_get_none() -> None:
    """Only the runtime containers talk to the NPUs."""
    resource = _with(load_example("deepseek-v3-pp2.yaml"), [{"name": "firmware"}])
    routers = [m for m in _children(resource) if m["kind"] == "Deployment"]
    assert len(routers) == 1
    # the router's only volume is its writable /tmp
    assert routers[0]["spec"]["template"]["spec"]["volumes"] == [
        {"name": "ascend-pd-tmp", "emptyDir": {}}
    ]
    spec = copy.deepcopy(resource["spec"])
    spec["model"].pop("config")
    job = inspector_job(Owner("dsv3", "llm"), parse_spec(spec))
    assert [v["name"] for v in job["spec"]["template"]["spec"]["volumes"]] == ["model"]


def test_the_workloads_are_valid_kubernetes() -> None:
    entries = [{"name": n} for n in HOST_FILES] + [{"name": "x", "hostPath": "/opt/x"}]
    for m in _children(_with(load_example("deepseek-v3-pp2.yaml"), entries)):
        if m["kind"] == "StatefulSet":
            kubernetes_validate.validate(m, "1.30", strict=True)


def test_each_well_known_name_is_in_the_node_prerequisites_table() -> None:
    """docs/compatibility.md lists every name with the path it mounts."""
    text = (ROOT / "docs" / "compatibility.md").read_text()
    section = text.split("## Node prerequisites", 1)[1].split("\n## ", 1)[0]
    for name, known in HOST_FILES.items():
        assert f"`{name}`" in section and f"`{known.path}`" in section, name


_ENV = celpy.Environment()
_PATHS = st.sampled_from(["", "/a", "/etc/hccn.conf", "/usr/local/sbin"])
_ENTRIES = st.fixed_dictionaries(
    {"name": st.sampled_from([*HOST_FILES, "mine", "npu-smi"])},
    optional={"hostPath": _PATHS, "mountPath": _PATHS},
)


@settings(max_examples=80, deadline=None)
@given(_ENTRIES)
def test_the_cel_copies_decide_as_the_python_ones(entry: Json) -> None:
    """The rules' CEL reads an entry's path and volume as the builder does."""
    activation = celpy.json_to_cel({"self": entry})
    for cel, python in (
        (hm.mount_path_cel("self"),
         hm.mount_path(entry["name"], entry.get("hostPath", ""), entry.get("mountPath", ""))),
        (hm.volume_cel("self"), host_mount_volume(entry["name"])),
    ):  # fmt: skip
        assert _ENV.program(_ENV.compile(cel)).evaluate(activation) == python, entry


@pytest.mark.parametrize(
    ("name", "ok"),
    [("firmware", True), ("npuSmi", True), ("queueSchedule", True), ("npu-smi", True),
     ("a" * hm.MAX_CUSTOM_NAME_LENGTH, True), ("a" * (hm.MAX_CUSTOM_NAME_LENGTH + 1), False),
     ("NpuSmi", False), ("npusmi2x", True), ("my_files", False), ("-a", False), ("", False)],
)  # fmt: skip
def test_names_are_well_known_or_dns_labels(name: str, ok: bool) -> None:
    """A custom name must make a valid volume name, host-<name>."""
    try:
        HostMount.model_validate({"name": name, "hostPath": "/x"})
        accepted = True
    except ValueError:
        accepted = False
    assert accepted == ok
    if ok:
        volume = host_mount_volume(name)
        assert len(volume) <= 63 and volume.replace("-", "").isalnum() and volume.islower()


def test_the_operator_md_example_is_a_valid_spec() -> None:
    """The YAML under "The node's Ascend files" in docs/operator.md is accepted as written,
    and builds the mounts its comments say."""
    text = (ROOT / "docs" / "operator.md").read_text()
    section = text.split("### The node's Ascend files", 1)[1].split("\n## ", 1)[0]
    fragment = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    resource = _with(load_example("deepseek-v3-pp2.yaml"), fragment["spec"]["ascend"]["hostMounts"])
    pod = next(iter(_runtime_pods(resource).values()))
    assert {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]} >= {
        "/usr/local/Ascend/firmware", "/etc/ascend_install.info", "/etc/hccn.conf",
        "/usr/local/sbin/npu-smi", "/etc/hccn_weak_dict.conf",
    }  # fmt: skip
