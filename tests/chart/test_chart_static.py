"""Static checks of the Helm chart with the real helm: lint, the ci/ values matrix rendered
for the oldest supported Kubernetes and a current release, every manifest validated against
its release's Kubernetes schemas, the restricted pod-security fields, strict values, and the CRD
variant by cluster version."""

from __future__ import annotations

import json
import re
import subprocess
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import monitoring_crds
import pytest
import yaml
from chart_env import CHART, CI_VALUES, KUBE_VERSIONS, NAMESPACE, REPO, Render, run_template
from pod_security import pod_specs, restricted_violations

from ascend_pd_operator.api.rules import RULES
from tests.unit.test_docs_drift import APPLY, CRD_NAMES, applied_crd_files

#: each render is validated against its own release's schemas (kubernetes-validate ships
#: every supported release's)
SCHEMAS = set(kubernetes_validate.utils.all_versions())

MATRIX = [(values, kube) for values in CI_VALUES for kube in KUBE_VERSIONS]
MATRIX_IDS = [f"{values.stem}-k8s{kube}" for values, kube in MATRIX]


def by_kind(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in manifests if doc["kind"] == kind]


def one(manifests: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    docs = by_kind(manifests, kind)
    assert len(docs) == 1, f"expected one {kind}, got {[d['metadata']['name'] for d in docs]}"
    return docs[0]


def walk_keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set(node) | {k for v in node.values() for k in walk_keys(v)}
    if isinstance(node, list):
        return {k for v in node for k in walk_keys(v)}
    return set()


def test_ci_matrix_is_complete() -> None:
    names = {p.stem.removesuffix("-values") for p in CI_VALUES}
    assert {"default", "namespaced", "digest", "gang", "no-crds"} <= names


@pytest.mark.parametrize("values", CI_VALUES, ids=[p.stem for p in CI_VALUES])
def test_helm_lint_strict(helm: Path, values: Path) -> None:
    done = subprocess.run(
        [str(helm), "lint", "--strict", str(CHART), "--values", str(values)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


def test_app_version_is_the_project_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]


@pytest.mark.parametrize(("values", "kube"), MATRIX, ids=MATRIX_IDS)
def test_manifests_match_kubernetes_schemas(render: Render, values: Path, kube: str) -> None:
    manifests = render([values], kube)
    assert manifests
    assert kube in SCHEMAS, f"kubernetes-validate has no schemas of {kube}"
    schema = kube
    for doc in manifests:
        name = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["apiVersion"] == "monitoring.coreos.com/v1":
            # not a built-in: checked against the Prometheus Operator's own CRD schema
            try:
                monitoring_crds.validate(doc)
            except jsonschema.ValidationError as exc:
                pytest.fail(f"{name} against the vendored CRD: {exc.message} at {list(exc.path)}")
            continue
        try:
            kubernetes_validate.validate(doc, schema, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name} against Kubernetes {schema}: {exc.message} at {exc.path}")
        if doc["kind"] != "CustomResourceDefinition":
            assert doc["metadata"]["name"].startswith("apd-ascend-pd-operator"), name


@pytest.mark.parametrize(("values", "kube"), MATRIX, ids=MATRIX_IDS)
def test_every_pod_is_restricted(render: Render, values: Path, kube: str) -> None:
    specs = pod_specs(render([values], kube))
    assert set(specs) == {"Deployment/apd-ascend-pd-operator", "Job/apd-ascend-pd-operator-test"}
    for key, spec in specs.items():
        assert restricted_violations(spec) == [], key


def test_restricted_check_catches_each_rule(render: Render) -> None:
    spec = pod_specs(render())["Deployment/apd-ascend-pd-operator"]
    container = spec["containers"][0]["securityContext"]
    breaks = {
        "allowPrivilegeEscalation": ("allowPrivilegeEscalation", True),
        "capabilities.drop": ("capabilities", {"drop": []}),
        "readOnlyRootFilesystem": ("readOnlyRootFilesystem", False),
        "runAsUser": ("runAsUser", 0),
        "seccompProfile.type": ("seccompProfile", {"type": "Unconfined"}),
    }
    for rule, (field, bad) in breaks.items():
        broken = json.loads(json.dumps(spec))
        broken["containers"][0]["securityContext"] = {**container, field: bad}
        assert any(rule in p for p in restricted_violations(broken)), rule
    assert restricted_violations({**spec, "hostNetwork": True})
    assert restricted_violations({**spec, "volumes": [{"name": "h", "hostPath": {"path": "/"}}]})


def test_operator_pod_shape(render: Render) -> None:
    manifests = render()
    deployment = one(manifests, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert (
        container["image"]
        == f"ascend-pd-operator:{yaml.safe_load((CHART / 'Chart.yaml').read_text())['appVersion']}"
    )
    ports = ["--all-namespaces", "--health-port=8080", "--metrics-port=8081"]
    assert container["args"][:3] == ports  # then the operator's flags (test_chart_operator_args)
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["ports"] == [
        {"name": "health", "containerPort": 8080, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 8081, "protocol": "TCP"},
    ]
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert pod["automountServiceAccountToken"] is True
    assert pod["serviceAccountName"] == "apd-ascend-pd-operator"


def test_tokens_only_where_needed(render: Render) -> None:
    manifests = render()
    accounts = {d["metadata"]["name"]: d for d in by_kind(manifests, "ServiceAccount")}
    assert set(accounts) == {"apd-ascend-pd-operator", "apd-ascend-pd-operator-test"}
    assert all(a["automountServiceAccountToken"] is False for a in accounts.values())
    mounting = {k for k, s in pod_specs(manifests).items() if s["automountServiceAccountToken"]}
    # exactly the two pods that call the API server opt in
    assert mounting == {"Deployment/apd-ascend-pd-operator", "Job/apd-ascend-pd-operator-test"}


def test_digest_pins_the_image(render: Render) -> None:
    values = CHART / "ci" / "digest-values.yaml"
    pinned = yaml.safe_load(values.read_text())["image"]
    for key, spec in pod_specs(render([values])).items():
        image = spec["containers"][0]["image"]
        assert image == f"{pinned['repository']}@{pinned['digest']}", key
        assert pinned["tag"] not in image


def test_scheduling_values_reach_the_pod(render: Render) -> None:
    values = CHART / "ci" / "digest-values.yaml"
    given = yaml.safe_load(values.read_text())
    pod = one(render([values]), "Deployment")["spec"]["template"]["spec"]
    for field in ("nodeSelector", "tolerations", "affinity", "priorityClassName"):
        assert pod[field] == given[field], field
    assert pod["imagePullSecrets"] == given["imagePullSecrets"]
    env = pod["containers"][0]["env"]
    assert env[-len(given["extraEnv"]) :] == given["extraEnv"]
    assert "--debug" in pod["containers"][0]["args"]


def test_namespaced_watch_has_no_cluster_rights(render: Render) -> None:
    values = CHART / "ci" / "namespaced-values.yaml"
    watched = yaml.safe_load(values.read_text())["watch"]["namespaces"]
    manifests = render([values])
    # cluster-wide: only read-only rules (kopf's discovery; node readiness)
    (cluster_role,) = by_kind(manifests, "ClusterRole")
    assert cluster_role["metadata"]["name"] == "apd-ascend-pd-operator-discovery"
    for rule in cluster_role["rules"]:
        assert rule["verbs"] == ["get", "list", "watch"], rule
        assert set(rule["resources"]) <= {"namespaces", "customresourcedefinitions", "nodes"}, rule
    operator_roles = [
        r for r in by_kind(manifests, "Role") if not r["metadata"]["name"].endswith("-test")
    ]
    assert sorted(r["metadata"]["namespace"] for r in operator_roles) == sorted(watched)
    bindings = [
        b for b in by_kind(manifests, "RoleBinding") if not b["metadata"]["name"].endswith("-test")
    ]
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "apd-ascend-pd-operator", "namespace": NAMESPACE}
        ]
    args = one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--namespace")] == [f"--namespace={n}" for n in watched]
    assert "--all-namespaces" not in args
    # the helm test runs where the operator looks
    job_env = one(manifests, "Job")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "TEST_NAMESPACE", "value": watched[0]} in job_env


def test_all_namespaces_uses_one_cluster_role(render: Render) -> None:
    manifests = render()
    role = one(manifests, "ClusterRole")
    binding = one(manifests, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert [r["metadata"]["name"] for r in by_kind(manifests, "Role")] == [
        "apd-ascend-pd-operator-test"
    ]


@pytest.mark.parametrize(
    ("kube", "api_version"), [(KUBE_VERSIONS[0], "policy/v1"), ("1.31.0", "policy/v1")]
)
def test_pdb_api_by_cluster_version(render: Render, kube: str, api_version: str) -> None:
    pdb = one(render([CHART / "ci" / "gang-values.yaml"], kube), "PodDisruptionBudget")
    assert pdb["apiVersion"] == api_version
    assert pdb["spec"]["maxUnavailable"] == 1
    deployment = one(render([CHART / "ci" / "gang-values.yaml"], kube), "Deployment")
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]


def test_optional_objects_off_by_default(render: Render) -> None:
    kinds = {d["kind"] for d in render()}
    assert "PodDisruptionBudget" not in kinds
    assert not [d for d in render() if d["kind"] == "Service"]


def test_metrics_service_selects_the_operator(render: Render) -> None:
    manifests = render([CHART / "ci" / "namespaced-values.yaml"])
    service = one(manifests, "Service")
    deployment = one(manifests, "Deployment")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    # the operator's /metrics port, not its /healthz (the metrics Service once pointed there)
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == "metrics"
    assert port["protocol"] == "TCP"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert f"--metrics-port={named['metrics']}" in container["args"]
    assert named["metrics"] != named["health"]


def test_test_pods_are_not_selected_by_operator_selectors(render: Render) -> None:
    manifests = render()
    selector = one(manifests, "Deployment")["spec"]["selector"]["matchLabels"]
    job_labels = one(manifests, "Job")["spec"]["template"]["metadata"]["labels"]
    assert not selector.items() <= job_labels.items()


# -- the CRD ---------------------------------------------------------------------------

CRD_FILES = {
    "cel": CHART / "files" / "crds" / "pddeployments-cel.yaml",
    "cel-1.28": CHART / "files" / "crds" / "pddeployments-cel-1.28.yaml",
}
PLURALS = ("pddeployments", "pdrolescalers")


@pytest.mark.parametrize(
    ("kube", "variant"),
    # 1.28 and 1.29 refuse a rule whose cost their CEL cannot bound (``Rule.since``)
    [(KUBE_VERSIONS[0], "cel-1.28"), ("1.29.15", "cel-1.28"), ("1.30.0", "cel"),
     ("1.31.0", "cel")],
)  # fmt: skip
def test_crd_variant_by_cluster_version(render: Render, kube: str, variant: str) -> None:
    crds = by_kind(render([], kube), "CustomResourceDefinition")
    assert [c["metadata"]["name"] for c in crds] == [f"{p}.ascendpd.io" for p in PLURALS]
    for plural, crd in zip(PLURALS, crds, strict=True):
        expected = yaml.safe_load(
            (CHART / "files" / "crds" / f"{plural}-{variant}.yaml").read_text()
        )
        assert crd["spec"] == expected["spec"]
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert "x-kubernetes-validations" in walk_keys(crds[0]["spec"])


def _cel_rules(doc: Any) -> list[str]:
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            found.extend(v["rule"] for v in node.get("x-kubernetes-validations", []))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    return found


def test_cel_variants_really_differ() -> None:
    # otherwise the variant test above could pass on identical files: the 1.28 one lacks
    # exactly the rules whose CEL 1.28 and 1.29 refuse (the map() sum of podAnnotations)
    cel, older = (yaml.safe_load(CRD_FILES[v].read_text()) for v in CRD_FILES)
    dropped = [r.cel for r in RULES if r.since > 28]
    assert dropped and all("map(" in rule for rule in dropped)
    full = _cel_rules(cel)
    assert [r for r in full if r not in dropped] == _cel_rules(older)
    assert len(_cel_rules(older)) < len(full)


def test_crd_keep_and_install_switches(render: Render) -> None:
    for crd in by_kind(render(set_values=["crds.keep=false"]), "CustomResourceDefinition"):
        assert "helm.sh/resource-policy" not in (crd["metadata"].get("annotations") or {})
    assert not by_kind(render([CHART / "ci" / "no-crds-values.yaml"]), "CustomResourceDefinition")


# -- strict values -----------------------------------------------------------------------


def _unknown(key: str) -> str:
    """What the schema says of a key it does not have (a typo)."""
    return rf"additional propert(y|ies) '{key}' not allowed"


def _at(field: str) -> str:
    """Where the schema says a known key's value is wrong."""
    return re.escape(f"at '{field}'")


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        # typos: the key the schema does not know
        ("replicaCont=1", _unknown("replicaCont")),
        ("image.tga=v1", _unknown("tga")),
        ("crds.kep=false", _unknown("kep")),
        ("watch.namespace={a}", _unknown("namespace")),
        ("podDisruptionBudget.enable=true", _unknown("enable")),
        # bad values: the field that holds one
        ("image.digest=sha256:abc", _at("/image/digest")),
        ("replicaCount=2", _at("/replicaCount")),
        ("logLevel=loud", _at("/logLevel")),
        ("watch.namespaces={Bad_NS}", _at("/watch/namespaces/0")),
        ("image.pullPolicy=Sometimes", _at("/image/pullPolicy")),
    ],
)
def test_bad_values_fail_naming_the_key_or_field(helm: Path, setting: str, named: str) -> None:
    done = run_template(helm, set_values=[setting])
    assert done.returncode != 0
    assert re.search(named, done.stderr), done.stderr


def leaf_paths(node: Any, prefix: str = "") -> set[str]:
    if isinstance(node, dict) and node:
        return {p for k, v in node.items() for p in leaf_paths(v, f"{prefix}.{k}" if prefix else k)}
    return {prefix}


def schema_paths(schema: dict[str, Any], prefix: str = "") -> set[str]:
    props = schema.get("properties")
    if not props or schema.get("additionalProperties") is not False:
        return {prefix}
    return {p for k, v in props.items() for p in schema_paths(v, f"{prefix}.{k}" if prefix else k)}


def test_schema_is_strict_and_matches_values() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert schema["additionalProperties"] is False
    declared = schema_paths(schema) - {"global"}
    given = leaf_paths(values)
    # every default is declared (or sits under a declared free-form map) and vice versa
    for path in given:
        assert any(
            path == d or path.startswith(d + ".") or d.startswith(path + ".") for d in declared
        ), path
    for path in declared:
        assert any(
            g == path or g.startswith(path + ".") or path.startswith(g + ".") for g in given
        ), path


def test_every_value_has_a_comment() -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    documented_indents: list[tuple[int, bool]] = []  # (indent, documented) of open parents
    undocumented: list[str] = []
    for number, line in enumerate(lines):
        match = re.match(r"^(\s*)([A-Za-z][\w-]*):(.*)$", line)
        if not match:
            continue
        indent, key, rest = len(match.group(1)), match.group(2), match.group(3).strip()
        while documented_indents and documented_indents[-1][0] >= indent:
            documented_indents.pop()
        previous = lines[number - 1].strip() if number else ""
        documented = previous.startswith("#") or any(d for _, d in documented_indents)
        if rest and not rest.startswith("#"):
            if not documented:
                undocumented.append(key)
        else:
            documented_indents.append((indent, documented))
    assert undocumented == []


def notes(helm: Path, *set_values: str) -> str:
    cmd = [str(helm), "install", "apd", str(CHART), "--dry-run=client", "--namespace", NAMESPACE]
    for item in set_values:
        cmd += ["--set", item]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("NOTES:", 1)[1]


def test_notes_tell_the_next_step(helm: Path) -> None:
    text = notes(helm)
    assert "kubectl apply" in text
    assert "helm test apd -n ascend-pd-system" in text
    assert "kubectl get pdd" in text


@pytest.mark.parametrize(
    ("set_values", "namespace"),
    [((), "llm"), (("watch.namespaces={team-a,team-b}",), "team-a")],
    ids=["all-namespaces", "namespaced"],
)
def test_notes_commands_work_as_printed(
    helm: Path, set_values: tuple[str, ...], namespace: str
) -> None:
    """Every example NOTES applies exists, names no namespace and goes to one the operator
    watches; the deployment it waits for, the router Service it port-forwards and the model
    it asks for are the example's; it ends with the request."""
    text = notes(helm, *set_values)
    commands = [line.strip() for line in text.splitlines() if line.startswith("     ")]
    kubectl = [c for c in commands if c.startswith("kubectl ")]
    for command in kubectl:
        words = command.split()
        if "-n" in words:
            assert words[words.index("-n") + 1] in (namespace, NAMESPACE), command
        elif "namespace" in words[1:3]:
            assert words[3] == namespace, command
    applied = [c.split(" -f ")[1] for c in kubectl if c.startswith("kubectl apply -n")]
    assert applied == [
        "examples/models-pvc.yaml",
        "examples/models-download.yaml",
        "examples/deepseek-v2-lite.yaml",
    ]
    docs = [d for f in applied for d in yaml.safe_load_all((REPO / f).read_text())]
    assert all("namespace" not in d["metadata"] for d in docs)
    job = next(d for d in docs if d["kind"] == "Job")["metadata"]["name"]
    assert f"--for=condition=complete job/{job} " in text
    pdd = next(d for d in docs if d["kind"] == "PDDeployment")
    name, spec = pdd["metadata"]["name"], pdd["spec"]
    port = (spec.get("router") or {}).get("port", 8000)
    assert f"--for=condition=Ready pdd/{name} " in text
    assert f"port-forward svc/{name}-router {port}:{port} &" in text
    request = commands[-2:]
    assert request[0].startswith(f"curl -s http://127.0.0.1:{port}/v1/completions ")
    body = json.loads(request[1].removeprefix("-d ").strip("'"))
    assert body["model"] == spec["model"]["name"]
    assert text.rstrip().splitlines()[-1].startswith("`helm uninstall` keeps both CRDs")


def test_notes_without_the_chart_s_crds_apply_every_crd_file(helm: Path) -> None:
    """crds.install=false: NOTES' commands install every CRD of both variants (each file
    under crds/) and name each CRD; with the chart's CRDs they ask for none."""
    text = notes(helm, "crds.install=false")
    applied = set().union(*(applied_crd_files(t) for t in APPLY.findall(text)))
    every = set((REPO / "crds").rglob("*.yaml"))
    assert applied == every, sorted(str(p.relative_to(REPO)) for p in every - applied)
    assert all(name in text for name in CRD_NAMES)
    assert not APPLY.findall(notes(helm))


def test_values_typo_fails_helm_install(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "my-values.yaml"
    values.write_text("image:\n  repository: r\nwatch:\n  namespace: [team-a]\n")
    done = subprocess.run(
        [str(helm), "install", "apd", str(CHART), "--dry-run=client", "--values", str(values)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "at '/watch': additional properties 'namespace' not allowed" in done.stderr


def test_template_names_are_chart_prefixed() -> None:
    # defines are global across a chart and its parents: unprefixed ones collide
    defines = [
        name
        for path in (CHART / "templates").rglob("*")
        if path.is_file()
        for name in re.findall(r'define "([^"]+)"', path.read_text())
    ]
    assert defines
    assert [d for d in defines if not d.startswith("ascend-pd-operator.")] == []


def test_clusters_older_than_the_floor_are_refused(helm: Path) -> None:
    floor = KUBE_VERSIONS[0]
    major, minor, _ = floor.split(".")
    done = run_template(helm, kube_version=f"{major}.{int(minor) - 1}.16")
    assert done.returncode != 0
    assert "kubeVersion" in done.stderr or f">={floor}-0" in done.stderr, done.stderr
    assert run_template(helm, kube_version=floor).returncode == 0


def test_packaged_chart_carries_its_files(helm: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(helm), "package", str(CHART), "--destination", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (package,) = tmp_path.glob("ascend-pd-operator-*.tgz")
    with tarfile.open(package) as tar:
        names = {n.removeprefix("ascend-pd-operator/") for n in tar.getnames()}
    for needed in (
        "files/crds/pddeployments-cel.yaml",
        "files/crds/pddeployments-cel-1.28.yaml",
        "files/helm-test/smoke_test.py",
        "files/helm-test/pddeployment.yaml",
        "files/dashboards/ascend-pd.json",
        "values.schema.json",
        "templates/NOTES.txt",
    ):
        assert needed in names, needed
