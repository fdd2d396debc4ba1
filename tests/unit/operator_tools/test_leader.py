import datetime as dt
import time

import pytest

from ascend_pd_operator.decisions.lease import ACTING_SHARE, LeaseView, decide
from ascend_pd_operator.kubeio.leader import LeaderElector

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def lease(holder, renewed=T0, duration=15):
    return LeaseView(
        holder=holder, renew_time=renewed, duration_seconds=duration, resource_version="1"
    )


def test_no_lease_creates():
    assert decide(None, "a", T0) == "create"


def test_holder_renews():
    assert decide(lease("a"), "a", T0 + dt.timedelta(seconds=100)) == "renew"


def test_standby_waits_the_full_duration():
    assert decide(lease("b"), "a", T0 + dt.timedelta(seconds=14.9)) == "wait"
    assert decide(lease("b"), "a", T0 + dt.timedelta(seconds=15)) == "acquire"


def test_released_lease_is_acquired():
    assert decide(lease(""), "a", T0) == "acquire"


def test_renew_interval_must_fit_the_lease():
    with pytest.raises(ValueError, match="at most half the lease"):
        LeaderElector(object(), "ns", "l", "a", lease_seconds=10, renew_seconds=6)


def test_a_leader_may_write_only_while_its_renewal_is_fresh():
    # a leader paused past its lease (SIGSTOP, a stalled node) must not write on waking,
    # before its renew thread notices that a standby took over
    elector = LeaderElector(None, "ns", "lease", "me", lease_seconds=15, renew_seconds=5)
    assert not elector.holds()  # not elected yet
    elector.is_leader.set()
    elector._last_renewed = time.monotonic()
    assert elector.holds()
    elector._last_renewed = time.monotonic() - 15 * ACTING_SHARE
    assert not elector.holds()


class FakeLeases:
    """The three Lease verbs the elector uses on ``Kube``, over one Lease in memory."""

    def __init__(self) -> None:
        self.body: dict | None = None
        self.version = 0
        self.reachable = True

    def _check(self) -> None:
        if not self.reachable:
            raise ConnectionRefusedError("the API server is down")

    def get(self, kind, namespace, name):
        self._check()
        if self.body is None:
            return None
        return {**self.body, "metadata": {**self.body["metadata"],
                                          "resourceVersion": str(self.version)}}  # fmt: skip

    def create(self, kind, namespace, body):
        self._check()
        self.body, self.version = body, self.version + 1

    def replace(self, kind, namespace, name, body):
        from ascend_pd_operator.kubeio.errors import KubeError

        self._check()
        if body["metadata"].get("resourceVersion") != str(self.version):
            raise KubeError(409, "Conflict", "the object has been modified")
        self.body, self.version = body, self.version + 1

    def take(self, holder: str) -> None:
        """Another replica holds the lease, freshly renewed."""
        assert self.body is not None
        spec = dict(self.body["spec"], holderIdentity=holder,
                    renewTime=dt.datetime.now(dt.UTC).isoformat())  # fmt: skip
        self.body, self.version = dict(self.body, spec=spec), self.version + 1


class Beats:
    def beat(self) -> None:
        pass


def _until(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_a_lost_lease_stands_the_replica_by_and_it_leads_again_later() -> None:
    """An outage longer than the lease (or a pause) used to end the process: now the
    replica stops writing at once, stands by, and takes the lease again when it is free."""
    import threading

    leases = FakeLeases()
    elector = LeaderElector(leases, "ns", "lease", "me", lease_seconds=1, renew_seconds=0.05)
    stop = threading.Event()
    thread = threading.Thread(target=elector.run, args=(Beats(), stop), daemon=True)
    thread.start()
    try:
        _until(elector.holds)
        leases.take("other")  # a standby took over while this replica was cut off
        _until(lambda: not elector.is_leader.is_set())
        assert not elector.holds() and thread.is_alive()
        # the other replica goes away: its lease expires and this one leads again
        _until(elector.holds, seconds=15)
        assert leases.body is not None and leases.body["spec"]["holderIdentity"] == "me"
    finally:
        stop.set()
        thread.join(5)
