"""Acting as the chart's ServiceAccount: a token from TokenRequest, and a kubeconfig holding
only that token."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from ascend_pd_dev.testtools.rbac import kubeconfig_for_token, service_account_token


class FakeCore:
    """The CoreV1Api call service_account_token makes (no API server here)."""

    def __init__(self, token_request: Any) -> None:
        self.token_request = token_request

    def create_namespaced_service_account_token(self, name: str, ns: str, body: Any) -> Any:
        if isinstance(self.token_request, Exception):
            raise self.token_request
        return SimpleNamespace(status=SimpleNamespace(token=self.token_request))


def test_token_request() -> None:
    assert service_account_token(FakeCore("minted"), "ns", "sa") == "minted"


def test_no_token_names_the_account() -> None:
    with pytest.raises(RuntimeError, match="serviceaccount ns/sa"):
        service_account_token(FakeCore(""), "ns", "sa")


def test_token_request_errors_are_not_hidden() -> None:
    with pytest.raises(ApiException):
        service_account_token(FakeCore(ApiException(status=404)), "ns", "sa")


def test_kubeconfig_keeps_the_cluster_and_only_the_token(tmp_path: Path) -> None:
    admin = {
        "clusters": [
            {
                "name": "dev",
                "cluster": {
                    "server": "https://127.0.0.1:6443",
                    "certificate-authority-data": "Q0E=",
                },
            },
            {"name": "other", "cluster": {"server": "https://127.0.0.2"}},
        ],
        "users": [
            {"name": "admin", "user": {"client-certificate-data": "x", "client-key-data": "y"}}
        ],
        "contexts": [{"name": "dev", "context": {"cluster": "dev", "user": "admin"}}],
        "current-context": "dev",
    }
    config = kubeconfig_for_token(admin, "tok", "system:serviceaccount:ns:sa")
    assert config["clusters"] == [admin["clusters"][0]]
    assert config["users"] == [{"name": "system:serviceaccount:ns:sa", "user": {"token": "tok"}}]
    assert "client-key-data" not in yaml.safe_dump(config)
    assert config["current-context"] == "system:serviceaccount:ns:sa"
