"""Driving a trace into a running pipeline at real time or compressed, with bounded concurrency.

Arrivals are sent in trace order, each at ``start + offset / speed``. At most `max_in_flight`
requests are outstanding: when the pipeline answers slower than the trace asks, sends fall behind
their due time (the lateness is recorded per request and summarised) rather than piling up
unbounded tasks. A stop event (Ctrl-C) ends the sending; requests already sent are awaited (each
is bounded by the sender's timeout) and recorded, so the summary covers everything that was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from inferq.clock import wall_ms
from inferq.tools.loadtest.progress import Tally
from inferq.tools.loadtest.runs import RequestRecord, request_id
from inferq.tools.loadtest.senders import Sender
from inferq.tools.traces.arrival import Arrival

TICK_S = 0.25


@dataclass(frozen=True)
class LoadOptions:
    run_id: str
    speed: float = 1.0
    max_in_flight: int = 64
    # A moment to get every task scheduled before the first due time, so the first burst is on time.
    start_delay_s: float = 0.2
    # Epoch seconds the trace's offset 0 falls on instead, so that processes posting parts of one
    # trace (the benches') share its start.
    start_at_s: float | None = None

    def __post_init__(self) -> None:
        if self.speed <= 0 or self.max_in_flight < 1:
            raise ValueError("speed must be positive and max_in_flight at least 1")


@dataclass
class LoadResult:
    planned: int
    tally: Tally = field(default_factory=Tally)
    started_ms: int = 0
    elapsed_s: float = 0.0
    interrupted: bool = False
    late_ms_total: int = 0
    late_ms_max: int = 0

    @property
    def sent(self) -> int:
        return self.tally.total().sent

    def observe(self, record: RequestRecord) -> None:
        self.tally.add(record.tier, record.outcome)
        late = max(0, record.sent_ms - record.due_ms)
        self.late_ms_total += late
        self.late_ms_max = max(self.late_ms_max, late)


async def run_load(
    arrivals: Sequence[Arrival],
    sender: Sender,
    options: LoadOptions,
    *,
    stop: asyncio.Event,
    on_record: Callable[[RequestRecord], None],
    on_tick: Callable[[LoadResult], None] | None = None,
) -> LoadResult:
    """Send every arrival at its (scaled) time until done or `stop` is set; returns the tally."""
    loop = asyncio.get_running_loop()
    result = LoadResult(planned=len(arrivals))
    delay_s = options.start_delay_s if options.start_at_s is None else options.start_at_s - time.time()
    start = loop.time() + delay_s
    result.started_ms = (
        wall_ms() + round(delay_s * 1000) if options.start_at_s is None else round(options.start_at_s * 1000)
    )
    slots = asyncio.Semaphore(options.max_in_flight)
    in_flight: set[asyncio.Task[None]] = set()
    finished = asyncio.Event()

    async def one(arrival: Arrival, due_ms: int) -> None:
        try:
            rid = request_id(options.run_id, arrival.index)
            sent = wall_ms()
            answer = await sender.send(arrival, rid)
            record = RequestRecord(
                n=arrival.index,
                request_id=rid,
                scenario=arrival.scenario,
                tier=arrival.tier.value,
                kind=arrival.kind,
                session_id=arrival.session_id,
                offset_ms=arrival.offset_ms,
                due_ms=due_ms,
                sent_ms=sent,
                answered_ms=wall_ms(),
                outcome=answer.outcome,
                status=answer.status,
                answer_tier=answer.answer_tier,
                expire_at_ms=answer.expire_at_ms,
                retry_after_s=answer.retry_after_s,
                error=answer.error,
                tenant=arrival.tenant,
            )
            result.observe(record)
            on_record(record)
        finally:
            slots.release()

    async def ticker() -> None:
        while not finished.is_set():
            result.elapsed_s = max(0.0, loop.time() - start)
            if on_tick is not None:
                on_tick(result)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), TICK_S)

    tick_task = asyncio.create_task(ticker())
    try:
        for arrival in arrivals:
            due = start + arrival.offset_ms / 1000 / options.speed
            delay = due - loop.time()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
            if stop.is_set():
                break
            # Blocks while max_in_flight requests are outstanding: that is the concurrency bound.
            await slots.acquire()
            due_ms = result.started_ms + round(arrival.offset_ms / options.speed)
            task = asyncio.create_task(one(arrival, due_ms))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        # Everything sent is awaited; each send is bounded by the sender's timeout.
        await asyncio.gather(*in_flight)
    finally:
        result.interrupted = stop.is_set()
        result.elapsed_s = max(0.0, loop.time() - start)
        finished.set()
        await tick_task
    return result


def summary(result: LoadResult, *, run_id: str) -> str:
    """The end-of-run summary: what was sent, how the pipeline answered, the rate achieved."""
    t = result.tally.total()
    rate = t.sent / result.elapsed_s if result.elapsed_s > 0 else 0.0
    head = "interrupted" if result.interrupted else "done"
    lines = [
        f"run {run_id} {head}: sent {t.sent} of {result.planned} in {result.elapsed_s:.1f} s ({rate:.1f}/s)",
        f"  accepted {t.accepted}, refused {t.refused} (429), unavailable {t.unavailable} (503), "
        f"errors {t.error}",
    ]
    for tier, c in result.tally.by_tier.items():
        if c.sent:
            lines.append(
                f"  {tier:6} sent {c.sent:6}  accepted {c.accepted:6}  429 {c.refused:5}  "
                f"503 {c.unavailable:5}  errors {c.error:5}"
            )
    if t.sent:
        lines.append(
            f"  send lateness vs the trace: mean {result.late_ms_total / t.sent:.0f} ms, "
            f"max {result.late_ms_max} ms"
        )
    return "\n".join(lines)
