"""Producing until the broker acknowledges, and the dead-letter topic: shared by every writer of it.

Two services write dead letters: the dispatcher (poison records, refused requests, exhausted
retries) and the results service (webhooks that could not be delivered). Both go through here:

- `DurableProducer.produce` produces until the broker acknowledges (None) or says it never will
  (the permanent `ProduceError`, returned for the caller to send the record elsewhere). An outage
  or a timeout is waited out, librdkafka's retries first, then ours with a pause doubling up to
  `MAX_PRODUCE_PAUSE_S`. "Unknown topic" for the pipeline's own topics (`own_topics`: checked at
  start) is waited out too: a broker still loading its metadata, not a topic that will never be.
  A fatal producer error calls `on_fatal` and raises.
- `DeadLetters.write` writes one dead letter; one over the DLQ's size limit is written again cut
  to `DLQ_TRUNCATE_BYTES`, with the original size in a header. False when the DLQ refused it
  (logged and counted by the caller's `on_unwritable`).

The headers every dead letter may carry are named here (`ERROR_HEADER`...), so a reader of the DLQ
sees one vocabulary whoever wrote the record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from typing import Protocol

from inferq.messaging.producer import ProduceError

log = logging.getLogger("inferq.messaging")

Headers = list[tuple[str, str | bytes | None]]
MAX_PRODUCE_PAUSE_S = 10.0
FIRST_PRODUCE_PAUSE_S = 0.5
# A dead letter over the DLQ's size limit keeps this much of the record, and says so in a header.
DLQ_TRUNCATE_BYTES = 64 * 1024

# Why the record is here (short, free of secrets), and what it was about.
ERROR_HEADER = "inferq.error"
REQUEST_ID_HEADER = "inferq.request_id"
TENANT_HEADER = "inferq.tenant"
# What kind of dead letter: absent for a request record, "webhook" for an undelivered outcome.
KIND_HEADER = "inferq.dead_letter.kind"
TRUNCATED_HEADER = "inferq.truncated_from"


class RecordProducer(Protocol):
    """What a durable writer needs of a producer (`messaging.producer.AsyncProducer` in production)."""

    async def produce(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Headers | None = None
    ) -> object:
        """Return once the broker acknowledged the record (acks=all); `ProduceError` if it did not."""
        ...


def _ignore_fatal(error: ProduceError) -> None:
    """An owner that passes no `on_fatal`: a fatal producer error only raises."""


class DurableProducer:
    """`produce` until acknowledged or refused for good (module docstring)."""

    def __init__(
        self,
        producer: RecordProducer,
        *,
        own_topics: Collection[str] = (),
        on_fatal: Callable[[ProduceError], None] = _ignore_fatal,
    ) -> None:
        self._producer = producer
        self._own_topics = frozenset(own_topics)
        # E.g. stops the dispatcher when the producer is unusable; by default, the error only raises.
        self._on_fatal = on_fatal

    async def produce(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Headers | None = None
    ) -> ProduceError | None:
        """Produce until the broker acknowledges (None), or until it says it never will (the
        permanent `ProduceError`). Cancelling the task is the only other way out: an owner that
        stops gives up on the record, which it has not marked done, so it is redone later."""
        pause_s = FIRST_PRODUCE_PAUSE_S
        while True:
            try:
                await self._producer.produce(topic, value, key=key, headers=headers)
            except ProduceError as exc:
                if exc.fatal:
                    log.exception("the producer failed for good: %s", exc.reason)
                    self._on_fatal(exc)
                    raise
                if not exc.retriable and not (exc.unknown_topic and topic in self._own_topics):
                    log.warning("produce to %s refused for good: %s", topic, exc.reason)
                    return exc
                log.error(  # noqa: TRY400 - the reason is the message; a traceback per retry is noise
                    "produce to %s failed, trying again in %.1f s: %s", topic, pause_s, exc.reason
                )
                await asyncio.sleep(pause_s)
                pause_s = min(pause_s * 2, MAX_PRODUCE_PAUSE_S)
            else:
                return None


class DeadLetters:
    """Writes dead letters to `topic` through `producer`; `on_unwritable` is called for each one
    the topic refused for good (a metric), after it is logged."""

    def __init__(
        self, producer: DurableProducer, topic: str, *, on_unwritable: Callable[[], None] = lambda: None
    ) -> None:
        self._producer = producer
        self._topic = topic
        self._on_unwritable = on_unwritable

    @property
    def topic(self) -> str:
        return self._topic

    async def write(self, raw: bytes, *, key: bytes | None, headers: Headers) -> bool:
        """Write a dead letter; one too large is written again, cut. False when the DLQ refused it."""
        failure = await self._producer.produce(self._topic, raw, key=key, headers=headers)
        if failure is not None and failure.too_large and len(raw) > DLQ_TRUNCATE_BYTES:
            cut: Headers = [*headers, (TRUNCATED_HEADER, str(len(raw)).encode())]
            failure = await self._producer.produce(
                self._topic, raw[:DLQ_TRUNCATE_BYTES], key=key, headers=cut
            )
        if failure is not None:
            self._on_unwritable()
            log.error("dead letter not writable, given up: %s", failure.reason)
            return False
        return True
