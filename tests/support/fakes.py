"""Fakes (not mocks) of the ingest and results edges: producers that keep, refuse or never acknowledge
what they are given, backlog sources whose lag the test decides, a publisher that answers what the
test scripted, an in-memory OpenTelemetry reader, and a results feed the test fills.

Fakes that take an `events` list append "<name>.start" / "<name>.stop" (and the like) to it, so one
list shared by several fakes shows the order things happened in.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from opentelemetry.metrics import Meter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from inferq.ingest.backlog import BacklogSnapshot
from inferq.ingest.errors import IngestError
from inferq.ingest.idempotency import Answer
from inferq.messaging.producer import AsyncProducer, ProduceError
from inferq.messaging.records import InferenceChunk, InferenceRequest, InferenceResult
from inferq.messaging.tiers import Tier

# --- ingest -------------------------------------------------------------------------------------


class RecordingProducer(AsyncProducer):
    """A fake producer that acknowledges every record at once and keeps it."""

    def __init__(self, events: list[str] | None = None) -> None:
        super().__init__({})
        self.sent: list[tuple[str, bytes, bytes | None]] = []
        self.events = events if events is not None else []

    async def start(self) -> None:
        self.events.append("producer.start")

    async def produce(self, topic: str, value: bytes, *, key: bytes | None = None, **_: Any) -> Any:
        self.sent.append((topic, value, key))
        return None

    async def stop(self, flush_timeout_s: float = 10.0) -> int:
        self.events.append("producer.stop")
        return 0


class RefusingProducer(RecordingProducer):
    """A producer whose broker refuses every record (what librdkafka reports after its timeout)."""

    def __init__(self, reason: str = "Local: Message timed out") -> None:
        super().__init__()
        self.reason = reason
        self.attempts = 0

    async def produce(self, topic: str, value: bytes, *, key: bytes | None = None, **_: Any) -> Any:
        self.attempts += 1
        raise ProduceError(topic, self.reason)


class SwitchableProducer(RecordingProducer):
    """Keeps what it is given, or, while `refusing`, refuses it as librdkafka does after its timeout
    (the deliberate 503 of the hostile suite); `refused` counts those."""

    def __init__(self, reason: str = "Local: Message timed out") -> None:
        super().__init__()
        self.reason = reason
        self.refusing = False
        self.refused = 0

    async def produce(self, topic: str, value: bytes, *, key: bytes | None = None, **kwargs: Any) -> Any:
        if self.refusing:
            self.refused += 1
            raise ProduceError(topic, self.reason)
        return await super().produce(topic, value, key=key, **kwargs)


class SilentProducer(RecordingProducer):
    """A producer whose broker never answers: `produce` waits for `timeout_s`, then times out."""

    async def produce(
        self, topic: str, value: bytes, *, key: bytes | None = None, timeout_s: float | None = None, **_: Any
    ) -> Any:
        await asyncio.wait_for(asyncio.get_running_loop().create_future(), timeout_s)


class FakeBacklog:
    """A backlog source whose lags the test sets (None: unknown); started and stopped by the app."""

    def __init__(self, events: list[str] | None = None, **lags: int | None) -> None:
        self.lags: dict[Tier, int | None] = {t: lags.get(t.value) for t in Tier}
        self.running = False
        self.events = events if events is not None else []

    async def start(self) -> None:
        self.running = True
        self.events.append("backlog.start")

    async def stop(self) -> None:
        self.running = False
        self.events.append("backlog.stop")

    def snapshot(self) -> BacklogSnapshot:
        if all(lag is None for lag in self.lags.values()):
            return BacklogSnapshot.unknown()
        return BacklogSnapshot(MappingProxyType(dict(self.lags)), refreshed_at_ms=1_700_000_000_000)


@dataclass
class ScriptedPublisher:
    """A publisher that raises `error` when one is set, else accepts (replaying a key seen before)."""

    error: IngestError | None = None
    published: list[tuple[InferenceRequest, str | None]] = field(default_factory=list)
    _keys: set[str] = field(default_factory=set)

    async def publish(self, request: InferenceRequest, *, idempotency_key: str | None) -> tuple[Answer, bool]:
        self.published.append((request, idempotency_key))
        if self.error is not None:
            raise self.error
        replayed = idempotency_key is not None and idempotency_key in self._keys
        if idempotency_key is not None:
            self._keys.add(idempotency_key)
        answer = {
            "request_id": request.request_id,
            "tier": request.tier.value,
            "expire_at_ms": request.expire_at_ms,
        }
        return answer, replayed


class InMemoryMetrics:
    """A meter whose instruments a test can read back: `points(name)` maps attributes to values."""

    def __init__(self) -> None:
        self._reader = InMemoryMetricReader()
        self._provider = MeterProvider(metric_readers=[self._reader])
        self.meter: Meter = self._provider.get_meter("tests")

    def points(self, name: str) -> dict[frozenset[tuple[str, Any]], float]:
        """The latest value per attribute set of instrument `name` ({} when it has none)."""
        data = self._reader.get_metrics_data()
        found: dict[frozenset[tuple[str, Any]], float] = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            found[frozenset(dict(point.attributes or {}).items())] = point.value
        return found

    def shutdown(self) -> None:
        self._provider.shutdown()


def labels(**attributes: str) -> frozenset[tuple[str, Any]]:
    """The key `InMemoryMetrics.points` uses for these attributes."""
    return frozenset(attributes.items())


# --- results ------------------------------------------------------------------------------------


def result_record(request_id: str, status: str = "OK", completed_at_ms: int = 30) -> dict[str, Any]:
    """An `InferenceResult` as its Avro record: enqueued at 0, dispatched at 10, one attempt."""
    return {
        "request_id": request_id,
        "tier": "HIGH",
        "status": status,
        "output": "hi",
        "error": None,
        "model": "m",
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
        "enqueued_at_ms": 0,
        "dispatched_at_ms": 10,
        "completed_at_ms": completed_at_ms,
        "attempts": 1,
        "dispatcher_id": "d",
    }


def a_result(
    request_id: str = "r1", status: str = "OK", completed_at_ms: int = 30, **fields: Any
) -> InferenceResult:
    """The result of `result_record`; `fields` replace any other field (tenant, output, ...)."""
    return replace(InferenceResult.from_record(result_record(request_id, status, completed_at_ms)), **fields)


def a_chunk(request_id: str = "r1", seq: int = 0, **fields: Any) -> InferenceChunk:
    """Chunk `seq` of a first attempt by dispatcher d1; `fields` replace any other field."""
    defaults = {"tenant": "default", "attempt": 1, "delta": f"d{seq} ", "model": "m", "dispatcher_id": "d1"}
    return InferenceChunk(request_id=request_id, seq=seq, **(defaults | {"created_at_ms": 1} | fields))


@dataclass(frozen=True)
class FakePartition:
    topic: str
    partition: int


@dataclass(frozen=True)
class FakeRecord:
    value: bytes | None
    offset: int
    headers: tuple[tuple[str, bytes], ...] = ()
    key: bytes | None = None


class FakeResultFeed:
    """A stand-in for the reply topic's reader: `getmany` hands out the batches the test `push`es
    (waiting up to `timeout_ms` for one), offsets counting from 0 (or `first_offset`); it is caught
    up once every batch pushed was handed out.

    `push` may be called from another thread (a test driving the app through `TestClient`).
    """

    def __init__(
        self, topic: str = "inferq.results", events: list[str] | None = None, *, first_offset: int = 0
    ) -> None:
        self.partition = FakePartition(topic, 0)
        self._batches: asyncio.Queue[
            tuple[list[bytes | None], tuple[tuple[str, bytes], ...], bytes | None]
        ] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next_offset = first_offset
        self.handed_out = 0
        self.events = events if events is not None else []

    def push(
        self,
        values: Sequence[bytes | None],
        *,
        headers: Sequence[tuple[str, bytes]] = (),
        key: str | None = None,
    ) -> None:
        """One batch; every record in it carries `headers` (a chunk's kind header, say) and `key`
        (the request_id the dispatcher keys it by; None: a record without a key)."""
        batch = (list(values), tuple(headers), None if key is None else key.encode())
        if self._loop is None:
            self._batches.put_nowait(batch)
        else:
            self._loop.call_soon_threadsafe(self._batches.put_nowait, batch)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.events.append("feed.start")

    async def stop(self) -> None:
        self.events.append("feed.stop")

    async def getmany(self, *, timeout_ms: int, max_records: int) -> Mapping[FakePartition, list[FakeRecord]]:
        try:
            values, headers, key = await asyncio.wait_for(self._batches.get(), timeout_ms / 1000)
        except TimeoutError:
            return {}
        records = [
            FakeRecord(v, self._next_offset + i, headers, key) for i, v in enumerate(values[:max_records])
        ]
        self._next_offset += len(records)
        self.handed_out += 1
        return {self.partition: records}

    async def caught_up(self) -> bool:
        return self._batches.empty()


class DyingResultFeed(FakeResultFeed):
    """A reply-topic feed whose every fetch fails with an error consumption cannot go on after."""

    async def getmany(self, *, timeout_ms: int, max_records: int) -> Mapping[FakePartition, list[FakeRecord]]:
        raise RuntimeError("the reply topic's consumer broke")


class GatedFeed(FakeResultFeed):
    """A `FakeResultFeed` whose start waits (at most 5 s) until the test sets `gate`: a replica that
    has not caught up with the reply topic yet."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    async def start(self) -> None:
        await asyncio.to_thread(self.gate.wait, 5.0)
        await super().start()
