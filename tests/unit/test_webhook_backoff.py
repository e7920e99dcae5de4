"""When a failed webhook is tried again: growing waits with jitter, and never past the retry period."""

from __future__ import annotations

import pytest

from inferq.webhooks.backoff import Backoff

POLICY = Backoff(first_backoff_s=1.0, max_backoff_s=60.0, retry_period_s=3_600)


def lowest(_low: float, _high: float) -> float:
    return _low


def highest(_low: float, high: float) -> float:
    return high


def test_the_wait_doubles_from_the_first_backoff_up_to_the_cap():
    assert [POLICY.ceiling_s(n) for n in range(1, 10)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert POLICY.ceiling_s(10_000) == 60  # no overflow for a long outage


@pytest.mark.parametrize("attempt", [1, 2, 5, 9])
def test_the_jitter_keeps_each_wait_within_half_and_all_of_its_ceiling(attempt):
    ceiling_ms = int(POLICY.ceiling_s(attempt) * 1000)
    low = POLICY.next_attempt_ms(attempt, now_ms=10_000, first_stored_ms=10_000, uniform=lowest)
    high = POLICY.next_attempt_ms(attempt, now_ms=10_000, first_stored_ms=10_000, uniform=highest)
    assert low == 10_000 + ceiling_ms // 2
    assert high == 10_000 + ceiling_ms


def test_real_jitter_spreads_retries_of_one_outage():
    times = {POLICY.next_attempt_ms(4, now_ms=0, first_stored_ms=0) for _ in range(50)}
    assert len(times) > 1
    assert all(t is not None and 4_000 <= t <= 8_000 for t in times)


def test_no_retry_is_scheduled_past_the_retry_period():
    short = Backoff(first_backoff_s=1.0, max_backoff_s=60.0, retry_period_s=10)
    assert short.next_attempt_ms(1, now_ms=8_000, first_stored_ms=0, uniform=highest) == 9_000
    assert short.next_attempt_ms(2, now_ms=9_000, first_stored_ms=0, uniform=highest) is None


def test_the_whole_schedule_of_a_receiver_that_never_answers():
    stored, now, attempts = 0, 0, 0
    times = []
    while (
        at := POLICY.next_attempt_ms(attempts + 1, now_ms=now, first_stored_ms=stored, uniform=highest)
    ) is not None:
        attempts += 1
        times.append(at)
        now = at
    assert times[:6] == [1_000, 3_000, 7_000, 15_000, 31_000, 63_000]
    assert times[-1] <= 3_600_000 and len(times) == 6 + (3_600_000 - 63_000) // 60_000


@pytest.mark.parametrize(
    "kwargs", [{"first_backoff_s": 0}, {"first_backoff_s": 10, "max_backoff_s": 5}, {"retry_period_s": 0}]
)
def test_a_nonsense_policy_is_refused(kwargs):
    with pytest.raises(ValueError):
        Backoff(**kwargs)
