"""The tests' one fake clock."""

from __future__ import annotations

import time


class ManualClock:
    """A clock that stands still until the test moves it with `advance` (or sets `now_ms`).

    Called, it is a wall clock in ms (what `clock_ms=` parameters take); `seconds` is the same time
    in seconds, for code that takes a seconds clock (`clock_s=`, `monotonic=`). Starts at `now_ms`,
    or `now_s` seconds, or the machine's time when neither is given.
    """

    def __init__(self, now_ms: int | None = None, *, now_s: float | None = None) -> None:
        if now_s is not None:
            now_ms = round(now_s * 1000)
        self.now_ms = now_ms if now_ms is not None else int(time.time() * 1000)

    def __call__(self) -> int:
        return self.now_ms

    def seconds(self) -> float:
        return self.now_ms / 1000

    def advance(self, ms: int = 0, *, s: float = 0.0) -> None:
        self.now_ms += ms + round(s * 1000)
