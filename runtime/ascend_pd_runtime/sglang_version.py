"""Is the SGLang in this image the one the spec names? Checked, never trusted.

The operator computes the KV layout for ``spec.runtime.sglangVersion``: which draft (MTP)
layers each side holds, and where, depends on the SGLang release (``layout``; e.g. a PP
prefill sends draft KV only from 0.5.20). If the image holds another SGLang, that SGLang
may lay out KV differently than both sides were told, and transfers land in the wrong
slots: silently wrong tokens, the one failure this project exists to prevent. So the
launcher and the inspector read the installed ``sglang`` distribution's version from the
interpreter that runs SGLang (``--python``; the launcher's own may differ) and refuse a
version that does not follow the same rules, before anything loads.

Which versions agree (``versions_agree``), after PEP 440 normalisation (``packaging``:
``v0.5.20`` is ``0.5.20``, ``0.5.13-post1`` is ``0.5.13.post1``):

* the release must be equal, trailing zeros aside (``0.5.20.0`` is ``0.5.20``, ``0.5.2`` is
  not ``0.5.20``): the layout core keys every version rule on the release;
* a post-release or a local build (``0.5.13.post1``, ``0.5.20+ascend``) agrees with its
  release: it follows that release's rules (docs/compatibility.md says so for the images;
  the base images carry ``0.5.13.post1``), and the spec may name either;
* a pre-release or a development build (``0.5.20rc1``, ``0.5.20.dev0``) agrees only with
  itself: it precedes its release and may lack the very change the release's rules assume.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping

from packaging.version import InvalidVersion, Version

from .env_contract import SGLANG_VERSION
from .errors import BadInput, SGLangVersionMismatch

#: The distribution whose version the image's package metadata holds.
DISTRIBUTION = "sglang"
#: Run by SGLang's interpreter: only the standard library, SGLang itself is not imported
#: (that takes seconds and may fail for other reasons). The answer is the last line.
_QUERY = (
    "import importlib.metadata as m, json\n"
    "try:\n"
    f"    v = m.version({DISTRIBUTION!r})\n"
    "except m.PackageNotFoundError:\n"
    "    v = None\n"
    "print(json.dumps({'version': v}))\n"
)
QUERY_TIMEOUT = 120.0

VersionKey = tuple[int, tuple[int, ...], tuple[str, int] | None, int | None]


def _key(version: Version) -> VersionKey:
    """What the rules depend on: epoch, release (no trailing zeros), pre- and dev-release."""
    release = list(version.release)
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    return (version.epoch, tuple(release), version.pre, version.dev)


def _parse(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def versions_agree(spec: str, installed: str) -> bool:
    """Whether SGLang ``installed`` follows the KV layout rules of ``spec`` (module doc)."""
    wanted, found = _parse(spec), _parse(installed)
    if wanted is None or found is None:
        return spec.strip() == installed.strip()
    return _key(wanted) == _key(found)


def mismatch_message(spec: str, installed: str | None, python: str) -> str:
    """Why ``installed`` (None: no SGLang) cannot serve a spec naming ``spec``; "" when it can."""
    head = f"SGLang version mismatch: spec.runtime.sglangVersion is {spec} ({SGLANG_VERSION})"
    if installed is None:
        return (
            f"{head}, but no SGLang is installed for {python} (no {DISTRIBUTION!r} "
            "distribution): build the runtime image on an SGLang Ascend base image "
            "(make images) and set spec.runtime.sglangVersion to the version it carries"
        )
    if versions_agree(spec, installed):
        return ""
    invalid = [repr(v) for v in (spec, installed) if _parse(v) is None]
    why = (
        f"{' and '.join(invalid)} is not a PEP 440 version, so they cannot be compared"
        if invalid
        else "the KV layout's draft-layer rules depend on the SGLang version, so the layout "
        f"computed for {spec} may not be the one SGLang {installed} uses"
    )
    return (
        f"{head}, but this image's SGLang is {installed} ({python}); {why}. Set "
        f"spec.runtime.sglangVersion to {installed}, or use a runtime image with SGLang {spec}"
    )


def installed_version(python: str, env: Mapping[str, str]) -> str | None:
    """The version of the ``sglang`` distribution ``python`` sees with ``env`` (None: none).

    ``BadInput`` when ``python`` cannot answer (missing, or it fails)."""
    what = f"cannot read the installed SGLang's version with {python}"
    try:
        done = subprocess.run(
            [python, "-c", _QUERY],
            env=dict(env),
            capture_output=True,
            text=True,
            check=False,
            timeout=QUERY_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadInput(f"{what}: {exc}") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip()[-1500:]
        raise BadInput(f"{what}: it exited {done.returncode}: {tail}")
    try:
        answer = json.loads(lines[-1])
    except json.JSONDecodeError:
        raise BadInput(f"{what}: it printed {lines[-1][-200:]!r}") from None
    version = answer.get("version") if isinstance(answer, dict) else None
    return str(version) if version is not None else None


def check_installed(spec: str, python: str, env: Mapping[str, str]) -> str:
    """The installed SGLang's version if it agrees with ``spec``; else
    ``SGLangVersionMismatch`` naming both (``BadInput`` when it cannot be read)."""
    installed = installed_version(python, env)
    message = mismatch_message(spec, installed, python)
    if message:
        raise SGLangVersionMismatch(message)
    assert installed is not None
    return installed
