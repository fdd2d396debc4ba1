"""The CEL CRD on the newest API server alone (the default release's kube-apiserver with its
own etcd, ``controlplane/crd_server``).

Beside the operator's e2e suite, this server decides what only the CRD decides on the newest
Kubernetes, without a controller or node in the way: that the CRD (its defaults, its CEL
rules and their estimated cost) is accepted, that ``kubectl explain`` describes every field,
that the examples are accepted and shown with the printer columns, that the bad-input corpus is
refused where the corpus says the schema or CEL refuses it (and accepted where it says the
operator does), that unknown fields are refused under strict field validation, and that the
chart hands this server's version the CEL variant.
"""

from __future__ import annotations

import copy
import re
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from crd_env import CRD_NAME, REPO, RESOURCES, Kubectl, crd_document

from ascend_pd_dev.controlplane import crd_server
from ascend_pd_dev.testtools.helm import ensure_helm
from ascend_pd_dev.testtools.kubectl import table_rows
from ascend_pd_operator.api import models
from ascend_pd_operator.api.rules import RULES, rules_for
from ascend_pd_operator.api.rules.limits import MAX_POD_ANNOTATIONS_BYTES, MAX_REPLICAS
from ascend_pd_operator.api.vocabulary import HOST_FILES
from reliability.bad_inputs import FIELD, Case, case_document, load_corpus
from reliability.offline import offline_verdict

pytestmark = pytest.mark.crdserver

Json = dict[str, Any]
CASES = load_corpus()
#: the examples holding a PDDeployment (examples/ also holds the models PVC and its Job)
EXAMPLES = sorted(
    p for p in (REPO / "examples").glob("*.yaml") if "kind: PDDeployment" in p.read_text()
)
CHART = REPO / "charts" / "ascend-pd-operator"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
SCALER_CRD = "pdrolescalers.ascendpd.io"
SCALERS = "/apis/ascendpd.io/v1alpha1/namespaces/default/pdrolescalers"


def _message(body: Any) -> str:
    return str(body.get("message", "")) if isinstance(body, dict) else str(body)


def _dry_run_create(server: crd_server.CrdServer, doc: Json, strict: bool = False) -> tuple:
    """Create ``doc`` with server-side dry run (nothing is stored); (status, message)."""
    namespace = doc["metadata"].get("namespace", "default")
    query = {"dryRun": "All"}
    if strict:
        query["fieldValidation"] = "Strict"
    path = RESOURCES.replace("/namespaces/default/", f"/namespaces/{namespace}/")
    status, body = server.request("POST", f"{path}?{urllib.parse.urlencode(query)}", doc)
    return status, _message(body)


# --- the CRD itself ---------------------------------------------------------------------------


def test_the_server_is_a_current_kubernetes(server: crd_server.CrdServer) -> None:
    version = crd_server.server_version(server)
    major, minor = (int(x) for x in re.findall(r"\d+", version)[:2])
    assert (major, minor) >= (1, 36), version


def test_the_cel_crd_is_established_with_its_rules(server: crd_server.CrdServer) -> None:
    status, body = server.request(
        "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
    )
    assert status == 200
    conditions = {c["type"]: c["status"] for c in body["status"]["conditions"]}
    assert conditions["Established"] == "True"
    assert conditions["NamesAccepted"] == "True"
    served = body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert served == crd_document()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "x-kubernetes-validations" in served["properties"]["spec"]


def test_a_default_that_breaks_a_rule_is_refused(crd_server_up: crd_server.CrdServer) -> None:
    """The bug of issue 15 as this server sees it: ``speculative: default: {}`` fails the
    speculative roles rule (evaluated on the default as written), so the CRD is refused."""
    doc = crd_document()
    spec_schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec_schema["properties"]["speculative"]["default"] = {}
    doc["metadata"]["name"] = CRD_NAME  # dry run: the real one may exist already
    status, body = crd_server_up.request(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions?dryRun=All", doc
    )
    message = _message(body)
    assert status == 422, (status, message)
    assert "properties[speculative].default" in message, message
    assert "no such key: algorithm" in message, message
    assert "speculative.roles with prefill must include decode" in message, message


# --- kubectl explain ------------------------------------------------------------------------


def _fields(schema: Json, path: str) -> Iterator[tuple[str, Json]]:
    for name, prop in (schema.get("properties") or {}).items():
        here = f"{path}.{name}"
        yield here, prop
        yield from _fields(prop, here)
        items = prop.get("items")
        if isinstance(items, dict) and "properties" in items:
            yield from _fields(items, here)


def _words(text: str) -> str:
    return " ".join(text.split())


def test_kubectl_explain_describes_every_field(server: crd_server.CrdServer, kubectl: Kubectl):
    schema = crd_document()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    fields = [(p, s) for p, s in _fields(schema, models.PLURAL) if not p.endswith(".metadata")]
    assert len(fields) > 80

    def explain(item: tuple[str, Json]) -> str | None:
        path, prop = item
        done = kubectl("explain", path)
        out = _words(done.stdout)
        name = path.rsplit(".", 1)[1]
        if done.returncode != 0:
            return f"{path}: {done.stderr.strip()}"
        if f"FIELD: {name} <" not in out:
            return f"{path}: no FIELD line in {out[:300]}"
        description = prop.get("description")
        # the API server describes apiVersion and kind itself, as for every kind
        own = path.count(".") > 1 or name not in ("apiVersion", "kind")
        if own and description and _words(description) not in out:
            return f"{path}: description {description!r} missing from {out[:500]}"
        return None

    with ThreadPoolExecutor(4) as pool:
        problems = [p for p in pool.map(explain, fields) if p]
    assert not problems, "\n".join(problems)


# --- examples and printer columns -----------------------------------------------------------


def _pddeployments(path: Path) -> list[Json]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == models.KIND]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_is_accepted_and_listed(
    server: crd_server.CrdServer, kubectl: Kubectl, example: Path
) -> None:
    docs = _pddeployments(example)
    assert docs
    for doc in docs:
        # NamespaceLifecycle is off, so no namespace need exist: the examples name none
        # (`kubectl apply -n <namespace>`); this one is taken as it is.
        namespace, name = "llm", doc["metadata"]["name"]
        done = kubectl(
            "apply", "--validate=strict", "-n", namespace, "-f", "-", input=yaml.safe_dump(doc)
        )
        assert done.returncode == 0, done.stderr
        item = f"{RESOURCES.replace('/default/', f'/{namespace}/')}/{name}"
        stored = server.request("GET", item)[1]
        # the API server's defaulting agrees with the operator's: whatever it filled in is
        # what the operator's models assume for an absent field
        assert models.parse_spec(stored["spec"]) == models.parse_spec(doc["spec"])
        spec_schema = crd_document()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for key, prop in spec_schema["properties"]["spec"]["properties"].items():
            if key not in doc["spec"] and "default" in prop:
                assert stored["spec"][key] == prop["default"], key
        # the printer columns, as the server renders them for kubectl get
        _, table = server.request("GET", item, accept=TABLE)
        names = [c["name"] for c in table["columnDefinitions"]]
        assert names == ["Name", *SHOWN, *WIDE]
        cells = dict(zip(names, table["rows"][0]["cells"], strict=True))
        spec = stored["spec"]
        assert cells["PP"] == spec["prefill"]["parallelism"]["pipeline"]
        assert cells["Prefill"] is None  # no status yet: the roles' columns stay empty
        listed = kubectl("get", "pdd", "-n", namespace)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.split()[:8] == [n.upper() for n in ["Name", *SHOWN]]
        done = kubectl("delete", "pdd", name, "-n", namespace)
        assert done.returncode == 0, done.stderr


#: The printer columns: kubectl get pdd's, then -o wide's (priority 1).
SHOWN = ["Ready", "Phase", "Prefill", "Decode", "Reason", "Updates", "Age"]
WIDE = ["PP", "Layers", "Router", "Endpoint", "Message"]


def test_kubectl_get_wide_shows_counts_reason_endpoint_and_message(
    server: crd_server.CrdServer, kubectl: Kubectl
) -> None:
    """A status as the operator writes one while an instance is not ready, as this
    server's printer columns and the real kubectl show it."""
    (doc,) = _pddeployments(REPO / "examples" / "deepseek-v3-pp2.yaml")
    name = "columns"
    doc["metadata"] = {"name": name, "namespace": "default"}
    item = f"{RESOURCES}/{name}"
    server.request("DELETE", item)
    status, body = server.request("POST", RESOURCES, doc)
    assert status == 201, _message(body)
    message = ("waiting for DecodeReady: columns-decode-0 (0/2 pods ready): pod "
               'columns-decode-0-0 ImagePullBackOff: Back-off pulling image "x:1"')  # fmt: skip
    ready = {"type": "Ready", "status": "False", "reason": "InstancesNotReady",
             "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    obj = server.request("GET", item)[1]
    obj["status"] = {
        "phase": "Progressing", "conditions": [ready],
        "roles": {"prefill": {"replicas": 2, "readyReplicas": 2, "ready": "2/2"},
                  "decode": {"replicas": 1, "readyReplicas": 0, "ready": "0/1"}},
        "kvLayout": {"totalKvLayers": 61},
        "router": {"replicas": 2, "readyReplicas": 1, "ready": "1/2"},
        "endpoint": "http://columns-router.default.svc:8000",
    }  # fmt: skip
    status, body = server.request("PUT", f"{item}/status", obj)
    assert status == 200, _message(body)
    listed = kubectl("get", "pdd", name, "-n", "default")
    assert listed.returncode == 0, listed.stderr
    (row,) = table_rows(listed.stdout)
    assert list(row) == [n.upper() for n in ["Name", *SHOWN]]
    assert [row[k] for k in ("READY", "PHASE", "PREFILL", "DECODE", "REASON")] == [
        "False", "Progressing", "2/2", "0/1", "InstancesNotReady"]  # fmt: skip
    wide = kubectl("get", "pdd", name, "-n", "default", "-o", "wide")
    assert wide.returncode == 0, wide.stderr
    (row,) = table_rows(wide.stdout)
    assert list(row) == [n.upper() for n in ["Name", *SHOWN, *WIDE]]
    assert (row["PP"], row["LAYERS"], row["ROUTER"]) == ("2", "61", "1/2")
    assert row["ENDPOINT"] == "http://columns-router.default.svc:8000"
    assert row["MESSAGE"] == message
    server.request("DELETE", item)


def test_each_role_status_is_kept_at_status_roles(server: crd_server.CrdServer) -> None:
    """The status subresource keeps each role's status at status.roles.<role>, every field
    the operator writes; status.prefill, where operators before status.roles kept it, is not
    the schema's any more: the server drops it (the operator's status patch nulls it too)."""
    (doc,) = _pddeployments(REPO / "examples" / "deepseek-v3-pp2.yaml")
    name = "roles-status"
    doc["metadata"] = {"name": name, "namespace": "default"}
    item = f"{RESOURCES}/{name}"
    server.request("DELETE", item)
    status, body = server.request("POST", RESOURCES, doc)
    assert status == 201, _message(body)
    draining = [{"instance": f"{name}-decode-2", "since": "2026-01-01T00:00:00Z"}]
    role = {"replicas": 3, "effectiveReplicas": 2, "readyReplicas": 2, "ready": "2/2",
            "nodesPerInstance": 2,
            "updatedReplicas": 2, "availableReplicas": 2, "surgeReplicas": 0,
            "scaler": f"{name}-decode", "draining": draining}  # fmt: skip
    obj = server.request("GET", item)[1]
    obj["status"] = {"phase": "Progressing", "roles": {"prefill": role, "decode": role},
                     "prefill": role}  # fmt: skip
    status, body = server.request("PUT", f"{item}/status", obj)
    assert status == 200, _message(body)
    stored = server.request("GET", item)[1]["status"]
    assert stored["roles"] == {"prefill": role, "decode": role}
    assert "prefill" not in stored
    server.request("DELETE", item)


def _host_mounts_doc(name: str, entries: list[Json]) -> Json:
    (doc,) = _pddeployments(REPO / "examples" / "deepseek-v3-pp2.yaml")
    doc["metadata"] = {"name": name, "namespace": "default"}
    doc["spec"].setdefault("ascend", {})["hostMounts"] = entries
    return doc


def test_host_mounts_are_accepted_and_defaulted(server: crd_server.CrdServer) -> None:
    """Every well-known name and entries of one's own are accepted as written, and stored
    as the operator reads them; a spec without the field gets the empty list."""
    entries = [{"name": n} for n in HOST_FILES] + [
        {"name": "weak-dict", "hostPath": "/etc/hccn_weak_dict.conf", "type": "File"},
        {"name": "cann", "hostPath": "/opt/cann", "mountPath": "/usr/local/cann"},
        {"name": "npu-smi", "hostPath": "/opt/npu-smi", "mountPath": "/opt/bin/npu-smi"},
    ]
    doc = _host_mounts_doc("host-mounts", entries)
    item = f"{RESOURCES}/host-mounts"
    server.request("DELETE", item)
    status, body = server.request("POST", RESOURCES, doc)
    assert status == 201, _message(body)
    stored = server.request("GET", item)[1]["spec"]
    assert stored["ascend"]["hostMounts"] == entries
    assert models.parse_spec(stored) == models.parse_spec(doc["spec"])
    server.request("DELETE", item)
    doc["spec"]["ascend"].pop("hostMounts")
    status, body = server.request("POST", RESOURCES, doc)
    assert status == 201, _message(body)
    assert server.request("GET", item)[1]["spec"]["ascend"]["hostMounts"] == []
    server.request("DELETE", item)


def test_the_largest_host_mounts_stay_within_the_cel_budget(server: crd_server.CrdServer) -> None:
    """16 entries and 64 mounts on each role, every path long: each rule compares every
    entry with every other and with each mount, and the API server still decides."""
    deep = "/" + "/".join(["d" * 60] * 16)  # 977 characters
    entries = [{"name": f"e{i}", "hostPath": f"{deep}/e{i}"} for i in range(16)]
    doc = _host_mounts_doc("host-mounts-largest", entries)
    for role in ("prefill", "decode"):
        doc["spec"][role]["volumes"] = [{"name": f"v{i}", "emptyDir": {}} for i in range(64)]
        doc["spec"][role]["volumeMounts"] = [
            {"name": f"v{i}", "mountPath": f"{deep}/m{i}"} for i in range(64)
        ]
    status, message = _dry_run_create(server, doc)
    assert status == 201, message
    # and the same size with one clash is refused by the rule, not by a cost limit
    doc["spec"]["decode"]["volumeMounts"][63]["mountPath"] = f"{deep}/e15/x"
    status, message = _dry_run_create(server, doc)
    assert status == 422, message
    assert "decode.volumeMounts may not mount at, inside or above a path of" in message, message


# --- the bad-input corpus -------------------------------------------------------------------


def _rules_named(case: Case) -> list[str]:
    """The rule messages (``api.rules``) the operator's own check of the case names."""
    verdict = offline_verdict(case)
    return [r.message for r in RULES if r.message in verdict.message]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.reject}-{c.name}")
def test_bad_input_corpus(server: crd_server.CrdServer, case: Case) -> None:
    status, message = _dry_run_create(server, case_document(case, "default"))
    if case.reject in ("layout", "model"):
        # the operator refuses these; the API server has no reason to
        assert status == 201, (status, message)
        return
    assert status == 422, (status, message)
    assert FIELD.search(message), f"names no field: {message}"
    if case.reject == "schema":
        # the corpus's messages name no list index; the server adds the index of a list item
        assert case.message in message or case.message in re.sub(r"\[\d+\]", "", message), message
    else:
        rules = _rules_named(case)
        assert rules, f"the operator's message names no rule of api.rules: {case.message}"
        for rule in rules:
            assert rule in message, message


@pytest.mark.parametrize(
    ("value", "accepted"),
    [("x" * (MAX_POD_ANNOTATIONS_BYTES - 1), True), ("x" * MAX_POD_ANNOTATIONS_BYTES, False),
     ("é" * (MAX_POD_ANNOTATIONS_BYTES // 2), False)],
    ids=["at-the-limit", "one-byte-over", "multi-byte-over"],
)  # fmt: skip
def test_pod_annotations_are_counted_in_bytes(
    server: crd_server.CrdServer, value: str, accepted: bool
) -> None:
    """The size rule uses sum() of Kubernetes' CEL (cel-python lacks it): this server counts
    what Kubernetes counts, keys and values in bytes."""
    doc = copy.deepcopy(_pddeployments(REPO / "examples" / "deepseek-v3-pp2.yaml")[0])
    doc["metadata"]["namespace"] = "default"
    doc["spec"]["decode"]["podAnnotations"] = {"a": value}
    status, message = _dry_run_create(server, doc)
    if accepted:
        assert status == 201, (status, message[:500])
        return
    assert status == 422, (status, message[:500])
    rule = rules_for("RoleSpec", "podAnnotations")[2].message
    assert "spec.decode.podAnnotations: Invalid value: " in message, message
    assert rule in message, message


def test_the_corpus_covers_both_server_points() -> None:
    points = {c.reject for c in CASES}
    assert {"schema", "rule", "layout", "model"} <= points


# --- strict field validation ----------------------------------------------------------------


def _with_unknown_field(example: str = "deepseek-v3-pp2.yaml") -> Json:
    doc = copy.deepcopy(_pddeployments(REPO / "examples" / example)[0])
    doc["metadata"]["namespace"] = "default"
    doc["spec"]["prefill"]["replicaz"] = 2
    return doc


def test_unknown_fields_are_refused_under_strict_validation(
    server: crd_server.CrdServer, kubectl: Kubectl
) -> None:
    doc = _with_unknown_field()
    status, message = _dry_run_create(server, doc, strict=True)
    assert status == 400, (status, message)
    assert 'unknown field "spec.prefill.replicaz"' in message, message
    done = kubectl("apply", "--validate=strict", "--dry-run=server", "-f", "-",
                   input=yaml.safe_dump(doc))  # fmt: skip
    assert done.returncode != 0
    assert 'unknown field "spec.prefill.replicaz"' in done.stderr, done.stderr
    # without strict validation the field is pruned, not refused: strictness is what refuses it
    status, message = _dry_run_create(server, doc, strict=False)
    assert status == 201, (status, message)


# --- the chart's CRD selection ----------------------------------------------------------------


def test_the_chart_hands_this_server_the_cel_variant(server: crd_server.CrdServer) -> None:
    version = crd_server.server_version(server)
    done = subprocess.run(
        [str(ensure_helm()), "template", "apd", str(CHART), "--namespace", "ascend-pd-system",
         "--kube-version", version],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    crds = [d for d in yaml.safe_load_all(done.stdout)
            if d and d.get("kind") == "CustomResourceDefinition"]  # fmt: skip
    assert [c["metadata"]["name"] for c in crds] == [CRD_NAME, SCALER_CRD]
    rendered = crds[0]
    scaler = yaml.safe_load((REPO / "crds" / "ascendpd.io_pdrolescalers.yaml").read_text())
    assert crds[1]["spec"] == scaler["spec"], "the chart did not pick the scaler's CEL variant"
    shipped = crd_document()
    assert rendered["spec"] == shipped["spec"], "the chart did not pick the CEL variant"
    status, body = server.request(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions?dryRun=All", rendered
    )
    # dry run against the Established one: the name is taken, everything else was checked
    assert status in (201, 409), (status, _message(body))


def test_the_scaler_crd_serves_the_scale_subresource(server: crd_server.CrdServer) -> None:
    """The PDRoleScaler CRD is accepted and Established, and its scale subresource is what an
    HPA, KEDA and ``kubectl scale`` use: a PUT on /scale sets spec.replicas, and GET /scale
    reads status.replicas and status.selector; the schema's bound holds there too."""
    doc = yaml.safe_load((REPO / "crds" / "ascendpd.io_pdrolescalers.yaml").read_text())
    status, body = server.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                  doc)  # fmt: skip
    assert status in (201, 409), (status, _message(body))
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{SCALER_CRD}"

    def established() -> bool:
        got, crd = server.request("GET", path)
        conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get(
            "conditions") or []} if got == 200 else {}  # fmt: skip
        return conditions.get("Established") == "True" and server.request("GET", SCALERS)[0] == 200

    deadline = time.monotonic() + 60
    while not established():
        assert time.monotonic() < deadline, "the scaler CRD was not Established in 60 s"
        time.sleep(0.2)
    scaler = {"apiVersion": "ascendpd.io/v1alpha1", "kind": "PDRoleScaler",
              "metadata": {"name": "dsv3-decode", "namespace": "default"},
              "spec": {"replicas": 1}}  # fmt: skip
    server.request("DELETE", f"{SCALERS}/dsv3-decode")
    status, body = server.request("POST", SCALERS, scaler)
    assert status == 201, _message(body)
    status, scale = server.request("GET", f"{SCALERS}/dsv3-decode/scale")
    assert status == 200 and scale["kind"] == "Scale" and scale["spec"]["replicas"] == 1
    scale["spec"]["replicas"] = 3
    status, body = server.request("PUT", f"{SCALERS}/dsv3-decode/scale", scale)
    assert status == 200, _message(body)
    assert server.request("GET", f"{SCALERS}/dsv3-decode")[1]["spec"]["replicas"] == 3
    # the operator's status: what /scale reports as current and as the selector
    status, obj = server.request("GET", f"{SCALERS}/dsv3-decode")
    selector = "ascendpd.io/leader=true,!ascendpd.io/draining"
    obj["status"] = {"replicas": 2, "selector": selector}
    status, body = server.request("PUT", f"{SCALERS}/dsv3-decode/status", obj)
    assert status == 200, _message(body)
    scale = server.request("GET", f"{SCALERS}/dsv3-decode/scale")[1]
    assert scale["status"] == {"replicas": 2, "selector": selector}
    # more than the schema's maximum is refused through /scale as well
    scale["spec"]["replicas"] = MAX_REPLICAS + 1
    status, body = server.request("PUT", f"{SCALERS}/dsv3-decode/scale", scale)
    assert status == 422, (status, _message(body))
