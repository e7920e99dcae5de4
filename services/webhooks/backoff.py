"""When a failed delivery is tried again: exponential backoff with jitter, within the retry period.

Attempt n (1 = the first) failed: the next waits ``first_backoff_s x 2^(n-1)``, at most
`max_backoff_s`, of which a random half is jitter (equal jitter: ``d/2 + uniform(0, d/2)``), so the
retries of one receiver's outage spread out and yet the wait still grows. A retry that would start
after the period's end is not scheduled: the delivery has failed for good (dead letter). Pure;
randomness injected.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    first_backoff_s: float = 1.0
    max_backoff_s: float = 600.0
    retry_period_s: float = 86_400.0

    def __post_init__(self) -> None:
        if not 0 < self.first_backoff_s <= self.max_backoff_s:
            raise ValueError("need 0 < first_backoff_s <= max_backoff_s")
        if self.retry_period_s <= 0:
            raise ValueError("retry_period_s must be > 0")

    def ceiling_s(self, attempt: int) -> float:
        """The wait after failed attempt `attempt` before jitter (the exponential part)."""
        # min() before the power would overflow for a large attempt: 2**60 is already past any cap.
        exponent = max(0, min(attempt - 1, 60))
        return min(self.max_backoff_s, self.first_backoff_s * float(2**exponent))

    def next_attempt_ms(
        self,
        attempt: int,
        *,
        now_ms: int,
        first_stored_ms: int,
        uniform: Callable[[float, float], float] = random.uniform,
    ) -> int | None:
        """When to try again after attempt `attempt` failed at `now_ms`; None when that would be past
        the retry period counted from `first_stored_ms` (give up)."""
        ceiling = self.ceiling_s(attempt)
        wait_s = ceiling / 2 + uniform(0.0, ceiling / 2)
        at_ms = now_ms + int(wait_s * 1000)
        if at_ms > first_stored_ms + int(self.retry_period_s * 1000):
            return None
        return at_ms
