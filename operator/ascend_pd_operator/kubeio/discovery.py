"""Which version of a kind the API server serves, from its ``/version``, asked once.

A kind whose served version depends on the server (``access.LEGACY_VERSIONS``) is
addressed at the version the server's ``/version`` says it serves; every other kind at its
version in ``access.RESOURCES``. The answer is asked for when first needed and shared by
everyone using the client.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ascend_pd_operator.api.access import (
    LEGACY_VERSIONS,
    Resource,
    resource_for,
    served_api_version,
)
from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.kubeio.errors import KubeError, NotFound


def server_minor(version: Json) -> int | None:
    """The minor version of a ``/version`` answer: "20" and "21+" (some providers' builds)
    give 20 and 21; None when it says nothing usable."""
    digits = "".join(c for c in str(version.get("minor", "")) if c.isdigit())
    return int(digits) if digits else None


class ServerVersion:
    """The server's minor version as ``get`` (a GET of a path) fetches it from ``/version``,
    once; and each kind's resource at the version that server serves."""

    def __init__(self, get: Callable[[str], Json]) -> None:
        self._get = get
        self._minor: int | None = None
        self._known = False
        self._lock = threading.Lock()
        self._retry_at = 0.0  # monotonic: no GET /version before

    @property
    def minor(self) -> int | None:
        """The API server's Kubernetes minor version (1.x), from ``/version`` on first use;
        None if the server does not say (then every kind is used at its table version)."""
        # The reconciler and the resync share this client: one of them asks, the other
        # waits for its answer; after a throttled ask neither asks again before the server
        # said (the other used to send its own GET /version right after the 429).
        with self._lock:
            if not self._known:
                wait = self._retry_at - time.monotonic()
                if wait > 0:
                    raise KubeError(429, "TooManyRequests", "GET /version: the server asked "
                                    f"to wait {wait:.1f}s more", retry_after=wait)  # fmt: skip
                try:
                    self._minor = server_minor(self._get("/version"))
                except NotFound:
                    self._minor = None
                except KubeError as exc:
                    self._retry_at = time.monotonic() + (exc.retry_after or 0.0)
                    raise
                self._known = True
            return self._minor

    def resource(self, kind: str) -> Resource:
        """``kind``'s allow-list entry at the version this server serves."""
        if kind in LEGACY_VERSIONS:
            return resource_for(kind, served_api_version(kind, self.minor))
        return resource_for(kind)
