"""One interpreter per SGLang release and mode for every check the tier runs in it.

Importing torch and an SGLang release costs a check about ten CPU seconds; the check
itself costs a fraction of that. So the tests do not start an interpreter each: every
test module registers, at import, what it runs in a release (``release_check``: a
function of the release's ``SGLangEnv`` returning ``Job``s), and the first test that
needs a result of a release runs every registered job of that release and mode in one
``batch_runner.py`` process. The modes are the two sets of SGLang a test drives:

* ``patched``: the session's copy patched by ``install-and-patch.sh``, the pristine
  release behind it (what the runtime image runs);
* ``upstream``: the pristine release alone.

Jobs run in ``order`` (then in registration order): a job that changes the process for
the jobs after it (SGLang's global parallel config, ``logging.disable``) goes late.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sglang_harness as harness

RUNNER = Path(__file__).resolve().parent / "batch_runner.py"


@dataclass(frozen=True)
class Job:
    name: str
    #: a script, as a test would run it with ``python -c``; reads ``globals`` and ``TESTS``
    code: str
    globals: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JobResult:
    stdout: str
    #: the traceback of what the job raised, None if it ran to its end
    error: str | None
    #: the JSON its last ``REPORT `` line carried (None: it raised or printed none)
    report: Any


def run_jobs(
    dirs: tuple[Path, ...], jobs: Iterable[Job], tmp: Path, stubs: Path = harness.STUBS
) -> dict[str, JobResult]:
    """Run ``jobs`` in one harness interpreter with ``dirs`` (then this checkout's runtime
    and ``stubs``) on the path; name -> result."""
    documents = [
        {"name": j.name, "code": j.code, "globals": {"TESTS": str(RUNNER.parent), **j.globals}}
        for j in jobs
    ]
    names = [d["name"] for d in documents]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    assert not duplicated, f"two jobs named {duplicated}"
    tmp.mkdir(parents=True, exist_ok=True)
    jobs_path, results_path = tmp / "jobs.json", tmp / "results.json"
    jobs_path.write_text(json.dumps({"jobs": documents}))
    out = subprocess.run(
        ["nice", str(harness.PYTHON), str(RUNNER), str(jobs_path), str(results_path)],
        env=harness.venv_env(*dirs, stubs=stubs),
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"batch_runner failed ({out.returncode}):\n{out.stderr[-5000:]}")
    return {k: JobResult(**v) for k, v in json.loads(results_path.read_text()).items()}


Builder = Callable[[harness.SGLangEnv], list[Job]]
_BUILDERS: list[tuple[int, str, Builder]] = []
MODES: dict[str, Callable[[harness.SGLangEnv], tuple[Path, ...]]] = {
    "patched": lambda env: (env.patched, env.pristine),
    "upstream": lambda env: (env.pristine,),
}


def release_check(mode: str, order: int = 50) -> Callable[[Builder], Builder]:
    """Register a builder of the jobs a test module runs in each release in ``mode``."""
    assert mode in MODES, mode

    def register(build: Builder) -> Builder:
        _BUILDERS.append((order, mode, build))
        return build

    return register


class ReleaseChecks:
    """The session's results: each (release, mode) run once, on first use."""

    def __init__(self, envs: harness.Envs) -> None:
        self.envs = envs
        self.results: dict[tuple[str, str], dict[str, JobResult]] = {}

    def result(self, version: str, mode: str, name: str) -> JobResult:
        key = (version, mode)
        if key not in self.results:
            env = self.envs.get(version)
            builders = sorted((b for b in _BUILDERS if b[1] == mode), key=lambda b: b[0])
            jobs = [job for _, _, build in builders for job in build(env)]
            self.results[key] = run_jobs(MODES[mode](env), jobs, env.workdir / f"jobs-{mode}")
        return self.results[key][name]
