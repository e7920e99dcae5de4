"""Execution: one started request from its token to its durable outcome.

The backend call is bounded by the smaller of `backend_timeout_s` and the request's remaining
deadline. The token comes back the moment the call ends, however it ends (it is the backend's
concurrency, not the outcome's), and the starter is woken for it. Then the adaptive budget hears
how the call went, and the outcome is written: OK, or what the retry policy decides for a failure
(a retry on the retry topic, EXPIRED, or a dead letter and FAILED).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from services.dispatcher.adaptive import AdaptiveBudget, warn_on_change
from services.dispatcher.backend import Backend
from services.dispatcher.errors import BackendError
from services.dispatcher.metrics import DispatcherMetrics
from services.dispatcher.models import ModelChoice
from services.dispatcher.retries import RetryPolicy, Verdict
from services.dispatcher.tokens import Lease, TokenPool
from services.dispatcher.work import Work
from services.dispatcher.writer import OutcomeWriter


class Execution:
    def __init__(
        self,
        *,
        backend: Backend,
        pool: TokenPool,
        writer: OutcomeWriter,
        models: ModelChoice,
        retry_policy: RetryPolicy,
        adaptive: AdaptiveBudget | None,
        metrics: DispatcherMetrics,
        clock_ms: Callable[[], int],
        backend_timeout_s: float,
        token_freed: asyncio.Event,
        call_ended: Callable[[Work], None] = lambda _: None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._backend = backend
        self._pool = pool
        self._writer = writer
        self._models = models
        self._retry_policy = retry_policy
        self._adaptive = adaptive
        self._metrics = metrics
        self._clock_ms = clock_ms
        self._backend_timeout_s = backend_timeout_s
        self._token_freed = token_freed
        # The tenant's concurrency cap counts the call until its token is back (`NextStart.ended`).
        self._call_ended = call_ended
        self._monotonic = monotonic

    async def call(self, work: Work, lease: Lease) -> None:
        dispatched_at = self._clock_ms()
        self._metrics.record_queue_wait(
            work.tier, (dispatched_at - work.created_at_ms) / 1000, work.request.tenant
        )
        model = self._models.model_for(work)
        remaining_s = (work.expire_at_ms - dispatched_at) / 1000
        timeout_s = max(0.001, min(self._backend_timeout_s, remaining_s))
        # A timeout the request's own deadline imposed says the request ran out of time, not that
        # the backend is overloaded: it must not cut the budget.
        deadline_bound = remaining_s < self._backend_timeout_s
        started = self._monotonic()
        failure: BackendError | None = None
        try:
            completion = await self._backend.complete(
                model, work.request.openai_messages(), work.params, timeout_s=timeout_s
            )
        except BackendError as exc:
            failure = exc
        finally:
            self._call_ended(work)
            await self._pool.release(lease)
            self._token_freed.set()
        if failure is not None:
            if failure.overload and not (failure.timed_out and deadline_bound):
                self._feedback_overload()
            await self._failed(work, failure, dispatched_at)
            return
        if self._adaptive is not None:
            before = self._adaptive.effective
            self._adaptive.record_success(model, self._monotonic() - started)
            warn_on_change(self._adaptive, before)
        await self._writer.ok(work, completion, dispatched_at)

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
