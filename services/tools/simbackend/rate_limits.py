"""Requests and tokens per minute, as an OpenAI deployment limits them (``--rpm``, ``--tpm``).

One sliding minute per model, as OpenAI limits each model of a key on its own: admitted calls, each
counted when received with its whole usage (prompt and answer tokens: the simulated answer is known
on arrival), one request each. A call that would take the minute past either limit is answered 429
with OpenAI's headers; every answer, 200 or 429, carries ``x-ratelimit-limit-*``,
``x-ratelimit-remaining-*`` and ``x-ratelimit-reset-*`` (the time until the oldest counted call
leaves the minute, in OpenAI's format: "1s", "6m0s", "20ms"), and a 429 ``retry-after`` in whole
seconds.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import Literal

WINDOW_S = 60.0


def openai_duration(seconds: float) -> str:
    """`seconds` as OpenAI writes its resets: "20ms" below a second, else "1s", "1.5s", "6m0s"."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    rest_text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{rest_text}" if minutes else rest_text


class MinuteLimits:
    """One model's per-minute limits in the simulator (None: that one unlimited)."""

    def __init__(
        self, *, rpm: int | None, tpm: int | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rpm = rpm
        self.tpm = tpm
        self._clock = clock
        self._calls: deque[tuple[float, int]] = deque()  # (received at, tokens)

    @property
    def enabled(self) -> bool:
        return self.rpm is not None or self.tpm is not None

    def refusal(self, tokens: int) -> Literal["requests", "tokens"] | None:
        """Which limit a call of `tokens` would go past now (None: it fits)."""
        self._prune()
        if self.rpm is not None and len(self._calls) + 1 > self.rpm:
            return "requests"
        if self.tpm is not None and self._tokens() + tokens > self.tpm:
            return "tokens"
        return None

    def count(self, tokens: int) -> None:
        """An admitted call of `tokens`."""
        self._calls.append((self._clock(), tokens))

    def retry_after_s(self, tokens: int) -> int:
        """Whole seconds until a call of `tokens` would fit (at least 1)."""
        self._prune()
        now, used, count = self._clock(), self._tokens(), len(self._calls)
        wait = 0.0
        for at, spent in self._calls:
            fits_requests = self.rpm is None or count + 1 <= self.rpm
            fits_tokens = self.tpm is None or used + tokens <= self.tpm
            if fits_requests and fits_tokens:
                break
            used, count = used - spent, count - 1
            wait = at + WINDOW_S - now
        return max(1, math.ceil(wait))

    def headers(self) -> dict[str, str]:
        """The ``x-ratelimit-*`` headers as they stand now (none when unlimited)."""
        self._prune()
        reset = self._calls[0][0] + WINDOW_S - self._clock() if self._calls else 0.0
        headers: dict[str, str] = {}
        if self.rpm is not None:
            headers["x-ratelimit-limit-requests"] = str(self.rpm)
            headers["x-ratelimit-remaining-requests"] = str(max(0, self.rpm - len(self._calls)))
            headers["x-ratelimit-reset-requests"] = openai_duration(reset)
        if self.tpm is not None:
            headers["x-ratelimit-limit-tokens"] = str(self.tpm)
            headers["x-ratelimit-remaining-tokens"] = str(max(0, self.tpm - self._tokens()))
            headers["x-ratelimit-reset-tokens"] = openai_duration(reset)
        return headers

    def _tokens(self) -> int:
        return sum(tokens for _, tokens in self._calls)

    def _prune(self) -> None:
        horizon = self._clock() - WINDOW_S
        while self._calls and self._calls[0][0] <= horizon:
            self._calls.popleft()
