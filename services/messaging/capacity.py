"""Backlog capacity per tier: consumers x target wait / mean latency.

The target wait is 60% of the tier's deadline, leaving 40% for inference: with a budget of 10,
a 5 s chat deadline and 0.5 s chats, 10 x 3 s / 0.5 s = 60 requests may wait. Ingest refuses
above it; the dispatcher sheds LOW above it when eviction is on.
"""

from __future__ import annotations

import math
from fractions import Fraction


def exact_decimal(value: float) -> Fraction:
    # Decimal semantics for configured numbers: 10 x 3 s / 0.5 s must be 60, not 59.999...
    return Fraction(str(value))


def default_capacity(
    *, budget: int, deadline_ms: int, mean_latency_s: float, queue_wait_fraction: float
) -> int:
    """budget x (queue_wait_fraction x deadline) / mean latency, rounded down, at least 1."""
    target_wait_s = Fraction(deadline_ms, 1000) * exact_decimal(queue_wait_fraction)
    return max(1, math.floor(budget * target_wait_s / exact_decimal(mean_latency_s)))
