"""An idle operator makes no API writes across many resyncs, yet still repairs drift.

The operator (``ascend-pd run``) talks to the API server through the fault proxy with
every fault rate at zero, so the proxy only counts its requests per verb. Once the
example is Ready, several resync periods pass: reads go on (each resync reconciles),
writes must not, and the reconcile reads the PDDeployment from the watch (at most one GET
of it and its model ConfigMap per resync). Then a user edits a managed field and adds a
label of their own: the next reconcile restores the field and keeps the label.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from pdd_e2e import apply, example

RESYNC_SECONDS = 2
# the proxy forwards the admin bearer token of the dev cluster; it needs kubelet-sim for Ready
pytestmark = [pytest.mark.local, pytest.mark.simulated, pytest.mark.timeout(600)]


def test_idle_resyncs_make_no_writes_and_drift_is_still_repaired(
    kubectl: Any,
    namespace: str,
    proxied_operator: Any,
    proxy_stats: Any,
    get_json: Any,
    wait_until: Any,
) -> None:
    proxied_operator(RESYNC_SECONDS)
    apply(kubectl, example("deepseek-v2-lite.yaml", namespace))
    wait_until(
        lambda: (get_json("pdd", "dsv2-lite").get("status") or {}).get("phase") == "Ready",
        "dsv2-lite Ready",
    )

    # Settled: a whole resync period passes without a single write.
    def quiet_period() -> dict[str, Any] | None:
        before = proxy_stats()
        time.sleep(RESYNC_SECONDS * 1.5)
        after = proxy_stats()
        return after if after["write_total"] == before["write_total"] else None

    before = wait_until(quiet_period, "a resync period without writes", timeout=120)
    time.sleep(RESYNC_SECONDS * 5)  # five more resyncs
    after = proxy_stats()
    assert after["requests"] > before["requests"], "no reads: the resyncs did not run"
    writes = {v: n - before["writes"].get(v, 0) for v, n in after["writes"].items()}
    assert not any(writes.values()), f"idle operator wrote: {writes}"

    # Reads at rest: the PDDeployment and its model ConfigMap come from the watches
    # (cached_reads); at most one GET of either per deployment per resync (here the user's
    # ConfigMap, which no watch of ours carries). Each resync LISTs the PDDeployments once:
    # that count is the number of resyncs in the window.
    start = proxy_stats()["kinds"]

    def since(kinds: dict[str, int], kind: str) -> int:
        return kinds.get(kind, 0) - start.get(kind, 0)

    def five_resyncs() -> dict[str, int] | None:
        kinds: dict[str, int] = proxy_stats()["kinds"]
        return kinds if since(kinds, "LIST pddeployments") >= 5 else None

    end = wait_until(five_resyncs, "five resyncs", timeout=180)
    resyncs = since(end, "LIST pddeployments")
    gets = {kind: since(end, kind) for kind in ("GET pddeployments", "GET configmaps")}
    # +1: the window may open between a resync's LIST and its reconcile's reads
    assert sum(gets.values()) <= resyncs + 1, f"{gets} in {resyncs} resyncs"
    assert gets["GET pddeployments"] <= 1, f"{gets} in {resyncs} resyncs"

    # Drift is still repaired: a managed field edited back, a user's label kept.
    kubectl("label", "service", "dsv2-lite-decode-0", "-n", namespace, "team=inference")
    kubectl("scale", "statefulset", "dsv2-lite-decode-0", "-n", namespace, "--replicas=3")
    wait_until(
        lambda: get_json("statefulset", "dsv2-lite-decode-0")["spec"]["replicas"] == 1,
        "replicas restored",
    )
    kubectl("delete", "service", "dsv2-lite-prefill-0", "-n", namespace)
    wait_until(lambda: get_json("service", "dsv2-lite-prefill-0"), "restored")
    labels = get_json("service", "dsv2-lite-decode-0")["metadata"]["labels"]
    assert labels["team"] == "inference"
