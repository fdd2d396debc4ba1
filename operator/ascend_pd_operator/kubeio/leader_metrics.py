"""Scraping the instance leaders' ``/metrics`` for the built-in planner.

Each Ready leader serves SGLang's Prometheus exposition on the runtime's HTTP port
(``vocabulary.HTTP_PORT``; the launcher starts SGLang with ``--enable-metrics``).
``LeaderMetrics.scrape`` fetches many leaders at once and returns, per instance, the
samples ``decisions.autoscale`` reads (only the families it reads, so a large exposition
costs no memory past the parse), or None when the scrape failed: a refused connection, a
timeout, a non-200 answer, a body too large or not the text format. A failure is the
planner's "metrics missing" (it holds), never an exception up the stack.

Why a small thread pool: one PDDeployment's scrape must not take one timeout per dead
leader in a row (sequentially, ten black-holed leaders at 2 s each would stall the planner
20 s, longer than its interval), and a thread per leader would cost one stack per leader
at 100 PDDeployments. A few workers bound both: the healthy leaders answer in
milliseconds, and the dead ones time out side by side. Each scrape also has a deadline for
the whole answer, not only per socket read, so a leader that trickles bytes cannot hold a
worker past it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor

import urllib3
from prometheus_client.parser import text_string_to_metric_families

from ascend_pd_operator.api.vocabulary import HTTP_PORT
from ascend_pd_operator.decisions.autoscale import METRICS_READ, Samples

log = logging.getLogger(__name__)

#: An SGLang exposition is a few hundred KiB with every histogram; past this it is not one.
MAX_BYTES = 8 << 20
_CHUNK = 64 << 10


def parse(text: str, families: Collection[str] = METRICS_READ) -> Samples:
    """The samples of ``families`` in a Prometheus text exposition (ValueError: not one)."""
    found: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in families:
            continue
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def url(ip: str, port: int = HTTP_PORT) -> str:
    host = f"[{ip}]" if ":" in ip else ip  # an IPv6 pod IP
    return f"http://{host}:{port}/metrics"


class LeaderMetrics:
    """Scrapes leaders with ``workers`` threads; ``close`` when done."""

    def __init__(
        self,
        *,
        timeout_seconds: float = 2.0,
        workers: int = 4,
        port: int = HTTP_PORT,
        families: Collection[str] = METRICS_READ,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.port = port
        self.families = families
        # No retries: the next interval is the retry, and a hold costs nothing.
        self._http = urllib3.PoolManager(num_pools=4 * workers, maxsize=1, retries=False)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="leader-metrics")

    def scrape(self, leaders: Mapping[str, str]) -> dict[str, Samples | None]:
        """Instance name -> its leader's samples (None: missing), for ``{instance: pod IP}``."""
        futures = {name: self._pool.submit(self.scrape_one, ip) for name, ip in leaders.items()}
        return {name: future.result() for name, future in futures.items()}

    def scrape_one(self, ip: str) -> Samples | None:
        target = url(ip, self.port)
        deadline = time.monotonic() + self.timeout_seconds
        try:
            answer = self._http.request(
                "GET",
                target,
                timeout=urllib3.Timeout(total=self.timeout_seconds),
                preload_content=False,
                headers={"Accept": "text/plain"},
            )
            try:
                if answer.status != 200:
                    log.debug("scrape %s: HTTP %s", target, answer.status)
                    return None
                body = bytearray()
                for chunk in answer.stream(_CHUNK):
                    body += chunk
                    if len(body) > MAX_BYTES or time.monotonic() > deadline:
                        log.debug("scrape %s: too large or too slow", target)
                        return None
            finally:
                answer.release_conn()
            return parse(body.decode("utf-8", errors="replace"), self.families)
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
            log.debug("scrape %s: %s", target, error)
            return None
        except Exception:  # a parser's surprise on a strange body: still only "missing"
            log.warning("scrape %s: unexpected failure", target, exc_info=True)
            return None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.clear()
