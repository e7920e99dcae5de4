"""Forecast lending (issue 14): a tier borrows past its ceiling only while the chat forecast leaves
room. Pure: the forecast and the read-ahead are fed epoch ms by the test (a manual clock)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferq.dispatcher.call_times import CallTimes
from inferq.dispatcher.forecast import ArrivalForecast, ForecastPolicy, forecast_lending
from inferq.dispatcher.next_start import NextStart
from inferq.dispatcher.policies import Demand, TieredScheduler
from inferq.dispatcher.readahead import ReadAhead
from inferq.dispatcher.schedule import Schedule
from inferq.dispatcher.settings import DispatcherSettings
from inferq.dispatcher.work import Work
from inferq.messaging.tiers import Tier
from inferq.tools.simulation.simulate import sim_config
from tests.support.work import a_work

H, M, L = Tier.HIGH, Tier.MEDIUM, Tier.LOW
TYPICAL_MS = {H: 50.0, M: 280.0, L: 500.0}
BUDGET = 10
_ids = iter(range(10**9))


def work(tier: Tier, created: int) -> Work:
    return a_work(tier, next(_ids), created_at_ms=created, expire_at_ms=created + 10**9)


def setup(*, lending: bool = True) -> tuple[NextStart, ReadAhead]:
    calls = CallTimes(TYPICAL_MS)
    readahead = ReadAhead(
        promotion_age_ms=10**9, calls=calls, lending=forecast_lending(calls) if lending else None
    )
    return NextStart(readahead, TieredScheduler(Schedule.default(budget=BUDGET).pin("peak"))), readahead


def start_all(decide: NextStart, in_use: dict[Tier, int], now_ms: int) -> list[Work]:
    started = []
    for _ in range(BUDGET + 1):
        tier = decide.tier(in_use, BUDGET, now_ms)
        if tier is None:
            break
        start = decide.take(tier, now_ms)
        assert start is not None
        in_use[tier] += 1
        started.append(start.work)
    return started


def briefs_started(chats_every_ms: int | None) -> int:
    """Chats (one every `chats_every_ms`, None: none) for 2 s, each answered in its 50 ms, then 20
    briefs at 2 s with every slot free: how many start."""
    decide, readahead = setup()
    readahead.add(work(M, 0))  # the forecast starts observing at the first arrival
    (analysis,) = start_all(decide, dict.fromkeys(Tier, 0), 0)
    decide.ended(analysis, 280)
    if chats_every_ms is not None:
        for now in range(0, 2000, chats_every_ms):
            readahead.add(work(H, now))
            chat = decide.take(H, now)
            assert chat is not None
            decide.ended(chat.work, now + 50)
    for _ in range(20):
        readahead.add(work(L, 2000))
    return len(start_all(decide, dict.fromkeys(Tier, 0), 2000))


def test_lends_past_the_ceiling_when_no_chat_is_forecast() -> None:
    # Peak: LOW's ceiling is 1, and MEDIUM and LOW keep 2 slots free; with no chat in 2 s, briefs
    # take every slot but the HIGH headroom, which lending never takes (a cluster of chats starts
    # unforeseen, and a brief holds its slot for ten chats).
    assert briefs_started(None) == BUDGET - 2


def test_lending_stops_when_chat_demand_is_forecast() -> None:
    # A chat every 5 ms asks for ~10 slots of 50 ms calls at once: briefs keep to the seed's ceiling.
    assert briefs_started(5) == 1
    # Every 10 ms, 5 at once: briefs borrow, but 5 slots and a margin (z = 1) stay free for chat.
    assert 1 < briefs_started(10) < BUDGET - 5


def test_moderate_chat_leaves_a_reserve() -> None:
    lent = briefs_started(25)  # two slots of chat on average: some lent, not all
    assert 1 < lent < BUDGET - 1


def test_without_forecast_data_the_ceilings_hold() -> None:
    decide, readahead = setup()
    for _ in range(20):
        readahead.add(work(L, 0))
    assert len(start_all(decide, dict.fromkeys(Tier, 0), 0)) == 1


def test_lending_off_keeps_the_ceilings() -> None:
    decide, readahead = setup(lending=False)
    readahead.add(work(M, 0))
    for _ in range(20):
        readahead.add(work(L, 5000))
    assert len(start_all(decide, {H: 0, M: 0, L: 0}, 5000)) == 2  # the MEDIUM and LOW's one


def test_waiting_higher_tier_is_never_lent_over() -> None:
    calls = CallTimes(TYPICAL_MS)
    lending = forecast_lending(calls)
    lending.arrived(M, 0)
    outlook = lending.at(5000)
    assert outlook.may_lend(L, free=5, waiting={H: 0, M: 0, L: 3})
    assert not outlook.may_lend(L, free=5, waiting={H: 1, M: 0, L: 3})
    assert not outlook.may_lend(L, free=5, waiting={H: 0, M: 1, L: 3})
    assert not outlook.may_lend(L, free=0, waiting={H: 0, M: 0, L: 3})


def test_the_forecast_decays_through_quiet_intervals() -> None:
    forecast = ArrivalForecast(TYPICAL_MS, ForecastPolicy(weight=0.2))
    for at in range(0, 1000, 10):
        forecast.arrived(H, at)
    busy = forecast.upper(H, 50, 1000)
    assert busy > 3
    assert forecast.upper(H, 50, 5000) < 0.1 * busy


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(list(Tier)), st.integers(0, 400), st.booleans()),
        min_size=1,
        max_size=120,
    ),
    st.integers(1, BUDGET),
)
def test_never_over_the_budget_and_floors_first(events: list[tuple[Tier, int, bool]], budget: int) -> None:
    """Arrivals, starts and ends in any order: the budget holds, a tier below its floor with work
    waiting is served first (but for the headroom, which it leaves to HIGH while a tier below
    holds borrowed slots), the HIGH headroom goes to MEDIUM or LOW only as a floor while no tier
    below holds borrowed slots, and the same events give the same starts."""

    def replay() -> list[tuple[int, Tier]]:
        calls = CallTimes(TYPICAL_MS)
        readahead = ReadAhead(promotion_age_ms=10**9, calls=calls, lending=forecast_lending(calls))
        schedule = Schedule.default(budget=budget).pin("peak")
        decide = NextStart(readahead, TieredScheduler(schedule))
        window = schedule.window_at(None)  # type: ignore[arg-type]
        floors = {t: window.limits[t].floor for t in Tier}
        ceilings = {t: window.limits[t].ceiling for t in Tier}
        headroom = min(window.high_headroom, budget - 1)
        in_use = dict.fromkeys(Tier, 0)
        running: list[tuple[Work, Tier]] = []
        now, log = 0, []
        for tier, gap, end_one in events:
            now += gap
            readahead.add(work(tier, now))
            if end_one and running:
                done, as_tier = running.pop(0)
                in_use[as_tier] -= 1
                decide.ended(done, now)
            for _ in range(budget + 1):
                waiting = readahead.demand().waiting
                below_floor = [t for t in Tier if waiting[t] > 0 and in_use[t] < floors[t]]
                chosen = decide.tier(in_use, budget, now)
                if chosen is None:
                    break
                if below_floor and chosen not in below_floor:
                    # Held out of the headroom by borrowed slots below them: only HIGH takes it.
                    assert chosen is H and budget - sum(in_use.values()) - 1 < headroom
                    assert all(
                        any(in_use[t] > ceilings[t] for t in Tier if t.rank > b.rank) for b in below_floor
                    )
                if chosen is not H and budget - sum(in_use.values()) - 1 < headroom:
                    assert chosen in below_floor
                    assert all(in_use[t] <= ceilings[t] for t in Tier if t.rank > chosen.rank)
                start = decide.take(chosen, now)
                assert start is not None
                in_use[chosen] += 1
                running.append((start.work, chosen))
                log.append((now, chosen))
                assert sum(in_use.values()) <= budget
        return log

    assert replay() == replay()


def test_a_burst_in_progress_holds_the_slots_back() -> None:
    """A quiet minute, then four chats within 10 ms: briefs may not take the slots they will need."""
    calls = CallTimes(TYPICAL_MS)
    lending = forecast_lending(calls)
    lending.arrived(M, 0)
    quiet = lending.at(60_000)
    assert quiet.may_lend(L, free=3, waiting={})
    for at in range(60_000, 60_010, 3):
        lending.arrived(H, at)
    burst = lending.at(60_010)
    assert not burst.may_lend(L, free=3, waiting={})
    assert lending.at(65_000).may_lend(L, free=3, waiting={})  # it fades once the burst is over


def test_a_floor_waits_for_a_borrowed_slot_rather_than_take_the_headroom() -> None:
    """Briefs borrowed every slot but the headroom; an analysis (MEDIUM, below its floor of 3) gets
    the next brief's slot as it ends, not the headroom, which a chat still finds free."""
    decide, readahead = setup()
    readahead.add(work(M, 0))
    (analysis,) = start_all(decide, dict.fromkeys(Tier, 0), 0)
    decide.ended(analysis, 280)
    in_use = dict.fromkeys(Tier, 0)
    for _ in range(20):
        readahead.add(work(L, 2000))
    briefs = start_all(decide, in_use, 2000)
    assert in_use[L] == BUDGET - 2
    readahead.add(work(M, 2010))
    assert start_all(decide, in_use, 2010) == []  # the two free slots are the headroom
    readahead.add(work(H, 2020))
    (chat,) = start_all(decide, in_use, 2020)
    assert chat.tier is H
    in_use[H] -= 1
    decide.ended(chat, 2070)
    assert start_all(decide, in_use, 2070) == []
    in_use[L] -= 1
    decide.ended(briefs[0], 2500)
    assert [w.tier for w in start_all(decide, in_use, 2500)] == [M]


@pytest.mark.parametrize("lending", [True, False])
def test_without_lending_a_floor_still_takes_the_headroom(lending: bool) -> None:
    """The seed's rule: MEDIUM below its floor takes a slot even from the headroom, however many
    slots LOW holds (after a window change, say); only under lending does it wait for LOW's."""
    scheduler = TieredScheduler(Schedule.default(budget=BUDGET).pin("peak"))
    in_use = {H: 0, M: 0, L: 8}  # LOW's peak ceiling is 1
    waiting = Demand.counts(MEDIUM=1)
    outlook = forecast_lending(CallTimes(TYPICAL_MS)).at(0) if lending else None
    demand = Demand(waiting.waiting, waiting.oldest_enqueued_ms, outlook)
    assert scheduler.next_tier(in_use, demand, BUDGET) == (None if lending else M)
    in_use[L] = 1  # nothing borrowed: the floor is served at once either way
    assert scheduler.next_tier(in_use, demand, BUDGET) == M


@pytest.mark.parametrize("bad", [{"weight": 0.0}, {"recent_weight": 2.0}, {"z": -1.0}, {"min_free": -1}])
def test_policy_rejects_nonsense(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ForecastPolicy(**bad)  # type: ignore[arg-type]


def test_forecast_lending_is_off_by_default_and_the_simulator_follows_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Off by default (issue 22): a lent call cannot be taken back, and on an analysis surge it cost
    # analyses their deadlines that the seed's ceilings kept (docs/benchmarks/scheduling.md).
    monkeypatch.delenv("INFERQ_DISPATCHER_FORECAST_LENDING", raising=False)
    monkeypatch.delenv("INFERQ_DISPATCHER_LEARN_LATENCY", raising=False)
    settings = DispatcherSettings()
    assert (settings.forecast_lending, settings.learn_latency) == (False, True)
    assert sim_config(settings).forecast_lending is False
    monkeypatch.setenv("INFERQ_DISPATCHER_FORECAST_LENDING", "true")
    assert sim_config(DispatcherSettings()).forecast_lending is True
