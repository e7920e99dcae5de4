"""A request taken from Kafka and held until it starts, with where it came from."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import Span

from inferq import tracing
from inferq.dispatcher.offsets import PartitionOffsets
from inferq.messaging.records import InferenceRequest
from inferq.messaging.tiers import Tier


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
    # The trace context its record's headers carried (None when tracing is off or there was none).
    trace: Context | None = None
    # Times its call was preempted and it went back to waiting (``preemption.py``; this process's).
    preemptions: int = 0
    # Started again because its backend had not yet freed a preempted call's slot (``preempting.py``).
    settle_restarts: int = 0

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

    def traced(self, now_ms: int) -> AbstractContextManager[Span | None]:
        """Its process span (``services/tracing.py``), current while the block runs: around the
        backend call and the outcome's produce. A no-op when tracing is off or the span is open."""
        if not tracing.enabled():
            return tracing.NO_SPAN
        return tracing.processing(
            self,
            topic=self.offsets.topic,
            partition=self.offsets.partition,
            offset=self.offset,
            parent=self.trace,
            message_id=self.request_id,
            attributes={
                tracing.TIER: self.tier.value,
                tracing.ATTEMPT: self.request.attempt,
                tracing.QUEUE_WAIT_SECONDS: max(0, now_ms - self.created_at_ms) / 1000,
            },
        )

    def begin(self) -> None:
        """The request left the read-ahead: it is being called, expired or evicted."""
        self.offsets.start(self.offset)

    def wait_again(self) -> None:
        """Its call was preempted: it waits again, its offset not being worked on (nor committed)."""
        self.preemptions += 1
        self.offsets.unstart(self.offset)

    def done(self) -> None:
        """The outcome is durably written: the offset may be committed."""
        self.offsets.complete(self.offset)
