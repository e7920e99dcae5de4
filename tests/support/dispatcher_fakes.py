"""Fakes (not mocks) of the dispatcher's edges, so its steps run in unit tests without a broker:

- `InMemoryConsumer`: one member of a consumer group over in-memory partition logs, keeping the
  `TierConsumer` contract (positions, seek, pause, commits with metadata, eager rebalances that
  forget pauses, refused commits on request);
- `HeldProducer`: acknowledges records, or holds every acknowledgement until the test releases them,
  or refuses the records of a topic (or those over a size) with the `ProduceError` librdkafka would give;
- `HeldBackend`: answers calls OK at once, or holds them, or fails them, as the test says; a
  streamed call hands its `pieces` over one by one, failing after some of them when told;
- `RecordingTokenPool`: the exact local pool, its start and stop recorded;
- `ManualClock`: wall-clock milliseconds that move only when the test moves them.

They share an `events` list, so a test can read the order in which the dispatcher used its edges.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from confluent_kafka import KafkaError

from inferq.clock import wall_ms
from inferq.dispatcher.backend import Completion
from inferq.dispatcher.bootstrap import Dispatcher, TokenSupply, bootstrap
from inferq.dispatcher.consumer import (
    Batches,
    CommitPoint,
    FetchedRecord,
    Partition,
    RebalanceListener,
    Unfetched,
)
from inferq.dispatcher.deltas import StreamDelta
from inferq.dispatcher.errors import BackendError, CommitFailedError
from inferq.dispatcher.settings import DispatcherSettings
from inferq.dispatcher.tokens import LocalTokenPool
from inferq.messaging.codec import request_codec, result_codec
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.producer import ProduceError
from inferq.messaging.record_signing import RecordSigner
from inferq.messaging.records import InferenceRequest, InferenceResult, is_chunk
from inferq.messaging.topics import TopicNames
from inferq.tools.stack.tenants import SERVICE_RECORD_KEY
from tests.support.waiting import eventually

Headers = list[tuple[str, str | bytes | None]]


@dataclass(frozen=True)
class Record:
    """A consumed record; by default unkeyed, without headers, with a CreateTime timestamp of 0."""

    offset: int
    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int = 0
    timestamp_type: int = 0


class InMemoryConsumer:
    """Partition logs in memory and one group member consuming them (every partition, at first)."""

    def __init__(self, partitions: Mapping[str, int], events: list[str] | None = None) -> None:
        self.logs: dict[Partition, list[bytes | None]] = {
            Partition(topic, p): [] for topic, count in partitions.items() for p in range(count)
        }
        self.events = events if events is not None else []
        self.group_commits: dict[Partition, CommitPoint] = {}
        self.refuse_commits = 0  # the next this many commits raise CommitFailedError
        self.seeks: list[tuple[Partition, int]] = []
        self._positions: dict[Partition, int] = {}
        self._assigned: set[Partition] = set()
        self._paused: set[Partition] = set()
        self._listener: RebalanceListener | None = None
        self._changed: asyncio.Event | None = None
        # What a record has beside its value, when the test gave it (`produce`).
        self._extras: dict[tuple[Partition, int], dict[str, Any]] = {}

    @classmethod
    def for_topics(
        cls, topics: TopicNames, events: list[str] | None = None, partitions_each: int = 1
    ) -> InMemoryConsumer:
        return cls(dict.fromkeys([*topics.all_requests, topics.retry], partitions_each), events)

    # -- what a test does ------------------------------------------------------------------------

    def produce(
        self,
        partition: Partition,
        value: bytes | None,
        *,
        signed_with: str | None = SERVICE_RECORD_KEY,
        **extras: Any,
    ) -> int:
        """Append `value`; `extras` are `Record` fields (key, headers, timestamp, timestamp_type).
        Unless `headers` are given, the record is signed with `signed_with` (by default the
        service key of every tenants file the tests write; a dispatcher in open mode ignores it)."""
        log = self.logs[partition]
        log.append(value)
        if "headers" not in extras and value is not None and signed_with is not None:
            signer = RecordSigner.with_key(signed_with)
            extras["headers"] = tuple(signer.headers(extras.get("key"), value))
        if extras:
            self._extras[partition, len(log) - 1] = extras
        self._notify()
        return len(log) - 1

    def position(self, partition: Partition) -> int:
        return self._positions[partition]

    def committed_offset(self, partition: Partition) -> int | None:
        point = self.group_commits.get(partition)
        return point.offset if point is not None else None

    async def rebalance(self, assigned: Collection[Partition]) -> None:
        """An eager rebalance: everything revoked, then `assigned` given (pauses are forgotten)."""
        if self._listener is None:
            raise RuntimeError("rebalance before start")
        if self._assigned:
            await self._listener.on_revoked(sorted(self._assigned))
        self._assigned = set(assigned)
        self._paused.clear()
        for partition in self._assigned:
            point = self.group_commits.get(partition)
            self._positions[partition] = point.offset if point is not None else 0
        await self._listener.on_assigned(sorted(self._assigned))
        self._notify()

    # -- TierConsumer ----------------------------------------------------------------------------

    async def start(self, listener: RebalanceListener) -> None:
        self.events.append("consumer.start")
        self._listener = listener
        await self.rebalance(self.logs)

    async def stop(self) -> None:
        self.events.append("consumer.stop")
        self._assigned = set()

    def assignment(self) -> set[Partition]:
        return set(self._assigned)

    async def fetch(self, max_records: int, timeout_ms: int) -> Batches:
        batches = self._take(max_records)
        if not batches:
            changed = self._changed = asyncio.Event()
            try:
                await asyncio.wait_for(changed.wait(), timeout_ms / 1000)
            except TimeoutError:
                return {}
            batches = self._take(max_records)
        return batches

    def _take(self, max_records: int) -> dict[Partition, list[FetchedRecord]]:
        batches: dict[Partition, list[FetchedRecord]] = {}
        for partition in sorted(self._assigned - self._paused):
            log, position = self.logs[partition], self._positions[partition]
            records = [
                Record(o, log[o], **self._extras.get((partition, o), {}))
                for o in range(position, min(len(log), position + max_records))
            ]
            if records:
                batches[partition] = records
                self._positions[partition] = records[-1].offset + 1
                max_records -= len(records)
            if max_records <= 0:
                break
        return batches

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def seek(self, partition: Partition, offset: int) -> None:
        if partition not in self._assigned:
            raise AssertionError(f"seek on {partition}, which is not assigned")
        self.seeks.append((partition, offset))
        self._positions[partition] = offset

    def pause(self, partitions: Collection[Partition]) -> None:
        self._paused |= set(partitions) & self._assigned

    def resume(self, partitions: Collection[Partition]) -> None:
        self._paused -= set(partitions)
        self._notify()

    def paused(self) -> set[Partition]:
        return set(self._paused)

    async def commit(self, offsets: Mapping[Partition, tuple[int, str]]) -> None:
        names = [str(p) for p in offsets]
        if self.refuse_commits > 0:
            self.refuse_commits -= 1
            raise CommitFailedError("the group is rebalancing", partitions=names, retriable=False)
        if not set(offsets) <= self._assigned:
            raise CommitFailedError("not assigned", partitions=names, retriable=False)
        for partition, (offset, metadata) in offsets.items():
            self.group_commits[partition] = CommitPoint(offset, metadata)
            self.events.append(f"commit {partition}@{offset}")

    async def committed(self, partitions: Collection[Partition]) -> dict[Partition, CommitPoint | None]:
        return {p: self.group_commits.get(p) for p in partitions}

    async def beginning_offsets(self, partitions: Collection[Partition]) -> dict[Partition, int]:
        return dict.fromkeys(partitions, 0)

    async def unfetched(self, topics: Collection[str], timeout_s: float) -> dict[Partition, Unfetched]:
        return {
            p: Unfetched(self._positions[p], len(self.logs[p])) for p in self._assigned if p.topic in topics
        }

    def partition_count(self, topic: str) -> int:
        return sum(1 for p in self.logs if p.topic == topic)


@dataclass(frozen=True)
class Produced:
    topic: str
    value: bytes
    key: bytes | None
    headers: dict[str, bytes]


class HeldProducer:
    """Acknowledges every record at once, or, after `hold()`, none until `release()`. Records of a
    topic in `refusals` fail with its librdkafka error, every time; records over `max_bytes` (value
    plus headers) fail as librdkafka fails them, "message size too large"."""

    def __init__(self, events: list[str] | None = None) -> None:
        self.events = events if events is not None else []
        self.sent: list[Produced] = []
        self.attempts: list[str] = []  # every topic produced to, acknowledged or not
        self.refusals: dict[str, KafkaError] = {}
        self.max_bytes: int | None = None
        self._open = asyncio.Event()
        self._open.set()

    def refuse(self, topic: str, code: int, *, fatal: bool = False) -> None:
        self.refusals[topic] = KafkaError(code, fatal=fatal)

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def on(self, topic: str) -> list[Produced]:
        return [p for p in self.sent if p.topic == topic]

    async def start(self) -> None:
        self.events.append("producer.start")

    async def stop(self) -> None:
        self.events.append("producer.stop")

    async def produce(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Headers | None = None
    ) -> object:
        await self._open.wait()
        self.attempts.append(topic)
        if topic in self.refusals:
            raise ProduceError(topic, self.refusals[topic])
        encoded = {k: v if isinstance(v, bytes) else (v or "").encode() for k, v in headers or []}
        size = len(value) + sum(len(k) + len(v) for k, v in encoded.items())
        if self.max_bytes is not None and size > self.max_bytes:
            raise ProduceError(topic, KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        self.sent.append(Produced(topic, value, key, encoded))
        self.events.append(f"produce {topic}")
        return None


class HeldBackend:
    """Answers every call OK at once; after `hold()` calls (of one model, or all) wait for
    `release()`; with `failure` set they raise it."""

    def __init__(self, events: list[str] | None = None) -> None:
        self.events = events if events is not None else []
        self.models: list[str] = []
        self.calls: list[tuple[list[dict[str, str]], dict[str, Any]]] = []  # messages, params
        self.output = "hi"
        self.in_flight = 0
        self.most_in_flight = 0  # the most calls it ran at once
        self.failure: BackendError | None = None
        # A streamed call: these pieces, one by one; with `stream_failure` (n, error), the call
        # fails with `error` after handing over n pieces.
        # A piece is its text, or a `StreamDelta` (tool-call pieces, another choice...).
        self.pieces: list[str | StreamDelta] = ["h", "i"]
        self.stream_failure: tuple[int, BackendError] | None = None
        self.streamed: list[str] = []  # the models of streamed calls
        self._held_models: set[str] | None = set()  # None: every model
        self._released = asyncio.Event()

    def hold(self, model: str | None = None) -> None:
        """Hold the calls of `model` (every call when None) until `release()`."""
        self._released = asyncio.Event()
        if model is None:
            self._held_models = None
        elif self._held_models is not None:
            self._held_models.add(model)

    def release(self) -> None:
        self._held_models = set()
        self._released.set()

    async def complete(
        self, model: str, messages: list[dict[str, str]], params: dict[str, Any], *, timeout_s: float
    ) -> Completion:
        self.models.append(model)
        self.calls.append((messages, params))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self._held_models is None or model in self._held_models:
                await self._released.wait()
        finally:
            self.in_flight -= 1
        if self.failure is not None:
            raise self.failure
        return Completion(
            output=self.output, model=model, prompt_tokens=1, completion_tokens=1, total_tokens=2
        )

    async def embed(
        self, model: str, inputs: list[str], dimensions: int | None, *, timeout_s: float
    ) -> Completion:
        """Vectors of `dimensions` (2 when None) values, each the input's length and its place."""
        completion = await self.complete(
            model, [{"role": "user", "content": t} for t in inputs], {}, timeout_s=timeout_s
        )
        width = dimensions or 2
        vectors = tuple(tuple(float(len(t) + d) for d in range(width)) for t in inputs)
        return replace(
            completion, output="", completion_tokens=0, total_tokens=len(inputs), embeddings=vectors
        )

    async def stream(
        self,
        model: str,
        messages: list[dict[str, str]],
        params: dict[str, Any],
        *,
        timeout_s: float,
        on_delta: Callable[[StreamDelta], None],
    ) -> Completion:
        self.streamed.append(model)
        completion = await self.complete(model, messages, params, timeout_s=timeout_s)
        failure_after, failure = self.stream_failure or (None, None)
        for n, piece in enumerate(self.pieces):
            if n == failure_after and failure is not None:
                raise failure
            on_delta(piece if isinstance(piece, StreamDelta) else StreamDelta(content=piece))
            # A real stream yields between tokens; so does this one, letting chunks be written.
            for _ in range(5):
                await asyncio.sleep(0)
        if failure is not None:
            raise failure
        return Completion(
            output="".join(p.content if isinstance(p, StreamDelta) else p for p in self.pieces),
            model=completion.model,
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=len(self.pieces),
            total_tokens=completion.prompt_tokens + len(self.pieces),
        )

    async def close(self) -> None:
        self.events.append("backend.close")


class RecordingTokenPool(LocalTokenPool):
    """The exact single-process pool, with its start and stop in the event log."""

    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.events = events

    async def start(self) -> None:
        self.events.append("pool.start")
        await super().start()

    async def stop(self) -> None:
        self.events.append(f"pool.stop holding {sum(self.held_locally().values())}")
        await super().stop()


# -- the whole dispatcher on these fakes -----------------------------------------------------------


@dataclass
class Rig:
    """A dispatcher built by the real `bootstrap`, every edge a fake from this module."""

    settings: DispatcherSettings
    events: list[str]
    consumer: InMemoryConsumer
    producer: HeldProducer
    backend: HeldBackend
    pool: RecordingTokenPool
    dispatcher: Dispatcher

    @property
    def topics(self) -> TopicNames:
        return self.settings.kafka.topics

    def partition(self, tier: str, index: int = 0) -> Partition:
        return Partition(self.topics.requests_by_name(tier), index)

    def results(self, topic: str | None = None) -> dict[str, InferenceResult]:
        """Results acknowledged on `topic` (the default results topic), by request id; chunks of
        streamed answers (``inferq-kind: chunk``) are not results and are left out."""
        codec = result_codec()
        produced = self.producer.on(topic or self.topics.results)
        decoded = [codec.decode(p.value) for p in produced if not is_chunk(list(p.headers.items()))]
        return {r.request_id: r for r in decoded}

    def dead_letters(self) -> list[Produced]:
        return self.producer.on(self.topics.dlq)


def rig(
    *,
    pool_class: type[RecordingTokenPool] | None = None,
    clock_ms: Callable[[], int] | None = None,
    spares: Mapping[str, HeldBackend] | None = None,
    **overrides: Any,
) -> Rig:
    """Settings for quick unit runs (a pinned window, short timers) with `overrides` applied; the
    token pool a `RecordingTokenPool` (or `pool_class`); the wall clock `clock_ms` (e.g. a
    `ManualClock`), the machine's when None."""
    values: dict[str, Any] = {
        "kafka": KafkaSettings(topic_prefix="unit"),
        "dispatcher_id": "unit",
        "schedule_pin": "normal",
        "commit_interval_s": 0.02,
        "housekeeping_interval_s": 0.02,
        "adaptive": False,
        "drain_timeout_s": 5.0,
    } | overrides
    settings = DispatcherSettings(**values)
    events: list[str] = []
    consumer = InMemoryConsumer.for_topics(settings.kafka.topics, events)
    producer, backend = HeldProducer(events), HeldBackend(events)
    pool = (pool_class or RecordingTokenPool)(events)
    dispatcher = bootstrap(
        settings,
        consumer=consumer,
        producer=producer,
        # With `spares`: several backends, `backend` the "default" one, routed as the settings say.
        backend={"default": backend, **spares} if spares else backend,
        tokens=TokenSupply(pool, shared=False),
        clock_ms=clock_ms or wall_ms,
    )
    return Rig(settings, events, consumer, producer, backend, pool, dispatcher)


@contextlib.asynccontextmanager
async def running(test_rig: Rig) -> AsyncIterator[Rig]:
    """The rig's dispatcher running until the block ends, then stopped as SIGTERM would stop it."""
    task = asyncio.create_task(test_rig.dispatcher.run())
    try:
        await eventually(lambda: test_rig.dispatcher.health()["assigned"] != 0 or task.done(), "assignment")
        if task.done():
            task.result()
        yield test_rig
    finally:
        test_rig.dispatcher.request_stop()
        async with asyncio.timeout(30):
            await task


def encoded(request: InferenceRequest) -> bytes:
    return request_codec().encode(request)
