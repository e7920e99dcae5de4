"""Tenant headroom: with two tenants active, one holding its weighted share may not take the last
free tokens; they stay for the other's chat (HIGH), never for its MEDIUM or LOW work. One tenant, or
0 slots: nothing held back. Pure, through the dispatcher's and simulator's own `NextStart`."""

from __future__ import annotations

import pytest

from inferq.dispatcher.next_start import NextStart
from inferq.dispatcher.policies import TieredScheduler
from inferq.dispatcher.readahead import ReadAhead
from inferq.dispatcher.schedule import Schedule
from inferq.dispatcher.tenant_headroom import TenantHeadroom
from inferq.dispatcher.work import Work
from inferq.messaging.tiers import Tier
from tests.support.work import a_work

H = Tier.HIGH
M = Tier.MEDIUM
L = Tier.LOW
BUDGET = 10
WEIGHTS = {"a": 1.0, "b": 3.0}
_seq = iter(range(1, 1_000_000))


def chat(tenant: str, created: int, tier: Tier = H) -> Work:
    n = next(_seq)
    return a_work(
        tier, n, request_id=f"{tenant}-{n}", created_at_ms=created, expire_at_ms=10_000_000, tenant=tenant
    )


def readahead_with(slots: int = 1, window_ms: int = 5_000) -> tuple[NextStart, ReadAhead]:
    headroom = TenantHeadroom(slots=slots, window_ms=window_ms, weight_of=lambda t: WEIGHTS.get(t, 1.0))
    readahead = ReadAhead(promotion_age_ms=60_000, headroom=headroom)
    return NextStart(readahead, TieredScheduler(Schedule.default(budget=BUDGET).pin("peak"))), readahead


def start_works(decide: NextStart, in_use: dict[Tier, int], now_ms: int) -> list[Work]:
    """Start what the decision allows, one at a time, as the starter does."""
    started: list[Work] = []
    while (tier := decide.tier(in_use, BUDGET, now_ms)) is not None:
        start = decide.take(tier, now_ms)
        assert start is not None and start.expired is None
        in_use[tier] += 1
        assert sum(in_use.values()) <= BUDGET
        started.append(start.work)
    return started


def start_all(decide: NextStart, in_use: dict[Tier, int], now_ms: int) -> list[str]:
    """The tenants of what `start_works` started."""
    return [w.request.tenant for w in start_works(decide, in_use, now_ms)]


def test_a_flooding_tenant_leaves_the_last_token_to_a_tenant_active_recently() -> None:
    decide, readahead = readahead_with()
    readahead.add(chat("b", created=0))
    in_use = dict.fromkeys(Tier, 0)
    assert start_all(decide, in_use, now_ms=10) == ["b"]
    for i in range(30):
        readahead.add(chat("a", created=100 + i))
    # B has nothing waiting now, but was active within the window: A stops one short of the budget.
    started = start_all(decide, in_use, now_ms=200)
    assert started == ["a"] * 8
    assert sum(in_use.values()) == BUDGET - 1
    # B's next chat takes the token kept for it at once.
    readahead.add(chat("b", created=300))
    assert start_all(decide, in_use, now_ms=300) == ["b"]
    assert sum(in_use.values()) == BUDGET


def test_the_headroom_is_kept_for_chat_not_for_the_medium_or_low_work_of_a_tenant_below_its_share() -> None:
    decide, readahead = readahead_with()
    readahead.add(chat("b", created=0))
    in_use = dict.fromkeys(Tier, 0)
    assert start_all(decide, in_use, now_ms=10) == ["b"]
    for i in range(30):
        readahead.add(chat("a", created=100 + i))
    assert start_all(decide, in_use, now_ms=200) == ["a"] * 8
    # B is below its share and its MEDIUM and LOW tiers below their floors, yet the last token is
    # not theirs: a chat of B's arriving next would find every token busy.
    readahead.add(chat("b", created=300, tier=M))
    readahead.add(chat("b", created=301, tier=L))
    assert start_all(decide, in_use, now_ms=310) == []
    assert sum(in_use.values()) == BUDGET - 1
    readahead.add(chat("b", created=400))
    (started,) = start_works(decide, in_use, now_ms=400)
    assert (started.request.tenant, started.tier) == ("b", H)
    assert sum(in_use.values()) == BUDGET


def test_with_one_tenant_active_its_medium_and_low_work_uses_every_token() -> None:
    decide, readahead = readahead_with()
    for i in range(9):
        readahead.add(chat("b", created=i))
    readahead.add(chat("b", created=20, tier=M))
    readahead.add(chat("b", created=21, tier=L))
    in_use = dict.fromkeys(Tier, 0)
    started = start_works(decide, in_use, now_ms=100)
    assert len(started) == BUDGET
    assert {w.tier for w in started} >= {M, L}


def test_with_one_tenant_active_every_token_is_used() -> None:
    decide, readahead = readahead_with()
    for i in range(30):
        readahead.add(chat("a", created=i))
    in_use = dict.fromkeys(Tier, 0)
    assert start_all(decide, in_use, now_ms=100) == ["a"] * BUDGET


def test_a_tenant_gone_quiet_for_the_window_no_longer_holds_tokens_back() -> None:
    decide, readahead = readahead_with(window_ms=5_000)
    readahead.add(chat("b", created=0))
    in_use = dict.fromkeys(Tier, 0)
    (b_call,) = start_works(decide, in_use, now_ms=0)
    for i in range(30):
        readahead.add(chat("a", created=10 + i))
    assert len(start_all(decide, in_use, now_ms=100)) == 8
    # B's call still runs (B is active whatever the window): the last token stays free.
    assert start_all(decide, in_use, now_ms=100_000) == []
    decide.ended(b_call)
    in_use[H] -= 1
    # B's call ended and B sent nothing for longer than the window: A may use every token.
    assert start_all(decide, in_use, now_ms=100_000) == ["a", "a"]
    assert sum(in_use.values()) == BUDGET


def test_zero_slots_turns_the_headroom_off() -> None:
    decide, readahead = readahead_with(slots=0)
    readahead.add(chat("b", created=0))
    in_use = dict.fromkeys(Tier, 0)
    start_all(decide, in_use, now_ms=10)
    for i in range(30):
        readahead.add(chat("a", created=100 + i))
    assert start_all(decide, in_use, now_ms=200) == ["a"] * (BUDGET - 1)
    assert sum(in_use.values()) == BUDGET


@pytest.mark.parametrize("slots", [1, 2, 3, 10, 50])
def test_the_budget_is_never_exceeded_and_only_the_tenant_below_its_share_takes_the_headroom(
    slots: int,
) -> None:
    decide, readahead = readahead_with(slots=slots)
    for i in range(40):
        readahead.add(chat("a", created=i))
        readahead.add(chat("b", created=i))
    in_use = dict.fromkeys(Tier, 0)
    started = start_all(decide, in_use, now_ms=100)
    assert sum(in_use.values()) == BUDGET  # B, below its share, takes the headroom
    # A, with weight 1 of 4, holds at its share (2.5) once only the headroom is free.
    assert started.count("a") <= max(3, BUDGET - slots)


def test_with_a_budget_of_one_two_tenants_medium_and_low_work_still_starts() -> None:
    headroom = TenantHeadroom(slots=1, window_ms=5_000, weight_of=lambda t: 1.0)
    readahead = ReadAhead(promotion_age_ms=60_000, headroom=headroom)
    decide = NextStart(readahead, TieredScheduler(Schedule.default(budget=1).pin("night")))
    readahead.add(chat("a", created=0, tier=L))
    readahead.add(chat("b", created=1, tier=L))
    in_use = dict.fromkeys(Tier, 0)
    tier = decide.tier(in_use, 1, now_ms=10)
    assert tier is L
    start = decide.take(tier, now_ms=10)
    assert start is not None and start.expired is None


def test_with_two_slots_the_second_last_token_is_open_to_any_work_of_a_tenant_below_its_share() -> None:
    decide, readahead = readahead_with(slots=2)
    readahead.add(chat("b", created=0))
    in_use = dict.fromkeys(Tier, 0)
    assert start_all(decide, in_use, now_ms=10) == ["b"]
    for i in range(30):
        readahead.add(chat("a", created=100 + i))
    assert start_all(decide, in_use, now_ms=200) == ["a"] * 7  # two tokens kept
    readahead.add(chat("b", created=300, tier=M))
    readahead.add(chat("b", created=301, tier=L))
    # B's analysis takes the second-last token; the last stays for a chat.
    (analysis,) = start_works(decide, in_use, now_ms=310)
    assert (analysis.request.tenant, analysis.tier) == ("b", M)
    assert sum(in_use.values()) == BUDGET - 1
    readahead.add(chat("b", created=400))
    (started,) = start_works(decide, in_use, now_ms=400)
    assert (started.request.tenant, started.tier) == ("b", H)
    assert sum(in_use.values()) == BUDGET
