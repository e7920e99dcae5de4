"""Per-partition offset tracking for out-of-order completion.

Requests of one partition run concurrently and finish in any order. The committable offset of a
partition is the lowest offset whose outcome is not yet durably written (or one past the last
offset seen when nothing is outstanding), so a commit never runs ahead of work. Each assignment of
a partition gets a fresh `PartitionOffsets`; work carries the object it was tracked in, so a
completion arriving after the partition was revoked lands in a detached object and is ignored.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class PartitionOffsets:
    topic: str
    partition: int
    _outstanding: deque[int] = field(default_factory=deque)
    _done_out_of_order: set[int] = field(default_factory=set)
    _next_after_seen: int | None = None
    _last_committed: int | None = None
    revoked: bool = False

    def track(self, offset: int) -> None:
        """Record a consumed offset; offsets of one partition arrive in increasing order."""
        self._outstanding.append(offset)
        self._next_after_seen = offset + 1

    def complete(self, offset: int) -> None:
        """Mark an offset's outcome durable. Completing twice, or an unknown offset, is harmless."""
        if self.revoked or not self._outstanding or offset < self._outstanding[0]:
            return
        self._done_out_of_order.add(offset)
        while self._outstanding and self._outstanding[0] in self._done_out_of_order:
            self._done_out_of_order.discard(self._outstanding.popleft())

    @property
    def in_flight(self) -> int:
        return len(self._outstanding)

    def committable(self) -> int | None:
        """The offset to commit (next to read), or None before anything was consumed."""
        if self._outstanding:
            return self._outstanding[0]
        return self._next_after_seen

    def take_commit(self) -> int | None:
        """The committable offset if it moved since the last commit taken, else None."""
        position = self.committable()
        if position is None or position == self._last_committed:
            return None
        return position

    def mark_committed(self, position: int) -> None:
        self._last_committed = position


class OffsetTracker:
    """The partitions this consumer owns right now, each with its `PartitionOffsets`."""

    def __init__(self) -> None:
        self._partitions: dict[tuple[str, int], PartitionOffsets] = {}

    def assign(self, topic: str, partition: int) -> PartitionOffsets:
        state = PartitionOffsets(topic, partition)
        self._partitions[(topic, partition)] = state
        return state

    def get(self, topic: str, partition: int) -> PartitionOffsets:
        state = self._partitions.get((topic, partition))
        return state if state is not None else self.assign(topic, partition)

    def revoke(self, topic: str, partition: int) -> PartitionOffsets | None:
        state = self._partitions.pop((topic, partition), None)
        if state is not None:
            state.revoked = True
        return state

    def owned(self) -> list[PartitionOffsets]:
        return list(self._partitions.values())
