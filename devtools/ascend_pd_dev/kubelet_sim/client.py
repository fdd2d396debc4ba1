"""The API client kubelet-sim and its test helpers use: a ``CoreV1Api``."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def make_api(kubeconfig: str) -> Any:
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    return client.CoreV1Api(api_client)


def core_api(kube: Any) -> Any:
    """A CoreV1Api from a kubeconfig path, a ``kubernetes.client.ApiClient`` or a CoreV1Api."""
    if isinstance(kube, str | Path):
        return make_api(str(kube))
    from kubernetes import client

    if isinstance(kube, client.ApiClient):
        return client.CoreV1Api(kube)
    return kube
