"""How fast `inferq replay --speed max` re-publishes: records/s, median of several runs.

`measure_replay_rate` fills a fresh source prefix with N requests (the evening mix of tiers, keyed
by session, as ingest writes them), replays them to a fresh target prefix as fast as possible, and
returns the median rate. The clock covers reading, rewriting, producing and the final flush (every
record acknowledged by the broker). The topics it created are deleted afterwards.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from inferq.messaging.admin import create_topics
from inferq.messaging.codec import request_codec
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import ChatMessage, InferenceRequest
from inferq.messaging.tiers import DEFAULT_DEADLINES_MS, Tier
from inferq.messaging.topics import TopicNames
from inferq.tools.loadtest.errors import ReplayError
from inferq.tools.loadtest.replay import Replayer, producer_config
from inferq.tools.loadtest.rewrite import Rewriter
from inferq.tools.loadtest.source import TopicSource
from inferq.tools.loadtest.timerange import TimeRange

_MIX = ((Tier.HIGH, "realtime_chat"), (Tier.HIGH, "realtime_chat"), (Tier.MEDIUM, "emotion_analysis"))
_LOW_EVERY = 10  # one record in ten is a morning brief


def fill(settings: KafkaSettings, records: int) -> None:
    """Write `records` requests to the request topics of `settings`' prefix, as ingest would."""
    codec = request_codec()
    producer = Producer(producer_config(settings.admin_config(), paced=False))
    now = time.time_ns() // 1_000_000
    for i in range(records):
        tier, scenario = (Tier.LOW, "morning_brief") if i % _LOW_EVERY == 0 else _MIX[i % len(_MIX)]
        session = f"{scenario}-{i % 500}"
        value = codec.encode(
            InferenceRequest(
                request_id=str(uuid.UUID(int=i)),
                tenant="bench",
                scenario=scenario,
                tier=tier,
                created_at_ms=now + i,
                expire_at_ms=now + i + DEFAULT_DEADLINES_MS[tier],
                estimated_tokens=225,
                session_id=session,
                messages=(ChatMessage("user", f"Hi, it's me again ({i}). How was your day?"),),
                params={"max_tokens": "150"},
            )
        )
        while True:
            try:
                producer.produce(settings.topics.requests(tier), value, session.encode())
                break
            except BufferError:
                producer.poll(0.05)  # the local queue is full: let deliveries drain it
    if producer.flush(120.0):
        raise ReplayError("the bench's source records were not all acknowledged within 120 s")


def replay_once(source: KafkaSettings, target: KafkaSettings, run_id: str) -> tuple[float, int]:
    """One replay as fast as possible from `source`'s to `target`'s request topics: (records/s, records)."""
    tiers = [t.value for t in Tier]
    topic_source = TopicSource(source.admin_config(), source.topics, tiers, TimeRange())
    try:
        replayer = Replayer(
            producer_config(target.admin_config(), paced=False), target.topics, Rewriter(run_id)
        )
        stats = replayer.run(topic_source, speed=None)
    finally:
        topic_source.close()
    if stats.failed or stats.undecodable:
        raise ReplayError(
            f"bench replay lost records: {stats.failed} failed, {stats.undecodable} undecodable"
        )
    return stats.rate, stats.published


def measure_replay_rate(
    bootstrap: str, records: int = 200_000, *, runs: int = 3, log: Callable[[str], None] = lambda _: None
) -> float:
    """Median records/s of `runs` replays of `records` requests as fast as possible."""
    tag = uuid.uuid4().hex[:8]
    source = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=f"bench-replay-{tag}-src")
    prefixes = [source.topic_prefix]
    try:
        create_topics(source)
        started = time.monotonic()
        fill(source, records)
        log(f"filled {records:,} records in {time.monotonic() - started:.1f} s")
        rates = []
        for run in range(runs):
            target = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=f"bench-replay-{tag}-dst{run}")
            prefixes.append(target.topic_prefix)
            create_topics(target)
            rate, published = replay_once(source, target, f"bench{run}")
            if published != records:
                raise ReplayError(f"bench replay re-published {published} of {records} records")
            log(f"run {run + 1}: {published:,} records at {rate:,.0f} records/s")
            rates.append(rate)
        return statistics.median(rates)
    finally:
        _delete_prefixes(bootstrap, prefixes, log)


def _delete_prefixes(bootstrap: str, prefixes: list[str], log: Callable[[str], None]) -> None:
    """Delete the bench's topics: half a million records are not worth keeping on a shared broker."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [spec.name for p in prefixes for spec in TopicNames(p).specs()]
    for name, future in admin.delete_topics(names, operation_timeout=30).items():
        error = future.exception(timeout=30)
        if error is not None:
            # Not raised: this runs in a finally, and must not hide the error that got us here.
            log(f"could not delete bench topic {name}: {error}")
