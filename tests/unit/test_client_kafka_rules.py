"""The Kafka-native client's checks before it touches Kafka: a request ingest would refuse is
refused with the same field named, and no connection is even tried (the broker here does not exist:
reaching for it would fail differently, after its timeout)."""

from __future__ import annotations

import asyncio

import pytest

from inferq.client import InferqClient, InvalidRequestError
from inferq.client.kafka import KafkaTransport
from inferq.messaging.record_signing import SIGNATURE_HEADER, hmac_key, verify
from inferq.tenancy.secret_forms import new_record_key

NOWHERE = "127.0.0.1:1"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "bot", "content": "x"}]}, "messages.0.role"),
        ({"request_id": "has spaces"}, "request_id"),
        ({"deadline_ms": 10**12}, "deadline_ms"),
        ({"params": {"stream": True}}, "params.stream"),
        ({"params": {"temperature": 9}}, "params.temperature"),
        ({"scenario": "x" * 65}, "scenario"),
        ({"session_id": 5}, "session_id"),
        ({"priority": "NOW"}, "priority"),
        ({"estimated_tokens": -1}, "estimated_tokens"),
        ({"messages": [{"role": "user", "content": "\ud800"}]}, "messages.0.content"),
    ],
)
def test_a_bad_request_is_refused_before_anything_is_produced(options: dict[str, object], named: str) -> None:
    async def body() -> None:
        async with InferqClient(KafkaTransport(NOWHERE, region="eu")) as client:
            fields = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "hi"}]} | options
            with pytest.raises(InvalidRequestError) as raised:
                await client.submit(fields.pop("scenario"), fields.pop("messages"), **fields)  # type: ignore[arg-type]
            assert named in [p["field"] for p in raised.value.problems]

    asyncio.run(asyncio.wait_for(body(), 10))


@pytest.mark.parametrize("region", ["EU", "results", "a.b", "", "x" * 33])
def test_a_region_that_cannot_name_a_reply_topic_is_refused(region: str) -> None:
    with pytest.raises(ValueError, match="region"):
        KafkaTransport("127.0.0.1:1", region=region)


def test_a_record_key_that_is_not_one_is_refused_without_echoing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="record_key must be 'irk_'") as raised:
        KafkaTransport(NOWHERE, record_key="not-a-key-at-all")
    assert "not-a-key-at-all" not in str(raised.value)
    monkeypatch.setenv("INFERQ_RECORD_KEY", "irk_short")
    with pytest.raises(ValueError, match="record_key"):
        KafkaTransport(NOWHERE)


def test_records_are_signed_with_the_given_key_or_the_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the transport attaches to each record it produces (its signer): a signature the key
    verifies, from the argument or else $INFERQ_RECORD_KEY; none without a key."""
    given, from_env = new_record_key(), new_record_key()
    monkeypatch.setenv("INFERQ_RECORD_KEY", from_env)
    for transport, key in (
        (KafkaTransport(NOWHERE, record_key=given), given),
        (KafkaTransport(NOWHERE), from_env),
    ):
        [(name, signature)] = transport._signer.headers(b"s", b"value")
        assert name == SIGNATURE_HEADER and isinstance(signature, bytes)
        assert verify(signature, [hmac_key(key)], b"s", b"value")
    monkeypatch.delenv("INFERQ_RECORD_KEY")
    assert KafkaTransport(NOWHERE)._signer.headers(b"s", b"value") == []
