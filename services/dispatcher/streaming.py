"""A streamed answer's chunks: the backend's tokens batched and written to the chunk topic in order.

When a request has `stream` set, the backend hands each piece (a choice's token, tool-call piece,
refusal or end: a `StreamDelta`) to `ChunkStream.add` as it arrives (synchronously: reading the
stream never waits for Kafka). One flusher task writes the first token
at once (the time to the first token is what a caller feels), then what has gathered as one
`InferenceChunk` once the oldest has waited `ChunkPolicy.linger_ms`, about `ChunkPolicy.chars`
characters wait or `ChunkPolicy.tokens` tokens do, whichever comes first: by default a chunk every
40 ms or 256 characters, so a model's 20-100 tokens a second make at most ~25 records a second
per stream instead of one a token (each record is a produce, a fetch and a decode for every
reader: issue 25's CPU), and waits for the broker's acknowledgement before
the next: so chunks are written one at a time, in order (seq 0, 1, 2...), and while one is being
acknowledged the next grows. Chunks are transient: one the chunk topic does not acknowledge in time
is lost (`lost`) and the next takes the following seq, so a reader sees the gap and takes the rest
of the answer from the result, which always holds all of it. A chunk holds one choice: the pieces
gathered are merged per run of one choice (`deltas.merged`), so two choices interleaved become
alternating chunks. Chunks are keyed by request id like the result; they are on another topic, so a
reader may see the result before the last chunks (and takes what they held from the result).

The rule that keeps a caller from seeing a token twice (`execution.py` applies it): until a chunk has
been handed to the producer (`started`), a failed call may be retried as any other; tokens still
waiting in the buffer are dropped with the call. Once a chunk has been handed over, the outcome is
terminal: the rest is flushed and the request fails ("failed mid-stream after N chunks").
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from inferq.dispatcher.deltas import StreamDelta, merged
from inferq.messaging.producer import ProduceError

# Writes chunk `seq` with `delta`; None once acknowledged, the `ProduceError` when it was lost.
ChunkSink = Callable[[int, StreamDelta], Awaitable[ProduceError | None]]


@dataclass(frozen=True)
class ChunkPolicy:
    """When gathered tokens become a chunk (after the first, which goes at once): `linger_ms` after
    the first of them arrived, or at about `chars` characters (`StreamDelta.size_chars`), or at
    `tokens` tokens, whichever comes first. `ChunkPolicy(tokens=1)` writes every token as it
    comes. The defaults trade at most 40 ms more between a stream's pieces (below what a reader
    notices) for several times fewer records."""

    tokens: int = 64
    linger_ms: float = 40.0
    chars: int = 256

    def __post_init__(self) -> None:
        if self.tokens < 1:
            raise ValueError(f"a chunk holds at least one token, got {self.tokens}")
        if self.chars < 1:
            raise ValueError(f"a chunk holds at least one character, got {self.chars}")
        if not 0 <= self.linger_ms <= 10_000:
            raise ValueError(f"linger_ms must be within 0-10000, got {self.linger_ms}")


class ChunkStream:
    """The chunks of one streamed call. `start()` before the call, `add()` per token, then either
    `finish()` (write what is left, wait for every acknowledgement) or `abort()` (drop it)."""

    def __init__(
        self,
        sink: ChunkSink,
        policy: ChunkPolicy,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sink = sink
        self._policy = policy
        self._monotonic = monotonic
        self._buffer: list[StreamDelta] = []
        self._buffer_chars = 0
        self._first_at = 0.0
        self._closing = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Chunks acknowledged by the broker, and chunks lost (not acknowledged in time): why the
        # first was.
        self.written = 0
        self.lost = 0
        self.first_loss: str | None = None
        # Whether a chunk was handed to the producer: from then on a caller may have seen tokens.
        self.started = False

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._flush_loop(), name="chunk-flusher")

    def add(self, delta: StreamDelta) -> None:
        """One piece from the backend (a token, a piece of a tool call, a choice's end); never waits."""
        if not delta or self._closing:
            return
        if not self._buffer:
            self._first_at = self._monotonic()
        self._buffer.append(delta)
        self._buffer_chars += delta.size_chars()
        # The flusher wakes for a first token (to start its linger) and for a full chunk.
        if len(self._buffer) == 1 or self._full():
            self._wake.set()

    def _full(self) -> bool:
        return len(self._buffer) >= self._policy.tokens or self._buffer_chars >= self._policy.chars

    async def finish(self) -> None:
        """Write what is gathered and wait until every chunk is acknowledged or lost."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task

    def withdraw(self) -> bool:
        """Stop at once, before any chunk is handed to the producer (the call is preempted): the
        gathered tokens are dropped and the flusher cancelled. False, and nothing changes, when a
        chunk has been handed over already (a caller may have seen tokens)."""
        if self.started:
            return False
        self._closing = True
        self._buffer.clear()
        self._buffer_chars = 0
        task, self._task = self._task, None
        if task is not None:
            task.cancel()  # it holds no chunk yet: nothing to wait for
        return True

    async def abort(self) -> None:
        """Stop writing: gathered tokens are dropped (a chunk being written may still land)."""
        self._closing = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _flush_loop(self) -> None:
        linger_s = self._policy.linger_ms / 1000
        while True:
            await self._wake.wait()
            self._wake.clear()
            # The first chunk goes at once: the time to the first token is what a caller feels.
            lingers = self.started and not self._closing
            if self._buffer and not self._full() and lingers:
                wait_s = self._first_at + linger_s - self._monotonic()
                if wait_s > 0:
                    # Woken early by a full chunk or the end of the call.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), wait_s)
                    self._wake.clear()
            if self._buffer:
                gathered, self._buffer, self._buffer_chars = merged(self._buffer), [], 0
                self.started = True
                for delta in gathered:
                    failure = await self._sink(self.written + self.lost, delta)
                    if failure is None:
                        self.written += 1
                    else:
                        self.lost += 1
                        self.first_loss = self.first_loss or failure.reason
            if self._closing and not self._buffer:
                return
            if self._buffer:
                self._wake.set()  # tokens that came in while the chunk was being acknowledged
