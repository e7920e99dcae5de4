"""Records read but left in Kafka because their tenant had no place left in the read-ahead.

Pausing is per partition, and one partition carries every tenant's records; so a tenant over its
share (``readahead_shares.py``) cannot be paused alone. Its records are *deferred* instead: intake
tracks each one as not done in the partition's offsets (so no commit ever passes it: the committed
offset stays at or below the lowest deferred one) and keeps only its offset and tenant here, not
the record; it goes on reading the partition for the other tenants. When the tenant has room again
intake seeks the partition back to its first deferred record and reads it again (``intake.py``);
what lies between was tracked already and is skipped without decoding.

Bounded: a deferred offset is one of the partition's tracked offsets, at most
`offsets.MAX_UNCOMMITTED` beyond its commit; past that the partition pauses like any other. A new
assignment of a partition starts afresh (its `PartitionOffsets` differ); so does a revoked one, whose
records the next owner reads from the commit.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from inferq.dispatcher.consumer import Partition
from inferq.dispatcher.offsets import OffsetTracker, PartitionOffsets
from inferq.messaging.tiers import Tier

Key = tuple[Tier, str]


@dataclass
class _Deferred:
    offsets: PartitionOffsets
    # Per (tier, tenant), its deferred offsets in increasing order; and the key of each offset.
    by_key: dict[Key, deque[int]] = field(default_factory=dict)
    key_at: dict[int, Key] = field(default_factory=dict)


class DeferredRecords:
    def __init__(self) -> None:
        self._parts: dict[Partition, _Deferred] = {}

    def __len__(self) -> int:
        return sum(len(p.key_at) for p in self._live())

    def defer(self, partition: Partition, offsets: PartitionOffsets, offset: int, key: Key) -> None:
        """`offset` (tracked, increasing) of tenant `key` waits in Kafka."""
        part = self._parts.get(partition)
        if part is None or part.offsets is not offsets:
            part = self._parts[partition] = _Deferred(offsets)
        part.by_key.setdefault(key, deque()).append(offset)
        part.key_at[offset] = key

    def key_at(self, partition: Partition, offsets: PartitionOffsets, offset: int) -> Key | None:
        part = self._parts.get(partition)
        if part is None or part.offsets is not offsets:
            return None
        return part.key_at.get(offset)

    def take(self, partition: Partition, offset: int) -> None:
        """`offset` was read again and taken (admitted, answered): no longer deferred."""
        part = self._parts.get(partition)
        if part is None:
            return
        key = part.key_at.pop(offset, None)
        if key is None:
            return
        queue = part.by_key[key]
        queue.remove(offset)  # its front when read in order: O(1) then
        if not queue:
            del part.by_key[key]
        if not part.key_at:
            del self._parts[partition]

    def tenants(self, tier: Tier) -> set[str]:
        """The tenants with deferred records of `tier`, in any partition."""
        return {tenant for part in self._live() for (t, tenant) in part.by_key if t is tier}

    def next_offset(
        self, partition: Partition, after: int, wanted: Callable[[Tier, str], bool]
    ) -> int | None:
        """The first deferred offset of `partition` at or after `after` whose tenant is `wanted`."""
        part = self._parts.get(partition)
        if part is None or part.offsets.revoked:
            return None
        found: int | None = None
        for (tier, tenant), queue in part.by_key.items():
            if not wanted(tier, tenant):
                continue
            for offset in queue:
                if offset >= after:
                    found = offset if found is None else min(found, offset)
                    break
        return found

    def partitions(self) -> list[tuple[Partition, PartitionOffsets]]:
        """The partitions with deferred records, of the current assignment."""
        return [(p, part.offsets) for p, part in list(self._parts.items()) if self._alive(p, part)]

    def _live(self) -> list[_Deferred]:
        return [part for p, part in list(self._parts.items()) if self._alive(p, part)]

    def _alive(self, partition: Partition, part: _Deferred) -> bool:
        if part.offsets.revoked:
            del self._parts[partition]
            return False
        return True


class ReadPositions:
    """Where the consumer reads each partition: the offset its next fetch returns. Intake moves it
    (each record read, each seek); pausing asks whether a partition is read again behind its newest
    record, for its deferred records (a partition whose window is full stays unpaused meanwhile).

    Built by the composition root before both, so neither is patched after construction."""

    def __init__(self, offsets: OffsetTracker) -> None:
        self._offsets = offsets
        self._at: dict[Partition, int] = {}

    def at(self, partition: Partition) -> int | None:
        return self._at.get(partition)

    def move(self, partition: Partition, offset: int) -> None:
        self._at[partition] = offset

    def rereading(self, partition: Partition) -> bool:
        """The consumer reads `partition` behind its newest record: deferred records, again."""
        offsets = self._offsets.owned_state(partition.topic, partition.partition)
        at = self._at.get(partition)
        newest = offsets.next_to_read if offsets is not None else None
        return at is not None and newest is not None and at < newest
