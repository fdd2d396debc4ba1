"""What the reconciler last applied to each child, and whether applying again would change it.

Server-side apply of an unchanged manifest changes nothing but is still a write
request; at every resync and every child status change that adds up. The
reconciler remembers, per child, the digest of the manifest it applied and the
resourceVersion the API server answered with (``Applied``). While the watch reports that
same resourceVersion (nobody edited or deleted the child since) and the manifest's
digest is the same, ``needs_apply`` says no and the watched object stands in for
the apply response. Any edit, deletion or new desired state applies again.

A controller updating a workload's status changes its resourceVersion but not its
``metadata.generation``; ``only_status_changed`` lets such a child be skipped too when
the generation is the one our apply produced and our labels, annotations and owner
references are still on it (any spec edit bumps the generation; a metadata edit of
ours shows). ``others_added`` skips a child another controller only added to.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.kubeio.kept import DROPPED, SPEC_KEPT
from ascend_pd_operator.kubeio.watched import contains


def digest(manifest: Json) -> str:
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Applied:
    """One apply of a child: the manifest's digest, and the resourceVersion and generation
    the API server answered with."""

    digest: str
    version: str
    generation: int | None

    @classmethod
    def of(cls, manifest_digest: str, response: Json) -> Applied:
        meta = response["metadata"]
        generation = meta.get("generation")
        return cls(
            manifest_digest,
            str(meta.get("resourceVersion", "")),
            None if generation is None else int(generation),
        )


def needs_apply(
    manifest_digest: str, last_applied: tuple[str, str] | None, watched_version: str | None
) -> bool:
    """Apply unless this exact manifest was applied and the child is unchanged since."""
    if last_applied is None or watched_version is None:
        return True
    applied_digest, applied_version = last_applied
    return applied_digest != manifest_digest or applied_version != watched_version


def only_status_changed(manifest: Json, applied_generation: int | None, watched: Json) -> bool:
    """The watched child differs from what our apply returned in its status alone."""
    meta, live = manifest["metadata"], watched["metadata"]
    if applied_generation is None or live.get("generation") != applied_generation:
        return False
    refs = live.get("ownerReferences") or []
    return (
        contains(live.get("labels"), meta.get("labels"))
        and contains(live.get("annotations"), meta.get("annotations"))
        and all(ref in refs for ref in meta.get("ownerReferences") or [])
    )


def covers(live: Any, wanted: Any) -> bool:
    """Every field of ``wanted`` is in ``live`` with the same value (maps may hold more)."""
    if isinstance(wanted, dict):
        return isinstance(live, dict) and all(
            k in live and covers(live[k], v) for k, v in wanted.items()
        )
    return bool(live == wanted)


def others_added(manifest: Json, watched: Json) -> bool:
    """The watched child still holds all of our manifest; another controller only added
    to it (e.g. ``secrets`` or ``imagePullSecrets`` on a new ServiceAccount, which would
    cost one more apply per deployment). Kinds the cache trims never pass."""
    if manifest["kind"] in SPEC_KEPT or manifest["kind"] in DROPPED:
        return False
    wanted = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
    return covers(watched, wanted)


def unchanged(
    manifest: Json, manifest_digest: str, applied: Applied | None, watched: Json | None
) -> bool:
    """Applying ``manifest`` (of digest ``manifest_digest``) again would change nothing on
    the child the watch last reported as ``watched``, last applied as ``applied``."""
    version = watched["metadata"].get("resourceVersion") if watched else None
    last = (applied.digest, applied.version) if applied else None
    if not needs_apply(manifest_digest, last, version):
        return True
    return (
        watched is not None
        and applied is not None
        and applied.digest == manifest_digest
        and (
            only_status_changed(manifest, applied.generation, watched)
            or others_added(manifest, watched)
        )
    )
