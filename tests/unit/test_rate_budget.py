"""The rate budget (requests and tokens per minute), with a manual clock: no sleep, no network."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from inferq.dispatcher.rate_budget import (
    DEFAULT_COMPLETION_TOKENS,
    HELD_MS,
    MAX_COUNT,
    MAX_UNLIMITED_MODELS,
    WINDOW_MS,
    RateBudget,
    RateHeaders,
    RateLimit,
    _ModelState,
    estimate_tokens,
    parse_count,
    parse_duration_s,
    read_headers,
)
from inferq.dispatcher.settings import DispatcherSettings, rate_limits
from inferq.messaging.tiers import Tier
from tests.support.clock import ManualClock

PEAK_SHARES = {Tier.HIGH: 0.6, Tier.MEDIUM: 0.3, Tier.LOW: 0.1}


def test_no_limit_configured_or_seen_allows_everything_and_counts_the_minutes_starts() -> None:
    clock = ManualClock(1_000_000)
    budget = RateBudget({}, clock_ms=clock)
    for _ in range(1000):
        assert budget.take("m", Tier.LOW, 10_000) is not None
    assert budget.used("m") == (1000, 10_000_000)
    assert not budget.limited("m")
    clock.advance(HELD_MS)
    assert budget.used("m") == (0, 0)


def test_the_log_of_a_model_with_no_limit_keeps_only_its_last_minute() -> None:
    clock = ManualClock(1_000_000)
    budget = RateBudget({}, clock_ms=clock)
    for _ in range(10 * 60):  # ten minutes, a start a second: nothing but `take` is called
        assert budget.take("m", Tier.LOW, 10) is not None
        clock.advance(1000)
    state = budget._models["m"]
    assert len(state.requests._entries) <= HELD_MS // 1000
    assert len(state.tokens._entries) <= HELD_MS // 1000


def test_a_limit_learned_from_the_first_answer_counts_the_calls_started_before_it() -> None:
    clock = ManualClock(1_000_000)
    budget = RateBudget({}, clock_ms=clock)
    # Ten calls of 120 estimated tokens start before any limit is known.
    charges = [budget.take("m", Tier.HIGH, 120) for _ in range(10)]
    clock.advance(500)
    # The first answer: 1200 tokens a minute, and the backend had counted only that call (114 tokens)
    # when it received it; the nine others were received after it, and are still running.
    first = charges[0]
    assert first is not None
    budget.observe(
        "m",
        read_headers(
            {
                "x-ratelimit-limit-tokens": "1200",
                "x-ratelimit-remaining-tokens": "1086",
                "x-ratelimit-reset-tokens": "59.5s",
            },
            status=200,
        ),
    )
    budget.settle(first, 114)
    # 114 + 9 x 120 = 1194 tokens in the minute: an eleventh call of 120 would be a 429.
    assert not budget.allows("m", Tier.HIGH, 120)
    assert budget.used("m") == (10, 1194)
    clock.advance(HELD_MS)
    assert budget.allows("m", Tier.HIGH, 120)


def test_starts_of_at_most_so_many_unlimited_models_are_counted_and_idle_ones_are_forgotten() -> None:
    clock = ManualClock(1_000_000)
    budget = RateBudget({"configured": RateLimit()}, clock_ms=clock)
    for n in range(MAX_UNLIMITED_MODELS + 10):
        assert budget.take(f"model-{n}", Tier.LOW, 10) is not None
    counted = [n for n in range(MAX_UNLIMITED_MODELS + 10) if budget.used(f"model-{n}") != (0, 0)]
    # The configured model is one of them, with nothing counted yet.
    assert len(counted) == MAX_UNLIMITED_MODELS - 1
    assert budget.take("late", Tier.LOW, 10) is not None
    assert budget.used("late") == (0, 0)
    # A minute on, the idle ones are forgotten and a new model's starts are counted again.
    clock.advance(HELD_MS)
    assert budget.take("late", Tier.LOW, 10) is not None
    assert budget.used("late") == (1, 10)
    assert budget.take("configured", Tier.LOW, 10) is not None
    assert budget.used("configured") == (1, 10)


def test_once_full_a_new_models_starts_do_not_each_pass_over_every_model(monkeypatch) -> None:
    clock = ManualClock(1_000_000)
    budget = RateBudget({}, clock_ms=clock)
    for n in range(MAX_UNLIMITED_MODELS):
        assert budget.take(f"model-{n}", Tier.LOW, 10) is not None
    looked_at = 0
    forgettable = _ModelState.forgettable

    def counted(state: _ModelState, now_ms: int) -> bool:
        nonlocal looked_at
        looked_at += 1
        return forgettable(state, now_ms)

    monkeypatch.setattr(_ModelState, "forgettable", counted)
    # A burst of starts of a model beyond the bound: one look over the counted models, not one each.
    for _ in range(100):
        assert budget.take("late", Tier.LOW, 10) is not None
    assert looked_at == MAX_UNLIMITED_MODELS
    assert budget.used("late") == (0, 0)
    # Once the idle ones may be forgotten, the next look (a second on at most) counts it.
    clock.advance(HELD_MS)
    assert budget.take("late", Tier.LOW, 10) is not None
    assert budget.used("late") == (1, 10)


def test_tokens_per_minute_refuses_past_the_limit_until_the_minute_moves_on() -> None:
    clock = ManualClock(1_000_000)
    budget = RateBudget({"m": RateLimit(tpm=1000)}, clock_ms=clock)
    assert budget.take("m", Tier.HIGH, 600) is not None
    assert budget.take("m", Tier.HIGH, 400) is not None
    assert budget.take("m", Tier.HIGH, 1) is None
    clock.advance(HELD_MS - 1)
    assert not budget.allows("m", Tier.HIGH, 1)
    clock.advance(1)
    assert budget.allows("m", Tier.HIGH, 1000)


def test_requests_per_minute_counts_starts() -> None:
    clock = ManualClock(1_000_000)
    budget = RateBudget({"m": RateLimit(rpm=3)}, clock_ms=clock)
    assert all(budget.take("m", Tier.HIGH, 1) is not None for _ in range(3))
    assert budget.take("m", Tier.HIGH, 1) is None
    assert budget.used("m") == (3, 3)


def test_settle_returns_the_unused_estimate_to_the_window() -> None:
    budget = RateBudget({"m": RateLimit(tpm=1000)}, clock_ms=ManualClock(1_000_000))
    charge = budget.take("m", Tier.HIGH, 900)
    assert charge is not None
    assert not budget.allows("m", Tier.HIGH, 500)
    budget.settle(charge, 300)
    assert budget.used("m") == (1, 300)
    assert budget.allows("m", Tier.HIGH, 700)


def test_settle_takes_a_larger_usage_from_the_window() -> None:
    budget = RateBudget({"m": RateLimit(tpm=1000)}, clock_ms=ManualClock(1_000_000))
    charge = budget.take("m", Tier.HIGH, 100)
    assert charge is not None
    budget.settle(charge, 950)
    assert not budget.allows("m", Tier.HIGH, 100)


def test_low_may_not_spend_the_share_high_has_not_used_yet() -> None:
    budget = RateBudget({"m": RateLimit(tpm=1000)}, floor_shares=PEAK_SHARES, clock_ms=ManualClock(1_000_000))
    # LOW may take what HIGH's 600 and MEDIUM's 300 leave: 100.
    assert budget.take("m", Tier.LOW, 100) is not None
    assert budget.take("m", Tier.LOW, 1) is None
    # MEDIUM may take up to HIGH's reserve; HIGH everything that is left.
    assert budget.take("m", Tier.MEDIUM, 300) is not None
    assert budget.take("m", Tier.MEDIUM, 1) is None
    assert budget.take("m", Tier.HIGH, 600) is not None
    assert budget.used("m") == (3, 1000)


def test_when_room_is_left_for_one_the_high_request_gets_it() -> None:
    budget = RateBudget({"m": RateLimit(tpm=1000)}, floor_shares=PEAK_SHARES, clock_ms=ManualClock(1_000_000))
    assert budget.take("m", Tier.HIGH, 900) is not None
    assert not budget.allows("m", Tier.LOW, 100)
    assert budget.allows("m", Tier.HIGH, 100)


def test_a_request_dearer_than_the_minute_starts_on_an_empty_window_only() -> None:
    clock = ManualClock(1_000_000)
    budget = RateBudget({"m": RateLimit(tpm=100)}, clock_ms=clock)
    assert budget.take("m", Tier.HIGH, 5000) is not None
    assert budget.used("m") == (1, 100)
    assert budget.take("m", Tier.HIGH, 5000) is None


def test_limits_are_learned_from_headers_and_the_lower_of_configured_and_learned_holds() -> None:
    clock = ManualClock(1_000_000)
    budget = RateBudget({"m": RateLimit(tpm=5000)}, clock_ms=clock)
    budget.observe("m", read_headers({"X-RateLimit-Limit-Tokens": "1000", "x-ratelimit-limit-requests": "2"}))
    assert budget.take("m", Tier.HIGH, 900) is not None
    assert not budget.allows("m", Tier.HIGH, 200)
    budget.observe("other", read_headers({"x-ratelimit-limit-tokens": "50"}))
    assert budget.limited("other")
    assert budget.take("other", Tier.HIGH, 50) is not None
    assert budget.take("other", Tier.HIGH, 1) is None


def test_remaining_below_our_count_holds_the_excess_until_the_backend_resets() -> None:
    clock = ManualClock(1_000_000)
    budget = RateBudget({"m": RateLimit(tpm=1000)}, clock_ms=clock)
    assert budget.take("m", Tier.HIGH, 100) is not None
    # Another client on the same key: the backend counts 900 used, resetting in 2 s.
    budget.observe(
        "m", read_headers({"x-ratelimit-remaining-tokens": "100", "x-ratelimit-reset-tokens": "2s"})
    )
    assert budget.allows("m", Tier.HIGH, 100)
    assert not budget.allows("m", Tier.HIGH, 101)
    clock.advance(2000)
    assert budget.allows("m", Tier.HIGH, 900)


def test_retry_after_holds_every_start_of_the_model_until_it_has_passed() -> None:
    clock = ManualClock(1_000_000)
    budget = RateBudget({"m": RateLimit(tpm=1000)}, clock_ms=clock)
    budget.observe("m", read_headers({"retry-after": "3"}))
    assert not budget.allows("m", Tier.HIGH, 1)
    assert budget.allows("n", Tier.HIGH, 1)
    clock.advance(3000)
    assert budget.allows("m", Tier.HIGH, 1)


def test_openai_durations_parse() -> None:
    assert parse_duration_s("1s") == 1.0
    assert parse_duration_s("6m0s") == 360.0
    assert parse_duration_s("20ms") == 0.02
    assert parse_duration_s("1m2.5s") == 62.5
    assert parse_duration_s("1h0m0s") == 3600.0
    assert parse_duration_s("0.5") == 0.5
    assert parse_duration_s(" 2 ") == 2.0


def test_hostile_header_values_are_ignored() -> None:
    for bad in (
        "",
        "s",
        "-1s",
        "1x",
        "1s2",
        "NaN",
        "inf",
        "1e9",
        "2h",
        "99999999999s",
        "1s" * 30,
        "\uff11s",
        "\x00",
    ):
        assert parse_duration_s(bad) is None, bad
    for bad in ("", "-5", "1.5", "abc", str(MAX_COUNT + 1), "9" * 400, "0x10", "+3", "\uff11\uff10"):
        assert parse_count(bad) is None, bad
    headers = read_headers(
        {
            "x-ratelimit-limit-tokens": "-1",
            "x-ratelimit-remaining-tokens": "9" * 50,
            "x-ratelimit-reset-tokens": "forever",
            "retry-after": "Wed, 21 Oct 2015 07:28:00 GMT",
        }
    )
    assert headers == RateHeaders()
    budget = RateBudget({}, clock_ms=ManualClock(1_000_000))
    budget.observe("m", headers)
    assert budget.allows("m", Tier.LOW, 10**6)
    assert not budget.limited("m")


def test_a_zero_limit_header_teaches_nothing() -> None:
    budget = RateBudget({}, clock_ms=ManualClock(1_000_000))
    budget.observe("m", read_headers({"x-ratelimit-limit-tokens": "0", "x-ratelimit-limit-requests": "0"}))
    assert budget.allows("m", Tier.LOW, 10)


def test_estimate_before_the_call() -> None:
    assert estimate_tokens([400], 50, None) == 150
    # Each message is rounded up, as the backend counts it.
    assert estimate_tokens([1, 1, 1], 10, None) == 13
    assert estimate_tokens([401], None, None) == 101 + DEFAULT_COMPLETION_TOKENS
    assert estimate_tokens([400], 50, 7) == 7
    assert estimate_tokens([], 0, None) == DEFAULT_COMPLETION_TOKENS


def test_configured_limits_are_validated() -> None:
    for bad in ({"rpm": 0}, {"tpm": -1}, {"tpm": MAX_COUNT + 1}):
        try:
            RateLimit(**bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad} accepted")


starts = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=5_000),  # ms since the previous attempt
        st.sampled_from(list(Tier)),
        st.integers(min_value=1, max_value=400),  # estimated tokens
        st.integers(min_value=0, max_value=400),  # usage the response reports (at most estimated here)
    ),
    max_size=300,
)


@settings(max_examples=150, deadline=None)
@given(starts, st.integers(min_value=1, max_value=3_000), st.integers(min_value=1, max_value=60))
def test_no_minute_ever_holds_more_than_either_limit(
    attempts: list[tuple[int, Tier, int, int]], tpm: int, rpm: int
) -> None:
    clock = ManualClock(1_000_000)
    budget = RateBudget({"m": RateLimit(rpm=rpm, tpm=tpm)}, floor_shares=PEAK_SHARES, clock_ms=clock)
    started: list[tuple[int, int]] = []
    for gap, tier, estimate, usage in attempts:
        clock.advance(gap)
        charge = budget.take("m", tier, min(estimate, tpm))
        if charge is not None:
            budget.settle(charge, min(usage, estimate))
            started.append((clock.now_ms, min(usage, estimate, tpm)))
    for end, _ in started:
        in_minute = [tokens for at, tokens in started if end - WINDOW_MS < at <= end]
        assert len(in_minute) <= rpm
        assert sum(in_minute) <= tpm


@settings(max_examples=150, deadline=None)
@given(starts, st.integers(min_value=100, max_value=3_000))
def test_lower_tiers_never_eat_into_the_unused_floor_of_a_higher_tier(
    attempts: list[tuple[int, Tier, int, int]], tpm: int
) -> None:
    clock = ManualClock(1_000_000)
    budget = RateBudget({"m": RateLimit(tpm=tpm)}, floor_shares=PEAK_SHARES, clock_ms=clock)
    started: list[tuple[int, Tier, int]] = []
    for gap, tier, estimate, _ in attempts:
        clock.advance(gap)
        if budget.take("m", tier, estimate) is not None:
            started.append((clock.now_ms, tier, min(estimate, tpm)))
            # At each start, HIGH can still have what it has not used of its 60% share.
            now = clock.now_ms
            minute = [(t, c) for at, t, c in started if now - WINDOW_MS < at <= now]
            high_used = sum(c for t, c in minute if t is Tier.HIGH)
            total = sum(c for _, c in minute)
            if tier is not Tier.HIGH:
                assert tpm - total >= int(0.6 * tpm) - high_used - 1


@given(starts)
def test_the_same_attempts_with_the_same_clock_decide_the_same(
    attempts: list[tuple[int, Tier, int, int]],
) -> None:
    def run() -> list[bool]:
        clock = ManualClock(1_000_000)
        budget = RateBudget({"m": RateLimit(rpm=20, tpm=2000)}, floor_shares=PEAK_SHARES, clock_ms=clock)
        decided = []
        for gap, tier, estimate, usage in attempts:
            clock.advance(gap)
            charge = budget.take("m", tier, estimate)
            decided.append(charge is not None)
            if charge is not None:
                budget.settle(charge, usage)
        return decided

    assert run() == run()


@given(st.text(max_size=60))
def test_any_header_text_parses_to_none_or_a_sane_value(text: str) -> None:
    seconds = parse_duration_s(text)
    assert seconds is None or 0 <= seconds <= 3600
    count = parse_count(text)
    assert count is None or 0 <= count <= MAX_COUNT
    budget = RateBudget({}, clock_ms=ManualClock(1_000_000))
    budget.observe("m", read_headers({"x-ratelimit-limit-tokens": text, "retry-after": text}))


def test_rate_limits_setting_reads_json_per_model_and_refuses_hostile_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "INFERQ_DISPATCHER_RATE_LIMITS", '{"inferq-fast": {"rpm": 500, "tpm": 90000}, "x": {"tpm": 10}}'
    )
    assert rate_limits(DispatcherSettings()) == {
        "inferq-fast": RateLimit(rpm=500, tpm=90000),
        "x": RateLimit(tpm=10),
    }
    for bad in (
        '{"m": {"tpm": 0}}',
        '{"m": {"rpm": -5}}',
        '{"m": {"tpm": "lots"}}',
        '{"m": {"tpm": 1e20}}',
        '{"m": {"tokens": 5}}',
        '{"m": 5}',
        "[1, 2]",
    ):
        monkeypatch.setenv("INFERQ_DISPATCHER_RATE_LIMITS", bad)
        with pytest.raises(ValidationError):
            DispatcherSettings()
    monkeypatch.delenv("INFERQ_DISPATCHER_RATE_LIMITS")
    assert rate_limits(DispatcherSettings()) == {}


def test_a_retry_after_is_the_models_limit_only_on_a_429() -> None:
    headers = {"Retry-After": "2", "x-ratelimit-remaining-requests": "5"}
    assert read_headers(headers, status=429).retry_after_s == 2
    assert read_headers(headers).retry_after_s == 2  # a 200's headers
    # A 503's Retry-After is that request's retry delay: other requests may still be tried.
    outage = read_headers(headers, status=503)
    assert outage.retry_after_s is None
    assert outage.remaining_requests == 5
