"""Preempting: the running calls of this process, and the cancelling of the one ``preemption.py`` names.

`Execution` registers each backend call as it starts (`running`) and forgets it when it ends
(`ended`); the starter, when the scheduler says wait while work waits, asks `preempt`, which
cancels the call the decision names only if the scheduler would give its slot to a tier above the
victim's (no churn for a slot the victim's own tier would take again). Cancelling
is synchronous and takes back only what has not reached anyone: a call whose answer has arrived
(its task done) is left alone, and a streamed call is first withdrawn from its chunk stream, which
refuses once a chunk has been handed to the producer. The cancelled task closes the HTTP connection
(the backend stops generating); `Execution` then sees the call ended cancelled and, instead of an
outcome, hands the request back (`wait_again`): into the read-ahead at its place, its offset still
uncommitted, its token released only after, once the call's task has ended.

A backend frees a cancelled call's slot when it sees the connection close, a moment after the
dispatcher has: a call started at once on that slot may be refused (429) in between. Such a 429,
within `SETTLE_MS` of a cancellation on that backend, is not the backend's overload: the request is
started again (`not_yet_freed`, `start_again`), at most `MAX_SETTLE_RESTARTS` times, and the budget
is not cut for it (measured: 3 such 429s in 144 preemptions cut the bench's budget 10 -> 7 three
times, and two chats, refused and retried after a backoff, expired).

The discarded tokens are counted from the pieces a streamed call had received, or estimated for
one that was not streamed: the call's elapsed time x its request's token estimate
(``starting.request_cost``) / its tier's typical call time (``call_times.py``), at most the estimate.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from inferq.dispatcher.errors import BackendError
from inferq.dispatcher.metrics import DispatcherMetrics
from inferq.dispatcher.preemption import NextTier, RunningCall, discarded_estimate, victim_to_cancel
from inferq.dispatcher.readahead import ReadAhead
from inferq.dispatcher.schedule import Window
from inferq.dispatcher.streaming import ChunkStream
from inferq.dispatcher.work import Work
from inferq.messaging.tiers import Tier

# How long after a cancellation a 429 of its backend is read as its slot not yet freed.
SETTLE_MS = 250
# Starts again of one request for that reason, at most (each is one more HTTP call).
MAX_SETTLE_RESTARTS = 3


@dataclass
class Call:
    """One running backend call as `Execution` registered it."""

    key: int
    work: Work
    # The tier its token counts in (a promoted LOW request's is MEDIUM).
    tier: Tier
    started_ms: int
    backend: str
    backend_preemptible: bool
    task: asyncio.Task[Any]
    stream: ChunkStream | None
    # Pieces of a streamed answer received so far.
    pieces: int = 0
    cancelled: bool = False
    # Started past its tier's ceiling or into the HIGH headroom (``policies.next_start``).
    lent: bool = False

    def view(self) -> RunningCall:
        return RunningCall(
            self.key,
            self.tier,
            self.started_ms,
            self.backend_preemptible,
            self.work.preemptions,
            chunks_sent=self.stream is not None and self.stream.started,
            answered=self.task.done(),
            cancelling=self.cancelled,
            lent=self.lent,
        )


class Preemptor:
    def __init__(
        self,
        *,
        preemptible: frozenset[str],
        max_preemptions: int,
        readahead: ReadAhead,
        metrics: DispatcherMetrics,
        clock_ms: Callable[[], int],
        typical_ms: Callable[[Tier], float],
        estimate: Callable[[Work], int],
    ) -> None:
        self._preemptible = preemptible
        self._max = max_preemptions
        self._readahead = readahead
        self._metrics = metrics
        self._clock_ms = clock_ms
        self._typical_ms = typical_ms
        # A request's tokens before its call (``starting.request_cost``).
        self._estimate = estimate
        self._calls: dict[int, Call] = {}
        self._keys = itertools.count()
        # Per backend, when this process last cancelled a call of it (clock ms).
        self._cancelled_at: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._calls)

    def running(
        self,
        work: Work,
        tier: Tier,
        backend: str,
        task: asyncio.Task[Any],
        stream: ChunkStream | None,
        *,
        lent: bool = False,
    ) -> Call:
        """A backend call started (`backend`: its backend's name; `lent`: its slot was lent,
        ``policies.next_start``)."""
        call = Call(
            next(self._keys),
            work,
            tier,
            self._clock_ms(),
            backend,
            backend in self._preemptible,
            task,
            stream,
            lent=lent,
        )
        self._calls[call.key] = call
        return call

    def lent(self) -> dict[Tier, int]:
        """Per tier, this process's running calls that were lent their slot (those being cancelled
        included: their slots come back)."""
        counts = dict.fromkeys(Tier, 0)
        for call in self._calls.values():
            if call.lent:
                counts[call.tier] += 1
        return counts

    def ended(self, call: Call) -> None:
        """The call's task ended (however): it holds its slot no more for the decision."""
        self._calls.pop(call.key, None)

    def preempt(
        self,
        *,
        in_use: Mapping[Tier, int],
        waiting: Mapping[Tier, int],
        window: Window,
        budget: int,
        next_tier: NextTier,
    ) -> bool:
        """Cancel the call ``preemption.victim_to_cancel`` names, if any: the one `choose_victim`
        names, if the scheduler (`next_tier`) would give its slot to a tier above the victim's.
        True when one was cancelled."""
        if not self._preemptible or not self._calls:
            return False
        victim = victim_to_cancel(
            [call.view() for call in self._calls.values()],
            in_use=in_use,
            waiting=waiting,
            window=window,
            budget=budget,
            max_preemptions=self._max,
            next_tier=next_tier,
        )
        return victim is not None and self.cancel(self._calls[victim.key])

    def cancel(self, call: Call) -> bool:
        """Take the call back if nothing of it has reached anyone: not answered, no chunk handed over."""
        if call.cancelled or call.task.done():
            return False
        if call.stream is not None and not call.stream.withdraw():
            return False
        call.cancelled = True
        call.task.cancel()
        self._cancelled_at[call.backend] = self._clock_ms()
        return True

    def not_yet_freed(self, call: Call, failure: BackendError) -> bool:
        """`failure` (the call's) is a 429 of a backend this process cancelled a call of within
        `SETTLE_MS`: the slot was not yet freed when the call came, and the request may start again."""
        cancelled_at = self._cancelled_at.get(call.backend)
        return (
            failure.status == 429
            and cancelled_at is not None
            and self._clock_ms() - cancelled_at <= SETTLE_MS
            and call.work.settle_restarts < MAX_SETTLE_RESTARTS
        )

    def start_again(self, call: Call) -> None:
        """The call was refused for a slot not yet freed (`not_yet_freed`): its request waits again
        at its place, not an attempt, not a preemption."""
        work = call.work
        work.settle_restarts += 1
        work.offsets.unstart(work.offset)
        self._requeue(work)

    def wait_again(self, call: Call) -> None:
        """The cancelled call's task has ended cancelled: its request waits again as it was
        (`_requeue`), and what it cost is counted."""
        work = call.work
        work.wait_again()
        streamed = call.stream is not None
        if streamed:
            discarded = call.pieces
        else:
            elapsed = self._clock_ms() - call.started_ms
            discarded = discarded_estimate(elapsed, self._typical_ms(work.tier), self._estimate(work))
        limit_reached = work.preemptions == self._max
        self._metrics.record_preempted(call.tier, discarded, streamed=streamed, limit_reached=limit_reached)
        self._requeue(work)

    def _requeue(self, work: Work) -> None:
        """Back into the read-ahead at its place, unless its partition was revoked meanwhile: then
        it is left to the next owner (its offset was never committed), unless this process took the
        partition back."""
        if not work.offsets.revoked or work.offsets.successor is not None:
            self._readahead.put_back(work)
