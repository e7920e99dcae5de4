"""`inferq bench replay`: how fast `inferq replay --speed max` re-publishes (target >= 100,000 records/s).

N requests of the evening mix (tiers, keyed by session, as ingest writes them) are written to a
fresh source prefix, then replayed to a fresh target prefix as fast as possible, three times; the
median rate is the figure. The clock covers reading, rewriting, producing and the final flush
(every record acknowledged by the broker). The topics are deleted afterwards. Writes
`<out>/replay.json` and `<out>/replay.md` and prints the markdown.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from inferq.clock import wall_ms
from inferq.messaging.admin import create_topics
from inferq.messaging.codec import request_codec
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import ChatMessage, InferenceRequest
from inferq.messaging.tiers import DEFAULT_DEADLINES_MS, Tier
from inferq.messaging.topics import TopicNames
from inferq.tools.bench.kafka import bench_broker
from inferq.tools.bench.machine import header, publish, run_record, table, verdict
from inferq.tools.loadtest.errors import ReplayError
from inferq.tools.loadtest.replay import Replayer, producer_config
from inferq.tools.loadtest.rewrite import Rewriter
from inferq.tools.loadtest.source import TopicSource
from inferq.tools.loadtest.timerange import TimeRange

TARGET_PER_S = 100_000.0

_MIX = ((Tier.HIGH, "realtime_chat"), (Tier.HIGH, "realtime_chat"), (Tier.MEDIUM, "emotion_analysis"))
_LOW_EVERY = 10  # one record in ten is a morning brief


def fill(settings: KafkaSettings, records: int) -> None:
    """Write `records` requests to the request topics of `settings`' prefix, as ingest would."""
    codec = request_codec()
    producer = Producer(producer_config(settings.admin_config(), paced=False))
    now = wall_ms()
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


def measure_replay_rates(
    bootstrap: str, records: int, *, runs: int, log: Callable[[str], None]
) -> list[float]:
    """Records/s of each of `runs` replays of `records` requests as fast as possible."""
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
        return rates
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


def run(records: int, *, runs: int, out: Path, home: Path) -> int:
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        print(line)

    started = time.monotonic()
    with bench_broker(home, log) as bootstrap:
        rates = measure_replay_rates(bootstrap, records, runs=runs, log=log)
    median = statistics.median(rates)
    document: dict[str, Any] = {
        **run_record("replay", time.monotonic() - started),
        "records": records,
        "runs": runs,
        "median_records_per_s": median,
        "rates_records_per_s": rates,
        "target_records_per_s": TARGET_PER_S,
        "verdict": verdict(median >= TARGET_PER_S),
        "log": lines,
    }
    publish(out, "replay", document, render(document), indent=2)
    return 0


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def render(document: dict[str, Any]) -> str:
    rates = document["rates_records_per_s"]
    fill = next((line for line in document["log"] if line.startswith("filled ")), None)
    return "\n".join(
        [
            "# Replay benchmark",
            "",
            header(document),
            "",
            f"{document['records']:,} requests (Avro, the evening mix of tiers, keyed by session) in a fresh "
            "source prefix, replayed as fast as possible (`inferq replay --speed max`: read, rewrite, "
            f"produce, final flush with every record acknowledged) to a fresh target prefix, "
            f"{document['runs']} times." + (f" Source {fill}." if fill else ""),
            "",
            *table(
                ("", "records/s"),
                [
                    *((f"run {i}", _rate(rate)) for i, rate in enumerate(rates, start=1)),
                    ("**median**", f"**{_rate(document['median_records_per_s'])}**"),
                ],
            ),
            "",
            f"Target: median >= {_rate(document['target_records_per_s'])} records/s: "
            f"**{document['verdict']}**.",
            "",
        ]
    )
