"""confluent-kafka's producer, awaited from asyncio.

librdkafka does batching, idempotence and retries in its own threads; delivery reports arrive
through `poll()`. One small thread polls and hands each report to the event loop, so a coroutine
can `await` the broker's acknowledgement of exactly its record (ingest answers 202 only then; the
dispatcher commits an offset only then).

A failed produce raises `ProduceError`, classified from librdkafka's `KafkaError`:

- `fatal`: the producer instance is unusable (librdkafka's `fatal()`, e.g. a fenced idempotent
  producer); nothing it produces will ever be acknowledged;
- not `retriable`: this record can never be written where it was sent, however long one waits (the
  topic name is invalid or unknown, the record is too large, writing is not authorised...:
  `PERMANENT_CODES`);
- otherwise `retriable`: an outage or a timeout (librdkafka already retried for
  `message.timeout.ms`), worth trying again after a pause. librdkafka's own `retriable()` flag is
  not used for this: it is false for a message timeout, which is exactly what a broker outage
  produces and what must be waited out.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from inferq.messaging.errors import MessagingError

POLL_INTERVAL_S = 0.05


# Errors no wait can fix: the record goes elsewhere (the dead-letter topic) instead.
PERMANENT_CODES = frozenset(
    {
        KafkaError.TOPIC_EXCEPTION,  # "Invalid topic": a name Kafka refuses
        KafkaError.UNKNOWN_TOPIC_OR_PART,  # with auto-creation off, the topic does not exist
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.MSG_SIZE_TOO_LARGE,  # over the topic's max.message.bytes
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_TIMESTAMP,
        KafkaError.POLICY_VIOLATION,
        KafkaError._INVALID_ARG,  # refused by librdkafka itself (e.g. over message.max.bytes)
    }
)
_UNKNOWN_TOPIC_CODES = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
)
# librdkafka reports a record over its own message.max.bytes as this code from produce().
_LOCAL_SIZE_CODES = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})


class ProduceError(MessagingError):
    """The broker did not acknowledge a record.

    `retriable`: trying again later may help (an outage); `fatal`: the producer itself is unusable;
    `too_large`: the record is over a size limit; `unknown_topic`: the broker does not know the topic;
    `code`: librdkafka's error code, if there is one.
    """

    def __init__(self, topic: str, error: KafkaError | str) -> None:
        super().__init__(f"produce to {topic} failed: {error}")
        self.topic = topic
        self.code: int | None = error.code() if isinstance(error, KafkaError) else None
        self.fatal = bool(isinstance(error, KafkaError) and error.fatal())
        self.retriable = not self.fatal and self.code not in PERMANENT_CODES
        self.too_large = self.code in _LOCAL_SIZE_CODES
        self.unknown_topic = self.code in _UNKNOWN_TOPIC_CODES
        # Short and free of record content: fit for a dead-letter header and a FAILED result.
        self.reason = error.str() if isinstance(error, KafkaError) else error


class AsyncProducer:
    """An idempotent librdkafka producer whose `produce()` is awaitable. Start once, stop once."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = dict(config)
        self._producer: Producer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        # Acknowledgements awaited right now: failed together when the producer dies (a fatal error
        # reaches no delivery report, so they would wait forever).
        self._pending: set[asyncio.Future[Message]] = set()
        self._fatal: KafkaError | None = None

    async def start(self) -> None:
        if self._producer is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._producer = Producer(self._config | {"error_cb": self._on_error})
        self._stopping.clear()
        self._thread = threading.Thread(target=self._poll_loop, name="producer-poll", daemon=True)
        self._thread.start()

    def _on_error(self, error: KafkaError) -> None:
        """librdkafka's error callback (poll thread): only a fatal error changes anything here; the
        others (a broker down for a while...) surface as delivery reports when they matter."""
        if error.fatal() and self._fatal is None:
            self._fatal = error
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._fail_pending, error)

    def _fail_pending(self, error: KafkaError) -> None:
        for future in list(self._pending):
            if not future.done():
                future.set_exception(ProduceError("(any)", error))
        self._pending.clear()

    def _poll_loop(self) -> None:
        producer = self._producer
        if producer is None:
            return
        while not self._stopping.is_set():
            try:
                producer.poll(POLL_INTERVAL_S)
            except KafkaException as exc:
                # Raised by poll() for an error with no callback to take it: keep polling, so
                # delivery reports still arrive; a fatal one fails what is pending.
                error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                if error is not None:
                    self._on_error(error)

    async def produce(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
        timeout_s: float | None = None,
    ) -> Message:
        """Produce one record and wait for the broker's acknowledgement (acks=all)."""
        if self._producer is None:
            raise MessagingError("producer not started")
        if self._fatal is not None:
            raise ProduceError(topic, self._fatal)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Message] = loop.create_future()
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            loop.call_soon_threadsafe(_settle, future, topic, err, msg)

        try:
            self._producer.produce(topic, value=value, key=key, headers=headers, on_delivery=on_delivery)
        except BufferError as exc:
            raise ProduceError(topic, "local queue full") from exc
        except KafkaException as exc:
            raise ProduceError(topic, exc.args[0]) from exc
        if timeout_s is None:
            return await future
        return await asyncio.wait_for(future, timeout_s)

    async def stop(self, flush_timeout_s: float = 10.0) -> int:
        """Flush what is queued (bounded), then stop polling. Returns records left undelivered."""
        if self._producer is None:
            return 0
        self._stopping.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 2.0)
        remaining: int = await asyncio.to_thread(self._producer.flush, flush_timeout_s)
        self._producer = None
        return remaining


def _settle(future: asyncio.Future[Message], topic: str, err: KafkaError | None, msg: Message) -> None:
    if future.done():
        return
    if err is not None:
        future.set_exception(ProduceError(topic, err))
    else:
        future.set_result(msg)
