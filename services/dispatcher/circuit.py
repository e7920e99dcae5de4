"""A circuit breaker per backend: when a backend keeps failing, its traffic goes to the next one.

Pure and synchronous, with the caller's clock (ms). Three states:

- **closed**: calls go to the backend. It opens after `failures` consecutive failed calls (a 5xx,
  a timeout, a lost connection), or after `storm_429` answers 429 within `storm_window_ms` (a
  rate-limit storm the rate budget did not prevent: the key is shared, or the limit dropped).
- **open**: no call goes to the backend for `open_ms`; the router sends its traffic on.
- **half-open**: once `open_ms` has passed, one call at a time probes it. A probe that answers closes
  the breaker; one that fails opens it again for another `open_ms`.

A 4xx other than 429 is the request's fault, not the backend's: it counts as an answer. A call the
request's own deadline cut counts as nothing (`neutral`), since it says nothing about the backend.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum


class State(Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CallEnd(Enum):
    ANSWERED = "answered"
    FAILED = "failed"
    RATE_LIMITED = "rate_limited"
    NEUTRAL = "neutral"


@dataclass(frozen=True)
class BreakerPolicy:
    # Consecutive failed calls that open a closed breaker.
    failures: int = 5
    # 429 answers within the window that open it.
    storm_429: int = 20
    storm_window_ms: int = 10_000
    # How long an open breaker sends no call before one probe may go.
    open_ms: int = 10_000

    def __post_init__(self) -> None:
        if self.failures < 1 or self.storm_429 < 1 or self.storm_window_ms <= 0 or self.open_ms <= 0:
            raise ValueError(f"every breaker setting must be positive: {self}")


class CircuitBreaker:
    def __init__(self, policy: BreakerPolicy) -> None:
        self._policy = policy
        self._state = State.CLOSED
        self._failed_in_a_row = 0
        self._rate_limited_at: deque[int] = deque()
        self._open_until_ms = 0
        self._probing = False
        # Why it last opened ("5 failures in a row", "20 answers 429 within 10 s").
        self.reason = ""

    def state(self, now_ms: int) -> State:
        if self._state is State.OPEN and now_ms >= self._open_until_ms:
            self._state = State.HALF_OPEN
            self._probing = False
        return self._state

    def admits(self, now_ms: int) -> bool:
        """Whether a call may go to the backend now (half-open: only while no probe is out)."""
        state = self.state(now_ms)
        return state is State.CLOSED or (state is State.HALF_OPEN and not self._probing)

    def started(self, now_ms: int) -> bool:
        """A call went to the backend; half-open, it is the probe (True)."""
        if self.state(now_ms) is State.HALF_OPEN:
            self._probing = True
            return True
        return False

    def ended(self, end: CallEnd, now_ms: int, *, probe: bool = False) -> State:
        """Record how a call ended (`probe`: `started` said it was the probe); the state after it."""
        state = self.state(now_ms)
        if end is CallEnd.NEUTRAL:
            if state is State.HALF_OPEN and probe:
                # The probe told nothing: the next call probes again. (A call from before the
                # pause telling nothing leaves the probe out, one at a time.)
                self._probing = False
            return state
        if end is CallEnd.ANSWERED:
            self._failed_in_a_row = 0
            if state is State.HALF_OPEN:
                self._close()
            return self._state
        if state is State.HALF_OPEN:
            self._open(now_ms, f"the probe {'answered 429' if end is CallEnd.RATE_LIMITED else 'failed'}")
            return self._state
        if state is State.OPEN:
            return state  # a call started before it opened, ending now: already counted as open
        if end is CallEnd.FAILED:
            self._failed_in_a_row += 1
            if self._failed_in_a_row >= self._policy.failures:
                self._open(now_ms, f"{self._failed_in_a_row} failures in a row")
        else:
            self._rate_limited_at.append(now_ms)
            while self._rate_limited_at and self._rate_limited_at[0] <= now_ms - self._policy.storm_window_ms:
                self._rate_limited_at.popleft()
            if len(self._rate_limited_at) >= self._policy.storm_429:
                window_s = self._policy.storm_window_ms / 1000
                self._open(now_ms, f"{len(self._rate_limited_at)} answers 429 within {window_s:g} s")
        return self._state

    def _open(self, now_ms: int, reason: str) -> None:
        self._state = State.OPEN
        self._open_until_ms = now_ms + self._policy.open_ms
        self._probing = False
        self._failed_in_a_row = 0
        self._rate_limited_at.clear()
        self.reason = reason

    def _close(self) -> None:
        self._state = State.CLOSED
        self._probing = False
        self._failed_in_a_row = 0
        self._rate_limited_at.clear()
