"""The pure builders: each example renders into correct children, the env contract in
every pod reads back into the layout the operator computed, and every manifest is
valid against the current Kubernetes schemas."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

import ascend_pd_runtime.env_contract as ec
from ascend_pd_operator.api.crd import PDROLESCALER, openapi_schema
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import parse_spec
from ascend_pd_operator.api.vocabulary import Owner
from ascend_pd_operator.builders.desired import desired_state
from ascend_pd_operator.builders.model_source import resolve_facts
from ascend_pd_operator.wiring.cli import main as cli_main
from ascend_pd_operator.wiring.render_cli import render
from ascend_pd_runtime.layout import compute_layout
from ascend_pd_runtime.model_facts import parse_model_facts
from ascend_pd_runtime.plan import plan_document

from .conftest import EXAMPLES, load_example
from .volcano_schema import CURRENT as VOLCANO_CRD
from .volcano_schema import errors as volcano_errors

ALL_EXAMPLES = sorted(EXAMPLES.glob("*.yaml"))
#: the examples holding a PDDeployment (the others: the models PVC and its download Job)
EXAMPLE_FILES = sorted(p.name for p in ALL_EXAMPLES if "kind: PDDeployment" in p.read_text())
OWNER = Owner("dsv3", "llm", uid="0b6f8d4e-0000-4000-8000-000000000001", generation=3)


def children_of(resource: Json, owner: Owner = OWNER) -> list[Json]:
    spec = parse_spec(resource["spec"])
    facts = resolve_facts(spec).facts
    assert facts is not None
    desired = desired_state(owner, spec, facts)
    assert desired.ok, desired.message
    return desired.children


def by_kind(children: list[Json], kind: str) -> dict[str, Json]:
    return {c["metadata"]["name"]: c for c in children if c["kind"] == kind}


def env_of(container: Json) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_examples_cover_the_issue() -> None:
    assert {
        "deepseek-v3-pp2.yaml",
        "deepseek-v3.2.yaml",
        "deepseek-v2-lite.yaml",
        "deepseek-v3-a3.yaml",
    } <= set(EXAMPLE_FILES)
    assert {"models-pvc.yaml", "models-download.yaml"} <= {p.name for p in ALL_EXAMPLES}


@pytest.mark.parametrize("path", ALL_EXAMPLES, ids=[p.name for p in ALL_EXAMPLES])
def test_every_example_says_what_it_needs_and_names_no_namespace(path) -> None:
    """`kubectl apply -n <namespace> -f examples/<file>` works for any namespace: no
    manifest hard-codes one, and the header says what the example needs and how to apply."""
    text = path.read_text()
    for doc in yaml.safe_load_all(text):
        assert "namespace" not in doc["metadata"], doc["metadata"]
    header = text.split("\napiVersion:", 1)[0]
    assert f"# Apply: kubectl apply -n <namespace> -f examples/{path.name}" in header
    if path.name in EXAMPLE_FILES:
        assert "# Needs:" in header
        spec = next(d for d in yaml.safe_load_all(text) if d["kind"] == "PDDeployment")["spec"]
        nodes = 0
        for role in ("prefill", "decode"):
            r = spec[role]
            par = {"tensor": 1, "pipeline": 1, **r.get("parallelism", {})}
            per_node = r.get("devicesPerNode", 8)
            nodes += r.get("replicas", 1) * par["tensor"] * par["pipeline"] // per_node
        npus = sum(
            spec[role].get("replicas", 1)
            * spec[role]["parallelism"].get("tensor", 1)
            * spec[role]["parallelism"].get("pipeline", 1)
            for role in ("prefill", "decode")
        )
        assert f"{npus} NPUs on {nodes} " in header, (npus, nodes)
        volcano = (spec.get("scheduling") or {}).get("gang") == "volcano"
        assert ("No Volcano" in header) is not volcano


@pytest.mark.parametrize(
    "name", sorted(p.name for p in ALL_EXAMPLES if p.name not in EXAMPLE_FILES)
)
def test_the_other_examples_are_valid_manifests(name: str) -> None:
    for doc in yaml.safe_load_all((EXAMPLES / name).read_text()):
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_the_download_job_fills_the_claim_and_path_an_example_mounts() -> None:
    job = yaml.safe_load((EXAMPLES / "models-download.yaml").read_text())
    pvc = yaml.safe_load((EXAMPLES / "models-pvc.yaml").read_text())
    pod = job["spec"]["template"]["spec"]
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    # many nodes mount it at once
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    lite = load_example("deepseek-v2-lite.yaml")["spec"]["model"]
    assert env["TARGET"] == lite["path"]
    assert lite["volume"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_render_cli_renders_every_example(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["render", "-f", str(EXAMPLES / name)]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    kinds = [d["kind"] for d in docs]
    assert kinds[0] == "ConfigMap" and "StatefulSet" in kinds
    for doc in docs:
        if doc["kind"] == "PodGroup":  # Volcano's, not in the Kubernetes schemas: its CRD
            assert volcano_errors(VOLCANO_CRD, doc) == []
            continue
        if doc["kind"] == "PDRoleScaler":  # ours: its CRD's schema, by a JSON-schema validator
            jsonschema.validate(doc, openapi_schema(kind=PDROLESCALER))
            continue
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_dsv3_statefulsets_services_and_env(dsv3: Json) -> None:
    children = children_of(dsv3)
    sts = by_kind(children, "StatefulSet")
    assert sorted(sts) == ["dsv3-decode-0", "dsv3-prefill-0", "dsv3-prefill-1"]
    # prefill: 8 × 2 / 8 = 2 nodes; decode: 16 × 1 / 8 = 2 nodes
    assert sts["dsv3-prefill-1"]["spec"]["replicas"] == 2
    assert sts["dsv3-decode-0"]["spec"]["replicas"] == 2
    for s in sts.values():
        assert s["spec"]["podManagementPolicy"] == "Parallel"
        assert s["spec"]["serviceName"] == s["metadata"]["name"]
        assert s["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid
        pod = s["spec"]["template"]["spec"]
        assert pod["hostNetwork"] and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
        container = pod["containers"][0]
        res = container["resources"]
        assert res["requests"]["huawei.com/Ascend910"] == "8"
        assert res["limits"]["huawei.com/Ascend910"] == "8"
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["dshm"] == "/dev/shm"
        assert mounts["kv-layout"] == ec.KV_LAYOUT_MOUNT_DIR
        assert mounts["model"] == "/models/DeepSeek-V3"
        assert mounts["ascend-driver"] == "/usr/local/Ascend/driver"
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
        assert volumes["model"]["persistentVolumeClaim"]["claimName"] == "models"
    svc = by_kind(children, "Service")
    assert svc["dsv3-prefill-0"]["spec"]["clusterIP"] == "None"
    assert svc["dsv3-prefill-0"]["spec"]["publishNotReadyAddresses"] is True
    env = env_of(sts["dsv3-prefill-1"]["spec"]["template"]["spec"]["containers"][0])
    assert env[ec.DIST_INIT_ADDR] == "dsv3-prefill-1-0.dsv3-prefill-1.llm.svc:5757"
    assert env[ec.STORE_URL] == "tcp://dsv3-prefill-0-0.dsv3-prefill-0.llm.svc:24666"
    assert env[ec.NNODES] == "2" and env[ec.PP_SIZE] == "2" and env[ec.TP_SIZE] == "8"
    assert env[ec.LAYER_PARTITION] == "30,31"
    assert env[ec.SPECULATIVE_ALGORITHM] == "NEXTN" and env[ec.SPECULATIVE_ROLES] == "decode"
    assert env[ec.TRANSFER_PROTOCOL] == "device_rdma"
    assert json.loads(env[ec.EXTRA_ARGS]) == [
        "--quantization", "modelslim", "--mem-fraction-static", "0.8"]  # fmt: skip


def test_bootstrap_ports_unique_per_prefill_instance(dsv3: Json) -> None:
    resource = copy.deepcopy(dsv3)
    resource["spec"]["prefill"]["replicas"] = 5
    sts = by_kind(children_of(resource), "StatefulSet")
    ports = [
        env_of(sts[f"dsv3-prefill-{i}"]["spec"]["template"]["spec"]["containers"][0])[
            ec.BOOTSTRAP_PORT
        ]
        for i in range(5)
    ]
    assert len(set(ports)) == 5
    decode_env = env_of(sts["dsv3-decode-0"]["spec"]["template"]["spec"]["containers"][0])
    assert decode_env[ec.BOOTSTRAP_PORT] == ""


@pytest.mark.parametrize("name", ["deepseek-v3-pp2.yaml", "deepseek-v3.2.yaml"])
def test_pod_env_reads_back_into_the_operators_layout(name: str) -> None:
    """What the launcher will compute from the env equals the plan in the ConfigMap."""
    resource = load_example(name)
    children = children_of(resource)
    configmap = by_kind(children, "ConfigMap")[f"{OWNER.name}-kv-layout"]
    plan = json.loads(configmap["data"]["plan.json"])
    facts = resolve_facts(parse_spec(resource["spec"])).facts
    assert facts is not None
    for sts in by_kind(children, "StatefulSet").values():
        container = sts["spec"]["template"]["spec"]["containers"][0]
        environ = env_of(container) | {ec.POD_NAME: sts["metadata"]["name"] + "-1"}
        launch = ec.read_launch_env(environ)
        assert launch.node_rank == 1
        doc = plan_document(compute_layout(facts, launch.layout_request()))
        assert doc == plan
        assert launch.kv_fingerprint == plan["fingerprint"]
        template_meta = sts["spec"]["template"]["metadata"]
        assert template_meta["labels"]["ascendpd.io/kv-fingerprint"] == plan["fingerprint"]


def test_dsv32_has_three_buffer_groups_and_podgroups() -> None:
    resource = load_example("deepseek-v3.2.yaml")
    owner = Owner("dsv32", "llm", uid="u")
    children = children_of(resource, owner)
    plan = json.loads(by_kind(children, "ConfigMap")["dsv32-kv-layout"]["data"]["plan.json"])
    assert plan["model"]["kv_buf_groups"] == 3
    assert plan["prefill"]["draft_layers"] == 1 and plan["decode"]["draft_layers"] == 1
    groups = by_kind(children, "PodGroup")
    assert sorted(groups) == ["dsv32-decode-0", "dsv32-prefill-0"]
    assert groups["dsv32-prefill-0"]["spec"]["minMember"] == 2
    pod = by_kind(children, "StatefulSet")["dsv32-prefill-0"]["spec"]["template"]
    assert pod["spec"]["schedulerName"] == "volcano"
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "dsv32-prefill-0"
    volume = {v["name"]: v for v in pod["spec"]["volumes"]}["model"]
    assert volume["hostPath"]["path"] == "/data/models/DeepSeek-V3.2"


def test_router_disabled_leaves_it_out(dsv3: Json) -> None:
    resource = copy.deepcopy(dsv3)
    resource["spec"]["router"]["enabled"] = False
    children = children_of(resource)
    for kind in ("Deployment", "Service", "ServiceAccount", "Role", "RoleBinding"):
        assert "dsv3-router" not in by_kind(children, kind)


def test_user_env_follows_the_contract_as_given(dsv3: Json) -> None:
    secret = {"secretKeyRef": {"name": "hf", "key": "token"}}
    resource = copy.deepcopy(dsv3)
    resource["spec"]["decode"]["env"] = [
        {"name": "HCCL_BUFFSIZE", "value": "512"},
        {"name": "HF_TOKEN", "valueFrom": secret},
        {"name": "EMPTY"},
    ]
    sts = by_kind(children_of(resource), "StatefulSet")["dsv3-decode-0"]
    env = sts["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["value"] for e in env if e["name"] == ec.TP_SIZE] == ["16"]
    assert env[-3:] == [
        {"name": "HCCL_BUFFSIZE", "value": "512"},
        {"name": "HF_TOKEN", "valueFrom": secret},
        {"name": "EMPTY"},
    ]


def test_every_port_has_a_protocol(dsv3: Json) -> None:
    """Every port names its protocol: with containerPort, the key server-side apply merges
    a ports list on."""

    def port_lists(node: Any) -> Any:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "ports":
                    yield value
                yield from port_lists(value)
        elif isinstance(node, list):
            for item in node:
                yield from port_lists(item)

    found = 0
    for child in children_of(dsv3):
        for ports in port_lists(child):
            for port in ports:
                assert port.get("protocol") == "TCP", (child["metadata"]["name"], port)
                found += 1
    assert found >= 10


def test_render_reports_incompatible_layout_and_bad_partition(dsv3: Json) -> None:
    resource = copy.deepcopy(dsv3)
    resource["spec"]["prefill"]["layerPartition"] = [30, 30]
    code, manifests, message = render(resource, None, None)
    assert code == 1 and not manifests
    assert "sums to 60 but the model has 61 layers" in message
    resource = copy.deepcopy(dsv3)
    resource["spec"]["speculative"]["algorithm"] = "NONE"
    resource["spec"]["model"]["config"]["numNextnPredictLayers"] = 0
    resource["spec"]["speculative"] = {"algorithm": "EAGLE", "roles": ["decode"]}
    code, manifests, message = render(resource, None, None)
    assert code == 2 and "num_nextn_predict_layers 0" in message


def test_render_needs_facts_without_inline_config(tmp_path: Any) -> None:
    resource = load_example("deepseek-v3-pp2.yaml")
    del resource["spec"]["model"]["config"]
    code, _, message = render(resource, None, None)
    assert code == 1 and "--model-config" in message
    config = tmp_path / "config.json"
    raw = {"num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64}
    config.write_text(json.dumps({**raw, "num_nextn_predict_layers": 1}))
    code, manifests, _ = render(resource, str(config), None)
    assert code == 0 and manifests


def test_facts_from_config_json_equal_inline_facts() -> None:
    resource = load_example("deepseek-v3.2.yaml")
    spec = parse_spec(resource["spec"])
    inline = resolve_facts(spec).facts
    from ascend_pd_runtime.plan_cli import example_config

    raw = json.loads(example_config("deepseek-v3.2").read_text())
    from_file = parse_model_facts(raw)
    assert inline is not None
    assert inline.kv_buf_groups == from_file.kv_buf_groups == 3
    assert inline.total_kv_layers == from_file.total_kv_layers


def test_every_pod_of_an_instance_is_ready_when_its_leader_is(dsv3: Json) -> None:
    sts = by_kind(children_of(dsv3), "StatefulSet")["dsv3-prefill-1"]
    probe = sts["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    command = probe["exec"]["command"]
    assert command[:2] == ["python3", "-c"]
    assert "http://dsv3-prefill-1-0.dsv3-prefill-1.llm.svc:30000/health" in command[2]
    compile(command[2], "<probe>", "exec")  # the probe is valid Python


def test_role_label_is_for_runtime_objects_and_component_says_what_the_rest_is(dsv3: Json) -> None:
    from ascend_pd_operator.api.vocabulary import LABEL_COMPONENT, LABEL_ROLE

    children = children_of(dsv3)
    for child in children:
        labels = child["metadata"]["labels"]
        runtime = "-router" not in child["metadata"]["name"]
        if child["kind"] in ("StatefulSet", "PodGroup") or (
            child["kind"] in ("Service", "PodDisruptionBudget") and runtime
        ):
            assert labels[LABEL_ROLE] == labels[LABEL_COMPONENT] in ("prefill", "decode")
        else:
            assert LABEL_ROLE not in labels, child["metadata"]["name"]
    router = by_kind(children, "Deployment")["dsv3-router"]
    selector = router["spec"]["selector"]["matchLabels"]
    assert selector == {"ascendpd.io/deployment": "dsv3", LABEL_COMPONENT: "router"}
    assert by_kind(children, "Service")["dsv3-router"]["spec"]["selector"] == selector
    # the router's selector matches no runtime pod, and every runtime pod has a role
    for sts in by_kind(children, "StatefulSet").values():
        pod_labels = sts["spec"]["template"]["metadata"]["labels"]
        assert not all(pod_labels.get(k) == v for k, v in selector.items())
