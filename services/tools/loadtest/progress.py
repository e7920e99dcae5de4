"""Counts per tier and a one-line progress bar on stderr.

On a terminal the line is redrawn in place a few times a second; otherwise (a CI log, a pipe) a
line is printed every few seconds, so logs are not flooded with carriage returns. The text itself
is built by pure functions, so its shape is tested without a terminal.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TextIO

from inferq.messaging.tiers import TIERS_BY_PRIORITY

OUTCOMES = ("accepted", "refused", "unavailable", "error")


@dataclass
class TierCounts:
    sent: int = 0
    accepted: int = 0
    refused: int = 0  # 429: over the tier's backlog capacity
    unavailable: int = 0  # 503: Kafka did not acknowledge in time
    error: int = 0

    def add(self, outcome: str) -> None:
        self.sent += 1
        setattr(self, outcome, getattr(self, outcome) + 1)


@dataclass
class Tally:
    by_tier: dict[str, TierCounts] = field(
        default_factory=lambda: {t.value: TierCounts() for t in TIERS_BY_PRIORITY}
    )

    def add(self, tier: str, outcome: str) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        self.by_tier.setdefault(tier, TierCounts()).add(outcome)

    def total(self) -> TierCounts:
        out = TierCounts()
        for counts in self.by_tier.values():
            for name in ("sent", *OUTCOMES):
                setattr(out, name, getattr(out, name) + getattr(counts, name))
        return out


def bar(done: int, total: int, width: int = 20) -> str:
    filled = width if total <= 0 else min(width, width * done // total)
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return (
        f"{minutes // 60:d}:{minutes % 60:02d}:{secs:02d}" if minutes >= 60 else f"{minutes:02d}:{secs:02d}"
    )


def loadgen_line(tally: Tally, total: int, elapsed_s: float) -> str:
    """Sent/accepted/refused per tier, e.g.

    ``[##--] 120/7679  HIGH 80/78/2  MEDIUM 30/30/0  LOW 10/10/0  (sent/accepted/refused)  4.1/s  00:29``
    """
    t = tally.total()
    tiers = "  ".join(
        f"{name} {c.sent}/{c.accepted}/{c.refused + c.unavailable}" for name, c in tally.by_tier.items()
    )
    errors = f"  errors {t.error}" if t.error else ""
    rate = t.sent / elapsed_s if elapsed_s > 0 else 0.0
    return (
        f"{bar(t.sent, total)} {t.sent}/{total}  {tiers}  (sent/accepted/refused){errors}  "
        f"{rate:.1f}/s  {clock(elapsed_s)}"
    )


def count_line(counts: Iterable[tuple[str, int]], done: int, total: int | None, elapsed_s: float) -> str:
    """``[####----] 50000/200000  HIGH 30000  LOW 20000  41000/s  00:01`` (total None: unknown)."""
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    parts = "  ".join(f"{name} {n}" for name, n in counts)
    head = f"{bar(done, total)} {done}/{total}" if total else f"{done}"
    return f"{head}  {parts}  {rate:,.0f}/s  {clock(elapsed_s)}"


class ProgressLine:
    """Draws a status line on `stream`; throttled so drawing never costs the work it reports on."""

    def __init__(
        self,
        stream: TextIO,
        *,
        tty: bool | None = None,
        interval_s: float | None = None,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._tty = stream.isatty() if tty is None else tty
        self._interval_s = interval_s if interval_s is not None else (0.25 if self._tty else 5.0)
        self._clock = clock_s
        self._last = -float("inf")
        self._width = 0

    def due(self) -> bool:
        return self._clock() - self._last >= self._interval_s

    def show(self, text: str, *, force: bool = False) -> None:
        if not force and not self.due():
            return
        self._last = self._clock()
        if self._tty:
            # Pad over the previous line's tail: the new line may be shorter.
            self._stream.write("\r" + text.ljust(self._width))
            self._width = len(text)
        else:
            self._stream.write(text + "\n")
        self._stream.flush()

    def finish(self, text: str) -> None:
        self.show(text, force=True)
        if self._tty:
            self._stream.write("\n")
            self._stream.flush()
