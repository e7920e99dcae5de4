"""`KafkaTransport`: inferq straight over Kafka, for backends that already publish events.

- submit: the request is checked with ingest's own rules (`SubmitRequest`, `submitted_record`: the
  tier from the scenario map, the default deadline, the bounds), encoded with the product's Avro
  codec and produced (idempotent, acks=all) to its tier's topic, with ``reply_to`` the region's
  reply topic (``<prefix>.results.<region>``; the results topic without a region). There is no
  ingest in between: no admission (nothing is refused 429) and no idempotency (a request id sent
  twice runs twice; the results keep the first outcome), and the tenant is the one this transport
  names (the broker's ACLs decide who may write requests at all). Each record is signed with the
  tenant's record key (`record_key`, else ``$INFERQ_RECORD_KEY``; `inferq.messaging.record_signing`):
  a dispatcher with a tenants file dead-letters a record its tenant's keys did not sign. No key:
  unsigned, which only a dispatcher in open mode runs.
- outcomes: the reply topic is followed once per process by the delivery package's
  `ReplyFollower` (one consumer task, no group, every partition, started lazily before the first
  produce, so no outcome can slip by; shared by the transports of one region and event loop, stopped
  when the last is closed), into a `WaiterHub` keyed (tenant, request_id). `submit`
  registers the request's waiter before producing; `wait` and `stream` collect it. Bounded: at most
  `max_pending` requests are held (past it `RefusedError`); a waiter is dropped once collected, when
  its wait times out or is cancelled, when its stream is closed, and a request never waited for is
  dropped `PENDING_GRACE_S` after its deadline.
- streams: chunks in the order written, repeats dropped, a restarted answer marked (`ChunkTracker`).

A transport follows from the moment it starts: the outcome of a request accepted before (by an
earlier process) is seen only when it arrives later, or when `follow_from_ms` starts the follower
that far back (the batch producer's resume does that).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace

from pydantic import SecretStr, ValidationError

from inferq.client.errors import InvalidRequestError, RefusedError, TransportError
from inferq.client.models import Chunk, Handle, Outcome, Submission
from inferq.clock import wall_ms
from inferq.delivery.follower import KafkaReplyFeed, ReplyFollower, followed_topics
from inferq.delivery.hub import ChunkOrder, ChunkTracker, HubFullError, Waiter, WaiterHub
from inferq.ingest.deadlines import FieldRefusedError
from inferq.ingest.record import RecordRules, submitted_record
from inferq.ingest.validation import SubmitRequest, describe
from inferq.messaging.codec import request_codec
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.producer import AsyncProducer, ProduceError
from inferq.messaging.record_signing import RecordSigner
from inferq.messaging.records import InferenceResult
from inferq.messaging.reply_topics import region_problem
from inferq.messaging.tiers import DEFAULT_DEADLINES_MS, Tier, TierPolicy
from inferq.results.view import public_view
from inferq.tenancy.secret_forms import record_key_problem

# How long past its deadline a request nobody waits for is still held for a later `wait`.
PENDING_GRACE_S = 60.0
DEFAULT_MAX_PENDING = 10_000
READY_TIMEOUT_S = 30.0
PRODUCE_TIMEOUT_S = 15.0
SWEEP_INTERVAL_S = 1.0
# Where a producer's record key comes from when none is given (never a command-line argument).
RECORD_KEY_ENV = "INFERQ_RECORD_KEY"

Key = tuple[str, str]


@dataclass
class _Pending:
    waiter: Waiter
    scope: contextlib.ExitStack
    drop_at: float

    def drop(self) -> None:
        self.scope.close()


@dataclass
class _Following:
    """One reply topic followed in one process (event loop): the hub its records wake, the follower
    that reads them, how many transports use them."""

    hub: WaiterHub
    follower: ReplyFollower | None = None
    users: int = 0


# The reply topics followed in this process, by (event loop, bootstrap servers, topic): transports of
# one region share one consumer task (a transport that replays from a time follows on its own).
_FOLLOWING: dict[tuple[int, str, str], _Following] = {}
# The shared hub's bound; each transport also holds at most its own `max_pending`.
SHARED_MAX_WAITERS = 1_000_000


def producer_signer(record_key: str | SecretStr | None) -> RecordSigner:
    """The signer of a tenant's producer: `record_key`, else ``$INFERQ_RECORD_KEY``; no key signs
    nothing. `ValueError` (naming the rule, never the value) for a key that is not one."""
    if record_key is None:
        record_key = os.environ.get(RECORD_KEY_ENV) or None
    if isinstance(record_key, SecretStr):
        record_key = record_key.get_secret_value()
    if record_key is not None and (problem := record_key_problem(record_key)) is not None:
        raise ValueError(f"record_key {problem}")
    return RecordSigner.with_key(record_key)


class KafkaTransport:
    def __init__(
        self,
        kafka: KafkaSettings | str | None = None,
        region: str | None = None,
        tenant: str = "default",
        *,
        origin_region: str | None = None,
        policy: TierPolicy | None = None,
        deadlines_ms: Mapping[Tier, int] = DEFAULT_DEADLINES_MS,
        max_pending: int = DEFAULT_MAX_PENDING,
        follow_from_ms: int | None = None,
        clock_ms: Callable[[], int] = wall_ms,
        record_key: str | SecretStr | None = None,
    ) -> None:
        """`kafka`: the settings (``INFERQ_KAFKA_*`` when None) or a bootstrap list. `region`: whose
        reply topic outcomes come back on (created by ``inferq topics create --region``).
        `record_key`: the tenant's ``irk_...`` key that signs each record (``$INFERQ_RECORD_KEY``
        when None; `ValueError` when it is not one)."""
        if isinstance(kafka, str):
            kafka = KafkaSettings(bootstrap_servers=kafka)
        self._kafka = kafka or KafkaSettings()
        topics = self._kafka.topics
        if region is not None and (problem := region_problem(region)) is not None:
            raise ValueError(problem)
        self.reply_topic = topics.regional_results(region) if region else topics.results
        self.tenant = tenant
        self._signer = producer_signer(record_key)
        self._origin = origin_region or region or "local"
        self._policy = policy or TierPolicy()
        self._deadlines_ms = deadlines_ms
        self._clock_ms = clock_ms
        self._follow_from_ms = follow_from_ms
        self._max_pending = max_pending
        self._following: _Following | None = None
        self._following_key: tuple[int, str, str] | None = None
        self._pending: dict[Key, _Pending] = {}
        self._client_id = f"inferq-client-{uuid.uuid4().hex[:8]}"
        self._producer: AsyncProducer | None = None
        self._start_lock = asyncio.Lock()
        self._swept_at = 0.0
        self._closed = False

    @property
    def pending(self) -> int:
        """Requests held for a wait or a stream right now."""
        return len(self._pending)

    def _follow(self) -> _Following:
        """This transport's share of its reply topic's follower (joined on first use)."""
        if self._following is None:
            if self._follow_from_ms is not None:
                self._following = _Following(WaiterHub(max_waiters=self._max_pending), users=1)
            else:
                key = (id(asyncio.get_running_loop()), self._kafka.bootstrap_servers, self.reply_topic)
                following = _FOLLOWING.get(key)
                if following is None:
                    following = _FOLLOWING[key] = _Following(WaiterHub(max_waiters=SHARED_MAX_WAITERS))
                following.users += 1
                self._following_key = key
                self._following = following
        return self._following

    async def _started(self) -> None:
        """The follower reading (from the end, or `follow_from_ms`) and the producer started: once."""
        if self._closed:
            raise TransportError("transport is closed", retriable=False)
        following = self._follow()
        async with self._start_lock:
            if following.follower is None:
                topics = followed_topics(self._kafka, self.reply_topic)
                from_ms, client_id = self._follow_from_ms, self._client_id
                following.follower = ReplyFollower(
                    lambda: KafkaReplyFeed(self._kafka, topics, client_id=client_id, from_ms=from_ms),
                    following.hub,
                )
                await following.follower.start()
            try:
                async with asyncio.timeout(READY_TIMEOUT_S):
                    await following.follower.ready.wait()
            except TimeoutError as exc:
                raise TransportError(
                    f"cannot follow {self.reply_topic} (is Kafka up, does the topic exist?)"
                ) from exc
            if self._producer is None:
                producer = AsyncProducer(self._kafka.producer_config(client_id=self._client_id))
                await producer.start()
                self._producer = producer

    def _hold(self, key: Key, *, chunks: bool, drop_at: float) -> _Pending:
        self._sweep()
        held = self._pending.pop(key, None)
        if held is not None:
            held.drop()
        full = RefusedError(
            f"{self._max_pending} requests are already waited for", status_code=503, retry_after_s=1.0
        )
        if len(self._pending) >= self._max_pending:
            raise full
        scope = contextlib.ExitStack()
        try:
            waiter = scope.enter_context(self._follow().hub.waiting(*key, chunks=chunks))
        except HubFullError as exc:
            raise full from exc
        held = self._pending[key] = _Pending(waiter, scope, drop_at)
        return held

    def _release(self, key: Key, held: _Pending) -> None:
        if self._pending.get(key) is held:
            del self._pending[key]
        held.drop()

    def _sweep(self) -> None:
        now = time.monotonic()
        if now - self._swept_at < SWEEP_INTERVAL_S:
            return
        self._swept_at = now
        for key, held in [(k, h) for k, h in self._pending.items() if h.drop_at <= now]:
            self._release(key, held)

    async def submit(self, submission: Submission) -> Handle:
        handle, _ = await self._submit(submission, chunks=False)
        return handle

    async def _submit(self, submission: Submission, *, chunks: bool) -> tuple[Handle, _Pending]:
        body = submission.body() | {"tenant": self.tenant, "reply_to": self.reply_topic}
        try:
            validated = SubmitRequest.model_validate(body)
            rules = RecordRules(
                policy=self._policy,
                deadlines_ms=self._deadlines_ms,
                topics=self._kafka.topics,
                region=self._origin,
                clock_ms=self._clock_ms,
            )
            request = submitted_record(validated, rules)
        except ValidationError as exc:
            raise InvalidRequestError(
                "the request breaks the contract", status_code=422, problems=describe(exc)
            ) from exc
        except FieldRefusedError as exc:
            problems = [{"field": exc.field, "problem": str(exc)}]
            raise InvalidRequestError(str(exc), status_code=422, problems=problems) from exc
        request = replace(request, stream=submission.stream)
        await self._started()
        producer = self._producer
        if producer is None:
            raise TransportError("transport is closed", retriable=False)
        key = (request.tenant, request.request_id)
        left_s = (request.expire_at_ms - self._clock_ms()) / 1000
        held = self._hold(key, chunks=chunks, drop_at=time.monotonic() + left_s + PENDING_GRACE_S)
        value = request_codec().encode(request)
        try:
            await producer.produce(
                self._kafka.topics.requests(request.tier),
                value,
                key=request.key,
                headers=self._signer.headers(request.key, value),
                timeout_s=PRODUCE_TIMEOUT_S,
            )
        except ProduceError as exc:
            self._release(key, held)
            if exc.too_large:
                raise InvalidRequestError(f"the record is too large: {exc.reason}", status_code=413) from exc
            raise TransportError(
                f"Kafka did not take the request: {exc.reason}", retriable=exc.retriable
            ) from exc
        except BaseException:
            self._release(key, held)
            raise
        handle = Handle(request.request_id, request.tier, request.expire_at_ms)
        return handle, held

    def expect(self, request_id: str, expire_at_ms: int) -> None:
        """Hold a waiter for a request accepted before (a resumed batch), as `submit` does, until
        `wait` collects it or `PENDING_GRACE_S` after `expire_at_ms`. `RefusedError` when
        `max_pending` are held."""
        left_s = (expire_at_ms - self._clock_ms()) / 1000
        self._hold(
            (self.tenant, request_id), chunks=False, drop_at=time.monotonic() + left_s + PENDING_GRACE_S
        )

    async def wait(self, request_id: str, timeout_s: float) -> Outcome | None:
        key = (self.tenant, request_id)
        held = self._pending.get(key)
        if held is None:
            await self._started()
            # Not submitted here (or dropped): only an outcome arriving from now on is seen.
            held = self._hold(key, chunks=False, drop_at=time.monotonic() + timeout_s + PENDING_GRACE_S)
        try:
            result = await held.waiter.result(timeout_s)
        finally:
            self._release(key, held)
        return None if result is None else _outcome(result)

    async def stream(self, submission: Submission, timeout_s: float) -> AsyncIterator[Chunk | Outcome]:
        handle, held = await self._submit(submission, chunks=True)
        key = (self.tenant, handle.request_id)
        # The waiter was registered before the request was produced: chunk 0 is the first.
        tracker = ChunkTracker(from_start=True)
        loop = asyncio.get_running_loop()
        ends_at = loop.time() + timeout_s
        try:
            while (left := ends_at - loop.time()) > 0:
                item = await held.waiter.next(left)
                if item is None:
                    return
                if isinstance(item, InferenceResult):
                    yield _outcome(item)
                    return
                order = tracker.accept(item)
                if order is not ChunkOrder.REPEAT:
                    yield Chunk(
                        request_id=item.request_id,
                        delta=item.delta,
                        seq=item.seq,
                        attempt=item.attempt,
                        restart=order is ChunkOrder.RESTART,
                        gap=order is ChunkOrder.GAP,
                    )
        finally:
            self._release(key, held)

    async def aclose(self) -> None:
        """Drop every waiter, stop following, flush the producer. Idempotent."""
        self._closed = True
        for key, held in list(self._pending.items()):
            self._release(key, held)
        following, self._following = self._following, None
        if following is not None:
            following.users -= 1
            if following.users == 0:
                if self._following_key is not None:
                    _FOLLOWING.pop(self._following_key, None)
                if following.follower is not None:
                    await following.follower.stop()
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    def __del__(self) -> None:
        # As aiokafka does: a transport dropped while its consumer or producer may still run.
        started = (
            getattr(self, "_following", None) is not None or getattr(self, "_producer", None) is not None
        )
        if started and not getattr(self, "_closed", True):
            warnings.warn(
                f"KafkaTransport for {self.reply_topic} was never closed", ResourceWarning, stacklevel=1
            )


def _outcome(result: InferenceResult) -> Outcome:
    return Outcome.from_view(public_view(result))
