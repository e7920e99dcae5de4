"""The preemption decision (pure): which call gives its slot back to a higher tier. Property tests
over random running calls and waiting work: never a call within its tier's share (only one lent at
its start, or of a tier past its ceiling), never below a floor, never HIGH, never
a call that may not be cancelled, never more cancellations than slots needed; the youngest."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import example, given
from hypothesis import strategies as st

from inferq.dispatcher.policies import Demand, TieredScheduler
from inferq.dispatcher.preemption import RunningCall, ceiling_of, choose_victim
from inferq.dispatcher.schedule import Schedule, Window
from inferq.messaging.tiers import Tier

BUDGET = 10
PEAK = Schedule.default(BUDGET).pin("peak").window_at(None)  # type: ignore[arg-type]
MAX = 3


def call(key: int, tier: Tier, started_ms: int, **flags: object) -> RunningCall:
    return RunningCall(key, tier, started_ms, backend_preemptible=True, **flags)  # type: ignore[arg-type]


def in_use_of(calls: list[RunningCall]) -> dict[Tier, int]:
    return dict(Counter(c.tier for c in calls))


def decide(
    calls: list[RunningCall], window: Window = PEAK, budget: int = BUDGET, **waiting: int
) -> RunningCall | None:
    return choose_victim(
        calls,
        in_use=in_use_of(calls),
        waiting={t: waiting.get(t.value, 0) for t in Tier},
        window=window,
        budget=budget,
        max_preemptions=MAX,
    )


def full_of_low(n_high: int = 0) -> list[RunningCall]:
    """The peak window (LOW's ceiling 1) with LOW lent every other slot, started at 0, 1, 2..."""
    highs = [call(100 + i, Tier.HIGH, i) for i in range(n_high)]
    return highs + [call(i, Tier.LOW, i) for i in range(BUDGET - n_high)]


def test_a_waiting_chat_takes_the_youngest_lent_brief() -> None:
    victim = decide(full_of_low(), HIGH=1)
    assert victim is not None and victim.key == BUDGET - 1


def test_nothing_is_cancelled_while_a_slot_is_free_or_nothing_higher_waits() -> None:
    assert decide(full_of_low()[:-1], HIGH=1) is None
    assert decide(full_of_low(), LOW=5) is None


def test_a_call_being_cancelled_counts_as_the_free_slot() -> None:
    calls = full_of_low()
    calls[-1] = call(BUDGET - 1, Tier.LOW, BUDGET - 1, cancelling=True)
    assert decide(calls, HIGH=1) is None
    second = decide(calls, HIGH=2)
    assert second is not None and second.key == BUDGET - 2


def test_calls_that_may_not_be_cancelled_are_passed_over() -> None:
    calls = full_of_low()
    calls[9] = call(9, Tier.LOW, 9, chunks_sent=True)
    calls[8] = call(8, Tier.LOW, 8, answered=True)
    calls[7] = call(7, Tier.LOW, 7, preemptions=MAX)
    calls[6] = RunningCall(6, Tier.LOW, 6, backend_preemptible=False)
    victim = decide(calls, HIGH=1)
    assert victim is not None and victim.key == 5


def test_a_tier_at_its_ceiling_keeps_its_calls() -> None:
    # MEDIUM at its peak ceiling (8) and LOW at its own (1) with HIGH holding one: nothing lent.
    calls = [call(0, Tier.HIGH, 0)] + [call(i, Tier.MEDIUM, i) for i in range(1, 9)] + [call(9, Tier.LOW, 9)]
    assert decide(calls, HIGH=3) is None


def test_medium_below_its_ceiling_takes_a_lent_brief_but_never_a_chat() -> None:
    calls = [call(i, Tier.HIGH, 100 + i) for i in range(5)] + [call(10 + i, Tier.LOW, i) for i in range(5)]
    victim = decide(calls, MEDIUM=2)
    assert victim is not None and victim.tier is Tier.LOW and victim.key == 14
    only_chats = [call(i, Tier.HIGH, i) for i in range(BUDGET)]
    assert decide(only_chats, MEDIUM=2) is None


TIER = st.sampled_from(list(Tier))
CALLS = st.lists(
    st.builds(
        lambda tier, started, pre, streamed, answered, preempted, cancelling, lent: (
            tier,
            started,
            pre,
            streamed,
            answered,
            preempted,
            cancelling,
            lent,
        ),
        TIER,
        st.integers(0, 1000),
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.integers(0, MAX + 1),
        st.booleans(),
        st.booleans(),
    ),
    max_size=BUDGET,
)


@given(
    CALLS,
    st.integers(0, 5),
    st.integers(0, 5),
    st.integers(0, 5),
    st.sampled_from(["peak", "normal", "night"]),
    st.integers(1, BUDGET),
)
def test_the_victim_is_always_one_that_may_go(
    rows: list[tuple[Tier, int, bool, bool, bool, int, bool, bool]],
    high: int,
    medium: int,
    low: int,
    window_name: str,
    budget: int,
) -> None:
    calls = [
        RunningCall(i, tier, started, pre, preempted, streamed, answered, cancelling, lent)
        for i, (tier, started, pre, streamed, answered, preempted, cancelling, lent) in enumerate(rows)
    ]
    schedule = Schedule.default(BUDGET).pin(window_name)
    window = schedule.window_at(None).squeezed(BUDGET - budget)  # type: ignore[arg-type]
    in_use = in_use_of(calls)
    victim = decide(calls, window, budget, HIGH=high, MEDIUM=medium, LOW=low)
    if victim is None:
        return
    live = in_use[victim.tier] - sum(1 for c in calls if c.cancelling and c.tier is victim.tier)
    # Never HIGH, never within its tier's share (lent at its start, or its tier past its ceiling),
    # never below its tier's floor, never one that may not be cancelled.
    assert victim.tier is not Tier.HIGH
    assert victim.lent or live - 1 >= ceiling_of(window, victim.tier, budget)
    assert live - 1 >= window.limits[victim.tier].floor
    assert victim.backend_preemptible and not victim.chunks_sent and not victim.answered
    assert not victim.cancelling and victim.preemptions < MAX
    # A higher tier waits and no slot is free for it, counting those being freed.
    assert high > 0 or (medium > 0 and victim.tier is Tier.LOW)
    freeing = sum(1 for c in calls if c.cancelling)
    assert budget - len(calls) + freeing < high + medium
    # The youngest of the calls of its kind.
    rivals = [
        c
        for c in calls
        if c.tier is victim.tier
        and c.backend_preemptible
        and not (c.chunks_sent or c.answered or c.cancelling)
        and c.preemptions < MAX
        and (c.lent or live - 1 >= ceiling_of(window, victim.tier, budget))
    ]
    assert victim.started_ms == max(c.started_ms for c in rivals)


@given(st.integers(1, 6), st.integers(0, BUDGET))
def test_cancellations_never_outnumber_the_slots_needed(high: int, n_high: int) -> None:
    """Cancelling one at a time (each slot still held while it is freed), as the dispatcher does:
    at most as many as HIGH's waiting requests, and every one a lent LOW call."""
    calls = full_of_low(n_high)
    cancelled = 0
    while (victim := decide(calls, HIGH=high)) is not None:
        assert victim.tier is Tier.LOW
        calls = [
            call(c.key, c.tier, c.started_ms, cancelling=True) if c.key == victim.key else c for c in calls
        ]
        cancelled += 1
        assert cancelled <= high
    lent = BUDGET - n_high - ceiling_of(PEAK, Tier.LOW, BUDGET)
    assert cancelled == min(high, max(0, lent))


EVENT = st.tuples(st.sampled_from(["arrive", "answer", "freed"]), TIER, st.integers(0, 1000))


@given(st.lists(EVENT, max_size=80), st.sampled_from(["peak", "normal", "night"]))
@example(
    [("arrive", Tier.LOW, 0)] * BUDGET + [("arrive", Tier.HIGH, 0)] * 3 + [("freed", Tier.LOW, 0)], "peak"
)
# A chat ends on its own while a lent brief is being cancelled for the next chat: that chat takes
# the slot freed first, and the cancellation, decided when it was needed, is in progress for nobody.
@example(
    [("arrive", Tier.HIGH, 0)] * 8
    + [("arrive", Tier.LOW, 0)] * 2
    + [("arrive", Tier.HIGH, 0), ("answer", Tier.HIGH, 0)],
    "peak",
)
def test_with_the_scheduler_the_budget_holds_while_slots_are_being_freed(
    events: list[tuple[str, Tier, int]], window_name: str
) -> None:
    """The scheduler lending every idle slot to LOW and MEDIUM and the decision taking them back,
    one event at a time (an arrival, an answer, a cancelled call's slot coming back late): the
    calls never exceed the budget, never is HIGH or a call within its share cancelled, and when a
    call is cancelled, the calls being cancelled do not outnumber the higher tiers' waiting
    requests. (Later they may: a call that ends on its own frees a slot the waiting request takes
    first, and a cancellation cannot be undone.)"""
    schedule = Schedule.default(BUDGET).pin(window_name)
    window = schedule.window_at(None)  # type: ignore[arg-type]
    policy = TieredScheduler(schedule, preemptible=(Tier.MEDIUM, Tier.LOW))
    waiting = dict.fromkeys(Tier, 0)
    calls: list[RunningCall] = []
    clock = 0
    for kind, tier, pick in events:
        clock += 1
        live = [c for c in calls if not c.cancelling]
        if kind == "arrive":
            waiting[tier] += 1
        elif kind == "answer" and live:
            calls.remove(live[pick % len(live)])
        elif kind == "freed" and len(live) < len(calls):
            cancelling = [c for c in calls if c.cancelling]
            gone = cancelling[pick % len(cancelling)]
            calls.remove(gone)
            waiting[gone.tier] += 1  # it waits again
        while True:
            in_use = in_use_of(calls)
            lent = dict(Counter(c.tier for c in calls if c.lent))
            start = policy.next_start(in_use, Demand(dict(waiting), dict.fromkeys(Tier), lent=lent), BUDGET)
            if start is not None:
                started, was_lent = start
                waiting[started] -= 1
                calls.append(call(clock * 100 + len(calls), started, clock, lent=was_lent))
                continue
            victim = choose_victim(
                calls, in_use=in_use, waiting=waiting, window=window, budget=BUDGET, max_preemptions=MAX
            )
            if victim is None:
                break
            assert victim.tier is not Tier.HIGH
            live_of_tier = sum(1 for c in calls if c.tier is victim.tier and not c.cancelling)
            # Lent at its start (past its ceiling or into the headroom), or its tier past its ceiling.
            assert victim.lent or live_of_tier > ceiling_of(window, victim.tier, BUDGET)
            assert live_of_tier > window.limits[victim.tier].floor
            calls = [replace(c, cancelling=True) if c.key == victim.key else c for c in calls]
            assert sum(1 for c in calls if c.cancelling) <= waiting[Tier.HIGH] + waiting[Tier.MEDIUM]
        assert len(calls) <= BUDGET
