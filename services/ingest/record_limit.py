"""The largest record ingest may hand to Kafka, so an oversized request is 413 before any produce.

Two limits apply to one record: the producer's ``message.max.bytes`` (librdkafka refuses a bigger
record at once, which used to surface as a 503) and the request topics' ``max.message.bytes`` (the
broker refuses a bigger batch). The body limit (1 MiB) does not bound the record: text outside ASCII
takes 2 to 4 bytes per character, and the record adds its own fields. So the encoded record, key
included, is checked against the smaller limit less `RECORD_OVERHEAD_BYTES`.

The topics' limit is read once at start-up (`RecordLimit.read_topics`, with the reader it was built
with, `read_topics_max_message_bytes` in the service); when it cannot be read, the producer's limit
alone applies and a broker refusal still answers 413 (`is_too_large`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaError, KafkaException

# Public names of confluent_kafka.admin, which has no __all__ for mypy to see them re-exported.
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]

from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.producer import ProduceError

log = logging.getLogger("inferq.ingest")

# librdkafka's default message.max.bytes.
LIBRDKAFKA_MESSAGE_MAX_BYTES = 1_000_000
# A record's framing on the wire (record batch header, varint lengths, attributes) and its headers
# (the signature, ~85 bytes; the trace context, ~70), with room: librdkafka counts it into
# message.max.bytes, the broker into max.message.bytes.
RECORD_OVERHEAD_BYTES = 512
_TOO_LARGE = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE}


class RecordLimit:
    """The bound of one record's key + value: the smallest known Kafka limit less the overhead.

    `topics_max_bytes` reads the request topics' limit (blocking: it runs in a thread; None when
    the broker does not say); `read_topics` runs it, at start-up."""

    def __init__(
        self,
        producer_max_bytes: int,
        *,
        topics_max_bytes: Callable[[], int | None],
        cap_bytes: int | None = None,
    ) -> None:
        if producer_max_bytes <= RECORD_OVERHEAD_BYTES:
            raise ValueError(f"message.max.bytes must exceed {RECORD_OVERHEAD_BYTES}")
        self.producer_max_bytes = producer_max_bytes
        self._read_topics_max_bytes = topics_max_bytes
        self.topic_max_bytes: int | None = None
        self.cap_bytes = cap_bytes

    async def read_topics(self) -> None:
        """Learn the request topics' limit (until then, and when unknown, the producer's applies)."""
        self.topic_max_bytes = await asyncio.to_thread(self._read_topics_max_bytes)

    @property
    def max_record_bytes(self) -> int:
        known = [self.producer_max_bytes, self.topic_max_bytes]
        limit = min(b for b in known if b is not None) - RECORD_OVERHEAD_BYTES
        return limit if self.cap_bytes is None else min(limit, self.cap_bytes)

    def fits(self, key: bytes, value: bytes) -> bool:
        return len(key) + len(value) <= self.max_record_bytes


def producer_max_message_bytes(config: dict[str, object]) -> int:
    """The ``message.max.bytes`` a librdkafka configuration sets (its default when unset)."""
    value = config.get("message.max.bytes", LIBRDKAFKA_MESSAGE_MAX_BYTES)
    return int(str(value))


def read_topics_max_message_bytes(
    kafka: KafkaSettings, topics: Iterable[str], *, timeout_s: float = 10.0
) -> int | None:
    """The smallest ``max.message.bytes`` of `topics`, or None when the broker does not say."""
    admin = AdminClient(kafka.admin_config())
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in topics]
    limits: list[int] = []
    try:
        futures = admin.describe_configs(resources, request_timeout=timeout_s)
        for resource, future in futures.items():
            entry = future.result(timeout=timeout_s).get("max.message.bytes")
            if entry is not None and entry.value is not None:
                limits.append(int(entry.value))
            else:
                log.warning("topic %s does not report max.message.bytes", resource.name)
    except (KafkaException, TimeoutError, ValueError) as exc:
        log.warning("cannot read the request topics' max.message.bytes, using the producer's: %s", exc)
        return None
    return min(limits, default=None)


def is_too_large(exc: BaseException) -> bool:
    """Whether a produce failed because the record is too large (librdkafka's or the broker's word)."""
    cause = exc.__cause__ if isinstance(exc, ProduceError) else None
    error = cause.args[0] if isinstance(cause, KafkaException) and cause.args else None
    return isinstance(error, KafkaError) and error.code() in _TOO_LARGE
