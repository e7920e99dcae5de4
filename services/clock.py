"""The wall clock every service stamps records and deadlines with, in milliseconds since the epoch.

Parts take it as an injected `clock_ms` (tests pass `tests/support/clock.ManualClock`); this is the
one default. Durations are measured with `time.monotonic()`, never with this clock.
"""

from __future__ import annotations

import time


def wall_ms() -> int:
    """Now, in whole milliseconds since the Unix epoch (UTC)."""
    return time.time_ns() // 1_000_000
