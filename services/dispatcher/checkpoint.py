"""Checkpoint: which offsets may be committed, committing them, and what a rebalance changes.

A commit never runs ahead of work. Per partition the committable offset is the lowest one whose
outcome is not yet durably written (``offsets.py``; the writer marks an offset complete only after
the broker acknowledged its outcome). Commits go out every `commit_interval_s`, and at once for
partitions being revoked, inside the rebalance, so the next owner starts where this one stopped.
A refused commit (the group is rebalancing) is logged and its offsets stay owed: the next commit
carries them, or the revocation's does, or the next owner redoes the work; never is one skipped.

On assignment: pausing is re-applied (aiokafka forgets it), each partition gets fresh offset
tracking, calls this member still runs for a partition handed straight back are adopted rather
than redone, offsets a previous owner completed beyond its commit (the commit metadata) are
skipped, and a partition the group never committed is committed at its log start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping

from inferq.dispatcher.consumer import Partition, TierConsumer
from inferq.dispatcher.errors import CommitFailedError, ConsumerError
from inferq.dispatcher.offsets import OffsetTracker, PartitionOffsets, PendingCommit
from inferq.dispatcher.pausing import Pauses
from inferq.dispatcher.readahead import ReadAhead
from inferq.messaging import commit_metadata

log = logging.getLogger("inferq.dispatcher")

ASSIGNMENT_WAIT_S = 30.0


def _names(partitions: Collection[Partition]) -> list[str]:
    return sorted(str(p) for p in partitions)


class Checkpoint:
    """The dispatcher's rebalance listener and committer."""

    def __init__(
        self,
        *,
        consumer: TierConsumer,
        offsets: OffsetTracker,
        readahead: ReadAhead,
        pauses: Pauses,
        commit_interval_s: float,
        assignment_wait_s: float = ASSIGNMENT_WAIT_S,
    ) -> None:
        self._consumer = consumer
        self._offsets = offsets
        self._readahead = readahead
        self._pauses = pauses
        self._interval_s = commit_interval_s
        self._assignment_wait_s = assignment_wait_s
        self._just_revoked: dict[Partition, PartitionOffsets] = {}
        self._assignment_ready = asyncio.Event()

    def assigned_count(self) -> int:
        return len(self._offsets.owned())

    def in_group(self) -> bool:
        """Whether the last rebalance gave this member its assignment (possibly no partition) and
        none has begun since: false before the first join and during a rebalance."""
        return self._assignment_ready.is_set()

    async def run(self) -> None:
        """The commit loop."""
        while True:
            await asyncio.sleep(self._interval_s)
            await self.commit()

    async def commit(self, only: Collection[Partition] | None = None) -> None:
        """Commit every owned partition (or `only` these) whose committable offset moved."""
        commits: dict[Partition, tuple[int, str]] = {}
        taken: list[tuple[PartitionOffsets, PendingCommit]] = []
        for state in self._offsets.owned():
            partition = Partition(state.topic, state.partition)
            if only is not None and partition not in only:
                continue
            pending = state.take_commit()
            if pending is not None:
                commits[partition] = (pending.position, pending.metadata)
                taken.append((state, pending))
        if not commits:
            return
        try:
            await self._consumer.commit(commits)
        except CommitFailedError as exc:
            # Not marked committed, so the next commit takes these offsets again.
            log.warning("commit of %s refused, kept for the next one: %s", ", ".join(exc.partitions), exc)
            return
        for state, pending in taken:
            state.mark_committed(pending)

    async def settled(self) -> None:
        """Wait (bounded) until the current assignment's callback finished.

        aiokafka lets fetching resume before the assignment callback has finished; records must
        not be admitted before it has (it says which offsets are already handled)."""
        if self._assignment_ready.is_set():
            return
        try:
            await asyncio.wait_for(self._assignment_ready.wait(), self._assignment_wait_s)
        except TimeoutError:
            log.warning(
                "partition assignment not settled after %.0f s; admitting anyway", self._assignment_wait_s
            )

    async def on_revoked(self, revoked: list[Partition]) -> None:
        self._assignment_ready.clear()
        await self.commit(only=set(revoked))
        self._readahead.drop_sources({(p.topic, p.partition) for p in revoked})
        for partition in revoked:
            state = self._offsets.revoke(partition.topic, partition.partition)
            if state is not None:
                self._just_revoked[partition] = state
        log.info("partitions revoked: %s", _names(revoked))

    async def on_assigned(self, assigned: list[Partition]) -> None:
        self._pauses.apply()
        states = {p: self._offsets.assign(p.topic, p.partition) for p in assigned}
        # An eager rebalance revokes everything and hands most partitions back to the same member:
        # its calls still running for them complete into the new assignment instead of being redone.
        for partition, state in states.items():
            previous = self._just_revoked.pop(partition, None)
            if previous is not None:
                state.adopt(previous)
        self._just_revoked.clear()
        await self._resume_from_commits(states)
        self._assignment_ready.set()
        log.info("partitions assigned: %s", _names(assigned))

    async def _resume_from_commits(self, states: Mapping[Partition, PartitionOffsets]) -> None:
        """Skip what a previous owner completed beyond its commit (the commit metadata); start a
        partition the group never committed at its log start. Bounded; when the group's commits
        cannot be read nothing is skipped, so work is redone, not lost."""
        if not states:
            return
        try:
            points = await self._consumer.committed(list(states))
        except ConsumerError as exc:
            log.warning("commit metadata unreadable, completed work may be redone: %s", exc)
            return
        for partition, point in points.items():
            if point is not None and partition in states:
                done = commit_metadata.parse(point.metadata, point.offset)
                if done:
                    states[partition].skip_done(done)
        never_committed = [p for p in states if p in points and points[p] is None]
        if not never_committed:
            return
        try:
            starts = await self._consumer.beginning_offsets(never_committed)
        except ConsumerError as exc:
            log.info("log start of %s unknown, committed once a record is consumed: %s", never_committed, exc)
            return
        for partition, offset in starts.items():
            if partition in states:
                states[partition].start_at(offset)
