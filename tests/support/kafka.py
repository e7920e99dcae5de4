"""Small, bounded Kafka helpers for tests: produce records, read a topic to its end, read offsets."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from inferq.messaging.acls import ServicePrincipals, apply_grants, service_grants
from inferq.messaging.admin import create_topics
from inferq.messaging.codec import request_codec
from inferq.messaging.record_signing import RecordSigner
from inferq.messaging.records import ChatMessage, InferenceRequest
from inferq.messaging.tiers import Tier
from inferq.tools.broker.broker import BrokerConfig, LocalBroker, pick_free_ports
from inferq.tools.broker.security import ADMIN
from inferq.tools.stack.tenants import SERVICE_RECORD_KEY
from tests.support.waiting import wait_until


def a_request(tier: str = "HIGH", *, deadline_ms: int = 30_000, **overrides: Any) -> InferenceRequest:
    """A valid request of `tier` due in `deadline_ms`; `overrides` replace fields (messages may be
    given as role/content dicts, the tier as a string)."""
    now = int(time.time() * 1000)
    scenario = {"HIGH": "realtime_chat", "MEDIUM": "emotion_analysis", "LOW": "morning_brief"}[tier]
    if "messages" in overrides:
        overrides["messages"] = tuple(ChatMessage(m["role"], m["content"]) for m in overrides["messages"])
    if "tier" in overrides:
        overrides["tier"] = Tier(overrides["tier"])
    request = InferenceRequest(
        request_id=str(uuid.uuid4()),
        tenant="test",
        scenario=scenario,
        tier=Tier(tier),
        created_at_ms=now,
        expire_at_ms=now + deadline_ms,
        messages=(ChatMessage("user", "hello"),),
    )
    return replace(request, **overrides)


def produce(
    bootstrap: str,
    topic: str,
    values: list[bytes],
    *,
    key: bytes | None = None,
    partition: int | None = None,
    signed_with: str | None = None,
    headers: list[tuple[str, bytes]] | None = None,
) -> None:
    """Produce `values`; with `signed_with` (a record key), each signed with it (`record_signing`)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    signer = RecordSigner.with_key(signed_with)
    for value in values:
        extra: dict[str, Any] = {} if partition is None else {"partition": partition}
        sent = [*(headers or []), *signer.headers(key, value)]
        producer.produce(topic, value=value, key=key, headers=sent or None, **extra)
    assert producer.flush(15) == 0, "records not acknowledged within 15 s"


def produce_requests(
    bootstrap: str,
    topic: str,
    requests: list[InferenceRequest],
    *,
    signed_with: str | None = SERVICE_RECORD_KEY,
    **kwargs: Any,
) -> None:
    """Produce `requests`, signed by default with the service record key every tenants file this
    process writes holds (`inferq.tools.stack.tenants.SERVICE_RECORD_KEY`): a dispatcher with such
    a file believes them, one in open mode ignores the signature."""
    produce(
        bootstrap, topic, [request_codec().encode(r) for r in requests], signed_with=signed_with, **kwargs
    )


def reader(bootstrap: str) -> Consumer:
    """A consumer in a group of its own that starts at the earliest offset and commits nothing: it
    reads a topic as a new reader would and leaves no committed offset behind."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def read_all(
    bootstrap: str,
    topic: str,
    *,
    expect: int | None = None,
    until: Callable[[list[Message]], bool] | None = None,
    timeout_s: float = 30.0,
) -> list[Message]:
    """The tests' one topic reader: records of `topic` from its beginning, in the order they come.

    With `expect`, until that many came; with `until`, until it holds of the records so far (asked
    after every poll, records or not); on a timeout these return what came, for the caller to count.
    With neither: every record up to the end offsets the topic had when called, failing when they
    are not reached within `timeout_s`.
    """
    consumer = reader(bootstrap)
    ends: dict[int, int] | None = None
    try:
        if expect is None and until is None:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            ends = {}
            for p in partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                if high > low:
                    ends[p] = high
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        else:
            consumer.subscribe([topic])
        found: list[Message] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ends is not None and not ends:
                break
            if expect is not None and len(found) >= expect:
                break
            if until is not None and until(found):
                break
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            found.append(message)
            partition, offset = message.partition(), message.offset()
            if (
                ends is not None
                and partition in ends
                and offset is not None
                and offset >= ends[partition] - 1
            ):
                del ends[partition]
        assert not ends, (
            f"{topic}: partitions {sorted(ends or ())} not read to their end within {timeout_s} s"
        )
        return found
    finally:
        consumer.close()


# What a partition answers while its leader is still taking over.
_LEADER_MOVING = frozenset(
    {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART}
)


def end_offsets(bootstrap: str, topic: str, *, timeout_s: float = 15.0) -> dict[int, int]:
    """Each partition's end offset. A partition whose leader is still taking over (a topic just
    made: the broker lists a leader a moment before it serves as one) is asked again, within
    `timeout_s`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex}"})
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = metadata.topics[topic].partitions
        deadline = time.monotonic() + timeout_s
        ends: dict[int, int] = {}
        for p in partitions:
            while p not in ends:
                try:
                    ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                except KafkaException as exc:
                    error = exc.args[0]
                    passing = error.retriable() or error.code() in _LEADER_MOVING
                    if not passing or time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        return ends
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        committed = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        return {tp.partition: tp.offset for tp in committed}
    finally:
        consumer.close()


def commit_offsets(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit explicit offsets, (topic, partition) → next offset to read, for `group` (no subscription)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


def a_secured_prefix(broker: LocalBroker) -> str:
    """A fresh topic prefix on the secured `broker`: topics created by admin and the services' ACLs
    applied, with the groups `<prefix>-dispatcher` and `<prefix>-results` (as `Pipeline` names them)."""
    prefix = f"s{uuid.uuid4().hex[:12]}"
    admin = broker.client_settings(ADMIN, topic_prefix=prefix)
    create_topics(admin)
    who = ServicePrincipals(dispatcher_group=f"{prefix}-dispatcher", results_group=f"{prefix}-results")
    apply_grants(admin, service_grants(admin.topics, who))
    return prefix


def use_create_time(bootstrap: str, topics: list[str]) -> None:
    """Put `topics` on producer timestamps (CreateTime), as request topics were before they were
    LogAppendTime, and wait until the broker answers so (a topic's config applies a moment after
    the change is acknowledged)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry("message.timestamp.type", "CreateTime", incremental_operation=AlterConfigOpType.SET)
    resources = [ConfigResource(ResourceType.TOPIC, t, incremental_configs=[entry]) for t in topics]
    for future in admin.incremental_alter_configs(resources).values():
        future.result(timeout=15)

    def applied() -> bool:
        described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in topics])
        return all(
            f.result(timeout=15)["message.timestamp.type"].value == "CreateTime" for f in described.values()
        )

    wait_until(applied, "the topics on CreateTime", 30, interval_s=0.2)


@contextmanager
def own_broker(home: Path) -> Iterator[LocalBroker]:
    """A one-node broker of the test's own, on free ports, which the test may stop and start again
    (the shared broker must never go down); stopped when the block ends."""
    port, controller_port = pick_free_ports(2)
    broker = LocalBroker(BrokerConfig(home=home, port=port, controller_port=controller_port, heap="512m"))
    broker.start(timeout_s=120)
    try:
        yield broker
    finally:
        broker.stop()
