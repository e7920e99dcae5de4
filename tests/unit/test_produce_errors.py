"""How a failed produce is classified: waited out, sent elsewhere, or the end of the producer."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from services.messaging.producer import ProduceError


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
