"""Re-publishing recorded requests into request topics, paced by their original gaps or as fast as possible.

Paced (`speed` a number): records go out in timestamp order, each at
``start + (timestamp - first timestamp) / speed``, so a burst stays a burst and a quiet minute stays
quiet, ten times shorter at speed 10. As fast as possible (`speed` None): batches from the source go
straight to the producer, order kept per partition (and so per session key).

The hot path is one Python loop per record: read, rewrite the bytes (`rewrite.py`), `produce()`.
librdkafka does the rest in its threads: large lz4 batches, and delivery reports only for failures,
because a Python callback per record would cost as much as the rewrite.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import KafkaError, Message, Producer

from inferq.client.kafka import producer_signer
from inferq.clock import wall_ms
from inferq.messaging.errors import DecodeError
from inferq.messaging.topics import TopicNames
from inferq.tools.loadtest.errors import ReplayError
from inferq.tools.loadtest.rewrite import Rewriter
from inferq.tools.loadtest.source import SourceRecord

QUEUE_FULL_WAIT_S = 60.0
FLUSH_TIMEOUT_S = 60.0
_MAX_WAIT_STEP_S = 0.1


class Source(Protocol):
    total: int | None

    def batches(self) -> Iterator[list[SourceRecord]]: ...
    def ordered(self) -> Iterator[SourceRecord]: ...
    def close(self) -> None: ...


def producer_config(common: dict[str, Any], *, paced: bool) -> dict[str, Any]:
    conf = dict(common)
    conf.update(
        {
            "client.id": "inferq-replay",
            # No duplicates or reordering from librdkafka's internal retries; implies acks=all.
            "enable.idempotence": True,
            # Bulk: wait to fill big batches. Paced: a record should leave when it is due.
            "linger.ms": 5 if paced else 50,
            "batch.size": 1_000_000,
            "batch.num.messages": 100_000,
            "compression.type": "lz4",
            # Room for a few seconds of records at full speed, so produce() rarely meets a full queue.
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            # Only failures call back into Python (see the module docstring).
            "delivery.report.only.error": True,
            "message.timeout.ms": 60_000,
        }
    )
    return conf


@dataclass
class ReplayStats:
    read: int = 0
    published: int = 0
    filtered: int = 0  # dropped by --scenario
    undecodable: int = 0  # poison records in the source: never re-published
    failed: int = 0  # not acknowledged by the target cluster
    by_tier: dict[str, int] = field(default_factory=dict)
    first_ts: int | None = None
    last_ts: int | None = None
    elapsed_s: float = 0.0
    interrupted: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.published / self.elapsed_s if self.elapsed_s > 0 else 0.0


class Replayer:
    """Re-publishes one source into the request topics of `targets`; owns its producer."""

    def __init__(
        self,
        producer_conf: dict[str, Any],
        targets: TopicNames,
        rewriter: Rewriter,
        *,
        stop: threading.Event | None = None,
        on_progress: Callable[[ReplayStats], None] | None = None,
    ) -> None:
        self._producer = Producer({**producer_conf, "on_delivery": self.on_delivery})
        self._topic = {t: targets.requests_by_name(t) for t in ("HIGH", "MEDIUM", "LOW")}
        self._rewriter = rewriter
        # Rewritten records carry new bytes: signed afresh with $INFERQ_RECORD_KEY when set (the
        # target pipeline's service key verifies every tenant's; docs/tenants.md).
        self._sign = producer_signer(None).headers
        self._stop = stop or threading.Event()
        self._on_progress = on_progress or (lambda _: None)
        self.stats = ReplayStats()

    def on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        """The producer's delivery callback (``on_delivery`` in its config): called only for failures."""
        if err is not None:
            self.stats.failed += 1
            if len(self.stats.errors) < 5:
                self.stats.errors.append(str(err))

    def run(self, source: Source, *, speed: float | None) -> ReplayStats:
        if speed is not None and speed <= 0:
            raise ValueError(f"speed must be positive, got {speed}")
        started = time.monotonic()
        try:
            if speed is None:
                self._as_fast_as_possible(source)
            else:
                self._paced(source, speed)
        finally:
            self.stats.interrupted = self._stop.is_set()
            left = self._producer.flush(FLUSH_TIMEOUT_S)
            self.stats.failed += left
            self.stats.elapsed_s = time.monotonic() - started
            self._on_progress(self.stats)
        return self.stats

    def _as_fast_as_possible(self, source: Source) -> None:
        stats, by_tier, topic = self.stats, self.stats.by_tier, self._topic
        produce = self._producer.produce
        for batch in source.batches():
            rewrite = self._rewriter.at(wall_ms())
            for _ts, tier, key, value, _topic, _partition, _offset in batch:
                try:
                    fresh = rewrite(value)
                except DecodeError:
                    stats.undecodable += 1
                    continue
                if fresh is None:
                    stats.filtered += 1
                    continue
                try:
                    produce(topic[tier], fresh, key, headers=self._sign(key, fresh) or None)
                except BufferError:
                    self._wait_for_room(topic[tier], fresh, key)
                by_tier[tier] = by_tier.get(tier, 0) + 1
            stats.read += len(batch)
            stats.published = sum(by_tier.values())
            if batch:
                # Batches interleave partitions, so the span comes from the extremes, not the ends.
                lo, hi = min(r[0] for r in batch), max(r[0] for r in batch)
                stats.first_ts = lo if stats.first_ts is None else min(stats.first_ts, lo)
                stats.last_ts = hi if stats.last_ts is None else max(stats.last_ts, hi)
            self._producer.poll(0)
            self._on_progress(stats)
            if self._stop.is_set():
                return

    def _paced(self, source: Source, speed: float) -> None:
        stats = self.stats
        first: int | None = None
        origin = 0.0
        for ts, tier, key, value, _topic, _partition, _offset in source.ordered():
            if first is None:
                # The clock starts at the first record, not at run(): fetching it may take a while,
                # and measured from run() the first gaps would already be spent.
                first = stats.first_ts = ts
                origin = time.monotonic()
            due = origin + (ts - first) / 1000 / speed
            while (delay := due - time.monotonic()) > 0 and not self._stop.is_set():
                self._producer.poll(0)
                self._on_progress(stats)
                self._stop.wait(min(delay, _MAX_WAIT_STEP_S))
            if self._stop.is_set():
                return
            stats.read += 1
            stats.last_ts = ts
            try:
                fresh = self._rewriter.rewrite(value, wall_ms())
            except DecodeError:
                stats.undecodable += 1
                continue
            if fresh is None:
                stats.filtered += 1
                continue
            try:
                self._producer.produce(self._topic[tier], fresh, key, headers=self._sign(key, fresh) or None)
            except BufferError:
                self._wait_for_room(self._topic[tier], fresh, key)
            stats.by_tier[tier] = stats.by_tier.get(tier, 0) + 1
            stats.published += 1
            self._producer.poll(0)
            self._on_progress(stats)

    def _wait_for_room(self, topic: str, value: bytes, key: bytes | None) -> None:
        """The producer's queue is full: serve delivery reports until it takes the record (bounded)."""
        deadline = time.monotonic() + QUEUE_FULL_WAIT_S
        while time.monotonic() < deadline:
            self._producer.poll(0.05)
            try:
                self._producer.produce(topic, value, key, headers=self._sign(key, value) or None)
            except BufferError:
                continue
            return
        raise ReplayError(
            f"the producer's queue stayed full for {QUEUE_FULL_WAIT_S:.0f} s: is the target cluster up?"
        )


def summary(stats: ReplayStats, *, run_id: str, speed: float | None) -> str:
    head = "interrupted" if stats.interrupted else "done"
    pace = "as fast as possible" if speed is None else f"at speed {speed:g}"
    lines = [
        f"replay {run_id} {head} ({pace}): {stats.published:,} records re-published "
        f"in {stats.elapsed_s:.2f} s ({stats.rate:,.0f} records/s)",
        f"  read {stats.read:,}, filtered out {stats.filtered:,}, undecodable {stats.undecodable:,}, "
        f"not acknowledged {stats.failed:,}",
        "  by tier: " + (", ".join(f"{t} {n:,}" for t, n in sorted(stats.by_tier.items())) or "none"),
    ]
    if stats.first_ts is not None and stats.last_ts is not None:
        span_s = (stats.last_ts - stats.first_ts) / 1000
        lines.append(
            f"  recorded span {span_s:.1f} s"
            + ("" if speed is None else f", replayed in {span_s / speed:.1f} s")
        )
    lines.extend(f"  delivery error: {e}" for e in stats.errors)
    return "\n".join(lines)
