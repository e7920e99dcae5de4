"""Lending without foresight: behind a preemptible backend LOW and MEDIUM take every idle slot (no
headroom kept, no forecast asked); the tiers above lose nothing, since the floors come first and a
lent slot is taken back by preemption. Without one, the ceilings and the headroom hold as before. A
request preempted `max_preemptions` times is lent nothing more: it waits within its tier's share."""

from __future__ import annotations

from datetime import UTC, datetime

from inferq.dispatcher.next_start import NextStart
from inferq.dispatcher.offsets import PartitionOffsets
from inferq.dispatcher.policies import Demand, TieredScheduler, build_scheduler
from inferq.dispatcher.readahead import ReadAhead
from inferq.dispatcher.schedule import Schedule
from inferq.dispatcher.work import Work
from inferq.messaging.tiers import Tier
from tests.support.kafka import a_request

PEAK = Schedule.default(10).pin("peak")


def fill(
    scheduler: TieredScheduler, in_use: dict[Tier, int] | None = None, **waiting: int
) -> dict[Tier, int]:
    """Start requests until the scheduler says no; the tokens in use per tier then."""
    used = dict.fromkeys(Tier, 0) | (in_use or {})
    left = {t: waiting.get(t.value, 0) for t in Tier}
    while (tier := scheduler.next_tier(used, Demand(left, dict.fromkeys(Tier)), 10)) is not None:
        used[tier] += 1
        left[tier] -= 1
    return used


def scheduler(*preemptible: Tier) -> TieredScheduler:
    return TieredScheduler(PEAK, clock=lambda: datetime(2026, 12, 3, tzinfo=UTC), preemptible=preemptible)


def test_briefs_take_every_idle_slot_behind_a_preemptible_backend() -> None:
    assert fill(scheduler(Tier.LOW), LOW=50) == {Tier.HIGH: 0, Tier.MEDIUM: 0, Tier.LOW: 10}
    assert fill(scheduler(Tier.MEDIUM, Tier.LOW), MEDIUM=50) == {Tier.HIGH: 0, Tier.MEDIUM: 10, Tier.LOW: 0}


def test_without_one_the_ceilings_and_the_headroom_hold() -> None:
    assert fill(scheduler(), LOW=50) == {Tier.HIGH: 0, Tier.MEDIUM: 0, Tier.LOW: 1}
    assert fill(scheduler(), MEDIUM=50) == {Tier.HIGH: 0, Tier.MEDIUM: 8, Tier.LOW: 0}
    assert fill(scheduler(Tier.HIGH), MEDIUM=50) == {Tier.HIGH: 0, Tier.MEDIUM: 8, Tier.LOW: 0}


def test_the_floors_and_higher_tiers_still_come_first() -> None:
    # Under full contention every tier gets its floor, then the rest goes in priority order.
    assert fill(scheduler(Tier.LOW), HIGH=50, MEDIUM=50, LOW=50) == {
        Tier.HIGH: 6,
        Tier.MEDIUM: 3,
        Tier.LOW: 1,
    }
    # Fewer chats than HIGH's floor: MEDIUM lends before LOW, which keeps its floor. Capped, MEDIUM
    # stops short of the headroom (3/4/1); preemptible, it is lent the headroom, which HIGH takes back.
    mixed = fill(scheduler(Tier.MEDIUM, Tier.LOW), HIGH=3, MEDIUM=50, LOW=50)
    assert mixed == {Tier.HIGH: 3, Tier.MEDIUM: 6, Tier.LOW: 1}
    assert fill(scheduler(), HIGH=3, MEDIUM=50, LOW=50) == {Tier.HIGH: 3, Tier.MEDIUM: 4, Tier.LOW: 1}
    assert fill(scheduler(Tier.MEDIUM, Tier.LOW), MEDIUM=50, LOW=50) == {
        Tier.HIGH: 0,
        Tier.MEDIUM: 9,
        Tier.LOW: 1,
    }


def test_a_start_past_the_ceiling_or_into_the_headroom_is_lent_and_one_within_the_share_is_not() -> None:
    lending = scheduler(Tier.MEDIUM, Tier.LOW)
    waiting = Demand({Tier.HIGH: 0, Tier.MEDIUM: 50, Tier.LOW: 50}, dict.fromkeys(Tier))
    # MEDIUM 4 (within its ceiling of 8, 2 slots above the headroom left): its own share.
    assert lending.next_start({Tier.HIGH: 3, Tier.MEDIUM: 3, Tier.LOW: 1}, waiting, 10) == (
        Tier.MEDIUM,
        False,
    )
    # The next would leave HIGH one slot: lent, though MEDIUM is within its ceiling.
    assert lending.next_start({Tier.HIGH: 3, Tier.MEDIUM: 4, Tier.LOW: 1}, waiting, 10) == (Tier.MEDIUM, True)
    # Two lent calls count as HIGH's headroom: MEDIUM within its share may start again.
    with_lent = Demand(waiting.waiting, waiting.oldest_enqueued_ms, lent={Tier.LOW: 2})
    assert lending.next_start({Tier.HIGH: 1, Tier.MEDIUM: 4, Tier.LOW: 3}, with_lent, 10) == (
        Tier.MEDIUM,
        False,
    )
    # LOW past its ceiling of 1: lent.
    only_low = Demand({Tier.HIGH: 0, Tier.MEDIUM: 0, Tier.LOW: 50}, dict.fromkeys(Tier))
    assert lending.next_start({Tier.LOW: 1}, only_low, 10) == (Tier.LOW, True)
    # Capped, nothing is ever lent.
    assert scheduler().next_start({Tier.HIGH: 3, Tier.MEDIUM: 3, Tier.LOW: 1}, waiting, 10) == (
        Tier.MEDIUM,
        False,
    )


def test_the_baselines_ignore_it() -> None:
    static = build_scheduler("static", PEAK, preemptible=[Tier.LOW])
    used = dict.fromkeys(Tier, 0)
    waiting = {Tier.HIGH: 0, Tier.MEDIUM: 0, Tier.LOW: 50}
    while (tier := static.next_tier(used, Demand(waiting, dict.fromkeys(Tier)), 10)) is not None:
        used[tier] += 1
    assert used[Tier.LOW] == 1


def a_low(tenant: str, preemptions: int, offset: int) -> Work:
    work = Work(a_request("LOW", tenant=tenant), Tier.LOW, PartitionOffsets("unit-low", 0), offset)
    work.preemptions = preemptions
    return work


def test_a_request_preempted_max_times_is_lent_no_slot_past_its_ceiling() -> None:
    readahead = ReadAhead(promotion_age_ms=10**9)
    starts = NextStart(readahead, scheduler(Tier.LOW), max_preemptions=3)
    worn = a_low("a", 3, 0)
    readahead.add(worn)
    # LOW holds its ceiling (1 at peak): the slot past it is not lent to a request preempted 3 times.
    assert starts.tier({Tier.LOW: 1}, 10) is None
    # A fresh request of another tenant may borrow it, and is the one taken.
    fresh = a_low("b", 0, 1)
    readahead.add(fresh)
    assert starts.tier({Tier.LOW: 1}, 10) is Tier.LOW
    taken = starts.take(Tier.LOW, 0)
    assert taken is not None and taken.work is fresh
    # Within its tier's share it starts as any other.
    assert starts.tier({}, 10) is Tier.LOW
    taken = starts.take(Tier.LOW, 0)
    assert taken is not None and taken.work is worn


def test_a_tier_that_is_not_preemptible_takes_the_headroom_while_a_tier_below_holds_lent_slots() -> None:
    # LOW behind a preemptible backend, MEDIUM not, at its floor (3): LOW lent 5 slots past its
    # ceiling of 1, one slot free.
    lending = scheduler(Tier.LOW)
    assert lending.next_tier({Tier.MEDIUM: 3, Tier.LOW: 6}, Demand.counts(MEDIUM=3), 10) is Tier.MEDIUM
    # With nothing lent below it, MEDIUM keeps out of the headroom as before.
    assert lending.next_tier({Tier.HIGH: 5, Tier.MEDIUM: 3, Tier.LOW: 1}, Demand.counts(MEDIUM=3), 10) is None
