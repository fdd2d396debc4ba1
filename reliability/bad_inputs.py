"""The bad-input corpus (``bad_inputs/*.yaml``) against a Ready deployment and the operator.

Every case is refused where its file says (the API server's schema, CEL or the
operator's Validated rule, the layout core's KVLayoutCompatible, or ModelResolved) with
a message holding the expected text, and an update leaves the Ready deployment's
children and pods exactly as they were (same resourceVersions, same pods). After each
case the good spec is applied again and the deployment must be Ready before the next.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_operator.api import models
from ascend_pd_operator.api.rules import RULES
from ascend_pd_operator.api.vocabulary import LABEL_DEPLOYMENT

from .audit import started_converged, wait_converged
from .env import Env, Release, wait_for
from .result import ScenarioResult
from .specs import merged, pdd

CORPUS = Path(__file__).resolve().parent / "bad_inputs"
POINTS = ("schema", "rule", "layout", "model")
CONDITION = {"rule": "Validated", "layout": "KVLayoutCompatible", "model": "ModelResolved"}
#: Where the API server refuses at admission: its schema, and the rules' CEL (every corpus
#: rule is in the CRD of every supported release).
AT_SERVER = ("schema", "rule")
BASE_NAME = "bad"
INSPECTOR_FILE = "inspector.yaml"
CONFIGMAP = "bad-model-config"
#: A message names the field it is about.
#: (The layout core speaks of the layer partition, the pipeline size, the transfer backend.)
FIELD = re.compile(
    r"(spec|metadata)\.[a-zA-Z]|(prefill|decode|model|runtime|speculative|placement)\.[a-z]|"
    r"key '[a-z_]+'|config\.json|layer partition|pipeline size|transfer ?[bB]ackend"
)

Json = dict[str, Any]


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    patch: Json
    reject: str
    message: str
    mode: str = "update"
    config_map: Json | None = None


def load_corpus(directory: Path = CORPUS) -> list[Case]:
    cases = []
    for path in sorted(directory.glob("*.yaml")):
        if path.name == INSPECTOR_FILE:
            continue  # config.json files, not PDDeployments (reliability.offline)
        for raw in yaml.safe_load(path.read_text()) or []:
            case = Case(
                name=raw["name"],
                source=path.name,
                patch=raw["patch"],
                reject=raw["reject"],
                message=raw["message"],
                mode=raw.get("mode", "update"),
                config_map=raw.get("configMap"),
            )
            if case.reject not in POINTS or case.mode not in ("update", "create"):
                raise ValueError(f"{path.name}: {case.name}: reject {case.reject!r} / mode "
                                 f"{case.mode!r} not one of {POINTS} / update, create")  # fmt: skip
            cases.append(case)
    names = [c.name for c in cases]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"duplicate case names: {sorted(duplicates)}")
    return cases


def base_document(namespace: str) -> Json:
    """The deployment every case patches: the users' defaults (the host network included,
    which some rules are about)."""
    return pdd(BASE_NAME, namespace, host_network=True)


def server_refusal_names(case: Case, message: str) -> bool:
    """Does the API server's refusal ``message`` say what ``case`` expects? The corpus holds
    the operator's words (its own check of the same rules). The server's schema refusal adds
    list indices (``volumes[0].name``), and its CEL
    refusal is the rule's message without the operator's ``(got ...)`` detail: there each
    rule of ``api.rules`` the operator's own check names must be in it."""
    if case.message in message or case.message in re.sub(r"\[\d+\]", "", message):
        return True
    if case.reject != "rule":
        return False
    from .offline import offline_verdict  # offline.py imports this module

    rules = [r.message for r in RULES if r.message in offline_verdict(case).message]
    return bool(rules) and all(rule in message for rule in rules)


def case_document(case: Case, namespace: str) -> Json:
    return merged(base_document(namespace), case.patch)


def snapshot(env: Env, namespace: str) -> dict[str, str]:
    """resourceVersion of every child and pod of the base deployment (and the pods' uid)."""
    found = {}
    for kind in ("ConfigMap", "Service", "StatefulSet", "Deployment", "Pod"):
        for obj in env.kube.list(kind, namespace, f"{LABEL_DEPLOYMENT}={BASE_NAME}"):
            meta = obj["metadata"]
            found[f"{kind}/{meta['name']}"] = f"{meta['uid']}@{meta['resourceVersion']}"
    return found


def _condition(cr: Json | None, type_: str) -> Json:
    if not cr:
        return {}
    conditions = (cr.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), {})


def _rejection(env: Env, case: Case, namespace: str) -> tuple[bool, str]:
    """Apply the case; (refused at the expected point with the expected text?, message)."""
    doc = case_document(case, namespace)
    name = doc["metadata"]["name"]
    if case.config_map is not None:
        env.apply([{"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": CONFIGMAP, "namespace": namespace},
                    "data": case.config_map}])  # fmt: skip
    # --validate=false: the API server's own schema answers, not kubectl's copy of it.
    done = env.kubectl(
        "apply", "--validate=false", "-f", "-", input=yaml.safe_dump(doc), check=False
    )
    if case.reject in AT_SERVER:
        message = done.stderr.strip()
        return done.returncode != 0 and server_refusal_names(case, message), message
    if done.returncode != 0:
        return False, f"the API server refused it: {done.stderr.strip()}"
    type_ = CONDITION[case.reject]

    def refused() -> Json | None:
        cr = env.kube.get(models.KIND, namespace, name)
        cond = _condition(cr, type_)
        generation = (cr or {}).get("metadata", {}).get("generation")
        status = (cr or {}).get("status") or {}
        if cond.get("status") == "False" and status.get("observedGeneration") == generation:
            return cond
        return None

    cond, _ = wait_for(refused, 60.0, 0.2)
    if not cond:
        cr = env.kube.get(models.KIND, namespace, name)
        return False, f"no {type_}=False: {(cr or {}).get('status')}"
    return case.message in cond["message"], cond["message"]


def run(
    env: Env,
    release: Release,
    namespace: str,
    cases: list[Case] | None = None,
    bound_seconds: float = 120.0,
) -> ScenarioResult:
    result = ScenarioResult("bad-input-corpus")
    cases = load_corpus() if cases is None else cases
    base = base_document(namespace)
    operator = release.operator([namespace], "bad-inputs-operator")
    operator.start()
    messages: dict[str, str] = {}
    unnamed: list[str] = []
    try:
        if not started_converged(env, namespace, [base], result, 0.3):
            return result
        for case in cases:
            before = snapshot(env, namespace)
            started = time.monotonic()
            refused, message = _rejection(env, case, namespace)
            messages[case.name] = message
            if not FIELD.search(message):
                unnamed.append(case.name)
            after = snapshot(env, namespace)
            touched = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            if refused and case.reject in AT_SERVER:
                pass  # refused by the API server: nothing was stored, nothing to restore
            elif case.mode == "create":
                created = case_document(case, namespace)["metadata"]["name"]
                env.kubectl("delete", "pdd", created, "-n", namespace,
                            "--ignore-not-found", "--wait=false", check=False)  # fmt: skip
            else:
                env.apply([base])
            restored, _ = wait_converged(env.kube, namespace, bound_seconds, 0.2)
            problem = ""
            if not refused:
                problem = f"{case.source}:{case.name}: expected {case.reject} with " \
                          f"{case.message!r}, got {message!r}"  # fmt: skip
            elif touched:
                problem = f"{case.source}:{case.name}: touched {touched}"
            elif not restored.ok:
                problem = f"{case.source}:{case.name}: not Ready again: {restored}"
            result.duplicated += 0
            result.lost += len([k for k in before if k not in after])
            result.record(not problem, time.monotonic() - started, problem)
        result.details["cases"] = len(cases)
        result.details["by_point"] = {p: sum(c.reject == p for c in cases) for p in POINTS}
        result.details["messages_without_a_field"] = unnamed
        result.details["messages"] = messages
        if unnamed:
            result.problems.append(f"messages that name no field: {unnamed}")
    finally:
        operator.kill()
    return result
