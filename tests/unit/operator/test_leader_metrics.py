"""Scraping leaders' ``/metrics`` (``kubeio.leader_metrics``) against a local HTTP server:
the planner's samples from an SGLang exposition, and "missing" (None), never an exception,
for a 500, a timeout, a refused connection and a body that is no exposition."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from string import Template
from urllib.parse import urlsplit

from ascend_pd_operator.kubeio.leader_metrics import LeaderMetrics, parse, url
from tests.json_server import serving

FIXTURE = Path(__file__).parent / "fixtures" / "sglang_metrics" / "decode-dp2-0.5.23.prom"
TEXT = Template(FIXTURE.read_text()).substitute(
    usage0="0.5", usage1="0.9", prealloc_queue0="1.0", prealloc_queue1="3.0",
    transfer_queue0="0.0", transfer_queue1="2.0",
)  # fmt: skip


def port_of(base: str) -> int:
    port = urlsplit(base).port
    assert port is not None
    return port


def test_scrapes_sglangs_exposition_and_keeps_what_the_planner_reads() -> None:
    paths: list[str] = []

    def answer(method: str, path: str, query: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        paths.append(path)
        return 200, {"Content-Type": "text/plain; version=0.0.4"}, TEXT.encode()

    with serving(answer) as base:
        scraper = LeaderMetrics(port=port_of(base), timeout_seconds=5)
        try:
            got = scraper.scrape({"decode-0": "127.0.0.1", "decode-1": "127.0.0.1"})
        finally:
            scraper.close()
    assert paths == ["/metrics", "/metrics"]
    assert set(got) == {"decode-0", "decode-1"}
    samples = got["decode-0"]
    assert samples is not None and samples == got["decode-1"]
    usage = {
        dict(labels)["dp_rank"]: value
        for (name, labels), value in samples.items()
        if name == "sglang:token_usage"
    }
    assert usage == {"0": 0.5, "1": 0.9}
    names = {name for name, _ in samples}
    # SGLang's other families (running requests, throughput) are dropped at the scrape
    assert "sglang:gen_throughput" not in names and "sglang:num_running_reqs" not in names
    assert "sglang:inter_token_latency_seconds_bucket" in names


def test_a_500_a_timeout_a_refusal_or_garbage_is_missing_not_an_error() -> None:
    release = threading.Event()
    mode = ["500"]

    def answer(method: str, path: str, query: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        if mode[0] == "500":
            return 500, {}, b"internal error"
        if mode[0] == "garbage":
            return 200, {}, b'sglang:token_usage{model_name="x" 1\n'
        release.wait(30)  # the slow leader: answers only when the test lets it
        return 200, {}, TEXT.encode()

    with serving(answer) as base:
        with socket.socket() as closed:  # a port nobody listens on
            closed.bind(("127.0.0.1", 0))
            refused_port = closed.getsockname()[1]
        scraper = LeaderMetrics(port=port_of(base), timeout_seconds=0.5)
        refused = LeaderMetrics(port=refused_port, timeout_seconds=0.5)
        try:
            assert scraper.scrape({"decode-0": "127.0.0.1"}) == {"decode-0": None}
            mode[0] = "garbage"
            assert scraper.scrape({"decode-0": "127.0.0.1"}) == {"decode-0": None}
            mode[0] = "slow"
            started = time.monotonic()
            assert scraper.scrape({"decode-0": "127.0.0.1"}) == {"decode-0": None}
            took = time.monotonic() - started
            assert refused.scrape({"decode-1": "127.0.0.1"}) == {"decode-1": None}
        finally:
            release.set()
            scraper.close()
            refused.close()
    # the slow leader was given up at its deadline, long before the server would answer
    assert 0.4 < took < 10, took


def test_url_of_an_ipv6_pod() -> None:
    assert url("fd00::12", 30000) == "http://[fd00::12]:30000/metrics"
    assert url("10.0.0.7") == "http://10.0.0.7:30000/metrics"


def test_parse_keeps_each_series_labels() -> None:
    assert parse(TEXT, {"sglang:token_usage"}).keys() == {
        ("sglang:token_usage", frozenset(labels))
        for labels in (
            {("dp_rank", "0"), ("engine_type", "decode"), ("model_name", "deepseek-ai/DeepSeek-V3"),
             ("moe_ep_rank", "0"), ("pp_rank", "0"), ("tp_rank", "0")},
            {("dp_rank", "1"), ("engine_type", "decode"), ("model_name", "deepseek-ai/DeepSeek-V3"),
             ("moe_ep_rank", "8"), ("pp_rank", "0"), ("tp_rank", "8")},
        )
    }  # fmt: skip
