"""The operator's API client against a local JSON server (``tests.json_server.serving``),
for the unit tests of the client."""

from __future__ import annotations

from kubernetes import client

from ascend_pd_operator.kubeio import kube as kube_module
from ascend_pd_operator.kubeio.denials import Denials
from ascend_pd_operator.kubeio.kube import Kube


def local_kube(url: str, denials: Denials | None = None) -> Kube:
    """The operator's API client, as ``load_config`` builds it, talking to ``url`` (and
    judging 401/403 in ``denials``, a registry of its own unless given)."""
    config = client.Configuration()
    config.host = url
    return Kube(kube_module.new_client(config), denials=denials or Denials())
