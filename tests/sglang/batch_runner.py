"""Runs inside the SGLang harness venv: many checks of one release in one interpreter.

Usage: ``python batch_runner.py JOBS.json RESULTS.json``. A job is a Python script (the
text a test would otherwise run with ``python -c``) and the globals it reads (``TESTS``,
the tests' folder, among them). The jobs run in the order given, each in a namespace of
its own, and share the one import of torch and SGLang that costs far more than any check.
A job's result is its captured stdout, the JSON of its last ``REPORT `` line, and the
traceback if it raised: one job failing never hides another job's result.

Only the standard library here: the project's packages and pytest are not importable in
the harness venv.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback
from typing import Any

REPORT = "REPORT "


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    out = io.StringIO()
    error = None
    namespace = {"__name__": "__main__", **job["globals"]}
    with contextlib.redirect_stdout(out):
        try:
            exec(compile(job["code"], f"<job {job['name']}>", "exec"), namespace)
        except BaseException:  # the result names it; the test decides
            error = traceback.format_exc()
    stdout = out.getvalue()
    reports = [line for line in stdout.splitlines() if line.startswith(REPORT)]
    report = json.loads(reports[-1][len(REPORT) :]) if reports and error is None else None
    return {"stdout": stdout, "error": error, "report": report}


def main() -> int:
    with open(sys.argv[1]) as handle:
        jobs = json.load(handle)["jobs"]
    results = {job["name"]: run_job(job) for job in jobs}
    with open(sys.argv[2], "w") as handle:
        json.dump(results, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
