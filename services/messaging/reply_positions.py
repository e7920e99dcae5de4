"""Where a record sits in a reply topic: its partition and offset.

The results service keeps, beside its full copy of the results, how far it has read each reply
partition (so a replica resumes from its own positions, with no consumer group), and the webhook
outbox remembers each delivery's source record (so the replica owning a partition sends that
partition's webhooks, and a successor knows which are already done). Both speak in these types.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class ReplyPartition:
    """One partition of a reply topic."""

    topic: str
    partition: int


@dataclass(frozen=True)
class ReplySource:
    """The record a stored result came from."""

    topic: str
    partition: int
    offset: int

    @property
    def where(self) -> ReplyPartition:
        return ReplyPartition(self.topic, self.partition)
