"""Saying loudly when many records are poison: a producer writing the wrong format, say.

Each poison record is dead-lettered and the partition moves on; that is right for the odd bad
record and wrong to do silently for a whole stream. Over a sliding window, when the share of poison
records of a topic passes `threshold` (with at least `min_records` seen), the watch reports the
topic once, until the share falls back below half the threshold.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class PoisonWatch:
    clock: Callable[[], float]
    window_s: float = 60.0
    threshold: float = 0.2
    min_records: int = 20
    _events: dict[str, deque[tuple[float, bool]]] = field(default_factory=dict)
    _alarmed: set[str] = field(default_factory=set)

    def record(self, topic: str, *, poison: bool) -> bool:
        """Count one record; True when this record makes the topic cross the threshold upward."""
        now = self.clock()
        events = self._events.setdefault(topic, deque())
        events.append((now, poison))
        while events and events[0][0] < now - self.window_s:
            events.popleft()
        ratio = self.ratio(topic)
        if topic not in self._alarmed and len(events) >= self.min_records and ratio > self.threshold:
            self._alarmed.add(topic)
            return True
        if topic in self._alarmed and ratio < self.threshold / 2:
            self._alarmed.discard(topic)
        return False

    def ratio(self, topic: str) -> float:
        events = self._events.get(topic)
        if not events:
            return 0.0
        return sum(1 for _, bad in events if bad) / len(events)

    def ratios(self) -> dict[str, float]:
        return {topic: self.ratio(topic) for topic in self._events}
