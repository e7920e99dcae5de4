"""Everything the dispatcher writes (results, retries, dead letters), and the acknowledgement path.

Each record is produced until the broker acknowledges it (an outcome is owed: a broker outage is
waited out), and only then is its offset marked complete in its partition's `PartitionOffsets`, from
which the checkpoint commits. That is the whole ack path: produce durably here → complete the
offset (offsets.py) → commit the lowest incomplete one (checkpoint.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from services.dispatcher.backend import Completion
from services.dispatcher.errors import BackendError
from services.dispatcher.metrics import DispatcherMetrics
from services.dispatcher.models import ModelChoice
from services.dispatcher.offsets import PartitionOffsets
from services.dispatcher.outcomes import OutcomeBuilder
from services.dispatcher.work import Work
from services.messaging.codec import request_codec, result_codec
from services.messaging.producer import ProduceError
from services.messaging.records import InferenceResult
from services.messaging.topics import TopicNames

log = logging.getLogger("inferq.dispatcher")

Headers = list[tuple[str, str | bytes | None]]
MAX_PRODUCE_PAUSE_S = 10.0


class RecordProducer(Protocol):
    """What the writer needs of a producer (`messaging.producer.AsyncProducer` in production)."""

    async def produce(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Headers | None = None
    ) -> object:
        """Return once the broker acknowledged the record (acks=all); `ProduceError` if it did not."""
        ...


class OutcomeWriter:
    def __init__(
        self,
        producer: RecordProducer,
        topics: TopicNames,
        outcomes: OutcomeBuilder,
        models: ModelChoice,
        metrics: DispatcherMetrics,
        clock_ms: Callable[[], int],
    ) -> None:
        self._producer = producer
        self._topics = topics
        self._outcomes = outcomes
        self._models = models
        self._metrics = metrics
        self._clock_ms = clock_ms
        self._requests = request_codec()
        self._results = result_codec()

    async def ok(self, work: Work, completion: Completion, dispatched_at_ms: int) -> None:
        now = self._clock_ms()
        await self._emit(
            work, self._outcomes.ok(work.request, completion, dispatched_at_ms=dispatched_at_ms, now_ms=now)
        )

    async def expire(self, work: Work, reason: str) -> None:
        self._metrics.record_expired(work.tier, reason)
        model = self._models.model_for(work)
        await self._emit(work, self._outcomes.expired(work.request, model, now_ms=self._clock_ms()))

    async def evict(self, work: Work) -> None:
        self._metrics.record_evicted(work.tier)
        model = self._models.model_for(work)
        await self._emit(work, self._outcomes.evicted(work.request, model, now_ms=self._clock_ms()))

    async def retry(self, work: Work, not_before_ms: int) -> None:
        """Queue the next attempt on the retry topic; the original offset completes, so its
        partition moves on while the retry waits."""
        retry = work.request.retry(not_before_ms=not_before_ms)
        await self.produce_durably(
            self._topics.retry, self._requests.encode(retry), key=work.request_id.encode()
        )
        self._metrics.record_retry(work.tier)
        work.done()

    async def give_up(self, work: Work, error: BackendError, dispatched_at_ms: int, why: str) -> None:
        """Dead-letter the original record with the last error, then answer FAILED."""
        headers: Headers = [
            ("inferq.error", f"{why}: {error}".encode()),
            ("inferq.status", str(error.status or "").encode()),
            ("inferq.attempts", str(work.request.attempt).encode()),
            ("inferq.request_id", work.request_id.encode()),
            ("inferq.source.topic", work.offsets.topic.encode()),
            ("inferq.source.partition", str(work.offsets.partition).encode()),
            ("inferq.source.offset", str(work.offset).encode()),
        ]
        await self.produce_durably(self._topics.dlq, work.raw, key=work.request_id.encode(), headers=headers)
        self._metrics.record_dead_letter(work.offsets.topic)
        result = self._outcomes.failed(
            work.request,
            self._models.model_for(work),
            f"{why}: {error}",
            dispatched_at_ms=dispatched_at_ms,
            now_ms=self._clock_ms(),
        )
        await self._emit(work, result)

    async def poison(self, offsets: PartitionOffsets, offset: int, raw: bytes, reason: str) -> None:
        """A record no retry can fix: its raw bytes to the dead-letter topic, with where it came from;
        then its offset is complete (a poison record has no caller to answer)."""
        topic, partition = offsets.topic, offsets.partition
        headers: Headers = [
            ("inferq.error", reason.encode()),
            ("inferq.source.topic", topic.encode()),
            ("inferq.source.partition", str(partition).encode()),
            ("inferq.source.offset", str(offset).encode()),
        ]
        await self.produce_durably(self._topics.dlq, raw, headers=headers)
        log.warning("poison record %s[%d]@%d dead-lettered: %s", topic, partition, offset, reason)
        self._metrics.record_dead_letter(topic)
        offsets.complete(offset)

    async def _emit(self, work: Work, result: InferenceResult) -> None:
        topic = work.request.reply_to or self._topics.results
        await self.produce_durably(topic, self._results.encode(result), key=work.request_id.encode())
        self._metrics.record_outcome(work.tier, result)
        work.done()

    async def produce_durably(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Headers | None = None
    ) -> None:
        """Produce until the broker acknowledges.

        librdkafka already retries for `message.timeout.ms`; past that we try again with a growing
        pause. Once shutdown has begun and the drain bound passes, the task is cancelled: the offset
        stays uncommitted and the next owner redoes the request, so nothing is lost either way.
        """
        pause_s = 0.5
        while True:
            try:
                await self._producer.produce(topic, value, key=key, headers=headers)
            except ProduceError as exc:
                log.error(  # noqa: TRY400 - the reason is the message; a traceback per retry is noise
                    "produce to %s failed, trying again in %.1f s: %s", topic, pause_s, exc
                )
                await asyncio.sleep(pause_s)
                pause_s = min(pause_s * 2, MAX_PRODUCE_PAUSE_S)
            else:
                return
