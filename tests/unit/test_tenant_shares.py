"""Per-tenant admission: a tenant's estimated part of a tier's backlog against its weighted share."""

from __future__ import annotations

import pytest

from inferq.ingest.admission import AdmissionPolicy
from inferq.ingest.tenant_shares import BacklogShares
from inferq.messaging.tiers import Tier
from tests.support.clock import ManualClock

H, M, L = Tier.HIGH, Tier.MEDIUM, Tier.LOW
POLICY = AdmissionPolicy(capacity={H: 60, M: 30, L: 1_000})
EQUAL = {"a": 1.0, "b": 1.0, "c": 1.0}


def shares_with(mix: dict[str, int], tier: Tier = H, **kwargs: float) -> BacklogShares:
    shares = BacklogShares(POLICY, **kwargs)  # type: ignore[arg-type]
    for tenant, count in mix.items():
        for _ in range(count):
            shares.accepted(tenant, tier)
    return shares


def test_below_half_full_nobody_is_refused():
    shares = shares_with({"a": 10})
    assert shares.decide("a", H, 29, EQUAL) is None
    assert shares.decide("a", H, 30, EQUAL) is None  # alone: its share is the whole tier


def test_the_busy_tenant_is_refused_and_the_quiet_one_admitted():
    shares = shares_with({"a": 9, "b": 1})
    refusal = shares.decide("a", H, 40, EQUAL)
    assert refusal is not None
    assert (refusal.estimate, refusal.share, refusal.backlog, refusal.capacity) == (36, 30, 40, 60)
    assert shares.decide("b", H, 40, EQUAL) is None
    # A tenant new to the tier joins the split: a and b and c, 20 each; c has nothing waiting.
    assert shares.decide("c", H, 40, EQUAL) is None


def test_weights_set_the_shares():
    shares = shares_with({"a": 5, "b": 5})
    heavy = {"a": 3.0, "b": 1.0}
    assert shares.decide("a", H, 50, heavy) is None  # 25 of its 45
    refusal = shares.decide("b", H, 50, heavy)
    assert refusal is not None and (refusal.estimate, refusal.share) == (25, 15)


def test_tenants_no_longer_in_the_file_do_not_take_a_share():
    shares = shares_with({"a": 5, "gone": 5})
    assert shares.decide("a", H, 40, {"a": 1.0}) is None  # 20 of the whole 60


def test_unknown_backlog_disabled_admission_and_unknown_tenants_never_refuse():
    shares = shares_with({"a": 10, "b": 1})
    assert shares.decide("a", H, None, EQUAL) is None
    assert shares.decide("nobody", H, 59, EQUAL) is None
    off = BacklogShares(AdmissionPolicy(capacity={H: 60, M: 30, L: 1_000}, enabled=False))
    off.accepted("a", H)
    assert off.decide("a", H, 59, {"a": 1.0, "b": 1.0}) is None
    assert BacklogShares(POLICY).decide("a", H, 59, EQUAL) is None  # no mix seen yet


def test_the_mix_is_the_last_capacity_requests_of_the_tier():
    shares = shares_with({"a": 60})
    for _ in range(60):
        shares.accepted("b", H)
    assert shares.mix(H) == {"b": 60}
    assert shares.mix(M) == {}
    small = BacklogShares(POLICY, window=4)
    for tenant in "aabbbb":
        small.accepted(tenant, L)
    assert small.mix(L) == {"b": 4}


def test_retry_after_is_the_excess_drained_at_the_tenants_share_of_the_budget_and_clamped():
    shares = shares_with({"a": 59, "b": 1})
    refusal = shares.decide("a", H, 59, EQUAL)
    assert refusal is not None
    # estimate 58.02 over a share of 30: 29.02 records at 0.5 s with 5 of the 10 slots: 3 s.
    assert refusal.retry_after_s == 3
    low = shares_with({"a": 999, "b": 1}, L)
    assert low.decide("a", L, 100_000, EQUAL).retry_after_s == 600  # type: ignore[union-attr]


@pytest.mark.parametrize(("window", "from_fill"), [(0, 0.5), (10, -0.1), (10, 1.5)])
def test_bad_settings_are_refused(window, from_fill):
    with pytest.raises(ValueError):
        BacklogShares(POLICY, window=window, from_fill=from_fill)


def test_a_steady_tenant_missing_from_the_last_requests_still_keeps_its_share_of_the_tier():
    clock = ManualClock(now_s=1_000.0)
    shares = BacklogShares(POLICY, active_s=30.0, monotonic=clock.seconds)
    shares.accepted("b", H)  # B's chat, then 60 of A's flood: B is out of the last 60
    clock.advance(s=0.3)
    for _ in range(60):
        shares.accepted("a", H)
    assert "b" not in shares.mix(H)
    refusal = shares.decide("a", H, 40, {"a": 1.0, "b": 3.0})
    assert refusal is not None and refusal.share == 15  # a quarter of 60, not the whole tier
    assert shares.decide("b", H, 40, {"a": 1.0, "b": 3.0}) is None


def test_a_tenant_quiet_for_longer_than_the_window_leaves_the_split():
    clock = ManualClock(now_s=1_000.0)
    shares = BacklogShares(POLICY, active_s=30.0, monotonic=clock.seconds)
    shares.accepted("b", H)
    clock.advance(s=31)
    for _ in range(60):
        shares.accepted("a", H)
    assert shares.decide("a", H, 40, {"a": 1.0, "b": 3.0}) is None  # alone: the whole tier
    assert shares.active(H) == {"a"}


@pytest.mark.parametrize("active_s", [-1.0, float("inf"), float("nan")])
def test_a_nonsense_activity_window_is_refused(active_s: float):
    with pytest.raises(ValueError):
        BacklogShares(POLICY, active_s=active_s)


def test_a_tenant_below_its_share_keeps_its_room_in_a_full_tier():
    # a flooded the tier past its capacity (60); b sent 1 of the last 60.
    shares = shares_with({"a": 59, "b": 1})
    weights = {"a": 1.0, "b": 3.0}  # b's share: 45 of 60
    assert shares.keeps_room("b", H, 60, weights)
    assert shares.keeps_room("b", H, 100, weights)  # 100 < 60 + (45 - 100/60)
    assert not shares.keeps_room("b", H, 104, weights)  # its unused share is used up
    assert not shares.keeps_room("a", H, 60, weights)  # the flooder is over its share


def test_a_full_tier_keeps_no_room_for_a_lone_or_unknown_tenant():
    weights = {"a": 1.0, "b": 1.0}
    assert not shares_with({"a": 10}).keeps_room("a", H, 60, weights)  # alone: the tier is its share
    assert not shares_with({"a": 10}).keeps_room("x", H, 60, weights)  # not in the file
    assert not BacklogShares(POLICY).keeps_room("a", H, 60, weights)  # nothing seen yet
