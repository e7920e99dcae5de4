"""Everything the dispatcher writes (results, a streamed answer's chunks, retries, dead letters), and
the acknowledgement path.

Each record is produced until the broker acknowledges it, and only then is its offset marked
complete in its partition's `PartitionOffsets`, from which the checkpoint commits. That is the whole
ack path: produce durably here → complete the offset (offsets.py) → commit the lowest incomplete
one (checkpoint.py).

No produce loops forever. A failure is handled by what `ProduceError` says of it:

- retriable (an outage, a timeout): waited out, librdkafka's retries first, then ours with a
  growing pause (`inferq.messaging.dead_letters.DurableProducer`, shared with the results
  service's webhook dead letters); the offset stays uncommitted meanwhile, so a crash
  means the request is redone, not lost;
- permanent (invalid or unknown topic, record too large, not authorised): the record can never be
  written there. An outcome or a retry that cannot be written sends the request to the dead-letter
  topic with the reason and answers FAILED on the default results topic; a dead letter too large
  for the DLQ is written again cut (`dead_letters.DeadLetters`); what no topic takes is logged and
  counted (`inferq_unwritable_total`) and its offset completes: a partition never wedges on it;
- fatal (the producer itself is unusable): the dispatcher stops (`on_fatal`), offsets uncommitted,
  and the next owner redoes the work with a working producer.

One exception: "unknown topic" for the pipeline's own topics (results, retry, dead letters) is
waited out like an outage. They were checked at start; the broker not knowing one is a broker still
loading its metadata, and giving up on it would drop outcomes that a short wait would have written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import inferq.messaging.dead_letters as dead_letters
from inferq import tracing
from inferq.dispatcher.answered import RecentlyAnswered
from inferq.dispatcher.backend import Completion
from inferq.dispatcher.deltas import StreamDelta
from inferq.dispatcher.errors import BackendError
from inferq.dispatcher.metrics import DispatcherMetrics
from inferq.dispatcher.models import ModelChoice
from inferq.dispatcher.offsets import PartitionOffsets
from inferq.dispatcher.outcomes import OutcomeBuilder
from inferq.dispatcher.work import Work
from inferq.messaging.codec import chunk_codec, request_codec, result_codec
from inferq.messaging.producer import ProduceError
from inferq.messaging.record_signing import RecordSigner
from inferq.messaging.records import CHUNK_KIND, KIND_HEADER, InferenceChunk, InferenceResult, Status
from inferq.messaging.topics import TopicNames

log = logging.getLogger("inferq.dispatcher")

# One home for both, shared with the results service's webhook dead letters.
Headers = dead_letters.Headers
RecordProducer = dead_letters.RecordProducer


class OutcomeWriter:
    def __init__(
        self,
        producer: RecordProducer,
        topics: TopicNames,
        outcomes: OutcomeBuilder,
        models: ModelChoice,
        metrics: DispatcherMetrics,
        clock_ms: Callable[[], int],
        *,
        on_fatal: Callable[[ProduceError], None],
        signer: RecordSigner | None = None,
        chunk_producer: RecordProducer | None = None,
    ) -> None:
        """`on_fatal`: the producer is unusable (the dispatcher stops: `run_loop.Stop.fail`);
        `signer` signs the retry records (the tenants file's service key; none: open mode);
        `chunk_producer` writes the chunks (`KafkaSettings.chunk_producer_config`; none: `producer`)."""
        self._signer = signer if signer is not None else RecordSigner(tuple)
        self._producer = producer
        self._chunk_producer = chunk_producer if chunk_producer is not None else producer
        self._topics = topics
        self._outcomes = outcomes
        self._models = models
        self._metrics = metrics
        self._clock_ms = clock_ms
        self._requests = request_codec()
        self._results = result_codec()
        # Requests answered OK here lately: intake skips a copy read again (``answered.py``).
        self.answered = RecentlyAnswered()
        self._chunks = chunk_codec()
        self._own_topics = frozenset({topics.results, topics.retry, topics.dlq})
        self._durable = dead_letters.DurableProducer(producer, own_topics=self._own_topics, on_fatal=on_fatal)
        self._dead_letters = dead_letters.DeadLetters(
            self._durable, topics.dlq, on_unwritable=lambda: metrics.record_unwritable("dead_letter")
        )

    async def ok(self, work: Work, completion: Completion, dispatched_at_ms: int) -> None:
        now = self._clock_ms()
        await self._emit(
            work, self._outcomes.ok(work.request, completion, dispatched_at_ms=dispatched_at_ms, now_ms=now)
        )

    async def chunk(self, work: Work, *, seq: int, delta: StreamDelta, model: str) -> ProduceError | None:
        """Write one chunk of a streamed answer to the chunk topic beside the request's reply topic
        (`TopicNames.chunks_for`), keyed like its result and marked by the `inferq-kind: chunk`
        header. Tried once (the chunk producer's own retries aside): None once acknowledged, else
        the `ProduceError`, and the chunk is lost (counted; the result still carries the whole
        answer: see `streaming.py`). The offset is not touched: the result completes it."""
        chunk = InferenceChunk(
            request_id=work.request_id,
            tenant=work.request.tenant,
            attempt=work.request.attempt,
            seq=seq,
            delta=delta.content,
            model=model,
            created_at_ms=self._clock_ms(),
            dispatcher_id=self._outcomes.dispatcher_id,
            choice_index=delta.choice,
            tool_calls=delta.tool_calls_json(),
            refusal=delta.refusal or None,
            finish_reason=delta.finish_reason,
            logprobs=delta.logprobs_json(),
        )
        topic = self._topics.chunks_for(work.reply_topic or self._topics.results)
        try:
            await self._chunk_producer.produce(
                topic,
                self._chunks.encode(chunk),
                key=work.request_id.encode(),
                headers=[(KIND_HEADER, CHUNK_KIND)],
            )
        except ProduceError as exc:
            # Counted here; logged once per call (`execution.py`): an outage loses many.
            self._metrics.record_chunk_lost(work.tier)
            return exc
        self._metrics.record_chunk(work.tier)
        return None

    async def expire(self, work: Work, reason: str) -> None:
        self._metrics.record_expired(work.tier, reason)
        model = self._models.model_for(work)
        now = self._clock_ms()
        with work.traced(now):
            await self._emit(work, self._outcomes.expired(work.request, model, now_ms=now))

    async def evict(self, work: Work) -> None:
        self._metrics.record_evicted(work.tier)
        model = self._models.model_for(work)
        now = self._clock_ms()
        with work.traced(now):
            await self._emit(work, self._outcomes.evicted(work.request, model, now_ms=now))

    async def retry(self, work: Work, not_before_ms: int) -> None:
        """Queue the next attempt on the retry topic; the original offset completes, so its
        partition moves on while the retry waits. A retry the topic refuses is given up on."""
        retry = work.request.retry(not_before_ms=not_before_ms)
        tracing.annotate(tracing.OUTCOME, "RETRY")
        value, key = self._requests.encode(retry), work.request_id.encode()
        # Signed with the service key: only such a record is read from the retry topic (record_origin.py).
        failure = await self.produce_durably(
            self._topics.retry, value, key=key, headers=self._signer.headers(key, value)
        )
        if failure is not None:
            await self.refuse(work, f"retry not writable: {failure.reason}")
            return
        self._metrics.record_retry(work.tier)
        work.done()

    async def give_up(self, work: Work, error: BackendError, dispatched_at_ms: int, why: str) -> None:
        """Dead-letter the original record with the last error, then answer FAILED."""
        reason = f"{why}: {error}"
        await self._dead_letter(work, reason, status=str(error.status or ""))
        await self._emit(work, self._failed(work, reason, dispatched_at_ms), dead_lettered=True)

    async def refuse(self, work: Work, reason: str) -> None:
        """A request that must not run (a rule of ``record_rules.py``, or an outcome no topic takes):
        the original record to the dead-letter topic with `reason`, FAILED to the caller, no LLM call.
        The FAILED result goes to the request's reply topic when that is allowed (intake decided)."""
        with work.traced(self._clock_ms()):
            await self._dead_letter(work, reason, status="")
            await self._emit(work, self._failed(work, reason, None), dead_lettered=True)

    async def poison(
        self,
        offsets: PartitionOffsets,
        offset: int,
        raw: bytes,
        reason: str,
        *,
        key: bytes | None = None,
        about: Sequence[tuple[str, str | bytes | None]] = (),
    ) -> None:
        """A record no retry can fix, or one whose tenant is not believed (``record_origin.py``):
        its raw bytes (and `key`) to the dead-letter topic, with where it came from and `about` it;
        then its offset is complete (no caller to answer)."""
        topic, partition = offsets.topic, offsets.partition
        headers: Headers = [
            (dead_letters.ERROR_HEADER, reason.encode()),
            ("inferq.source.topic", topic.encode()),
            ("inferq.source.partition", str(partition).encode()),
            ("inferq.source.offset", str(offset).encode()),
            *about,
        ]
        if await self._to_dlq(raw, key, headers):
            log.warning("poison record %s[%d]@%d dead-lettered: %s", topic, partition, offset, reason)
            self._metrics.record_dead_letter(topic)
        offsets.complete(offset)

    def _failed(self, work: Work, reason: str, dispatched_at_ms: int | None) -> InferenceResult:
        return self._outcomes.failed(
            work.request,
            self._models.model_for(work),
            reason,
            dispatched_at_ms=dispatched_at_ms,
            now_ms=self._clock_ms(),
        )

    async def _dead_letter(self, work: Work, reason: str, *, status: str) -> None:
        headers: Headers = [
            (dead_letters.ERROR_HEADER, reason.encode()),
            ("inferq.status", status.encode()),
            ("inferq.attempts", str(work.request.attempt).encode()),
            (dead_letters.REQUEST_ID_HEADER, work.request_id.encode()),
            ("inferq.source.topic", work.offsets.topic.encode()),
            ("inferq.source.partition", str(work.offsets.partition).encode()),
            ("inferq.source.offset", str(work.offset).encode()),
        ]
        if await self._to_dlq(work.raw, work.request_id.encode(), headers):
            self._metrics.record_dead_letter(work.offsets.topic)

    async def _to_dlq(self, raw: bytes, key: bytes | None, headers: Headers) -> bool:
        """Write a dead letter (`inferq.messaging.dead_letters`). False when the DLQ refused it;
        the caller's offset completes either way."""
        return await self._dead_letters.write(raw, key=key, headers=headers)

    async def _emit(self, work: Work, result: InferenceResult, *, dead_lettered: bool = False) -> None:
        """Write `result` to the request's reply topic, then complete its offset. A result the reply
        topic cannot take (too large, a topic that does not exist...) sends the request to the
        dead-letter topic (unless it is there already) and a FAILED result to the default results
        topic (unless that is what was just refused)."""
        topic = work.reply_topic or self._topics.results
        key = work.request_id.encode()
        tracing.annotate(tracing.OUTCOME, result.status.value)
        failure = await self.produce_durably(topic, self._results.encode(result), key=key)
        if failure is not None:
            reason = f"result not writable to {topic}: {failure.reason}"
            if not dead_lettered:
                await self._dead_letter(work, reason, status="")
            if topic != self._topics.results or result.error is None:
                result = self._failed(work, reason, result.dispatched_at_ms)
                topic = self._topics.results
                failure = await self.produce_durably(topic, self._results.encode(result), key=key)
        if failure is not None:
            self._metrics.record_unwritable("result")
            log.error(
                "no result of request %s writable to %s, given up (its offset completes): %s",
                work.request_id,
                topic,
                failure.reason,
            )
        else:
            self._metrics.record_outcome(work.tier, result)
            if result.status is Status.OK and topic == (work.reply_topic or self._topics.results):
                self.answered.add(work.request.tenant, work.request_id, topic)
        work.done()

    async def produce_durably(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Headers | None = None
    ) -> ProduceError | None:
        """Produce until the broker acknowledges (None), or until it says it never will (the
        permanent `ProduceError`, returned for the caller to send the record elsewhere): see
        `inferq.messaging.dead_letters.DurableProducer`. Once shutdown has begun and the drain
        bound passes, the task is cancelled: the offset stays uncommitted and the next owner redoes
        the request, so nothing is lost either way."""
        return await self._durable.produce(topic, value, key=key, headers=headers)
