"""checkov, a third-party manifest scanner, over what ascend-pd ships and creates.

What it scans (``write_inputs``): ``helm template`` of the chart with its defaults and with
``ci/production-values.yaml``, ``ascend-pd render`` of every example PDDeployment (the
children the operator would create), and the examples' plain manifests as they are (the
download Job, the PVC). checkov (pinned, the ``scan`` extra of pyproject.toml) runs once
over all of them, offline (``--skip-download``: no Prisma Cloud look-up).

Every failed check must be accepted by an entry of the reviewed skip list
``tests/scanner/checkov-skips.yaml`` (a check id, the resources it covers as glob patterns
on checkov's resource id ``Kind.namespace.name``, and why), and every entry must accept
something: a new finding and a skip that no longer applies both fail the scanner tier.
``docs/security.md`` shows the same list (``docs_table``; ``--write-docs`` rewrites it).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_dev.testtools.helm import ensure_helm

#: The checkout (the toolbox is installed from it, editable).
ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "ascend-pd-operator"
EXAMPLES = ROOT / "examples"
SKIPS = ROOT / "tests" / "scanner" / "checkov-skips.yaml"
DOCS = ROOT / "docs" / "security.md"
DOCS_BEGIN = (
    "<!-- checkov-skips:begin (ascend-pd-dev: python -m ascend_pd_dev.testtools.scanner "
    "--write-docs) -->"
)
DOCS_END = "<!-- checkov-skips:end -->"
#: The chart renders scanned: its defaults, and what a production install sets.
CHART_VALUES = {"chart-default": None, "chart-production": CHART / "ci" / "production-values.yaml"}
NAMESPACE = "llm"


class ScanError(RuntimeError):
    """An input could not be rendered, or checkov did not run; the message says which."""


@dataclass(frozen=True)
class Finding:
    """One failed check on one resource of one scanned file."""

    check: str
    name: str
    resource: str
    source: str

    def describe(self) -> str:
        return f"{self.check} ({self.name}) on {self.resource} in {self.source}"


@dataclass(frozen=True)
class Skip:
    """A reviewed acceptance: ``check`` on the resources matching ``resources``."""

    check: str
    name: str
    resources: tuple[str, ...]
    why: str

    def accepts(self, finding: Finding) -> bool:
        return finding.check == self.check and any(
            fnmatch.fnmatchcase(finding.resource, p) for p in self.resources
        )


@dataclass(frozen=True)
class Scan:
    failed: tuple[Finding, ...]
    passed: tuple[Finding, ...]
    version: str


def load_skips(path: Path = SKIPS) -> list[Skip]:
    entries = yaml.safe_load(path.read_text()) or []
    return [
        Skip(e["check"], e["name"], tuple(e["resources"]), " ".join(e["why"].split()))
        for e in entries
    ]


def _run(cmd: list[str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT,
                          stdin=subprocess.DEVNULL)  # fmt: skip
    if done.returncode != 0:
        raise ScanError(f"{' '.join(cmd[:3])} ... failed ({done.returncode}): {done.stderr}")
    return done.stdout


def write_inputs(directory: Path) -> list[Path]:
    """Every manifest set the tier scans, one file each, in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    helm = ensure_helm(quiet=True)
    out = []
    for name, values in CHART_VALUES.items():
        cmd = [str(helm), "template", "apd", str(CHART), "--namespace", "ascend-pd-system"]
        if values is not None:
            cmd += ["--values", str(values)]
        out.append(directory / f"{name}.yaml")
        out[-1].write_text(_run(cmd))
    render = [sys.executable, "-m", "ascend_pd_operator.wiring.cli", "render"]
    for example in sorted(EXAMPLES.glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(example.read_text()) if isinstance(d, dict)]
        target = directory / f"example-{example.stem}.yaml"
        if any(d.get("kind") == "PDDeployment" for d in docs):
            target.write_text(_run([*render, "-f", str(example), "--namespace", NAMESPACE]))
        else:
            shutil.copyfile(example, target)
        out.append(target)
    return out


def checkov(directory: Path) -> Scan:
    """checkov's verdict on every manifest in ``directory`` (its kubernetes framework)."""
    exe = Path(sys.executable).with_name("checkov")
    if not exe.exists():
        raise ScanError(f"{exe} is missing: `make venv` installs the scan extra (checkov)")
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": ""}
    cmd = [str(exe), "-d", str(directory), "--framework", "kubernetes", "--output", "json",
           "--skip-download", "--compact"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env,
                          stdin=subprocess.DEVNULL)  # fmt: skip
    # checkov exits 1 when a check failed: that is a verdict, not an error
    if done.returncode not in (0, 1) or not done.stdout.strip():
        raise ScanError(f"checkov failed ({done.returncode}): {done.stderr[-2000:]}")
    report: Any = json.loads(done.stdout)
    reports = report if isinstance(report, list) else [report]
    failed: list[Finding] = []
    passed: list[Finding] = []
    version = ""
    for r in reports:
        version = r.get("summary", {}).get("checkov_version", version)
        for key, into in (("failed_checks", failed), ("passed_checks", passed)):
            for c in r.get("results", {}).get(key, []):
                source = Path(c["file_path"]).stem
                into.append(Finding(c["check_id"], c["check_name"], c["resource"], source))
    return Scan(tuple(failed), tuple(passed), version)


def unaccepted(scan: Scan, skips: list[Skip]) -> list[Finding]:
    """The findings no skip accepts: each one fails the tier."""
    return [f for f in scan.failed if not any(s.accepts(f) for s in skips)]


def stale(scan: Scan, skips: list[Skip]) -> list[Skip]:
    """The skips that accept no finding: each one fails the tier too (remove it)."""
    return [s for s in skips if not any(s.accepts(f) for f in scan.failed)]


def docs_table(skips: list[Skip]) -> str:
    lines = ["| check | what checkov asks | where | why it is accepted |", "|---|---|---|---|"]
    for s in skips:
        where = ", ".join(f"`{p}`" for p in s.resources)
        lines.append(f"| {s.check} | {s.name} | {where} | {s.why} |")
    return "\n".join(lines)


def docs_section(text: str) -> str:
    """The skip table as ``docs/security.md`` shows it (between its markers)."""
    start = text.index(DOCS_BEGIN) + len(DOCS_BEGIN)
    return text[start : text.index(DOCS_END)].strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ascend_pd_dev.testtools.scanner")
    parser.add_argument("--write-docs", action="store_true",
                        help="rewrite docs/security.md's table from the skip list")  # fmt: skip
    args = parser.parse_args(argv)
    if args.write_docs:
        text = DOCS.read_text()
        start = text.index(DOCS_BEGIN) + len(DOCS_BEGIN)
        table = docs_table(load_skips())
        DOCS.write_text(f"{text[:start]}\n{table}\n{text[text.index(DOCS_END) :]}")
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
