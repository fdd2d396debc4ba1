"""Acting as the chart's ServiceAccount: a token from TokenRequest, else the token Secret
that clusters before 1.24 create, and a kubeconfig holding only that token."""

from __future__ import annotations

import base64
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from ascend_pd_dev.testtools.rbac import kubeconfig_for_token, service_account_token


class FakeCore:
    """The three CoreV1Api calls service_account_token makes (no API server here)."""

    def __init__(self, token_request: Any, secrets: list[list[Any]]) -> None:
        self.token_request = token_request
        self.secret_rounds = secrets  # what each successive read of the account sees
        self.reads = 0

    def create_namespaced_service_account_token(self, name: str, ns: str, body: Any) -> Any:
        if isinstance(self.token_request, Exception):
            raise self.token_request
        return SimpleNamespace(status=SimpleNamespace(token=self.token_request))

    def read_namespaced_service_account(self, name: str, ns: str) -> Any:
        round_ = self.secret_rounds[min(self.reads, len(self.secret_rounds) - 1)]
        self.reads += 1
        return SimpleNamespace(secrets=[SimpleNamespace(name=s.name) for s in round_])

    def read_namespaced_secret(self, name: str, ns: str) -> Any:
        for round_ in self.secret_rounds:
            for secret in round_:
                if secret.name == name:
                    return secret
        raise ApiException(status=404)


def token_secret(name: str, token: str | None) -> Any:
    data = {"token": base64.b64encode(token.encode()).decode()} if token else None
    return SimpleNamespace(name=name, type="kubernetes.io/service-account-token", data=data)


def test_token_request_first() -> None:
    core = FakeCore("minted", [[token_secret("s", "from-secret")]])
    assert service_account_token(core, "ns", "sa") == "minted"
    assert core.reads == 0


def test_secret_when_there_is_no_token_request_api() -> None:
    # the token controller fills the Secret asynchronously: an account without one yet
    # is read again
    core = FakeCore(ApiException(status=404), [[], [token_secret("s", "tok")]])
    assert service_account_token(core, "ns", "sa", timeout_seconds=30) == "tok"
    assert core.reads == 2


def test_no_token_at_all_names_the_account() -> None:
    core = FakeCore(ApiException(status=404), [[]])
    with pytest.raises(TimeoutError, match="serviceaccount ns/sa"):
        service_account_token(core, "ns", "sa", timeout_seconds=0)


def test_other_token_request_errors_are_not_hidden() -> None:
    core = FakeCore(ApiException(status=403), [[token_secret("s", "tok")]])
    with pytest.raises(ApiException):
        service_account_token(core, "ns", "sa")


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
