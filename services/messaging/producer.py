"""confluent-kafka's producer, awaited from asyncio.

librdkafka does batching, idempotence and retries in its own threads; delivery reports arrive
through `poll()`. One small thread polls and hands each report to the event loop, so a coroutine
can `await` the broker's acknowledgement of exactly its record (ingest answers 202 only then; the
dispatcher commits an offset only then).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from services.messaging.errors import MessagingError

POLL_INTERVAL_S = 0.05


class ProduceError(MessagingError):
    """The broker did not acknowledge a record. `retriable` says whether trying again may help."""

    def __init__(self, topic: str, error: KafkaError | str) -> None:
        super().__init__(f"produce to {topic} failed: {error}")
        self.topic = topic
        self.retriable = bool(isinstance(error, KafkaError) and error.retriable())


class AsyncProducer:
    """An idempotent librdkafka producer whose `produce()` is awaitable. Start once, stop once."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = dict(config)
        self._producer: Producer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    async def start(self) -> None:
        if self._producer is not None:
            return
        self._producer = Producer(self._config)
        self._stopping.clear()
        self._thread = threading.Thread(target=self._poll_loop, name="producer-poll", daemon=True)
        self._thread.start()

    def _poll_loop(self) -> None:
        producer = self._producer
        if producer is None:
            return
        while not self._stopping.is_set():
            producer.poll(POLL_INTERVAL_S)

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
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Message] = loop.create_future()

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
