"""The API server's time for the operator's writes: the same applies from a bare client.

The operator's figure "N deployments until all children exist" is set against a client
that does nothing but the same server-side applies: the same manifests (what the operator
would apply for those deployments, used here only as the workload), the same query
(``force=true``), the same path to the same control plane, and the operator's concurrency:
``workers`` threads, each with one keep-alive ``http.client`` connection, each taking one
deployment's manifests at a time and applying them one after the other, as one operator
worker reconciles one deployment. No cache, no reads, no status, no retry: what is left is
the API server's (and the path's) time for the work.
"""

from __future__ import annotations

import http.client
import json
import queue
import threading
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode, urlsplit

from ascend_pd_operator.api.access import resource_for
from ascend_pd_operator.kubeio.kube import path

FIELD_MANAGER = "ascend-pd-bench-bare"


def apply_url(manifest: dict[str, Any]) -> str:
    meta = manifest["metadata"]
    res = resource_for(manifest["kind"], manifest.get("apiVersion"))
    query = urlencode([("fieldManager", FIELD_MANAGER), ("force", "true")])
    return f"{path(res, meta['namespace'], meta['name'])}?{query}"


def apply_all(
    base_url: str, token: str, groups: Sequence[Sequence[dict[str, Any]]], workers: int
) -> int:
    """Apply every group's manifests (a group to one thread, in order); the requests sent.

    Raises the first refused apply once every thread has stopped."""
    url = urlsplit(base_url)
    if url.scheme != "http" or url.hostname is None:
        raise ValueError(f"the bare client speaks plain HTTP to a local proxy, not {base_url!r}")
    host, port = url.hostname, url.port or 80
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/apply-patch+yaml",
        "Accept": "application/json",
    }
    work: queue.SimpleQueue[Sequence[dict[str, Any]]] = queue.SimpleQueue()
    for group in groups:
        work.put(group)
    errors: list[str] = []
    sent = [0] * workers

    def worker(index: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=120)
        try:
            while not errors:
                try:
                    group = work.get_nowait()
                except queue.Empty:
                    return
                for manifest in group:
                    body = json.dumps(manifest).encode()
                    conn.request("PATCH", apply_url(manifest), body=body, headers=headers)
                    response = conn.getresponse()
                    answer = response.read()  # the whole answer: the connection is reused
                    sent[index] += 1
                    if response.status not in (200, 201):
                        errors.append(f"{manifest['kind']} {manifest['metadata']['name']}: "
                                      f"{response.status} {answer[:300]!r}")  # fmt: skip
                        return
        except Exception as exc:  # reported below, after the other threads stop
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            conn.close()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"bare client apply refused: {errors[0]}")
    return sum(sent)
