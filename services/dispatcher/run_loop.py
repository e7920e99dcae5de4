"""The dispatcher's run loop: fetch, hand each batch to intake, wake the starter, update pauses.

Everything else is a step of its own (intake, starting, execution, checkpoint, housekeeping) built
by ``bootstrap.py``. `run` starts the parts in order and stops them in reverse under one
`AsyncExitStack`, which makes the shutdown order (below, in `run`) the mirror of the start-up.
Signals only call `request_stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Protocol

from inferq.dispatcher.checkpoint import Checkpoint
from inferq.dispatcher.consumer import TierConsumer
from inferq.dispatcher.intake import Intake
from inferq.dispatcher.parts import HeldBacklog
from inferq.dispatcher.routing import BackendRoutes
from inferq.dispatcher.starting import Starter
from inferq.dispatcher.tokens import TokenPool

log = logging.getLogger("inferq.dispatcher")

FETCH_TIMEOUT_MS = 100
# Helper tasks are cancelled at shutdown; this bounds the wait for them to unwind.
HELPER_STOP_S = 5.0


class Resource(Protocol):
    """Something started before the loop runs and stopped after it (a client, a thread)."""

    async def start(self) -> object: ...

    async def stop(self) -> object: ...


@dataclass(frozen=True)
class Helper:
    """A task that runs beside the loop until shutdown (the committer, the starter, timers)."""

    name: str
    run: Callable[[], Coroutine[object, object, None]]


@dataclass(frozen=True)
class Edges:
    """What the loop starts before it runs and stops after, in this order of start-up: the
    tenants-file watchers, what the token pool relies on, the pool, the backend clients, the
    producers (the outcomes', then the chunks'), and the consumer (started with the checkpoint as
    its rebalance listener)."""

    watchers: Sequence[Resource]
    pool_companions: Sequence[Resource]
    pool: TokenPool
    backends: BackendRoutes
    producers: Sequence[Resource]
    consumer: TierConsumer


@dataclass(frozen=True)
class Steps:
    """The steps the loop drives: intake each fetch, the checkpoint, the starter, and the helper
    tasks that run beside it."""

    intake: Intake
    checkpoint: Checkpoint
    starter: Starter
    helpers: Sequence[Helper]


class Stop:
    """Whether and why the dispatcher stops: a signal requests it, a part that cannot go on fails it.

    Built first in the composition root, so every part that may stop the dispatcher (the writer,
    when the producer fails for good) gets it in its constructor; the run loop waits on it."""

    def __init__(self) -> None:
        self._requested = asyncio.Event()
        self.failure: BaseException | None = None

    def request(self) -> None:
        """Signal handlers only call this; shutdown itself happens in `RunLoop.run`."""
        self._requested.set()

    def fail(self, error: BaseException) -> None:
        """A part cannot go on (the producer failed for good): stop, and `run` re-raises `error`."""
        if self.failure is None:
            self.failure = error
        self._requested.set()

    def is_set(self) -> bool:
        return self._requested.is_set()


class RunLoop:
    def __init__(
        self,
        *,
        edges: Edges,
        steps: Steps,
        held: HeldBacklog,
        stop: Stop,
        drain_timeout_s: float,
        describe: Callable[[], str],
    ) -> None:
        self._consumer = edges.consumer
        self._producers = edges.producers
        self._backends = edges.backends
        self._pool = edges.pool
        self._pool_companions = edges.pool_companions
        self._watchers = edges.watchers
        self._intake = steps.intake
        self._checkpoint = steps.checkpoint
        self._starter = steps.starter
        self._pauses = held.pauses
        self._readahead = held.readahead
        self._inflight = held.inflight
        self._helpers = steps.helpers
        self._drain_timeout_s = drain_timeout_s
        self._describe = describe
        self._stop = stop

    def request_stop(self) -> None:
        """Signal handlers only call this; shutdown itself happens in `run`."""
        self._stop.request()

    async def run(self) -> None:
        """Start every part, fetch until asked to stop, shut down in order; re-raises a helper's crash."""
        async with contextlib.AsyncExitStack() as stack:
            # Started top to bottom; the stack stops them bottom to top, and that is the shutdown:
            #  1. stop starting and fetching: helpers cancelled, every partition paused, the read-ahead
            #     forgotten (never started: the next owner reads it again from the commit);
            #  2. drain: running calls get `drain_timeout_s` to finish and produce their outcomes;
            #  3. commit what is durable;
            #  4. leave the group, so a peer takes the partitions over at once;
            #  5. flush the producers, close the backend clients;
            #  6. give the budget tokens back (and stop what the pool relies on);
            #  7. stop watching the tenants file.
            for watcher in self._watchers:
                await _started(stack, watcher)  # 7
            for companion in self._pool_companions:
                await _started(stack, companion)  # 6
            await _started(stack, self._pool)  # 6
            stack.push_async_callback(self._backends.close)  # 5
            for producer in self._producers:
                await _started(stack, producer)  # 5
            await self._consumer.start(self._checkpoint)
            stack.push_async_callback(self._consumer.stop)  # 4
            stack.push_async_callback(self._checkpoint.commit)  # 3
            stack.push_async_callback(self._drain)  # 2
            stack.push_async_callback(self._stop_taking_work, self._start_helpers())  # 1
            log.info("%s started", self._describe())
            while not self._stop.is_set():
                await self._fetch_once()
        if self._stop.failure is not None:
            raise self._stop.failure
        log.info("%s stopped cleanly", self._describe())

    async def _fetch_once(self) -> None:
        # Deferred records whose tenant has room again are read first (``deferred.py``).
        self._intake.rewind()
        batches = await self._consumer.fetch(self._intake.fetch_size(), FETCH_TIMEOUT_MS)
        if batches:
            await self._checkpoint.settled()
            for partition, records in batches.items():
                self._intake.admit(partition, records)
            self._starter.wake()
        self._pauses.update()

    def _start_helpers(self) -> list[asyncio.Task[None]]:
        tasks = [asyncio.create_task(helper.run(), name=helper.name) for helper in self._helpers]
        for task in tasks:
            task.add_done_callback(self._helper_ended)
        return tasks

    def _helper_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        # A helper never returns by itself: the dispatcher cannot work without it, so it stops.
        failure = task.exception() or RuntimeError(f"helper {task.get_name()} returned")
        self._stop.failure = failure
        log.error("helper %s ended; stopping the dispatcher", task.get_name(), exc_info=failure)
        self._stop.request()

    async def _stop_taking_work(self, helpers: list[asyncio.Task[None]]) -> None:
        for task in helpers:
            task.cancel()
        await asyncio.wait(helpers, timeout=HELPER_STOP_S)
        self._pauses.pause_everything()
        self._readahead.clear()

    async def _drain(self) -> None:
        await self._inflight.drain(self._drain_timeout_s)


async def _started(stack: contextlib.AsyncExitStack, resource: Resource) -> None:
    await resource.start()
    stack.push_async_callback(resource.stop)
