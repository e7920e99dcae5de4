"""Per-partition offset tracking for out-of-order completion.

Requests of one partition run concurrently and finish in any order. The committable offset of a
partition is the lowest offset whose outcome is not yet durably written (or one past the last
offset seen when nothing is outstanding), so a commit never runs ahead of work. Each assignment of
a partition gets a fresh `PartitionOffsets`; work carries the object it was tracked in, so a
completion arriving after the partition was revoked lands in a detached object and is ignored.

Offsets completed beyond the committable one travel in the commit's metadata, in the format of
``services/messaging/commit_metadata.py`` (ingest's admission reads it too), so after a rebalance
the next owner skips them instead of calling the LLM again.

Bounded: a partition tracks at most `MAX_UNCOMMITTED` offsets beyond its committable one (the
format's `MAX_SPAN`); past that `window_full` says so and intake pauses the partition until its
head completes. Every set here holds offsets of that window (or of the metadata, bounded the same
way), so one slow call at the head of a busy partition costs at most that many integers.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from inferq.messaging import commit_metadata

MAX_UNCOMMITTED = commit_metadata.MAX_SPAN


@dataclass(frozen=True)
class PendingCommit:
    position: int
    metadata: str
    done_beyond: int


@dataclass
class PartitionOffsets:
    topic: str
    partition: int
    _outstanding: deque[int] = field(default_factory=deque)
    _done_out_of_order: set[int] = field(default_factory=set)
    _next_after_seen: int | None = None
    _last_committed_state: tuple[int, int] | None = None
    _done_elsewhere: set[int] = field(default_factory=set)
    # Offsets that left the read-ahead (a call, an expiry...) and are not complete yet.
    _started: set[int] = field(default_factory=set)
    # Work still running from this member's previous assignment of the partition: not redone.
    _adopted: set[int] = field(default_factory=set)
    successor: PartitionOffsets | None = None
    revoked: bool = False

    def track(self, offset: int) -> bool:
        """Record a consumed offset (they arrive in increasing order). False when its outcome is
        written already or still being produced by work carried over: the caller skips it."""
        self._outstanding.append(offset)
        self._next_after_seen = offset + 1
        if offset in self._done_elsewhere:
            self._done_elsewhere.discard(offset)
            self.complete(offset)
            return False
        return offset not in self._adopted

    def start_at(self, offset: int) -> None:
        """Where consuming starts when the group has no commit for the partition: committable until
        a record is consumed, so even a partition that never sees one is committed (its lag reads 0,
        not "unknown"). Committing the log start is what an absent commit means anyway."""
        if self._next_after_seen is None and not self._outstanding:
            self._next_after_seen = offset

    def start(self, offset: int) -> None:
        """The offset left the read-ahead: its outcome is being worked on."""
        self._started.add(offset)

    def unstart(self, offset: int) -> None:
        """The offset is back in the read-ahead (its call preempted): waiting, not being worked on,
        so an adoption of the partition does not take it for running."""
        self._started.discard(offset)

    def adopt(self, previous: PartitionOffsets) -> None:
        """Take over this member's own previous assignment of the same partition (an eager
        rebalance revokes everything, then hands most partitions back): what it completed beyond
        the commit is skipped, and what it still runs completes here instead of being redone."""
        self._done_elsewhere |= previous._done_out_of_order
        self._adopted |= previous._started - previous._done_out_of_order
        previous.successor = self

    def _complete_adopted(self, offset: int) -> None:
        self._adopted.discard(offset)
        if offset in self._outstanding:
            self.complete(offset)
        else:
            self._done_elsewhere.add(offset)  # finished before it was fetched again

    def seen(self, offset: int) -> bool:
        """`offset` was consumed (tracked) already: read again, it is a rewind's (``deferred.py``)."""
        return self._next_after_seen is not None and offset < self._next_after_seen

    @property
    def next_to_read(self) -> int | None:
        """One past the last offset consumed (None before any)."""
        return self._next_after_seen

    def handled_already(self, offset: int) -> bool:
        """Written by a previous owner, or still running from this member's previous assignment."""
        return offset in self._done_elsewhere or offset in self._adopted

    def skip_done(self, offsets: set[int]) -> None:
        """Offsets a previous owner completed beyond its commit (from the commit metadata)."""
        self._done_elsewhere |= offsets

    def metadata(self, limit_bytes: int = commit_metadata.LIMIT_BYTES) -> str:
        """The completed offsets beyond the committable one, encoded for the commit's metadata."""
        base = self.committable()
        if base is None or not self._done_out_of_order:
            return ""
        return commit_metadata.encode(self._done_out_of_order, base, limit_bytes)

    def window_full(self) -> bool:
        """`MAX_UNCOMMITTED` offsets are tracked beyond the committable one: take no more of this
        partition until its head completes."""
        return len(self._outstanding) >= MAX_UNCOMMITTED

    def done_ahead(self, start: int, end: int) -> int:
        """Offsets in [`start`, `end`) not fetched yet whose outcome is already written (a previous
        owner's, from the commit metadata): not backlog."""
        return sum(1 for offset in self._done_elsewhere if start <= offset < end)

    def complete(self, offset: int) -> None:
        """Mark an offset's outcome durable. Completing twice, or an unknown offset, is harmless."""
        self._started.discard(offset)
        if self.revoked:
            if self.successor is not None:
                self.successor._complete_adopted(offset)
            return
        if not self._outstanding or offset < self._outstanding[0]:
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

    def take_commit(self) -> PendingCommit | None:
        """What to commit if the committable offset (or what lies beyond it) changed since the last
        commit; pass it back to `mark_committed` once the broker accepted it."""
        position = self.committable()
        state = (position, len(self._done_out_of_order)) if position is not None else None
        if position is None or state == self._last_committed_state:
            return None
        return PendingCommit(position, self.metadata(), len(self._done_out_of_order))

    def mark_committed(self, commit: PendingCommit) -> None:
        # The state as it was when the commit was taken: completions during the commit's round trip
        # are not in its metadata, so they must make the next `take_commit` differ.
        self._last_committed_state = (commit.position, commit.done_beyond)


class OffsetTracker:
    """The partitions this consumer owns right now, each with its `PartitionOffsets`."""

    def __init__(self) -> None:
        self._partitions: dict[tuple[str, int], PartitionOffsets] = {}

    def assign(self, topic: str, partition: int) -> PartitionOffsets:
        state = PartitionOffsets(topic, partition)
        self._partitions[(topic, partition)] = state
        return state

    def owned_state(self, topic: str, partition: int) -> PartitionOffsets | None:
        return self._partitions.get((topic, partition))

    def revoke(self, topic: str, partition: int) -> PartitionOffsets | None:
        state = self._partitions.pop((topic, partition), None)
        if state is not None:
            state.revoked = True
        return state

    def owned(self) -> list[PartitionOffsets]:
        return list(self._partitions.values())
