import pytest

from inferq.dispatcher.errors import BackendError
from inferq.dispatcher.retries import RetryPolicy, Verdict

NOW = 1_000_000


def err(status=503, retriable=True, retry_after=None):
    return BackendError("boom", retriable=retriable, status=status, retry_after_s=retry_after)


def top(low, high):
    return high  # the longest backoff jitter allows


def test_backoff_doubles_per_attempt_with_jitter_bounded():
    policy = RetryPolicy(base_backoff_s=0.5)
    first = policy.decide(err(), attempt=1, now_ms=NOW, expire_at_ms=NOW + 60_000, uniform=top)
    second = policy.decide(err(), attempt=2, now_ms=NOW, expire_at_ms=NOW + 60_000, uniform=top)
    assert first.verdict is Verdict.RETRY and first.not_before_ms == NOW + 500
    assert second.not_before_ms == NOW + 1_000


def test_attempts_are_bounded():
    decision = RetryPolicy(max_attempts=3).decide(err(), attempt=3, now_ms=NOW, expire_at_ms=NOW + 60_000)
    assert decision.verdict is Verdict.GIVE_UP


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_invalid_input_is_not_retried(status):
    decision = RetryPolicy().decide(
        err(status, retriable=False), attempt=1, now_ms=NOW, expire_at_ms=NOW + 9_000
    )
    assert decision.verdict is Verdict.GIVE_UP


def test_retry_after_is_honoured_but_capped_at_half_the_time_left():
    policy = RetryPolicy()
    honoured = policy.decide(err(429, retry_after=2), attempt=1, now_ms=NOW, expire_at_ms=NOW + 30_000)
    assert honoured.not_before_ms == NOW + 2_000
    capped = policy.decide(err(429, retry_after=60), attempt=1, now_ms=NOW, expire_at_ms=NOW + 10_000)
    assert capped.not_before_ms == NOW + 5_000


def test_a_retry_that_would_start_after_the_deadline_is_expired_not_failed():
    decision = RetryPolicy(base_backoff_s=2).decide(
        err(), attempt=1, now_ms=NOW, expire_at_ms=NOW + 1_000, uniform=top
    )
    assert decision.verdict is Verdict.EXPIRE
