"""The built-in PD planner on the local control plane: decode in ``scaling.mode: Planner``
grows when its leaders report a full KV pool and shrinks, one instance per stabilization
window, when they report an empty one.

The leaders are played by a small HTTP server on the addresses of the dev cluster's nodes at
the runtime pods' port (runtime pods use the host network, so kubelet-sim gives each pod
its node's address; ``exporters.serve``, as the Prometheus e2e tier serves its stand-ins). It
answers with the SGLang 0.5.23 decode exposition of the unit fixtures (the real metric names,
labels and buckets, ``fixtures/sglang_metrics``) with the test's token usage filled in, so
the operator's own scraper and parser read what a real leader would serve.

The oracles are the API server's objects (the scaler's ``spec.replicas``, the decode
StatefulSets, the scaler's ``status.planner``) and the operator's ``/metrics`` counters of
the planner's decisions; never the planner's code.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from string import Template
from typing import Any

import pytest
from pdd_e2e import REPO, apply, example, get, pdd_doc
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(REPO / "tests" / "prometheus"))

from exporters import serve

pytestmark = [pytest.mark.e2e, pytest.mark.simulated, pytest.mark.local, pytest.mark.timeout(600)]

NAME = "dsv2-lite"
SCALER = f"pdrolescaler/{NAME}-decode"
#: The runtime pods' ``http`` port (vocabulary.HTTP_PORT), where SGLang serves /metrics.
LEADER_PORT = 30000
FIXTURE = REPO / "tests/unit/operator/fixtures/sglang_metrics/decode-0.5.23.prom"
WINDOW_SECONDS = 5


class DecodeLeaders:
    """SGLang decode leaders' ``/metrics`` on every node address, all at one token usage."""

    def __init__(self, hosts: list[str], port: int, fixture: Path) -> None:
        self.template = Template(fixture.read_text())
        self.usage = 0.5
        self.lock = threading.Lock()
        self.servers = [serve(host, port, self._registry, self.lock) for host in hosts]

    def _registry(self, path: str) -> Any:
        return self if path == "/metrics" else None

    def collect(self) -> Iterator[Any]:  # what generate_latest asks a registry for
        text = self.template.substitute(
            usage=repr(self.usage), prealloc_queue="0.0", transfer_queue="0.0"
        )
        yield from text_string_to_metric_families(text)

    def set_usage(self, usage: float) -> None:
        with self.lock:
            self.usage = usage

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


def _node_addresses(kubectl: Any) -> list[str]:
    nodes = json.loads(kubectl("get", "nodes", "-o", "json").stdout)["items"]
    return sorted(a["address"] for n in nodes for a in n["status"].get("addresses", [])
                  if a["type"] == "InternalIP")  # fmt: skip


@pytest.fixture
def leaders(kubectl: Any) -> Iterator[DecodeLeaders]:
    served = DecodeLeaders(_node_addresses(kubectl), LEADER_PORT, FIXTURE)
    yield served
    served.stop()


def _decode_instances(kubectl: Any, namespace: str) -> list[str]:
    items = (get(kubectl, namespace, "statefulsets") or {}).get("items", [])
    return sorted(i["metadata"]["name"] for i in items
                  if i["metadata"]["name"].startswith(f"{NAME}-decode-")
                  and not i["metadata"].get("deletionTimestamp"))  # fmt: skip


def _decisions(operator: Any) -> dict[str, float]:
    """The operator's ``ascend_pd_planner_decisions_total`` for decode, by action."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(operator.metrics_text()):
        for sample in family.samples:
            if sample.name == "ascend_pd_planner_decisions_total" and (
                sample.labels.get("role") == "decode"
            ):
                found[sample.labels["action"]] = sample.value
    return found


def test_the_planner_scales_decode_up_on_its_leaders_load_and_down_after_the_window(
    kubectl: Any, namespace: str, operator: Any, leaders: DecodeLeaders, wait_until: Any
) -> None:
    docs = example("deepseek-v2-lite.yaml", namespace)
    spec = pdd_doc(docs)["spec"]
    spec["decode"]["replicas"] = 1
    spec["decode"]["scaling"] = {"mode": "Planner", "minReplicas": 1, "maxReplicas": 3}
    spec["scaling"] = {"planner": {"intervalSeconds": 1,
                                   "stabilizationWindowSeconds": WINDOW_SECONDS}}  # fmt: skip
    apply(kubectl, docs)

    def planner() -> dict[str, Any]:
        scaler = get(kubectl, namespace, SCALER) or {}
        return {"replicas": (scaler.get("spec") or {}).get("replicas"),
                **((scaler.get("status") or {}).get("planner") or {})}  # fmt: skip

    # The leaders at 0.5 of a 0.7 target: the planner reads them and holds at 1.
    held = wait_until(lambda: (p := planner()).get("metrics", {}).get("token_usage") == "0.5"
                      and p, "the planner reading decode-0's token usage")  # fmt: skip
    assert held["lastDecision"] == "hold" and held["replicas"] == 1, held
    assert held["reason"] == "hold: decode token usage 0.50 vs target 0.70 needs 1", held

    # A full KV pool: ceil(n * 0.95 / 0.7) asks for more than n until maxReplicas 3, where
    # it holds and says so.
    leaders.set_usage(0.95)
    at_max = wait_until(
        lambda: (
            (p := planner()).get("replicas") == 3
            and "at maxReplicas 3" in p.get("reason", "")
            and _decode_instances(kubectl, namespace) == [f"{NAME}-decode-{i}" for i in range(3)]
            and p
        ),
        "decode scaled up to 3 by the planner",
    )
    expected = "hold: decode token usage 0.95 > target 0.70, at maxReplicas 3"
    assert at_max["reason"] == expected, at_max
    assert _decisions(operator).get("up", 0) >= 1

    # An empty one: down by one instance per window, to minReplicas 1.
    leaders.set_usage(0.2)
    seen: list[str] = []

    def down_to_one() -> Any:
        p = planner()
        if p.get("reason") and p["reason"] not in seen:
            seen.append(p["reason"])
        # settled: one instance left and a decision on a fresh reading of it (the decision
        # taken while decode-1 still drained reads no metrics; on a busy machine its status
        # may outlive decode-1's StatefulSet by a planner interval or more)
        settled = (p.get("replicas") == 1 and p.get("lastDecision") == "hold"
                   and p.get("metrics", {}).get("token_usage") == "0.2"
                   and _decode_instances(kubectl, namespace) == [f"{NAME}-decode-0"])  # fmt: skip
        return settled and p

    done = wait_until(down_to_one, "decode scaled down to 1 by the planner")
    assert done["reason"] == "hold: decode token usage 0.20 vs target 0.70 needs 1", done
    assert done["metrics"]["token_usage"] == "0.2", done
    # it waited out the window below target before stepping down
    window = re.compile(rf"< target 0\.70 for \d+ s of {WINDOW_SECONDS} s")
    assert any(window.search(reason) for reason in seen), seen
    counts = _decisions(operator)
    assert counts.get("up", 0) >= 1 and counts.get("down", 0) >= 2, counts  # 3 -> 2 -> 1
