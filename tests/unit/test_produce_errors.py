"""How a failed produce is classified: waited out, sent elsewhere, or the end of the producer."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import KafkaError

from inferq.messaging.producer import AsyncProducer, ProduceError


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.TOPIC_EXCEPTION,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    ],
)
def test_what_no_wait_can_fix_is_not_retriable(code: int) -> None:
    error = ProduceError("t", KafkaError(code))
    assert (error.retriable, error.fatal) == (False, False)
    assert error.code == code
    assert error.reason == KafkaError(code).str()  # librdkafka's short text, fit for a header


@pytest.mark.parametrize(
    "code", [KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT, KafkaError.NOT_LEADER_FOR_PARTITION]
)
def test_an_outage_is_retriable_even_where_librdkafka_says_it_is_not(code: int) -> None:
    assert ProduceError("t", KafkaError(code, retriable=False)).retriable


def test_a_fatal_error_is_fatal_and_not_retriable() -> None:
    error = ProduceError("t", KafkaError(KafkaError._FATAL, fatal=True))
    assert (error.fatal, error.retriable) == (True, False)


def test_a_full_local_queue_is_retriable() -> None:
    assert ProduceError("t", "local queue full").retriable


def test_only_size_errors_say_too_large() -> None:
    assert ProduceError("t", KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)).too_large
    assert not ProduceError("t", KafkaError(KafkaError.TOPIC_EXCEPTION)).too_large


def test_a_fatal_error_fails_every_pending_acknowledgement_and_later_produces() -> None:
    """A fatal error reaches no delivery report: without this, awaited acknowledgements hang."""

    async def scenario() -> tuple[ProduceError, ProduceError]:
        # Nothing listens there: the record stays queued, its acknowledgement pending.
        producer = AsyncProducer({"bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": 60_000})
        await producer.start()
        try:
            pending = asyncio.ensure_future(producer.produce("t", b"v"))
            await asyncio.sleep(0.05)
            assert not pending.done()
            producer._on_error(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
            with pytest.raises(ProduceError) as first:
                await asyncio.wait_for(pending, 5.0)
            with pytest.raises(ProduceError) as later:
                await producer.produce("t", b"w")
            return first.value, later.value
        finally:
            await producer.stop(flush_timeout_s=0.1)

    first, later = asyncio.run(scenario())
    assert first.fatal and not first.retriable
    assert later.fatal
