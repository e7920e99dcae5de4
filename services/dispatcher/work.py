"""A request taken from Kafka and held until it starts, with where it came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.dispatcher.offsets import PartitionOffsets
from services.messaging.records import InferenceRequest
from services.messaging.tiers import Tier


@dataclass
class Work:
    request: InferenceRequest
    tier: Tier
    offsets: PartitionOffsets
    offset: int
    # The record as read, for the dead-letter topic; the decoded chat-completions parameters.
    raw: bytes = b""
    params: dict[str, Any] = field(default_factory=dict)
    # A LOW request that waited past the promotion age is scheduled as MEDIUM; its tier is unchanged.
    promoted: bool = False
    # Where its outcome goes, once intake allowed it (``reply_topics.py``); None: the default results.
    reply_topic: str | None = None

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def expire_at_ms(self) -> int:
        return self.request.expire_at_ms

    @property
    def created_at_ms(self) -> int:
        return self.request.created_at_ms

    @property
    def scheduling_tier(self) -> Tier:
        return Tier.MEDIUM if self.promoted else self.tier

    @property
    def source(self) -> tuple[str, int]:
        return (self.offsets.topic, self.offsets.partition)

    def begin(self) -> None:
        """The request left the read-ahead: it is being called, expired or evicted."""
        self.offsets.start(self.offset)

    def done(self) -> None:
        """The outcome is durably written: the offset may be committed."""
        self.offsets.complete(self.offset)
