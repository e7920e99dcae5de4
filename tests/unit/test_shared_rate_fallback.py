"""The local share of the group's rate budget while Redis is away (pure, a manual clock)."""

from __future__ import annotations

from collections.abc import Callable

from inferq.dispatcher.rate_budget import HELD_MS, RateHeaders, RateLimit
from inferq.dispatcher.shared_rate.fallback import (
    FRESH_MS,
    GroupView,
    local_share,
    local_share_budget,
    shared_headers,
)
from inferq.messaging.tiers import Tier
from tests.support.clock import ManualClock

NOW = 5_000_000


def tokens_admitted(take: Callable[[int], object], cost: int, tries: int = 100) -> int:
    total = 0
    for _ in range(tries):
        if take(cost) is not None:
            total += cost
    return total


def test_a_share_is_the_limit_over_the_group_and_never_none_of_it() -> None:
    assert local_share(1000, 3) == 333
    assert local_share(2, 5) == 1  # more dispatchers than the limit: each keeps one
    assert local_share(None, 3) is None
    assert local_share(100, 0) == 100


def test_a_fresh_reading_leaves_the_share_less_what_the_group_had_until_it_leaves_the_minute() -> None:
    clock = ManualClock(NOW)
    read_at = NOW - FRESH_MS // 2
    views = {"m": GroupView(rpm=None, tpm=1000, requests=4, tokens=400, hold_until_ms=0, read_at_ms=read_at)}
    budget = local_share_budget(views, {}, group_size=2, floor_shares={}, clock_ms=clock)
    assert tokens_admitted(lambda c: budget.take("m", Tier.HIGH, c), 50) == 100  # 500 - 400
    clock.now_ms = read_at + HELD_MS  # the group's 400 has left the minute; our 100 has not
    assert tokens_admitted(lambda c: budget.take("m", Tier.HIGH, c), 50) == 400


def test_a_stale_reading_or_none_counts_the_whole_limit_for_a_minute() -> None:
    clock = ManualClock(NOW)
    stale = GroupView(rpm=10, tpm=None, requests=0, tokens=0, hold_until_ms=0, read_at_ms=NOW - FRESH_MS - 1)
    budget = local_share_budget(
        {"m": stale}, {"c": RateLimit(tpm=1000)}, group_size=2, floor_shares={}, clock_ms=clock
    )
    assert budget.take("m", Tier.HIGH, 1) is None
    assert budget.take("c", Tier.HIGH, 1) is None
    assert budget.take("unlimited", Tier.HIGH, 10**6) is not None  # no limit known: as ever
    clock.now_ms = NOW + HELD_MS
    assert tokens_admitted(lambda c: budget.take("m", Tier.HIGH, c), 1) == 5  # 10 // 2 requests
    assert tokens_admitted(lambda c: budget.take("c", Tier.HIGH, c), 100) == 500


def test_a_hold_the_group_learned_still_holds_the_local_share() -> None:
    clock = ManualClock(NOW)
    view = GroupView(rpm=100, tpm=None, requests=0, tokens=0, hold_until_ms=NOW + 5_000, read_at_ms=NOW)
    budget = local_share_budget({"m": view}, {}, group_size=2, floor_shares={}, clock_ms=clock)
    assert budget.take("m", Tier.HIGH, 1) is None
    clock.now_ms = NOW + 5_000
    assert budget.take("m", Tier.HIGH, 1) is not None


def test_the_share_keeps_the_tiers_floors() -> None:
    clock = ManualClock(NOW)
    view = GroupView(rpm=None, tpm=2000, requests=0, tokens=0, hold_until_ms=0, read_at_ms=NOW)
    shares = {Tier.HIGH: 0.6, Tier.MEDIUM: 0.3, Tier.LOW: 0.1}
    budget = local_share_budget({"m": view}, {}, group_size=2, floor_shares=shares, clock_ms=clock)
    assert tokens_admitted(lambda c: budget.take("m", Tier.LOW, c), 10) == 100  # a tenth of 1000


def test_headers_read_against_the_share_leave_what_remains_of_it() -> None:
    share = shared_headers(
        RateHeaders(limit_tokens=1000, remaining_tokens=800, limit_requests=10, remaining_requests=2), 2
    )
    assert (share.limit_tokens, share.remaining_tokens) == (500, 300)
    assert (share.limit_requests, share.remaining_requests) == (5, 0)
    assert shared_headers(RateHeaders(retry_after_s=3.0), 2) == RateHeaders(retry_after_s=3.0)
