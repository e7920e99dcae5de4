"""Execution: one started request from its token to its durable outcome.

The backend call is bounded by `backend_timeout_s`; the request waits for it no longer than its
remaining deadline. The token is the backend's concurrency, not the outcome's: it comes back when
the backend call ends, however it ends, and the starter is woken for it. Then the adaptive budget
hears how the call went, and the outcome is written: OK, or what the retry policy decides for a
failure (a retry on the retry topic, EXPIRED, or a dead letter and FAILED).

When the request's deadline cuts the wait, its outcome is written at once as for a timeout, but the
call is not dropped: an HTTP server (the simulated backend, a real LLM API) goes on working on a call
whose client went away, so releasing its token then would let the next start be one call more than
the backend allows (a 429, and the adaptive budget cut for it). The call goes on in a lingering task
(`linger`, ``inflight.py``), its answer discarded, and its token comes back when it ends or when
`backend_timeout_s` has passed since it started, whichever is first; shutdown cancels it at the end
of the drain, and the token comes back then.

Behind a preemptible backend (``preemption.py``) the starter may cancel a lent call (started past
its tier's ceiling or into the HIGH headroom) for a higher tier (``preempting.py``). The cancelled
call ends with no outcome: its request waits again as it was (not a failed attempt, its offset not
committed past, its deadline, age and place kept), and its token comes back once the call's task
has ended, after the request is back in the read-ahead. A call whose answer has arrived, or that
has streamed a chunk, is never cancelled.

An embedding request (its `embedding_input` set) is called with the backend's `embed`, and its
checked vectors go into its OK result; its token, budget, deadline and retries are a chat call's.

A request with `stream` set is called with streaming on; its pieces go to the chunk topic
(``streaming.py``) before its result goes to the reply topic. Once a chunk is out, a failure is
terminal (FAILED, "failed mid-stream after N chunks"), never retried: a caller must not see the
same tokens twice.

With a rate budget (``rate_budget.py``), the answer's `usage` replaces the start's estimate in the
minute's window, and the rate-limit headers of every answer (a 429's too) teach the budget the
backend's limits and what it counts.

The call goes to the backend its start was routed to (``routing.py``); when the backend call ends
(when its token comes back), the routing hears how it went, which its circuit breaker counts. An
overload answer from a backend its breaker has taken out of service (open, or probed) does not cut
the adaptive budget: the traffic goes to the next backend, which the budget is for now. A tier with
no other backend still calls it, and its overload answers cut the budget as with one backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine

from inferq import tracing
from inferq.dispatcher.adaptive import warn_on_change
from inferq.dispatcher.backend import Completion
from inferq.dispatcher.deltas import StreamDelta
from inferq.dispatcher.errors import BackendError
from inferq.dispatcher.parts import Budgets, CallPolicy, Instruments
from inferq.dispatcher.preempting import Preemptor
from inferq.dispatcher.rate_budget import Charge, read_headers
from inferq.dispatcher.rate_ledger import RateLedger
from inferq.dispatcher.retries import Verdict
from inferq.dispatcher.routing import Route
from inferq.dispatcher.streaming import ChunkStream
from inferq.dispatcher.tokens import Lease
from inferq.dispatcher.work import Work
from inferq.dispatcher.writer import OutcomeWriter
from inferq.messaging.producer import ProduceError

log = logging.getLogger("inferq.dispatcher")


class Execution:
    def __init__(
        self,
        *,
        calls: CallPolicy,
        budgets: Budgets,
        writer: OutcomeWriter,
        instruments: Instruments,
        call_ended: Callable[[Work, int | None, bool], None],
        linger: Callable[[Coroutine[object, object, None], str], None],
        preemptor: Preemptor | None = None,
    ) -> None:
        self._routes = calls.routes
        self._pool = budgets.pool
        self._writer = writer
        self._models = calls.models
        self._retry_policy = calls.retries
        self._adaptive = budgets.adaptive
        self._metrics = instruments.metrics
        self._chunk_policy = calls.chunks
        self._clock_ms = instruments.clock_ms
        self._backend_timeout_s = calls.backend_timeout_s
        # Set when a token comes back: the starter waits on it.
        self._token_freed = budgets.wake
        # The tenant's concurrency cap counts the call until its token is back (`NextStart.ended`),
        # told when and whether it answered (a completed call's time is learned, ``call_times.py``).
        self._call_ended = call_ended
        self._monotonic = instruments.monotonic
        self._rate: RateLedger | None = budgets.rate
        # Where a call the deadline cut goes on until the backend ends it (`InFlight.linger`).
        self._linger = linger
        # Where running calls are registered for preemption (None: no backend is preemptible).
        self._preemptor = preemptor

    def expire(self, work: Work, reason: str) -> Coroutine[object, object, None]:
        """A started request found expired once its token came: answered EXPIRED, no call."""
        return self._writer.expire(work, reason)

    async def call(
        self,
        work: Work,
        lease: Lease,
        route: Route,
        charge: Charge | None = None,
        *,
        probe: bool = False,
        lent: bool = False,
    ) -> None:
        """Call `route`'s backend for `work` (the starter has counted the call on `route`; `probe`:
        the call is its breaker's probe; `lent`: its slot was lent, preemption may take it back)."""
        dispatched_at = self._clock_ms()
        if not tracing.enabled():  # nothing more than this check per call
            await self._call(work, lease, route, dispatched_at, charge, probe, lent)
            return
        with work.traced(dispatched_at):
            await self._call(work, lease, route, dispatched_at, charge, probe, lent)

    async def _call(
        self,
        work: Work,
        lease: Lease,
        route: Route,
        dispatched_at: int,
        charge: Charge | None,
        probe: bool,
        lent: bool,
    ) -> None:
        if work.preemptions == 0:  # once per request: a preempted one's wait was its first start's
            self._metrics.record_queue_wait(
                work.tier, (dispatched_at - work.created_at_ms) / 1000, work.request.tenant
            )
        model = self._models.model_for(work)
        remaining_s = (work.expire_at_ms - dispatched_at) / 1000
        # A timeout the request's own deadline imposed says the request ran out of time, not that
        # the backend is overloaded: it must not cut the budget.
        deadline_bound = remaining_s < self._backend_timeout_s
        stream = self._chunk_stream(work, model) if work.request.stream else None
        started = self._monotonic()
        failure: BackendError | None = None
        cut = _Cut()
        backend_call = asyncio.create_task(
            self._complete(work, route, model, self._backend_timeout_s, stream, cut), name="backend-call"
        )
        preemptor = self._preemptor
        running = None
        if preemptor is not None:
            running = preemptor.running(work, lease.tier, route.name, backend_call, stream, lent=lent)
        preempted = settling = False
        try:
            completion = await self._within(backend_call, remaining_s, cut)
        except BackendError as exc:
            failure = exc
        except _PreemptedError:
            preempted = True
        finally:
            if preemptor is not None and running is not None:
                preemptor.ended(running)  # a call the deadline cut lingers unseen: its outcome is out
                # Back to waiting before its token is: the next start finds it in its place.
                if preempted:
                    running.pieces = cut.pieces
                    preemptor.wait_again(running)
                elif failure is not None and preemptor.not_yet_freed(running, failure):
                    settling = True
                    preemptor.start_again(running)
            if backend_call.done():
                completed = failure is None and not backend_call.cancelled()
                # A timeout the deadline imposed, a cancelled call, or a slot a cancellation had not
                # yet freed, says nothing of the backend.
                neutral = (
                    settling
                    or backend_call.cancelled()
                    or (failure is not None and failure.timed_out and deadline_bound)
                )
                self._routes.ended(route, failure, self._clock_ms(), cut=neutral, probe=probe)
                await self._call_over(work, lease, completed=completed)
            else:
                # The deadline cut it (or shutdown cancelled this task): the backend still runs it.
                lingering = self._lingering(backend_call, work, lease, route, started, probe)
                self._linger(lingering, "abandoned-call")
        if preempted or settling:
            return  # no outcome: the request waits again (not an attempt, not committed past)
        self._metrics.record_backend_call(
            work.tier, failure, self._monotonic() - started, work.request.tenant, route.name
        )
        if self._rate is not None:
            answered = completion if failure is None else None
            await self._rate_learned(
                self._rate, self._routes.rate_key(route, model), charge, answered, failure
            )
        if failure is not None:
            if (
                failure.overload
                and not (failure.timed_out and deadline_bound)
                and self._routes.in_service(route, work.tier, self._clock_ms())
            ):
                self._feedback_overload()
            if stream is not None and await self._stream_ended(work, stream, failure, dispatched_at):
                return
            await self._failed(work, failure, dispatched_at)
            return
        if stream is not None and await self._stream_ended(work, stream, None, dispatched_at):
            return
        if self._adaptive is not None:
            before = self._adaptive.effective
            self._adaptive.record_success(model, self._monotonic() - started)
            warn_on_change(self._adaptive, before)
        await self._writer.ok(work, completion, dispatched_at)

    async def _within(
        self, backend_call: asyncio.Task[Completion], remaining_s: float, cut: _Cut
    ) -> Completion:
        """The call's answer if it comes within the request's remaining time; a timeout otherwise."""
        try:
            done, _ = await asyncio.wait({backend_call}, timeout=max(0.001, remaining_s))
        except asyncio.CancelledError:
            backend_call.cancel()  # shutdown past the drain bound: the call goes too (and its token)
            with contextlib.suppress(BaseException):
                await backend_call
            raise
        if backend_call.cancelled():
            cut.cut = True
            raise _PreemptedError  # only preemption cancels the call while this task waits for it
        if not done:
            cut.cut = True  # tokens still coming are not the request's any more
            seconds = min(self._backend_timeout_s, max(0.001, remaining_s))
            raise BackendError.timeout(seconds)
        return backend_call.result()

    async def _lingering(
        self,
        backend_call: asyncio.Task[Completion],
        work: Work,
        lease: Lease,
        route: Route,
        started: float,
        probe: bool,
    ) -> None:
        """Hold `lease` while the backend still runs the call, bounded by `backend_timeout_s`."""
        try:
            left_s = self._backend_timeout_s - (self._monotonic() - started)
            await asyncio.wait({backend_call}, timeout=max(0.0, left_s))
        finally:
            if not backend_call.done():
                backend_call.cancel()
            with contextlib.suppress(BaseException):
                await backend_call  # its answer (or failure) is nobody's any more
            self._routes.ended(route, None, self._clock_ms(), cut=True, probe=probe)
            await self._call_over(work, lease, completed=False)

    async def _call_over(self, work: Work, lease: Lease, *, completed: bool) -> None:
        self._call_ended(work, self._clock_ms(), completed)
        await self._pool.release(lease)
        self._token_freed.set()

    async def _complete(
        self, work: Work, route: Route, model: str, timeout_s: float, stream: ChunkStream | None, cut: _Cut
    ) -> Completion:
        """The backend call: streamed into `stream` (its flusher running meanwhile) when there is one;
        once the deadline has `cut` the call, the pieces still arriving are dropped."""
        request = work.request
        if request.embedding_input is not None:
            inputs = list(request.embedding_input)
            return await route.backend.embed(model, inputs, request.embedding_dimensions, timeout_s=timeout_s)
        if stream is None:
            return await route.backend.complete(
                model, work.request.openai_messages(), work.params, timeout_s=timeout_s
            )
        stream.start()

        def on_delta(delta: StreamDelta) -> None:
            if not cut.cut:
                cut.pieces += 1
                stream.add(delta)

        try:
            return await route.backend.stream(
                model, work.request.openai_messages(), work.params, timeout_s=timeout_s, on_delta=on_delta
            )
        except asyncio.CancelledError:
            await stream.abort()  # shutdown past the drain bound: the flusher goes with the call
            raise

    def _chunk_stream(self, work: Work, model: str) -> ChunkStream:
        async def write(seq: int, delta: StreamDelta) -> ProduceError | None:
            return await self._writer.chunk(work, seq=seq, delta=delta, model=model)

        return ChunkStream(write, self._chunk_policy, monotonic=self._monotonic)

    async def _stream_ended(
        self, work: Work, stream: ChunkStream, failure: BackendError | None, dispatched_at_ms: int
    ) -> bool:
        """Apply the streaming rule (``streaming.py``); True when it wrote the outcome.

        Nothing handed to the producer yet: the tokens gathered are dropped and the call's outcome
        is decided as for any call (a failure may be retried). Otherwise the remaining chunks are
        written first (a cancellation meanwhile cancels the flusher with it); then a failed call is
        FAILED and dead-lettered, never retried, so a caller never sees a token twice. Lost chunks
        change no outcome: the result holds the whole answer.
        """
        if failure is not None and not stream.started:
            await stream.abort()
            return False
        await stream.finish()
        if stream.lost:
            log.warning(
                "%d of %d chunks of request %s lost (its result holds them), the first: %s",
                stream.lost,
                stream.lost + stream.written,
                work.request_id,
                stream.first_loss,
            )
        if failure is not None:
            self._metrics.record_failed_mid_stream(work.tier)
            why = f"failed mid-stream after {stream.written} chunks"
            await self._writer.give_up(work, failure, dispatched_at_ms, why)
            return True
        return False

    async def _rate_learned(
        self,
        rate: RateLedger,
        model: str,
        charge: Charge | None,
        completion: Completion | None,
        failure: BackendError | None,
    ) -> None:
        """The answer's usage settles the start's estimate; its headers teach the rate budget."""
        headers = (
            completion.rate_headers if completion is not None else (failure.rate_headers if failure else {})
        )
        if headers:
            await rate.observe(
                model, read_headers(headers, status=failure.status if failure is not None else None)
            )
        if charge is not None and completion is not None and completion.total_tokens > 0:
            await rate.settle(charge, completion.total_tokens)

    def _feedback_overload(self) -> None:
        if self._adaptive is not None:
            before = self._adaptive.effective
            self._adaptive.record_overload()
            warn_on_change(self._adaptive, before)

    async def _failed(self, work: Work, error: BackendError, dispatched_at_ms: int) -> None:
        """Retry later, expire, or dead-letter and fail, as the retry policy decides."""
        decision = self._retry_policy.decide(
            error, attempt=work.request.attempt, now_ms=self._clock_ms(), expire_at_ms=work.expire_at_ms
        )
        if decision.verdict is Verdict.RETRY and decision.not_before_ms is not None:
            await self._writer.retry(work, decision.not_before_ms)
        elif decision.verdict is Verdict.EXPIRE:
            await self._writer.expire(work, decision.reason)
        else:
            await self._writer.give_up(work, error, dispatched_at_ms, decision.reason)


class _Cut:
    """Set when the request's deadline (or a preemption) has cut its wait for the backend call;
    `pieces`: the streamed pieces received until then."""

    cut = False
    pieces = 0


class _PreemptedError(Exception):
    """The backend call was cancelled by preemption (``preempting.py``): no outcome, it waits again."""
