"""The circuit breaker per backend (services/dispatcher/circuit.py): when it opens, how one probe
at a time tries the backend again, and what a probe's answer does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferq.dispatcher.circuit import BreakerPolicy, CallEnd, CircuitBreaker, State

POLICY = BreakerPolicy(failures=3, storm_429=4, storm_window_ms=1_000, open_ms=5_000)


def failing(breaker: CircuitBreaker, times: int, now_ms: int = 0, end: CallEnd = CallEnd.FAILED) -> None:
    for _ in range(times):
        probe = breaker.started(now_ms)
        breaker.ended(end, now_ms, probe=probe)


def test_failures_in_a_row_open_it_and_an_answer_between_them_resets_the_count():
    breaker = CircuitBreaker(POLICY)
    failing(breaker, 2)
    breaker.ended(CallEnd.ANSWERED, 0)
    failing(breaker, 2)
    assert breaker.state(0) is State.CLOSED and breaker.admits(0)
    failing(breaker, 1)
    assert breaker.state(0) is State.OPEN
    assert not breaker.admits(4_999)
    assert breaker.reason == "3 failures in a row"


def test_a_4xx_other_than_429_is_an_answer_and_a_deadline_cut_counts_for_nothing():
    breaker = CircuitBreaker(POLICY)
    for _ in range(10):
        failing(breaker, 2)
        breaker.ended(CallEnd.NEUTRAL, 0)
        breaker.ended(CallEnd.ANSWERED, 0)
    assert breaker.state(0) is State.CLOSED


def test_a_429_storm_within_the_window_opens_it_but_429s_spread_out_do_not():
    spread = CircuitBreaker(POLICY)
    for i in range(20):
        failing(spread, 1, now_ms=i * 400, end=CallEnd.RATE_LIMITED)  # 3 within any second
    assert spread.state(8_000) is State.CLOSED
    storm = CircuitBreaker(POLICY)
    failing(storm, 4, now_ms=100, end=CallEnd.RATE_LIMITED)
    assert storm.state(100) is State.OPEN
    assert storm.reason == "4 answers 429 within 1 s"


def test_after_the_pause_one_probe_at_a_time_and_its_answer_closes_it():
    breaker = CircuitBreaker(POLICY)
    failing(breaker, 3, now_ms=1_000)
    assert not breaker.admits(5_999)
    assert breaker.state(6_000) is State.HALF_OPEN
    assert breaker.admits(6_000)
    breaker.started(6_000)
    assert not breaker.admits(6_001), "a second call while the probe is out"
    assert breaker.ended(CallEnd.ANSWERED, 6_500) is State.CLOSED
    assert breaker.admits(6_500)


def test_a_failed_probe_opens_it_for_another_pause():
    breaker = CircuitBreaker(POLICY)
    failing(breaker, 3, now_ms=0)
    breaker.started(5_000)
    assert breaker.ended(CallEnd.FAILED, 5_200) is State.OPEN
    assert not breaker.admits(10_199)
    assert breaker.admits(10_200)
    assert breaker.reason == "the probe failed"


def test_a_probe_the_deadline_cut_lets_the_next_call_probe():
    breaker = CircuitBreaker(POLICY)
    failing(breaker, 3, now_ms=0)
    assert breaker.started(5_000)
    assert breaker.ended(CallEnd.NEUTRAL, 5_100, probe=True) is State.HALF_OPEN
    assert breaker.admits(5_100)


def test_a_call_from_before_the_pause_telling_nothing_does_not_let_a_second_probe_go():
    breaker = CircuitBreaker(POLICY)
    assert not breaker.started(0)  # a slow call, started while closed
    failing(breaker, 3, now_ms=0)
    assert breaker.started(5_000)  # the probe
    # The slow call, cut by its deadline, ends while the probe is out.
    assert breaker.ended(CallEnd.NEUTRAL, 5_100) is State.HALF_OPEN
    assert not breaker.admits(5_100), "a second probe while the first is out"


def test_calls_started_before_it_opened_ending_while_open_change_nothing():
    breaker = CircuitBreaker(POLICY)
    failing(breaker, 3, now_ms=0)
    breaker.ended(CallEnd.ANSWERED, 100)  # a slow call from before, answering late
    assert breaker.state(100) is State.OPEN and not breaker.admits(100)


@pytest.mark.parametrize(
    "bad",
    [
        {"failures": 0},
        {"storm_429": 0},
        {"storm_window_ms": 0},
        {"open_ms": -1},
    ],
)
def test_a_policy_out_of_range_is_refused(bad):
    with pytest.raises(ValueError, match="positive"):
        BreakerPolicy(**bad)


@given(st.lists(st.tuples(st.sampled_from(list(CallEnd)), st.integers(0, 3_000)), max_size=80))
def test_never_more_than_one_probe_out_and_open_means_no_call(events):
    breaker = CircuitBreaker(POLICY)
    now = 0
    probes_out = 0
    for end, step in events:
        now += step
        state = breaker.state(now)
        if state is State.OPEN:
            assert not breaker.admits(now)
        if breaker.admits(now):
            was_half_open = state is State.HALF_OPEN
            probe = breaker.started(now)
            assert probe is was_half_open
            probes_out += was_half_open
            assert probes_out <= 1
            breaker.ended(end, now, probe=probe)
            probes_out = 0
