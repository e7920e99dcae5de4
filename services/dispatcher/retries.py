"""What happens after a failed backend call: retry later, give up, or expire. Pure; randomness injected.

Retryable failures (timeouts, connection errors, 429, 5xx) are retried up to `max_attempts` in all,
each after an exponential backoff with full jitter; a Retry-After from the backend is honoured but
capped at half the time the request has left and at `max_backoff_s` (a retry record's not-before
beyond that is out of range when read back, and clamped: ``record_rules.py``). A retry that could
not start before the deadline is not scheduled: the request is answered EXPIRED (nobody waits for
it), not FAILED. Non-retryable
failures (invalid input: 4xx other than 429) and exhausted retries are dead-lettered and FAILED.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from dataclasses import dataclass

from inferq.dispatcher.errors import BackendError


class Verdict(enum.Enum):
    RETRY = "retry"
    GIVE_UP = "give_up"  # dead letter + FAILED
    EXPIRE = "expire"  # EXPIRED: the deadline comes before the retry could


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    not_before_ms: int | None = None
    reason: str = ""


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3
    base_backoff_s: float = 0.5
    max_backoff_s: float = 30.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not 0 < self.base_backoff_s <= self.max_backoff_s:
            raise ValueError("need 0 < base_backoff_s <= max_backoff_s")

    def decide(
        self,
        error: BackendError,
        *,
        attempt: int,
        now_ms: int,
        expire_at_ms: int,
        uniform: Callable[[float, float], float] = random.uniform,
    ) -> Decision:
        if not error.retriable:
            return Decision(Verdict.GIVE_UP, reason="not retryable")
        if attempt >= self.max_attempts:
            return Decision(Verdict.GIVE_UP, reason=f"gave up after {attempt} attempts")
        remaining_s = (expire_at_ms - now_ms) / 1000
        ceiling = min(self.max_backoff_s, self.base_backoff_s * 2 ** (attempt - 1))
        backoff_s = uniform(0.0, ceiling)  # full jitter: retries of one outage do not arrive together
        if error.retry_after_s is not None:
            backoff_s = max(backoff_s, min(error.retry_after_s, remaining_s / 2, self.max_backoff_s))
        not_before_ms = now_ms + int(backoff_s * 1000)
        if not_before_ms >= expire_at_ms:
            return Decision(Verdict.EXPIRE, reason="the deadline comes before a retry could start")
        return Decision(Verdict.RETRY, not_before_ms=not_before_ms)
