"""Processes that use one dev cluster together: started once, shared, stopped by the last.

Two pytest sessions (two test tiers) that started together both found no healthy cluster and
both started one afresh in the same state directory: the second wiped the first's cluster,
and every test of the first lost its API server. The cluster here is a marker file; the
processes are real, so the lock between them is the one that runs.
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from ascend_pd_dev.controlplane import cluster

START_SECONDS = 1.0  # long enough for the other process to arrive while one starts


def _use(state: Path, hold: float, go: multiprocessing.synchronize.Event) -> None:  # type: ignore[name-defined]
    layout = cluster.Layout(state)
    marker = state / "cluster-up"
    cluster.healthy = lambda _: marker.exists()  # type: ignore[assignment]

    def start() -> None:
        with (state / "starts").open("a") as log:
            log.write("start\n")
        time.sleep(START_SECONDS)
        marker.touch()

    def stop() -> None:
        with (state / "stops").open("a") as log:
            log.write("stop\n")
        marker.unlink()

    go.wait()
    with cluster.session(layout, start, stop):
        assert marker.exists()  # whoever started it, the cluster is up while used
        time.sleep(hold)


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_two_sessions_starting_together_start_the_cluster_once(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    go = context.Event()
    first = context.Process(target=_use, args=(tmp_path, 2.0, go))
    second = context.Process(target=_use, args=(tmp_path, 0.5, go))
    first.start()
    second.start()
    go.set()  # both at once
    for process in (first, second):
        process.join(30)
        assert process.exitcode == 0
    assert _lines(tmp_path / "starts") == 1
    # the last one out stops it, whichever of the two started it
    assert _lines(tmp_path / "stops") == 1 and not (tmp_path / "cluster-up").exists()


@pytest.mark.parametrize("starter_hold", [0.5, 2.0])
def test_the_last_one_out_stops_the_cluster_even_when_the_starter_left_first(
    tmp_path: Path, starter_hold: float
) -> None:
    # the starter is chosen, not raced for: the other arrives once the cluster is up
    context = multiprocessing.get_context("fork")
    go_first, go_second = context.Event(), context.Event()
    first = context.Process(target=_use, args=(tmp_path, starter_hold, go_first))
    second = context.Process(target=_use, args=(tmp_path, 1.25, go_second))
    first.start()
    go_first.set()
    marker = tmp_path / "cluster-up"
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    second.start()
    go_second.set()
    for process in (first, second):
        process.join(30)
        assert process.exitcode == 0
    assert _lines(tmp_path / "starts") == 1
    assert _lines(tmp_path / "stops") == 1 and not marker.exists()


def test_a_session_alone_starts_and_stops(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    go = context.Event()
    go.set()
    only = context.Process(target=_use, args=(tmp_path, 0.0, go))
    only.start()
    only.join(30)
    assert only.exitcode == 0
    assert _lines(tmp_path / "starts") == 1 and _lines(tmp_path / "stops") == 1
