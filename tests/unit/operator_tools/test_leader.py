import datetime as dt

import pytest

from ascend_pd_operator.leader import LeaderElector, LeaseView, decide

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
