"""The connection to the API server: the kubernetes client as the operator configures it,
and one HTTP exchange over it, counted.

``new_client`` leaves throttling to ``sender`` (urllib3 is told not to retry a 429 itself)
and names the operator's component in the User-Agent; ``watch_client`` gives the watches a
pool of their own. ``Wire.send`` sends one request through the client's auth and TLS
settings and counts it in ``metrics`` by verb, kind and status code ("error": no answer);
it neither retries nor reads the answer.
"""

from __future__ import annotations

import copy
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client import rest

from ascend_pd_operator.kubeio import metrics

Query = list[tuple[str, str]]

#: (connect, read) seconds: a request to an API server that vanished mid-call fails
#: instead of blocking its worker forever.
REQUEST_TIMEOUT = (10.0, 60.0)
USER_AGENT = "ascend-pd-operator"
#: urllib3's default retries, except that a 429 or 503 with Retry-After comes back to us:
#: urllib3 would retry a GET on its own and, after its last try, raise a MaxRetryError that
#: hides the Retry-After from the work queue, which then retried sooner than asked.
RETRIES = urllib3.Retry(total=3, respect_retry_after_header=False)


def load_config() -> client.ApiClient:
    """In-cluster config when running in a pod, else ``$KUBECONFIG`` / ``~/.kube/config``."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return new_client(client.Configuration.get_default_copy())


def new_client(
    configuration: client.Configuration, component: str = "reconciler"
) -> client.ApiClient:
    """A client for ``Kube``: throttling is answered by ``Sender.request`` alone (``RETRIES``);
    its User-Agent names the operator's ``component``, so that the API server's audit log
    (and a proxy counting retries) can tell the reconciler's requests from the watches'."""
    configuration.retries = RETRIES
    api = client.ApiClient(configuration)
    api.user_agent = f"{USER_AGENT} ({component})"
    return api


def watch_client(api_client: client.ApiClient, streams: int) -> client.ApiClient:
    """A client with the same credentials and a connection pool of ``streams`` (+2) for
    long-lived watches; urllib3 would discard connections beyond its pool's size."""
    configuration = copy.deepcopy(api_client.configuration)
    configuration.connection_pool_maxsize = streams + 2
    return new_client(configuration, "watches")


class Wire:
    """One request at a time through ``api``'s auth and TLS settings, each one counted."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api = api_client

    def send(
        self,
        method: str,
        url: str,
        query: Query | None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: tuple[float, float] | None = None,
    ) -> rest.RESTResponse:
        """One request; the response's body is not read yet (``.response`` streams it)."""
        try:
            response = self._call(method, url, query, body, content_type, timeout)
        except Exception:
            self._count(method, url, query, content_type, "error")
            raise
        self._count(method, url, query, content_type, response.status)
        return response

    @staticmethod
    def _count(method: str, url: str, query: Query | None, ctype: str, code: int | str) -> None:
        metrics.observe_request(
            metrics.request_verb(method, url, query, ctype), metrics.request_kind(url), code
        )

    def _call(
        self,
        method: str,
        url: str,
        query: Query | None,
        body: Any,
        content_type: str,
        timeout: tuple[float, float] | None,
    ) -> rest.RESTResponse:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        _, full_url, header_params, serialized, _ = self.api.param_serialize(
            method,
            url,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        return self.api.call_api(
            method,
            full_url,
            header_params=header_params,
            body=serialized,
            _request_timeout=timeout or REQUEST_TIMEOUT,
        )
