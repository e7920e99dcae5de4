"""Runs a batch: sends the lines not yet accepted (paced, 429s waited out), waits for every accepted
request's outcome, and writes each to the ledger.

`senders` tasks send, taking the lines in order (one at a time each: an interruption can cut at
most `senders` sends, the only requests a rerun may send again); `max_waiting` tasks wait for
outcomes, taking accepted requests oldest first. A refusal that says when to come back (429, 503)
is waited out for that long (at least `min_retry_s`) and the same request (same id) sent again; an
unreachable inferq is retried with a doubling pause up to `max_retry_s`. Nothing is sent for a
line the journal says was accepted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inferq.batch.ledger import Accepted, Ledger
from inferq.batch.lines import BatchLine
from inferq.batch.progress import Progress
from inferq.client.errors import InvalidRequestError, NotAuthorizedError, RefusedError, TransportError
from inferq.client.models import Outcome
from inferq.client.transport import Transport

log = logging.getLogger("inferq.batch")

# After its deadline, how long an accepted request's outcome is still waited for (the dispatcher
# answers EXPIRED at the deadline; this covers a slow results path).
OUTCOME_GRACE_S = 300.0
# One wait call's bound: a long poll is cut into these.
WAIT_SLICE_S = 30.0


class BatchAbortedError(Exception):
    """The batch cannot go on (the key is refused, or a bad line with --on-bad-line stop)."""


@dataclass(frozen=True)
class Pacing:
    """`rate_per_s` requests per second at most (None: as fast as accepted)."""

    rate_per_s: float | None = None
    min_retry_s: float = 0.5
    max_retry_s: float = 30.0


def parse_rate(text: str) -> float:
    """``50``, ``50/s``, ``600/min`` or ``3000/h`` as requests per second."""
    number, _, unit = text.strip().partition("/")
    per = {"": 1.0, "s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0}.get(unit.strip().lower())
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if per is None or not value > 0 or value == float("inf"):
        raise ValueError(
            f"rate must be a positive number of requests per s, min or h (e.g. 50/s), not {text!r}"
        )
    return value / per


def outcome_fields(outcome: Outcome) -> dict[str, Any]:
    view = outcome.to_json()
    view.pop("request_id", None)
    view.pop("status", None)
    return view


class BatchRun:
    def __init__(
        self,
        transport: Transport,
        ledger: Ledger,
        lines: list[BatchLine],
        *,
        pacing: Pacing,
        max_waiting: int = 200,
        senders: int = 1,
        stop_on_invalid: bool = False,
        progress: Progress | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transport = transport
        self._ledger = ledger
        self._lines = lines
        self._pacing = pacing
        self._max_waiting = max_waiting
        self._senders = max(1, senders)
        self._stop_on_invalid = stop_on_invalid
        self._progress = progress
        self._clock = clock
        self._queue: asyncio.Queue[Accepted | None] = asyncio.Queue()
        self.sent = 0

    async def run(self) -> Counter[str]:
        """Send and wait until every line has an outcome; this run's outcomes by status."""
        state = self._ledger.state
        for accepted in sorted(state.waiting.values(), key=lambda a: a.line):
            # Registered before anything is waited for: a Kafka transport then catches every one.
            self.transport.expect(accepted.request_id, accepted.expire_at_ms)
            self._queue.put_nowait(accepted)
        to_send = [
            line
            for line in self._lines
            if line.submission is not None
            and line.number not in state.outcomes
            and line.number not in state.accepted
        ]
        self.counts: Counter[str] = Counter()
        waiters = [
            asyncio.create_task(self._wait_loop(), name=f"batch-wait-{i}") for i in range(self._max_waiting)
        ]
        try:
            await self._send_all(to_send)
            for _ in waiters:
                self._queue.put_nowait(None)
            await asyncio.gather(*waiters)
        finally:
            for task in waiters:
                task.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
        return self.counts

    def _record(self, line: int, request_id: str, status: str, **fields: Any) -> None:
        if self._ledger.outcome(line, request_id, status, **fields):
            self.counts[status] += 1
            if self._progress is not None:
                self._progress.finished(status)

    async def _send_all(self, lines: list[BatchLine]) -> None:
        """`senders` tasks take the lines in order; each send takes the next slot of the pace."""
        interval = 1.0 / self._pacing.rate_per_s if self._pacing.rate_per_s else 0.0
        todo = iter(lines)
        next_at = self._clock()

        async def sender() -> None:
            nonlocal next_at
            for line in todo:
                if interval:
                    # Taken without an await in between: no two senders get one slot.
                    slot = max(next_at, self._clock() - interval)
                    next_at = slot + interval
                    delay = slot - self._clock()
                    if delay > 0:
                        await asyncio.sleep(delay)
                await self._send(line)

        senders = [asyncio.create_task(sender(), name=f"batch-send-{i}") for i in range(self._senders)]
        try:
            await asyncio.gather(*senders)
        finally:
            for task in senders:
                task.cancel()
            await asyncio.gather(*senders, return_exceptions=True)

    async def _send(self, line: BatchLine) -> None:
        if line.submission is None:
            return
        pause = self._pacing.min_retry_s
        while True:
            try:
                handle = await self.transport.submit(line.submission)
            except RefusedError as exc:
                wait = max(exc.retry_after_s or 0.0, self._pacing.min_retry_s)
                log.info(
                    "line %d refused (%d), sending it again in %.1f s", line.number, exc.status_code, wait
                )
                await asyncio.sleep(min(wait, self._pacing.max_retry_s * 10))
                continue
            except TransportError as exc:
                if not exc.retriable:
                    raise
                log.warning("line %d not sent (%s); trying again in %.1f s", line.number, exc, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, self._pacing.max_retry_s)
                continue
            except InvalidRequestError as exc:
                self._record(line.number, line.request_id, "INVALID", error=str(exc), problems=exc.problems)
                if self._stop_on_invalid:
                    raise BatchAbortedError(f"line {line.number}: refused by inferq: {exc}") from exc
                return
            except NotAuthorizedError as exc:
                if exc.status_code == 401:
                    raise BatchAbortedError(f"the API key was refused: {exc}") from exc
                self._record(line.number, line.request_id, "NOT_ENTITLED", error=str(exc))
                return
            break
        self._ledger.accepted(line.number, handle.request_id, handle.expire_at_ms)
        self.sent += 1
        if self._progress is not None:
            self._progress.sent()
        self._queue.put_nowait(Accepted(line.number, handle.request_id, handle.expire_at_ms))

    async def _wait_loop(self) -> None:
        while (accepted := await self._queue.get()) is not None:
            await self._wait(accepted)

    async def _wait(self, accepted: Accepted) -> None:
        give_up_at = accepted.expire_at_ms / 1000 + OUTCOME_GRACE_S
        while True:
            left = give_up_at - time.time()
            if left <= 0:
                self._record(
                    accepted.line, accepted.request_id, "NO_OUTCOME", error="no outcome by the deadline"
                )
                return
            outcome = await self.transport.wait(accepted.request_id, min(left, WAIT_SLICE_S))
            if outcome is not None:
                self._record(
                    accepted.line, accepted.request_id, outcome.status.value, **outcome_fields(outcome)
                )
                return
