"""The pure scheduling decision: no Kafka, no network, no sleep; the clock is injected."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferq.dispatcher.policies import Demand, FifoScheduler, StaticScheduler, TieredScheduler
from inferq.dispatcher.schedule import Schedule, ScheduleError, TierLimits, Window
from inferq.messaging.tiers import Tier

H, M, L = Tier.HIGH, Tier.MEDIUM, Tier.LOW


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 11, 29, hour, minute, tzinfo=UTC)


def fill(scheduler, demand: Demand, in_use=None, budget=10):
    """Start requests until the scheduler says no; returns tokens in use per tier."""
    in_use = dict.fromkeys(Tier, 0) | (in_use or {})
    waiting = dict(demand.waiting)
    while (
        tier := scheduler.next_tier(in_use, Demand(waiting, demand.oldest_enqueued_ms), budget)
    ) is not None:
        in_use[tier] += 1
        waiting[tier] -= 1
    return in_use


def tiered(hour: int, **kw) -> TieredScheduler:
    return TieredScheduler(Schedule.default(**kw), clock=lambda: at(hour))


def test_peak_under_full_contention_gives_the_seeds_split():
    assert fill(tiered(21), Demand.counts(HIGH=50, MEDIUM=50, LOW=50)) == {H: 6, M: 3, L: 1}


def test_normal_hours_under_full_contention():
    assert fill(tiered(10), Demand.counts(HIGH=50, MEDIUM=50, LOW=50)) == {H: 5, M: 3, L: 2}


def test_night_low_gets_eight_and_others_keep_a_slot():
    assert fill(tiered(3), Demand.counts(HIGH=50, MEDIUM=50, LOW=50)) == {H: 1, M: 1, L: 8}


def test_night_low_takes_the_whole_budget_when_nothing_else_waits():
    assert fill(tiered(3), Demand.counts(LOW=500)) == {H: 0, M: 0, L: 10}


def test_idle_high_slots_are_lent_to_medium_except_the_headroom():
    # The seed idles 4 of HIGH's 6 slots here; inferq lends them, keeping 2 free for a chat burst.
    assert fill(tiered(21), Demand.counts(HIGH=2, MEDIUM=50)) == {H: 2, M: 6, L: 0}
    assert fill(tiered(21), Demand.counts(MEDIUM=50)) == {H: 0, M: 8, L: 0}


def test_high_may_use_the_whole_budget():
    assert fill(tiered(21), Demand.counts(HIGH=50)) == {H: 10, M: 0, L: 0}


def test_low_is_capped_at_peak_unless_the_user_lifts_it():
    assert fill(tiered(21), Demand.counts(LOW=500)) == {H: 0, M: 0, L: 1}
    default = Schedule.default()
    peak = next(w for w in default.windows if w.name == "peak")
    lifted_limits = dict(peak.limits) | {L: TierLimits(1, 8)}
    windows = tuple(
        Window(w.name, w.start_hour, w.end_hour, lifted_limits, w.high_headroom) if w is peak else w
        for w in default.windows
    )
    lifted = TieredScheduler(Schedule(10, windows), clock=lambda: at(21))
    assert fill(lifted, Demand.counts(LOW=500)) == {H: 0, M: 0, L: 8}
    assert fill(lifted, Demand.counts(HIGH=3, LOW=500)) == {H: 3, M: 0, L: 5}


def test_a_tier_below_its_floor_gets_the_next_free_slot_before_anyone_borrows():
    # MEDIUM borrowed everything it may while HIGH was quiet; now chat arrives.
    sched = tiered(21)
    in_use = {H: 0, M: 8, L: 0}
    assert sched.next_tier(in_use, Demand.counts(HIGH=5, MEDIUM=20), 10) is H
    # A call finished: MEDIUM is above its floor, HIGH below: HIGH first.
    assert sched.next_tier({H: 2, M: 7, L: 0}, Demand.counts(HIGH=5, MEDIUM=20), 10) is H
    # LOW below its floor of 1 gets a slot even though HIGH has waiting work above its floor.
    assert sched.next_tier({H: 6, M: 3, L: 0}, Demand.counts(HIGH=5, LOW=1), 10) is L
    assert sched.next_tier({H: 7, M: 3, L: 0}, Demand.counts(HIGH=5, LOW=1), 10) is None


def test_all_busy_and_empty_tiers():
    sched = tiered(12)
    assert sched.next_tier({H: 5, M: 3, L: 2}, Demand.counts(HIGH=9), 10) is None
    assert sched.next_tier(dict.fromkeys(Tier, 0), Demand.counts(), 10) is None


def test_window_boundaries():
    demand = Demand.counts(HIGH=50, MEDIUM=50, LOW=50)
    for hour, minute, expected in [
        (19, 59, {H: 5, M: 3, L: 2}),
        (20, 0, {H: 6, M: 3, L: 1}),
        (21, 59, {H: 6, M: 3, L: 1}),
        (22, 0, {H: 5, M: 3, L: 2}),
        (23, 59, {H: 5, M: 3, L: 2}),
        (0, 0, {H: 1, M: 1, L: 8}),
        (5, 59, {H: 1, M: 1, L: 8}),
        (6, 0, {H: 5, M: 3, L: 2}),
    ]:
        sched = TieredScheduler(Schedule.default(), clock=lambda h=hour, m=minute: at(h, m))
        assert fill(sched, demand) == expected, (hour, minute)


def test_hours_are_local_to_the_schedule_timezone():
    # 12:30 UTC is 20:30 in a UTC+8 zone (no DST): the peak window.
    shanghai = Schedule.default(timezone="Asia/Shanghai")
    sched = TieredScheduler(shanghai, clock=lambda: datetime(2026, 11, 29, 12, 30, tzinfo=UTC))
    assert sched.window().name == "peak"
    fixed = datetime(2026, 11, 29, 20, 30, tzinfo=timezone(timedelta(hours=8)))
    assert TieredScheduler(shanghai, clock=lambda: fixed).window().name == "peak"


def test_pinned_window_ignores_the_clock():
    assert TieredScheduler(Schedule.default().pin("peak"), clock=lambda: at(3)).window().name == "peak"


def test_reduced_budget_squeezes_low_then_medium_high_last():
    sched = tiered(21)
    demand = Demand.counts(HIGH=50, MEDIUM=50, LOW=50)
    assert fill(sched, demand, budget=9) == {H: 6, M: 3, L: 0}
    assert fill(sched, demand, budget=7) == {H: 6, M: 1, L: 0}
    assert fill(sched, demand, budget=4) == {H: 4, M: 0, L: 0}


def test_static_policy_is_the_seeds_hard_split():
    sched = StaticScheduler(Schedule.default(), clock=lambda: at(21))
    assert fill(sched, Demand.counts(HIGH=2, MEDIUM=50)) == {H: 2, M: 3, L: 0}


def test_fifo_serves_the_oldest_whatever_its_tier():
    sched = FifoScheduler(Schedule.default(), clock=lambda: at(21))
    demand = Demand({H: 1, M: 1, L: 1}, {H: 300, M: 200, L: 100})
    assert sched.next_tier(dict.fromkeys(Tier, 0), demand, 10) is L
    assert sched.next_tier({H: 0, M: 0, L: 10}, demand, 10) is None


@pytest.mark.parametrize(
    "change",
    [
        {"windows": ()},
        {"budget": 0},
        {"pinned": "lunch"},
    ],
)
def test_invalid_schedules_are_refused(change):
    base = Schedule.default()
    args = {"budget": base.budget, "windows": base.windows, "pinned": None} | change
    with pytest.raises(ScheduleError):
        Schedule(**args)


def test_floors_above_budget_are_refused():
    default = Schedule.default()
    with pytest.raises(ScheduleError, match="floors"):
        Schedule(budget=8, windows=default.windows)  # night floors add up to 10


@pytest.mark.parametrize("budget", [1, 2, 4, 7, 10, 25, 100])
def test_default_table_scales_with_the_budget(budget):
    schedule = Schedule.default(budget=budget)
    peak = TieredScheduler(schedule, clock=lambda: at(21))
    full = fill(peak, Demand.counts(HIGH=500, MEDIUM=500, LOW=500), budget=budget)
    assert sum(full.values()) == budget
    assert full[L] >= min(1, budget * 1 // 10)
    if budget == 100:
        assert full == {H: 60, M: 30, L: 10}


def test_schedule_file_round_trip(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(
        """
budget = 4
timezone = "UTC"
[[windows]]
name = "all"
start_hour = 0
end_hour = 24
high_headroom = 1
tiers.high = { floor = 2, ceiling = 4 }
tiers.medium = { floor = 1, ceiling = 3 }
tiers.low = { floor = 1, ceiling = 1 }
"""
    )
    schedule = Schedule.from_toml(path)
    assert fill(TieredScheduler(schedule), Demand.counts(HIGH=9, MEDIUM=9, LOW=9), budget=4) == {
        H: 2,
        M: 1,
        L: 1,
    }


# -- properties ---------------------------------------------------------------------------------

counts = st.integers(min_value=0, max_value=12)


@settings(max_examples=400, deadline=None)
@given(
    hour=st.integers(min_value=0, max_value=23),
    budget=st.integers(min_value=1, max_value=10),
    waiting=st.tuples(counts, counts, counts),
    in_use=st.tuples(counts, counts, counts),
)
def test_properties_budget_ceilings_floors_and_work_conservation(hour, budget, waiting, in_use):
    schedule = Schedule.default()
    sched = TieredScheduler(schedule, clock=lambda: at(hour))
    use = dict(zip(Tier, in_use, strict=True))
    if sum(use.values()) > budget:
        return  # the state must be reachable: the budget was never exceeded before
    demand = Demand(dict(zip(Tier, waiting, strict=True)), dict.fromkeys(Tier))
    window = sched.window().squeezed(schedule.budget - budget)
    tier = sched.next_tier(use, demand, budget)
    if tier is None:
        free = budget - sum(use.values())
        for t in Tier:
            below_floor = use[t] < window.limits[t].floor
            # Nobody with waiting work is below its floor while a slot is free.
            assert not (free > 0 and demand.waiting[t] > 0 and below_floor)
        # Work-conserving: HIGH never waits while a slot is free and it is under its ceiling.
        assert not (free > 0 and demand.waiting[H] > 0 and use[H] < window.limits[H].ceiling)
        return
    assert demand.waiting[tier] > 0
    assert sum(use.values()) + 1 <= budget  # never above the budget, not for an instant
    ceiling = window.limits[tier].ceiling
    if tier is L and window.low_idle_ceiling is not None:
        ceiling = max(ceiling, window.low_idle_ceiling)
    assert use[tier] + 1 <= ceiling
    if use[tier] >= window.limits[tier].floor:  # a borrow: every floor with waiting work is met
        assert all(not (demand.waiting[t] > 0 and use[t] < window.limits[t].floor) for t in Tier)


def test_the_shipped_schedule_file_is_the_built_in_default():
    from pathlib import Path

    shipped = Schedule.from_toml(Path(__file__).resolve().parents[2] / "infra" / "schedule.toml")
    assert shipped == Schedule.default()
