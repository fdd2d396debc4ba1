"""The operator's API client against a local JSON server (``tests.json_server.serving``),
for the unit tests of the client."""

from __future__ import annotations

from ascend_pd_operator.kubeio.denials import Denials
from ascend_pd_operator.kubeio.kube import Connection, Kube


def local_kube(url: str, denials: Denials | None = None) -> Kube:
    """The operator's API client, as ``run`` builds it, talking to ``url`` (and judging
    401/403 in ``denials``, a registry of its own unless given)."""
    return Kube(Connection.for_url(url), denials=denials or Denials())
