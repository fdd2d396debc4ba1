"""What the watches last saw of each child, so an unchanged child is not applied again.

Server-side apply of an unchanged manifest changes nothing but is still a write
request; at every resync and every child status change that adds up. The
reconciler remembers, per child, the digest of the manifest it applied and the
resourceVersion the API server answered with. While the watch reports that same
resourceVersion (nobody edited or deleted the child since) and the manifest's
digest is the same, ``needs_apply`` says no and the watched object stands in for
the apply response. Any edit, deletion or new desired state applies again.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

Json = dict[str, Any]
Key = tuple[str, str, str]  # (kind, namespace, name)


def digest(manifest: Json) -> str:
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


def needs_apply(
    manifest_digest: str, last_applied: tuple[str, str] | None, watched_version: str | None
) -> bool:
    """Apply unless this exact manifest was applied and the child is unchanged since."""
    if last_applied is None or watched_version is None:
        return True
    applied_digest, applied_version = last_applied
    return applied_digest != manifest_digest or applied_version != watched_version


class LiveCache:
    """Children as the watches last reported them, and what we last applied to each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[Key, Json] = {}
        self._applied: dict[Key, tuple[str, str]] = {}

    # --- fed by the watch handlers ----------------------------------------------------
    def seen(self, obj: Json) -> None:
        meta = obj["metadata"]
        with self._lock:
            self._objects[(obj["kind"], meta["namespace"], meta["name"])] = obj

    def gone(self, kind: str, namespace: str, name: str) -> None:
        with self._lock:
            self._objects.pop((kind, namespace, name), None)

    # --- used by the reconciler -------------------------------------------------------
    def unchanged(self, manifest: Json) -> Json | None:
        """The watched child when applying ``manifest`` again would change nothing."""
        key = _key(manifest)
        with self._lock:
            obj = self._objects.get(key)
            version = obj["metadata"].get("resourceVersion") if obj else None
            if needs_apply(digest(manifest), self._applied.get(key), version):
                return None
            return obj

    def applied(self, manifest: Json, response: Json) -> None:
        with self._lock:
            self._applied[_key(manifest)] = (
                digest(manifest),
                str(response["metadata"].get("resourceVersion", "")),
            )


def _key(manifest: Json) -> Key:
    meta = manifest["metadata"]
    return (manifest["kind"], meta["namespace"], meta["name"])
