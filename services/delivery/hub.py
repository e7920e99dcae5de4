"""The waiter hub: callers wait for a (tenant, request_id); the reply topic's records wake them.

`WaiterHub.waiting(tenant, request_id)` registers a `Waiter` for the length of a ``with`` block (so a
caller that goes away, by cancellation or an exception, is unregistered at once). The reply topic's
reader (a follower, or the results service's consumer) calls `publish_chunk` and `publish_result`
for the records it reads, on the same event loop; each wakes only the waiters of that key. Bounds:

- at most `max_waiters` at once: past it `HubFullError` (the endpoint answers 503);
- at most `max_pending_chunks` chunks queued per waiter: a caller that does not read them loses the
  excess (counted in `Waiter.dropped_chunks`), never the result;
- chunks of streams still in progress are kept for callers who join late (the results service's
  event stream opened after the request started), up to `history_max_bytes` of deltas over at most
  `history_max_streams` streams, the oldest stream forgotten first; a stream's history is dropped
  when its result arrives (the result carries the whole output). A reader may keep a chunk nobody
  follows (`follows`) undecoded (`kept_unfollowed`): it is decoded only if a late joiner asks for it;
  a reader may run only while some waiter wants chunks at all (`following`, `watch_following`).
  The history is kept by request_id (a record's key, known undecoded): a replay keeps the caller's
  tenant's chunks, and any tenant's result under that id ends it (ids are unique in practice);
- the last results read are kept too, up to `recent_max_bytes` (outputs and errors), so a caller who
  registers a moment after its result went by (before the store has it) is answered at once.

`ChunkOrder` tells a caller which chunks are new, repeated or the start of a restarted answer.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum

from inferq.messaging.codec import chunk_codec
from inferq.messaging.errors import DecodeError
from inferq.messaging.records import InferenceChunk, InferenceResult, ReplyRecord

Key = tuple[str, str]

DEFAULT_MAX_WAITERS = 10_000
DEFAULT_MAX_PENDING_CHUNKS = 4_096
DEFAULT_HISTORY_MAX_BYTES = 8 * 1024 * 1024
DEFAULT_HISTORY_MAX_STREAMS = 1_024
DEFAULT_RECENT_MAX_BYTES = 4 * 1024 * 1024


class HubFullError(Exception):
    """`max_waiters` callers are already waiting; retrying shortly may succeed."""

    retriable = True

    def __init__(self, max_waiters: int) -> None:
        super().__init__(f"{max_waiters} callers are already waiting for outcomes")
        self.max_waiters = max_waiters


class Waiter:
    """One caller's view of one request: the chunks since it registered (when it asked for them), then
    the result. Read with `next` (chunks, then the result) or `result` (the result only)."""

    def __init__(self, key: Key, *, chunks: bool, max_pending_chunks: int) -> None:
        self.key = key
        self.wants_chunks = chunks
        self.dropped_chunks = 0
        self._max_pending = max_pending_chunks
        self._chunks: deque[InferenceChunk] = deque()
        self._result: InferenceResult | None = None
        self._wake = asyncio.Event()

    def _push_chunk(self, chunk: InferenceChunk) -> None:
        # Queued after the result too: chunks and results travel on different topics, so the last
        # chunks may be read after the result (`late_chunk`).
        if not self.wants_chunks:
            return
        if len(self._chunks) >= self._max_pending:
            self.dropped_chunks += 1
            return
        self._chunks.append(chunk)
        self._wake.set()

    def _push_result(self, result: InferenceResult) -> None:
        # The first result wins, as in the store: a redelivered duplicate changes nothing.
        if self._result is None:
            self._result = result
            self._wake.set()

    async def next(self, timeout_s: float) -> InferenceChunk | InferenceResult | None:
        """The next chunk; once none is queued, the result; None when neither arrived within
        `timeout_s`. After the result it returns the result again."""
        if not self._chunks and self._result is None and not await self._woken(timeout_s):
            return None
        if self._chunks:
            return self._chunks.popleft()
        return self._result

    async def late_chunk(self, timeout_s: float) -> InferenceChunk | None:
        """Once the result is in: the next chunk read after it, or None when none came within
        `timeout_s`."""
        if not self._chunks:
            await self._woken(timeout_s)
        return self._chunks.popleft() if self._chunks else None

    async def _woken(self, timeout_s: float) -> bool:
        """Wait until something new is pushed; False when nothing came within `timeout_s`."""
        self._wake.clear()
        try:
            async with asyncio.timeout(max(timeout_s, 0.0)):
                await self._wake.wait()
        except TimeoutError:
            return False
        return True

    async def result(self, timeout_s: float) -> InferenceResult | None:
        """The result, or None when it did not arrive within `timeout_s`; chunks are skipped."""
        if self._result is None:
            self._chunks.clear()
            self._wake.clear()
            try:
                async with asyncio.timeout(max(timeout_s, 0.0)):
                    while self._result is None:
                        await self._wake.wait()
                        self._wake.clear()
                        self._chunks.clear()
            except TimeoutError:
                return None
        return self._result


@dataclass
class _History:
    # In the order read; bytes: a chunk kept undecoded (its record's value), decoded on replay.
    chunks: list[InferenceChunk | bytes] = field(default_factory=list)
    size_bytes: int = 0


def _chunk_bytes(chunk: InferenceChunk) -> int:
    # The texts dominate; the fixed part stands for the record's other fields.
    texts = (chunk.delta, chunk.tool_calls, chunk.refusal, chunk.logprobs)
    return sum(len(text.encode("utf-8", "replace")) for text in texts if text) + 64


class WaiterHub:
    """Who waits for which (tenant, request_id), and the recent chunks of streams in progress.

    Not thread-safe: registration and publication run on one event loop (the reader's task and the
    HTTP handlers share it)."""

    def __init__(
        self,
        *,
        max_waiters: int = DEFAULT_MAX_WAITERS,
        max_pending_chunks: int = DEFAULT_MAX_PENDING_CHUNKS,
        history_max_bytes: int = DEFAULT_HISTORY_MAX_BYTES,
        history_max_streams: int = DEFAULT_HISTORY_MAX_STREAMS,
        recent_max_bytes: int = DEFAULT_RECENT_MAX_BYTES,
    ) -> None:
        if max_waiters < 1 or max_pending_chunks < 1 or history_max_bytes < 0 or history_max_streams < 0:
            raise ValueError("hub bounds must be positive (the history's may be 0: no history)")
        self.max_waiters = max_waiters
        self._max_pending = max_pending_chunks
        self._history_max_bytes = history_max_bytes
        self._history_max_streams = history_max_streams
        self._waiters: dict[Key, set[Waiter]] = {}
        self._count = 0
        # How many waiters want each request_id's chunks (any tenant): the keys a reader decodes.
        self._followed: dict[str, int] = {}
        # Who is told when chunks are first wanted, and when no more (`watch_following`).
        self._following_watchers: list[Callable[[], None]] = []
        # Decodes the chunks kept undecoded (`kept_unfollowed`) when a late joiner replays them.
        self._chunk_codec = chunk_codec()
        # By request_id (a record's Kafka key, known before decoding); a replay keeps its tenant's.
        self._history: OrderedDict[str, _History] = OrderedDict()
        self._history_bytes = 0
        self._recent_max_bytes = max(recent_max_bytes, 0)
        self._recent: OrderedDict[Key, tuple[InferenceResult, int]] = OrderedDict()
        self._recent_bytes = 0

    @property
    def waiters(self) -> int:
        """How many callers are waiting now."""
        return self._count

    @property
    def history_bytes(self) -> int:
        """The size of the chunks kept for late joiners (deltas plus a fixed overhead each)."""
        return self._history_bytes

    @contextmanager
    def waiting(
        self, tenant: str, request_id: str, *, chunks: bool = True, replay: bool = False
    ) -> Iterator[Waiter]:
        """A waiter for the block's duration. `chunks`: queue the stream's chunks too (else only the
        result wakes it); `replay`: start with the chunks already seen of a stream in progress.
        `HubFullError` when `max_waiters` are waiting."""
        if self._count >= self.max_waiters:
            raise HubFullError(self.max_waiters)
        key = (tenant, request_id)
        waiter = Waiter(key, chunks=chunks, max_pending_chunks=self._max_pending)
        if chunks and replay:
            for chunk in self._replay(request_id):
                if chunk.tenant == tenant:
                    waiter._push_chunk(chunk)
        recent = self._recent.get(key)
        if recent is not None:
            waiter._push_result(recent[0])
        self._waiters.setdefault(key, set()).add(waiter)
        self._count += 1
        if chunks:
            first = not self._followed
            self._followed[request_id] = self._followed.get(request_id, 0) + 1
            if first:
                self._following_changed()
        try:
            yield waiter
        finally:
            group = self._waiters.get(key)
            if group is not None:
                group.discard(waiter)
                if not group:
                    del self._waiters[key]
            self._count -= 1
            if chunks:
                left = self._followed.pop(request_id) - 1
                if left:
                    self._followed[request_id] = left
                if not self._followed:
                    self._following_changed()

    def follows(self, request_id: str) -> bool:
        """Whether a waiter (of any tenant) wants `request_id`'s chunks: a reader need not decode
        the others (`kept_unfollowed`)."""
        return request_id in self._followed

    @property
    def following(self) -> int:
        """How many waiters want chunks now (any request, any tenant)."""
        return sum(self._followed.values())

    def watch_following(self, callback: Callable[[], None]) -> None:
        """Call `callback` each time `following` turns from 0 to 1 or from 1 to 0: a reader of
        chunks that runs only while someone wants them (the results service's chunk reader)."""
        self._following_watchers.append(callback)

    def _following_changed(self) -> None:
        for callback in self._following_watchers:
            callback()

    def _replay(self, request_id: str) -> list[InferenceChunk]:
        """The stream's chunks kept so far, those kept undecoded decoded now (once: the history
        keeps them decoded; one that does not decode is dropped)."""
        history = self._history.get(request_id)
        if history is None:
            return []
        chunks: list[InferenceChunk] = []
        for entry in history.chunks:
            if isinstance(entry, InferenceChunk):
                chunks.append(entry)
            else:
                try:
                    chunks.append(self._chunk_codec.decode(entry))
                except DecodeError:
                    continue
        history.chunks = list(chunks)
        return chunks

    def publish_chunk(self, chunk: InferenceChunk) -> None:
        """A chunk read from a chunk topic: queued for its key's waiters and kept for late joiners."""
        key = (chunk.tenant, chunk.request_id)
        self._remember(chunk.request_id, chunk, _chunk_bytes(chunk))
        for waiter in self._waiters.get(key, ()):
            waiter._push_chunk(chunk)

    def kept_unfollowed(self, record: ReplyRecord) -> bool:
        """Whether chunk `record` belongs to a request no waiter here follows (`follows`, by the
        record's key, the request_id): then it is kept undecoded for a late joiner (when this hub
        keeps a history; decoded only if one comes) and its reader need not decode it. A record
        with no key cannot be told: False."""
        if record.key is None or record.value is None:
            return False
        request_id = record.key.decode("utf-8", "replace")
        if self.follows(request_id):
            return False
        self._remember(request_id, record.value, len(record.value) + 64)
        return True

    def publish_result(self, result: InferenceResult) -> None:
        """A result read from the reply topic (or stored): wakes its key's waiters; the stream's
        history is forgotten."""
        key = (result.tenant, result.request_id)
        history = self._history.pop(result.request_id, None)
        if history is not None:
            self._history_bytes -= history.size_bytes
        self._keep_recent(key, result)
        for waiter in self._waiters.get(key, ()):
            waiter._push_result(result)

    def _keep_recent(self, key: Key, result: InferenceResult) -> None:
        if key in self._recent:
            return  # the first result wins
        size = len((result.output or "").encode("utf-8", "replace")) + len(result.error or "") + 256
        if size > self._recent_max_bytes:
            return
        self._recent[key] = (result, size)
        self._recent_bytes += size
        while self._recent_bytes > self._recent_max_bytes:
            _, (_, oldest) = self._recent.popitem(last=False)
            self._recent_bytes -= oldest

    def _remember(self, request_id: str, chunk: InferenceChunk | bytes, size: int) -> None:
        if self._history_max_streams == 0 or self._history_max_bytes == 0:
            return
        history = self._history.get(request_id)
        if history is None:
            history = self._history[request_id] = _History()
        history.chunks.append(chunk)
        history.size_bytes += size
        self._history_bytes += size
        while self._history and (
            self._history_bytes > self._history_max_bytes or len(self._history) > self._history_max_streams
        ):
            _, oldest = self._history.popitem(last=False)
            self._history_bytes -= oldest.size_bytes


class ChunkOrder(Enum):
    """What a chunk is to a caller who has seen the chunks before it (`ChunkTracker.accept`)."""

    NEW = "new"
    REPEAT = "repeat"
    RESTART = "restart"
    # New, but a chunk before it never came (chunks are transient: a lost one is not written again).
    GAP = "gap"


class ChunkTracker:
    """Orders one caller's chunks. A stream is (attempt, dispatcher): within it seq grows by one, so
    a seq already passed is a repeat and one past the next expected follows a gap; a chunk of
    another stream, or seq 0 again, means the answer started over (a retry, or another dispatcher
    redoing it after a crash). `from_start`: the caller was waiting before the answer began, so a
    first chunk past seq 0 follows a gap too (a late joiner's first chunk may be any)."""

    def __init__(self, *, from_start: bool = False) -> None:
        self._stream: tuple[int, str] | None = None
        self._next_seq = 0
        self._from_start = from_start

    def accept(self, chunk: InferenceChunk) -> ChunkOrder:
        stream = (chunk.attempt, chunk.dispatcher_id)
        if self._stream is None:
            self._stream, self._next_seq = stream, chunk.seq + 1
            return ChunkOrder.GAP if self._from_start and chunk.seq > 0 else ChunkOrder.NEW
        if stream != self._stream or (chunk.seq == 0 and self._next_seq > 0):
            self._stream, self._next_seq = stream, chunk.seq + 1
            return ChunkOrder.RESTART
        if chunk.seq < self._next_seq:
            return ChunkOrder.REPEAT
        order = ChunkOrder.GAP if chunk.seq > self._next_seq else ChunkOrder.NEW
        self._next_seq = chunk.seq + 1
        return order
