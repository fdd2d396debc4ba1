import datetime as dt
import time

import pytest

from ascend_pd_operator.leader import ACTING_SHARE, LeaderElector, LeaseView, decide

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
