"""The operator on a real API server: reconcile, status, rules, restore, prune, GC, inspector.

Each test runs ``ascend-pd run --namespace <its namespace>`` as a local process against the
cluster (the local control plane runs no containers) and drives it with kubectl, as a user
would. Pods become Ready through kubelet-sim, hence the ``simulated`` marker.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pdd_e2e import REPO, Operator, apply, condition, example, get, pdd_doc, status, versions

from ascend_pd_operator.api.crd import cel_minor, cel_rules
from ascend_pd_operator.api.vocabulary import role_status
from ascend_pd_operator.decisions.template_diff import changes
from ascend_pd_operator.wiring.render_cli import render

pytestmark = [pytest.mark.simulated, pytest.mark.timeout(600)]


def test_example_becomes_ready_with_its_layout(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    apply(kubectl, example("deepseek-v2-lite.yaml", namespace))
    st = wait_until(
        lambda: (s := status(kubectl, namespace, "dsv2-lite")).get("phase") == "Ready" and s,
        "dsv2-lite Ready",
    )
    assert st["kvLayout"]["totalKvLayers"] == 27 and st["kvLayout"]["kvBufGroups"] == 2
    assert st["roles"]["decode"] == {"replicas": 2, "effectiveReplicas": 2, "readyReplicas": 2,
                                     "ready": "2/2", "nodesPerInstance": 1,
                                     "updatedReplicas": 2, "availableReplicas": 2,
                                     "surgeReplicas": 0}  # fmt: skip
    assert "prefill" not in st and "decode" not in st  # each role's is at status.roles only
    assert st["rollout"]["phase"] == "Complete"
    assert st["rollout"]["servingFingerprint"] == st["kvLayout"]["fingerprint"]
    assert st["endpoint"] == f"http://dsv2-lite-router.{namespace}.svc:8000"
    assert condition(st, "ModelResolved")["reason"] == "ConfigMap"
    cr = get(kubectl, namespace, "pdd", "dsv2-lite")
    assert cr is not None
    assert not cr["metadata"].get("finalizers")  # deletion never waits for the operator
    assert not any(k.startswith("kopf.zalando.org") for k in cr["metadata"].get("annotations", {}))
    sts = get(kubectl, namespace, "statefulset", "dsv2-lite-decode-1")
    assert sts is not None
    assert sts["metadata"]["ownerReferences"][0]["uid"] == cr["metadata"]["uid"]
    plan = get(kubectl, namespace, "configmap", "dsv2-lite-kv-layout")
    assert plan is not None
    assert json.loads(plan["data"]["plan.json"])["fingerprint"] == st["kvLayout"]["fingerprint"]
    printed = kubectl("get", "pdd", "-n", namespace).stdout.split("\n")[0].split()
    assert printed == ["NAME", "READY", "PHASE", "PREFILL", "DECODE", "REASON", "UPDATES", "AGE"]
    assert condition(st, "UpdatePending")["reason"] == "UpToDate"
    _stored_templates_are_what_the_operator_builds(kubectl, namespace, cr)
    _budgets_and_router_identity(kubectl, namespace, cr["metadata"]["uid"])


def _stored_templates_are_what_the_operator_builds(
    kubectl: Any, namespace: str, cr: dict[str, Any]
) -> None:
    """The API server stores a template with its defaults filled in and its empty values
    dropped: ``template_diff`` must see no change there, or every deployment would report
    an update pending (and roll it at the user's next change) for nothing."""
    configmaps = [
        d for d in example("deepseek-v2-lite.yaml", namespace) if d["kind"] == "ConfigMap"
    ]
    code, manifests, message = render(cr, None, namespace, configmaps)
    assert code == 0, message
    workloads = [m for m in manifests if m["kind"] in ("StatefulSet", "Deployment")]
    assert len(workloads) == 4  # 1 prefill and 2 decode instances, the router
    for m in workloads:
        live = get(kubectl, namespace, m["kind"].lower(), m["metadata"]["name"])
        assert live is not None
        found = changes(m["spec"]["template"], live["spec"]["template"])
        assert found == [], (m["metadata"]["name"], found)


def _budgets_and_router_identity(kubectl: Any, namespace: str, uid: str) -> None:
    """A policy/v1 PodDisruptionBudget per role, and the router's ServiceAccount, Role and
    RoleBinding, all created by the operator; the API server's authorizer says the router
    may read pods here and nothing more."""
    for role in ("prefill", "decode"):
        pdb = get(kubectl, namespace, "poddisruptionbudgets.v1.policy", f"dsv2-lite-{role}")
        assert pdb is not None, f"no policy/v1 PodDisruptionBudget for {role}"
        assert pdb["metadata"]["ownerReferences"][0]["uid"] == uid
        assert pdb["spec"]["maxUnavailable"] == 1
        assert pdb["spec"]["selector"]["matchLabels"] == {
            "ascendpd.io/deployment": "dsv2-lite", "ascendpd.io/role": role}  # fmt: skip
    for kind in ("serviceaccount", "role", "rolebinding"):
        obj = get(kubectl, namespace, kind, "dsv2-lite-router")
        assert obj is not None, kind
        assert obj["metadata"]["ownerReferences"][0]["uid"] == uid
    router = get(kubectl, namespace, "deployment", "dsv2-lite-router")
    assert router is not None
    assert router["spec"]["template"]["spec"]["serviceAccountName"] == "dsv2-lite-router"
    account = f"system:serviceaccount:{namespace}:dsv2-lite-router"

    def can_i(verb: str, ns: str = namespace) -> str:
        done = kubectl("auth", "can-i", verb, "pods", "-n", ns, "--as", account, check=False)
        return done.stdout.strip()

    assert [can_i(v) for v in ("get", "list", "watch")] == ["yes"] * 3
    assert [can_i("delete"), can_i("patch"), can_i("list", "default")] == ["no"] * 3


def test_invalid_update_leaves_the_deployment_as_it_was(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    apply(kubectl, example("deepseek-v3-pp2.yaml", namespace))
    before = wait_until(lambda: len(v := versions(kubectl, namespace)) == 9 and v, "9 children")
    done = kubectl("patch", "pdd", "dsv3", "-n", namespace, "--type=merge",
                   "-p", '{"spec": {"prefill": {"devicesPerNode": 6}}}', check=False)  # fmt: skip
    # the API server's CEL refuses it outright
    assert done.returncode != 0 and "must be divisible by devicesPerNode" in done.stderr
    assert versions(kubectl, namespace) == before


def test_deleted_or_edited_children_are_restored(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    apply(kubectl, example("deepseek-v2-lite.yaml", namespace))
    wait_until(lambda: get(kubectl, namespace, "service", "dsv2-lite-prefill-0"), "service")
    kubectl("delete", "service", "dsv2-lite-prefill-0", "-n", namespace)
    wait_until(lambda: get(kubectl, namespace, "service", "dsv2-lite-prefill-0"), "restored")
    kubectl("scale", "statefulset", "dsv2-lite-decode-0", "-n", namespace, "--replicas=3")
    wait_until(
        lambda: (
            (get(kubectl, namespace, "statefulset", "dsv2-lite-decode-0") or {})["spec"]["replicas"]
            == 1
        ),
        "replicas restored",
    )


def test_scaling_prunes_instances_and_leaves_the_router_alone(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    apply(kubectl, example("deepseek-v2-lite.yaml", namespace))
    wait_until(lambda: get(kubectl, namespace, "statefulset", "dsv2-lite-decode-1"), "decode-1")
    router = wait_until(lambda: get(kubectl, namespace, "deployment", "dsv2-lite-router"), "router")
    kubectl("patch", "pdd", "dsv2-lite", "-n", namespace, "--type=merge",
            "-p", '{"spec": {"decode": {"replicas": 1}}}')  # fmt: skip
    wait_until(lambda: not get(kubectl, namespace, "statefulset", "dsv2-lite-decode-1"), "pruned")
    wait_until(lambda: not get(kubectl, namespace, "service", "dsv2-lite-decode-1"), "svc pruned")
    # the router discovers instances: its Deployment is the one it was before scaling
    after = get(kubectl, namespace, "deployment", "dsv2-lite-router")
    assert after is not None and after["metadata"]["generation"] == router["metadata"]["generation"]
    assert after["spec"]["template"] == router["spec"]["template"]


def test_deleting_the_deployment_collects_every_child(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    apply(kubectl, example("deepseek-v2-lite.yaml", namespace))
    wait_until(lambda: len(versions(kubectl, namespace)) == 9, "children")
    kubectl("delete", "pdd", "dsv2-lite", "-n", namespace, "--wait=true", "--timeout=60s")
    wait_until(lambda: not versions(kubectl, namespace), "garbage collected")


def test_inspector_failure_is_shown_in_the_condition(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    docs = [d for d in example("deepseek-v2-lite.yaml", namespace) if d["kind"] != "ConfigMap"]
    del docs[0]["spec"]["model"]["configMapRef"]
    apply(kubectl, docs)
    wait_until(
        lambda: (
            condition(status(kubectl, namespace, "dsv2-lite"), "ModelResolved").get("reason")
            == "InspectingModel"
        ),
        "InspectingModel",
    )
    pods = wait_until(
        lambda: (get(kubectl, namespace, "pods", "-l", "job-name=dsv2-lite-inspect") or {}).get(
            "items"
        ),
        "inspector pod",
    )
    kubectl("annotate", "pod", pods[0]["metadata"]["name"], "-n", namespace,
            "kubelet-sim.ascend-pd.dev/outcome=fail")  # fmt: skip
    st = wait_until(
        lambda: (s := status(kubectl, namespace, "dsv2-lite")).get("phase") == "Invalid" and s,
        "Invalid after the inspector failed",
    )
    assert condition(st, "ModelResolved")["reason"] == "InspectionFailed"
    assert not get(kubectl, namespace, "statefulset", "dsv2-lite-prefill-0")


def test_leader_election_one_writer_and_a_standby_that_takes_over(
    cluster: Any, crd: None, kubectl: Any, namespace: str, tmp_path: Path, wait_until: Any
) -> None:
    def start(name: str) -> Operator:
        env = {"POD_NAMESPACE": namespace, "POD_NAME": name}
        log = tmp_path / f"{name}.log"
        return Operator(cluster.kubeconfig, namespace, log, "--leader-elect", env=env)

    ops = {name: start(name) for name in ("op-a", "op-b")}
    try:
        wait_until(lambda: all(op.healthy() for op in ops.values()), "both answer /healthz")
        lease = wait_until(
            lambda: (get(kubectl, namespace, "lease", "ascend-pd-operator") or {}).get("spec"),
            "the lease",
        )
        leader = lease["holderIdentity"]
        standby = next(name for name in ops if name != leader)
        apply(kubectl, example("deepseek-v2-lite.yaml", namespace))
        wait_until(lambda: status(kubectl, namespace, "dsv2-lite").get("phase") == "Ready", "Ready")
        assert ops[standby].healthy()  # a standby stays alive for its liveness probe
        assert "leading; reconciling" not in ops[standby].log.read_text()
        ops[leader].kill()
        kubectl("delete", "service", "dsv2-lite-prefill-0", "-n", namespace)
        wait_until(
            lambda: get(kubectl, namespace, "service", "dsv2-lite-prefill-0"),
            "the standby takes over (after the lease expires) and restores the service",
            timeout=120,
        )
        holder = get(kubectl, namespace, "lease", "ascend-pd-operator") or {}
        assert holder["spec"]["holderIdentity"] == standby
    finally:
        for op in ops.values():
            op.stop()


def test_layout_the_model_cannot_take_is_refused_at_reconcile(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    """A partition that does not sum to the model's layers needs the model: no CEL sees it."""
    docs = example("deepseek-v2-lite.yaml", namespace)
    docs[1]["spec"]["prefill"]["parallelism"] = {"tensor": 2, "pipeline": 2}
    docs[1]["spec"]["prefill"]["devicesPerNode"] = 4
    docs[1]["spec"]["prefill"]["layerPartition"] = [13, 13]
    apply(kubectl, docs)
    st = wait_until(
        lambda: (s := status(kubectl, namespace, "dsv2-lite")).get("phase") == "Invalid" and s,
        "Invalid",
    )
    cond = condition(st, "KVLayoutCompatible")
    assert cond["reason"] == "InvalidLayout"
    assert "sums to 26 but the model has 27 layers" in cond["message"]
    assert not versions(kubectl, namespace)  # nothing created
    events = get(kubectl, namespace, "events", "--field-selector", "reason=InvalidLayout")
    assert events is not None and events["items"]


def test_kubectl_explain_teaches_the_api(kubectl: Any, crd: None, wait_until: Any) -> None:
    def explain() -> str:
        done = kubectl("explain", "pdd.spec.prefill.layerPartition", check=False)
        return done.stdout if done.returncode == 0 else ""

    text = wait_until(explain, "the CRD's OpenAPI is published")
    assert "SGLANG_PP_LAYER_PARTITION" in text
    status_doc = kubectl("explain", "pdd.status.kvLayout.fingerprint").stdout
    assert "fingerprint" in status_doc.lower()


# --- the rest of the cluster contract --------------------------------------------------

EXAMPLE_MODELS = {
    "deepseek-v3-pp2.yaml": "deepseek-v3",
    "deepseek-v3.2.yaml": "deepseek-v3.2",
    "deepseek-v2-lite.yaml": "deepseek-v2-lite",
}


def _plan_for(spec: dict[str, Any], model: str) -> dict[str, Any]:
    """``ascend-pd plan`` for the same inputs as a PDDeployment spec."""
    prefill, decode = spec["prefill"], spec["decode"]
    speculative = spec.get("speculative") or {}
    args = [
        "--model-config", model,
        "--prefill-pp", str(prefill["parallelism"].get("pipeline", 1)),
        "--decode-pp", str(decode["parallelism"].get("pipeline", 1)),
        "--layer-partition", ",".join(map(str, prefill.get("layerPartition") or [])),
        "--speculative", str(speculative.get("algorithm", "none")).lower(),
        "--speculative-roles", ",".join(speculative.get("roles") or ["prefill", "decode"]),
        "--sglang-version", spec["runtime"].get("sglangVersion", "0.5.23"),
        "--transfer-backend", spec["runtime"].get("transferBackend", "ascend"),
    ]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "ascend_pd_operator.wiring.cli", "plan", *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return dict(json.loads(done.stdout))


@pytest.mark.parametrize("name", sorted(EXAMPLE_MODELS))
def test_each_example_is_ready_and_its_status_layout_is_the_plan(
    name: str, kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    docs = example(name, namespace)
    pdd = pdd_doc(docs)
    if (pdd["spec"].get("scheduling") or {}).get("gang") == "volcano":
        has_volcano = kubectl("api-resources", "--api-group=scheduling.volcano.sh", check=False)
        if "podgroups" not in has_volcano.stdout:
            pdd["spec"]["scheduling"]["gang"] = "none"  # no Volcano on this cluster
    apply(kubectl, docs)
    cr_name = pdd["metadata"]["name"]
    st = wait_until(
        lambda: (s := status(kubectl, namespace, cr_name)).get("phase") == "Ready" and s,
        f"{cr_name} Ready",
        timeout=180,
    )
    plan = _plan_for(pdd["spec"], EXAMPLE_MODELS[name])
    kv = st["kvLayout"]
    assert kv["totalKvLayers"] == plan["total_kv_layers"]
    assert kv["kvBufGroups"] == plan["model"]["kv_buf_groups"]
    assert kv["prefillDraftLayers"] == plan["prefill"]["draft_layers"]
    assert kv["decodeDraftLayers"] == plan["decode"]["draft_layers"]
    assert [(s["ppRank"], s["startLayer"], s["endLayer"]) for s in kv["prefillStages"]] == [
        (s["pp_rank"], s["start_layer"], s["end_layer"]) for s in plan["prefill"]["stages"]
    ]
    assert kv["fingerprint"] == plan["fingerprint"]
    stored = get(kubectl, namespace, "configmap", f"{cr_name}-kv-layout")
    assert stored is not None
    stored_plan = json.loads(stored["data"]["plan.json"])
    assert {k: v for k, v in stored_plan.items()} == plan
    # the children have the shape the spec asks for
    for role in ("prefill", "decode"):
        role_spec = pdd["spec"][role]
        nodes = st["roles"][role]["nodesPerInstance"]
        par = role_spec["parallelism"]
        assert nodes * role_spec.get("devicesPerNode", 8) == par["tensor"] * par.get("pipeline", 1)
        for i in range(role_spec.get("replicas", 1)):
            sts = get(kubectl, namespace, "statefulset", f"{cr_name}-{role}-{i}")
            assert sts is not None and sts["spec"]["replicas"] == nodes
            assert sts["status"].get("readyReplicas") == nodes


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"prefill": {"replicas": "two"}}, "spec.prefill.replicas"),
        ({"prefill": {"replicas": -1}}, "spec.prefill.replicas"),
        ({"runtime": {"transferBackend": "nixl"}}, "spec.runtime.transferBackend"),
        ({"model": {"path": None}}, "spec.model.path"),
    ],
)
def test_schema_invalid_specs_are_rejected_by_the_api_server_naming_the_field(
    patch: dict[str, Any], field: str, kubectl: Any, crd: None, namespace: str
) -> None:
    docs = example("deepseek-v2-lite.yaml", namespace)
    pdd = pdd_doc(docs)

    def merge(target: dict[str, Any], change: dict[str, Any]) -> None:
        for key, value in change.items():
            if value is None:
                target.pop(key, None)
            elif isinstance(value, dict):
                merge(target.setdefault(key, {}), value)
            else:
                target[key] = value

    merge(pdd["spec"], patch)
    # --validate=false: the API server's own schema check, not kubectl's copy of it
    done = kubectl("apply", "--validate=false", "-f", "-", input=yaml.safe_dump(pdd), check=False)
    assert done.returncode != 0
    assert field in done.stderr, done.stderr
    assert get(kubectl, namespace, "pdd", pdd["metadata"]["name"]) is None


def test_cross_field_invalid_spec_creates_nothing_and_says_why(
    kubectl: Any, namespace: str, operator: Operator
) -> None:
    docs = example("deepseek-v2-lite.yaml", namespace)
    pdd_doc(docs)["spec"]["prefill"]["extraArgs"] = ["--tp-size", "4"]
    done = kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs), check=False)
    # CEL sees it: the API server refuses with the rule's message (CEL names the field)
    assert done.returncode != 0, done.stdout
    assert "spec.prefill: Invalid value" in done.stderr, done.stderr
    assert "extraArgs may not set flags the operator manages" in done.stderr, done.stderr
    assert get(kubectl, namespace, "pdd", "dsv2-lite") is None


def test_annotations_over_255_kib_together_are_refused_by_the_api_server_or_the_operator(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any, cluster: Any
) -> None:
    """Two annotations of 130 KiB each: each within the schema's maxLength, together over
    the byte total. Its CEL (a map() sum) is in the CRD from 1.30 on, where the API server
    refuses; 1.28 and 1.29 get the CRD without it (docs/compatibility.md): there the API
    server admits the spec and the operator refuses it with the same message."""
    docs = example("deepseek-v2-lite.yaml", namespace)
    value = "x" * (130 * 1024)
    pdd_doc(docs)["spec"]["prefill"]["podAnnotations"] = {"example.com/a": value,
                                                          "example.com/b": value}  # fmt: skip
    # create, not apply: apply's last-applied annotation would copy the spec into metadata
    done = kubectl("create", "-f", "-", input=yaml.safe_dump_all(docs), check=False)
    rule = "keys and values may hold at most 255 KiB together"
    enforced = {r.message for r in cel_rules(cel_minor(cluster.server_version[1]))}
    if any(rule in m for m in enforced):
        assert done.returncode != 0, done.stdout
        assert "spec.prefill.podAnnotations: Invalid value" in done.stderr, done.stderr[:2000]
        assert rule in done.stderr, done.stderr[:2000]
        assert get(kubectl, namespace, "pdd", "dsv2-lite") is None
        return
    assert done.returncode == 0, done.stderr
    st = wait_until(
        lambda: (s := status(kubectl, namespace, "dsv2-lite")).get("phase") == "Invalid" and s,
        "Invalid",
    )
    cond = condition(st, "Validated")
    assert cond["status"] == "False" and cond["reason"] == "InvalidSpec", cond
    assert rule in cond["message"] and f"got {2 * (13 + len(value))} bytes" in cond["message"]
    assert not versions(kubectl, namespace)


def test_scale_prefill_2_3_1_and_the_router_is_never_replaced(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    docs = example("deepseek-v3-pp2.yaml", namespace)
    # TP 4 × PP 2 = one node per prefill instance: 3 instances + decode fit in 5 nodes
    pdd_doc(docs)["spec"]["prefill"]["parallelism"]["tensor"] = 4
    apply(kubectl, docs)

    def prefill_instances() -> list[str]:
        items = (get(kubectl, namespace, "statefulsets") or {}).get("items", [])
        return sorted(i["metadata"]["name"] for i in items if "-prefill-" in i["metadata"]["name"])

    def router_pods() -> list[tuple[str, str]]:
        items = (get(kubectl, namespace, "pods", "-l",
                     "ascendpd.io/deployment=dsv3,app.kubernetes.io/component=router")
                 or {}).get("items", [])  # fmt: skip
        return sorted((p["metadata"]["name"], p["metadata"]["uid"]) for p in items)

    router = wait_until(lambda: get(kubectl, namespace, "deployment", "dsv3-router"), "router")
    pods = wait_until(lambda: len(r := router_pods()) == 2 and r, "the router's two pods")
    for replicas in (2, 3, 1):
        kubectl("patch", "pdd", "dsv3", "-n", namespace, "--type=merge",
                "-p", json.dumps({"spec": {"prefill": {"replicas": replicas}}}))  # fmt: skip
        expected = [f"dsv3-prefill-{i}" for i in range(replicas)]
        wait_until(lambda e=expected: prefill_instances() == e, f"{replicas} prefill instances")
        wait_until(
            lambda r=replicas: (
                role_status(status(kubectl, namespace, "dsv3"), "prefill").get("readyReplicas") == r
            ),
            f"{replicas} prefill instances ready",
        )
        # the router discovers the leaders: neither its Deployment nor its pod changed
        now = get(kubectl, namespace, "deployment", "dsv3-router")
        assert now is not None and now["metadata"]["generation"] == router["metadata"]["generation"]
        assert router_pods() == pods, f"the router pod was replaced at {replicas} prefills"
        # each prefill leader announces its own bootstrap port where the router reads it
        for i in range(replicas):
            leader = get(kubectl, namespace, "pod", f"dsv3-prefill-{i}-0") or {}
            port = (leader.get("metadata") or {}).get("annotations", {})
            assert port.get("sglang.ai/bootstrap-port") == str(8998 + i), port
        # what its selectors discover (Running, Ready, matching): exactly the Ready leaders
        args = now["spec"]["template"]["spec"]["containers"][0]["args"]
        for role, want in (("prefill", {f"dsv3-prefill-{i}-0" for i in range(replicas)}),
                           ("decode", {"dsv3-decode-0-0"})):  # fmt: skip
            at = args.index(f"--{role}-selector") + 1
            labels = []
            while at < len(args) and not args[at].startswith("--"):
                labels.append(args[at])
                at += 1
            found = ",".join(labels)
            wait_until(lambda s=found, w=want: discovered(kubectl, namespace, s) == w,
                       f"the router's {role} selector finds exactly {sorted(want)}")  # fmt: skip


def discovered(kubectl: Any, namespace: str, selector: str) -> set[str]:
    """The pods sglang-router's discovery would take: matching, Running and Ready."""
    items = (get(kubectl, namespace, "pods", "-l", selector) or {}).get("items", [])
    return {
        p["metadata"]["name"]
        for p in items
        if p["status"].get("phase") == "Running"
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p["status"].get("conditions", [])
        )
    }


def test_a_new_runtime_image_rolls_every_workload(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    apply(kubectl, example("deepseek-v2-lite.yaml", namespace))
    wait_until(lambda: status(kubectl, namespace, "dsv2-lite").get("phase") == "Ready", "Ready")
    image = "registry.example.com/ascend-pd-runtime:0.2.0"
    kubectl("patch", "pdd", "dsv2-lite", "-n", namespace, "--type=merge",
            "-p", json.dumps({"spec": {"runtime": {"image": image}}}))  # fmt: skip

    def images() -> set[str]:
        items = (get(kubectl, namespace, "statefulsets") or {}).get("items", [])
        return {i["spec"]["template"]["spec"]["containers"][0]["image"] for i in items}

    wait_until(lambda: images() == {image}, "every StatefulSet on the new image")
    pods = get(kubectl, namespace, "pods", "-l", "ascendpd.io/deployment=dsv2-lite") or {}
    wait_until(
        lambda: (
            {
                c["image"]
                for p in (get(kubectl, namespace, "pods") or {}).get("items", [])
                if "-inspect" not in p["metadata"]["name"] and "router" not in p["metadata"]["name"]
                for c in p["spec"]["containers"]
            }
            == {image}
        ),
        "every runtime pod rolled to the new image",
        timeout=180,
    )
    assert pods is not None
    wait_until(lambda: status(kubectl, namespace, "dsv2-lite").get("phase") == "Ready", "Ready")


def test_an_operator_restarted_mid_rollout_converges_to_the_same_state(
    cluster: Any, crd: None, kubectl: Any, namespace: str, tmp_path: Path, wait_until: Any
) -> None:
    first = Operator(cluster.kubeconfig, namespace, tmp_path / "first.log")
    try:
        wait_until(first.healthy, "operator up")
        apply(kubectl, example("deepseek-v3-pp2.yaml", namespace))
        wait_until(lambda: len(versions(kubectl, namespace)) >= 1, "the rollout started")
        first.kill()
    finally:
        first.stop()
    kubectl("patch", "pdd", "dsv3", "-n", namespace, "--type=merge",
            "-p", '{"spec": {"prefill": {"replicas": 1}}}')  # fmt: skip
    second = Operator(cluster.kubeconfig, namespace, tmp_path / "second.log")
    try:
        st = wait_until(
            lambda: (
                (s := status(kubectl, namespace, "dsv3")).get("phase") == "Ready"
                and s.get("observedGeneration")
                == (get(kubectl, namespace, "pdd", "dsv3") or {})["metadata"]["generation"]
                # the instance scaled away drains first (Ready meanwhile: the rest serve)
                and not role_status(s, "prefill").get("draining")
                and s
            ),
            "Ready at the latest generation, the scaled-away instance drained",
            timeout=180,
        )
        assert st["roles"]["prefill"] == {"replicas": 1, "effectiveReplicas": 1, "ready": "1/1",
                                          "readyReplicas": 1, "nodesPerInstance": 2,
                                          "updatedReplicas": 1, "availableReplicas": 1,
                                          "surgeReplicas": 0}  # fmt: skip
        names = sorted(versions(kubectl, namespace))
        assert names == sorted(
            [
                "ConfigMap/dsv3-kv-layout",
                "Deployment/dsv3-router",
                "Service/dsv3-decode-0",
                "Service/dsv3-prefill-0",
                "Service/dsv3-router",
                "StatefulSet/dsv3-decode-0",
                "StatefulSet/dsv3-prefill-0",
            ]
        )
    finally:
        second.stop()


def test_a_namespace_scoped_operator_ignores_other_namespaces(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    other = f"{namespace}-other"
    kubectl("create", "namespace", other)
    try:
        apply(kubectl, example("deepseek-v2-lite.yaml", other))
        # created after the other namespace's CR: once this one is reconciled, the operator
        # has seen both watch streams' worth of time and must have left the other alone
        apply(kubectl, example("deepseek-v2-lite.yaml", namespace))
        wait_until(lambda: status(kubectl, namespace, "dsv2-lite").get("phase") == "Ready",
                   "own namespace Ready")  # fmt: skip
        assert status(kubectl, other, "dsv2-lite") == {}
        assert not versions(kubectl, other)
    finally:
        kubectl("delete", "namespace", other, "--wait=false", check=False)


def scrape(operator: Operator) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the operator's /metrics, parsed by prometheus_client's parser."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(operator.metrics_text())
        for s in family.samples
    }


def sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
           **labels: str) -> list[tuple[dict[str, str], float]]:  # fmt: skip
    return [(dict(key), v) for (n, key), v in samples.items()
            if n == name and set(labels.items()) <= key]  # fmt: skip


def test_metrics_match_the_status(
    kubectl: Any, namespace: str, operator: Operator, wait_until: Any
) -> None:
    """The running operator's /metrics: per-PDDeployment gauges equal to its status, the
    loop's own metrics moving, every operator metric the dashboard queries present, and a
    deleted PDDeployment's series gone."""
    import re

    docs = example("deepseek-v2-lite.yaml", namespace)
    apply(kubectl, docs)
    st = wait_until(
        lambda: (s := status(kubectl, namespace, "dsv2-lite")).get("phase") == "Ready" and s,
        "dsv2-lite Ready",
    )
    mine = {"namespace": namespace, "pddeployment": "dsv2-lite"}

    def settled() -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
        samples = scrape(operator)
        ready = {labels["role"]: v for labels, v in sample(samples, "ascend_pd_instances_ready",
                                                           **mine)}  # fmt: skip
        rollout = sample(samples, "ascend_pd_rollout_in_progress", **mine)
        want = {role: st["roles"][role]["readyReplicas"] for role in ("prefill", "decode")}
        return samples if ready == want and rollout and rollout[0][1] == 0 else None

    samples = wait_until(settled, "the metrics match the Ready status")
    for role in ("prefill", "decode"):
        ((_, desired),) = sample(samples, "ascend_pd_instances_desired", **mine, role=role)
        assert desired == st["roles"][role]["replicas"]
        ((_, updated),) = sample(samples, "ascend_pd_instances_updated", **mine, role=role)
        assert updated == st["roles"][role]["replicas"]
        restarts = sample(samples, "ascend_pd_instance_restarts", **mine, role=role)
        assert len(restarts) == st["roles"][role]["replicas"] and all(v == 0 for _, v in restarts)
    ((info, one_),) = sample(samples, "ascend_pd_deployment_info", **mine)
    spec = next(d for d in docs if d["kind"] == "PDDeployment")["spec"]
    assert one_ == 1
    assert info["fingerprint"] == st["kvLayout"]["fingerprint"]
    assert info["total_kv_layers"] == str(st["kvLayout"]["totalKvLayers"]) == "27"
    assert info["kv_buf_groups"] == str(st["kvLayout"]["kvBufGroups"]) == "2"
    assert info["prefill_pp"] == str(len(st["kvLayout"]["prefillStages"]))
    assert info["sglang_version"] == spec["runtime"]["sglangVersion"]
    ((_, compatible),) = sample(samples, "ascend_pd_kv_layout_compatible", **mine)
    assert compatible == 1
    assert sum(v for _, v in sample(samples, "ascend_pd_operator_reconcile_duration_seconds_count",
                                    result="ok")) > 0  # fmt: skip
    assert sum(v for _, v in sample(samples, "ascend_pd_operator_applies_total",
                                    kind="StatefulSet")) >= 3  # fmt: skip
    applies = sample(samples, "ascend_pd_operator_api_requests_total", verb="apply")
    # 201 when the apply created the object, 200 when it updated it
    assert sum(v for labels, v in applies if labels["code"] in ("200", "201")) >= 3, applies
    # every operator metric a dashboard query names is in this scrape
    dashboard = (REPO / "charts/ascend-pd-operator/files/dashboards/ascend-pd.json").read_text()
    used = set(re.findall(r"ascend_pd_[a-z0-9_]+", dashboard))
    names = {name for name, _ in samples}
    assert used and not used - names, sorted(used - names)

    kubectl("delete", "pdd", "dsv2-lite", "-n", namespace, "--wait=false")
    wait_until(
        lambda: not [k for k in scrape(operator) if ("pddeployment", "dsv2-lite") in k[1]],
        "the deleted PDDeployment's series gone",
    )
