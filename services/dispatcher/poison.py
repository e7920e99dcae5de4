"""Saying loudly when many records are poison: a producer writing the wrong format, say.

Each poison record is dead-lettered and the partition moves on; that is right for the odd bad
record and wrong to do silently for a whole stream. Over a sliding window, when the share of poison
records of a topic passes `threshold` (with at least `min_records` seen), the watch reports the
topic once, until the share falls back below half the threshold. Running counts keep each record
O(1): this sits on the dispatcher's hot path.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class _Window:
    events: deque[tuple[float, bool]] = field(default_factory=deque)
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
        window.events.append((now, poison))
        window.poison += poison
        while window.events and window.events[0][0] < now - self.window_s:
            _, was_poison = window.events.popleft()
            window.poison -= was_poison
        ratio = self.ratio(topic)
        if topic not in self._alarmed and len(window.events) >= self.min_records and ratio > self.threshold:
            self._alarmed.add(topic)
            return True
        if topic in self._alarmed and ratio < self.threshold / 2:
            self._alarmed.discard(topic)
        return False

    def ratio(self, topic: str) -> float:
        window = self._windows.get(topic)
        if window is None or not window.events:
            return 0.0
        return window.poison / len(window.events)

    def ratios(self) -> dict[str, float]:
        return {topic: self.ratio(topic) for topic in self._windows}
