"""Saying loudly when many records are poison: a producer writing the wrong format, say.

Each poison record is dead-lettered and the partition moves on; that is right for the odd bad
record and wrong to do silently for a whole stream. Over a sliding window, when the share of poison
records of a topic passes `threshold` (with at least `min_records` seen), the watch reports the
topic once, until the share falls back below half the threshold. Running counts keep each record
O(1): this sits on the dispatcher's hot path. Counts are kept per second of the window, so memory is
bounded by the window's seconds, not by the record rate (a flood of poison is exactly when it
matters).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class _Window:
    # [second, records, poison records] per second with records, oldest first.
    seconds: deque[list[int]] = field(default_factory=deque)
    records: int = 0
    poison: int = 0


@dataclass
class PoisonWatch:
    clock: Callable[[], float]
    window_s: float = 60.0
    threshold: float = 0.2
    min_records: int = 20
    _windows: dict[str, _Window] = field(default_factory=dict)
    _alarmed: set[str] = field(default_factory=set)

    def record(self, topic: str, *, poison: bool) -> bool:
        """Count one record; True when this record makes the topic cross the threshold upward."""
        now = self.clock()
        window = self._windows.setdefault(topic, _Window())
        second = int(now)
        if not window.seconds or window.seconds[-1][0] != second:
            window.seconds.append([second, 0, 0])
        window.seconds[-1][1] += 1
        window.seconds[-1][2] += poison
        window.records += 1
        window.poison += poison
        while window.seconds and window.seconds[0][0] < now - self.window_s:
            _, records, was_poison = window.seconds.popleft()
            window.records -= records
            window.poison -= was_poison
        ratio = self.ratio(topic)
        if topic not in self._alarmed and window.records >= self.min_records and ratio > self.threshold:
            self._alarmed.add(topic)
            return True
        if topic in self._alarmed and ratio < self.threshold / 2:
            self._alarmed.discard(topic)
        return False

    def ratio(self, topic: str) -> float:
        window = self._windows.get(topic)
        if window is None or not window.records:
            return 0.0
        return window.poison / window.records

    def ratios(self) -> dict[str, float]:
        return {topic: self.ratio(topic) for topic in self._windows}
