"""The corpus through the operator's pure code, no cluster: the same verdicts, every cluster.

On a cluster without CEL the operator's own rules are the only guard, and
``ascend-pd render`` uses them offline, so every case must be refused here too:
schema cases by the pydantic models (the CRD's source), rule cases by ``validate``,
layout cases by ``desired_state`` and model cases by ``resolve_facts``, each with the
corpus' expected text (the API server's wording differs for schema cases). The
inspector cases run the real ``ascend-pd-runtime inspect`` on a config.json in a
temporary model directory and the operator's reading of its termination message.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_operator.api.vocabulary import Owner
from ascend_pd_operator.builders.desired import desired_state, validate
from ascend_pd_operator.builders.model_source import inspector_state, resolve_facts

from .bad_inputs import CONFIGMAP, CORPUS, Case, case_document

Json = dict[str, Any]


@dataclass(frozen=True)
class Verdict:
    point: str  # schema-or-rule | layout | model | accepted
    message: str


def offline_verdict(case: Case) -> Verdict:
    doc = case_document(case, "offline")
    owner = Owner(doc["metadata"]["name"], "offline", "uid-offline", 1)
    validation = validate(owner, doc.get("spec"))
    if validation.spec is None:
        return Verdict("rule", validation.error)
    spec = validation.spec
    user_cm = None
    if case.config_map is not None:
        user_cm = {"metadata": {"name": CONFIGMAP}, "data": case.config_map}
    facts = resolve_facts(spec, user_configmap=user_cm)
    if facts.facts is None:
        return Verdict("model", facts.message)
    desired = desired_state(owner, spec, facts.facts)
    if not desired.ok:
        return Verdict("layout", desired.message)
    return Verdict("accepted", "")


def load_inspector_cases(path: Path = CORPUS / "inspector.yaml") -> list[Json]:
    cases: list[Json] = yaml.safe_load(path.read_text())
    return cases


def inspect_verdict(case: Json) -> Verdict:
    """Run the real inspector on the case's config.json; what ModelResolved would say."""
    from ascend_pd_operator.api.models import parse_spec

    from .specs import pdd

    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        model.mkdir()
        if case.get("binary"):
            (model / "config.json").write_bytes(base64.b64decode(case["binary"]))
        elif case.get("config") is not None:
            (model / "config.json").write_text(case["config"])
        output = Path(tmp) / "termination-log"
        done = subprocess.run(
            [sys.executable, "-m", "ascend_pd_runtime.cli", "inspect",
             "--model-path", str(model), "--output", str(output)],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        message = output.read_text() if output.exists() else ""
    raw = pdd("inspected", "offline")["spec"]
    raw["model"].pop("config")
    raw["model"]["path"] = str(model)
    spec = parse_spec(raw)
    job = {"metadata": {"annotations": {"ascendpd.io/model-path": str(model),
                                        "ascendpd.io/generation": "1"}},
           "status": {"failed" if done.returncode else "succeeded": 1}}  # fmt: skip
    terminated = {"state": {"terminated": {"message": message}}}
    pod = {"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
           "status": {"containerStatuses": [terminated]}}  # fmt: skip
    state = inspector_state(job, [pod])
    resolution = resolve_facts(spec, inspector=state, generation=1)
    if resolution.facts is None:
        return Verdict("model", f"{resolution.reason}: {resolution.message}")
    return Verdict("accepted", "")
