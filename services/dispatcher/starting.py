"""Starting: what the scheduler allows and the token pool grants leaves the read-ahead and runs.

Event-driven, not on a tick: one starter task wakes on every arrival, every completion (a token
came back) and every housekeeping change, and starts requests one at a time until the policy says
wait or nothing waits. Each start is `NextStart` (the pure decision the simulator shares) around
an asynchronous `try_acquire`, which a shared pool may refuse: another dispatcher took the token
first, and the pool refreshed its snapshot, so the decision is simply asked again. Tokens freed by
other dispatchers wake nobody here, so with a shared pool blocked work looks again shortly.

Each start is routed to a backend first (``routing.py``: the tier's first backend whose circuit
breaker admits it and that is below its own concurrency limit). With a rate budget
(``rate_budget.py``), the request the scheduler's tier would start is also priced (its estimated
tokens, one request, on that backend's minute) before its token is taken: a start needs all three.
A tier the rate budget or the routing refuses blocks the tiers below it for now, as a tier without
a token does, so a cheaper LOW never overtakes a waiting HIGH; the starter looks again shortly,
since the minute moving on and a breaker's pause ending wake nobody.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Literal

from inferq.dispatcher.execution import Execution
from inferq.dispatcher.models import ModelChoice
from inferq.dispatcher.next_start import NextStart
from inferq.dispatcher.parts import Budgets, CallPolicy, HeldBacklog, Instruments
from inferq.dispatcher.preempting import Preemptor
from inferq.dispatcher.rate_budget import CHARS_PER_TOKEN, Charge, estimate_tokens
from inferq.dispatcher.rate_ledger import RateLedger
from inferq.dispatcher.routing import Route
from inferq.dispatcher.work import Work
from inferq.messaging.tiers import Tier

# With a shared pool, tokens freed by other dispatchers wake nobody here: look again this often.
SHARED_POOL_RECHECK_S = 0.02
# Room in the rate budget comes back as the minute moves on, which wakes nobody: look again this often.
RATE_RECHECK_S = 0.05


class Starter:
    def __init__(
        self,
        *,
        next_start: NextStart,
        budgets: Budgets,
        calls: CallPolicy,
        held: HeldBacklog,
        execution: Execution,
        instruments: Instruments,
        preemptor: Preemptor | None = None,
    ) -> None:
        self._next = next_start
        # Cancels a lent call when a higher tier waits and no slot is free (None: none preemptible).
        self._preemptor = preemptor
        self._pool = budgets.pool
        self._pool_is_shared = budgets.pool_is_shared
        self._budget = budgets.budget
        # Bounds one round: a stale snapshot is asked again, not spun on.
        self._max_attempts = 4 * budgets.max_budget + 4
        self._execution = execution
        self._inflight = held.inflight
        self._pauses = held.pauses
        self._clock_ms = instruments.clock_ms
        self._wake = budgets.wake
        self._routes = calls.routes
        self._max_attempts_per_request = calls.retries.max_attempts
        self._rate: RateLedger | None = budgets.rate
        self._models: ModelChoice | None = calls.models
        # The last start the rate budget or the routing refused: the starter looks again after
        # RATE_RECHECK_S.
        self._rate_blocked = False

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            blocked = await self.start_ready()
            # Started work left the read-ahead: a paused tier may fetch again.
            self._pauses.update()
            if blocked and self._rate_blocked:
                asyncio.get_running_loop().call_later(RATE_RECHECK_S, self._wake.set)
            elif blocked and self._pool_is_shared:
                asyncio.get_running_loop().call_later(SHARED_POOL_RECHECK_S, self._wake.set)

    async def start_ready(self) -> bool:
        """Start every request the scheduler and the pool allow; True if work waits for a token."""
        self._rate_blocked = False
        for _ in range(self._max_attempts):
            if not self._next.waiting():
                return False
            in_use = self._pool.in_use()
            budget = self._budget.effective
            lent = self._preemptor.lent() if self._preemptor is not None else None
            tier = self._next.tier(in_use, budget, self._clock_ms(), lent)
            if tier is None:
                self._preempt(in_use, budget)
                return True
            route = self._route(tier)
            if route is None:
                self._rate_blocked = True
                return True
            charge = await self._charge(tier, budget, route)
            if charge is False:
                self._rate_blocked = True
                return True
            lease = await self._pool.try_acquire(tier, total_limit=budget, tier_limit=in_use.get(tier, 0) + 1)
            if lease is None:
                await self._refund(charge)
                continue  # another dispatcher took it first; the pool refreshed its snapshot
            start = self._next.take(tier, self._clock_ms())
            if start is None:  # its partition was revoked while we asked the pool
                await self._refund(charge)
                await self._pool.release(lease)
                continue
            if start.expired is not None:
                await self._refund(charge)
                await self._pool.release(lease)
                self._inflight.begin(start.work, self._execution.expire(start.work, start.expired), "expire")
                continue
            charge = await self._recharge(charge, start.work, tier, route)
            probe = self._routes.started(route, self._clock_ms())
            call = self._execution.call(start.work, lease, route, charge, probe=probe, lent=start.lent)
            self._inflight.begin(start.work, call, "call")
        return True

    def _preempt(self, in_use: Mapping[Tier, int], budget: int) -> None:
        """Free a slot lent below a waiting higher tier (it comes back, and wakes the starter, once
        the cancelled call has ended)."""
        if self._preemptor is not None:
            self._preemptor.preempt(
                in_use=in_use,
                waiting=self._next.waiting_by_tier(),
                window=self._next.window_for(budget),
                budget=budget,
                next_tier=lambda after, waiting, lent: self._next.would_start(after, waiting, budget, lent),
            )

    def _route(self, tier: Tier) -> Route | None:
        """The backend the request `tier` would start calls (its last attempt never a probe, unless
        every request is on its last: with one attempt in all, a backend whose circuit opened would
        otherwise never be called again)."""
        work = self._next.peek(tier)
        last = (
            self._max_attempts_per_request > 1
            and work is not None
            and work.request.attempt >= self._max_attempts_per_request
        )
        return self._routes.choose(tier, self._clock_ms(), may_probe=not last)

    async def _charge(self, tier: Tier, budget: int, route: Route) -> Charge | Literal[False] | None:
        """The rate budget's charge for the request `tier` would start (None: no rate budget, or
        nothing to price); False: the rate budget has no room for it now."""
        if self._rate is None or self._models is None:
            return None
        work = self._next.peek(tier)
        if work is None:
            return None
        self._rate.set_floor_shares(self._next.floor_shares(budget))
        model = self._routes.rate_key(route, self._models.model_for(work))
        charge = await self._rate.take(model, tier, request_cost(work))
        return False if charge is None else charge

    async def _refund(self, charge: Charge | None) -> None:
        if self._rate is not None and charge is not None:
            await self._rate.refund(charge)

    async def _recharge(self, charge: Charge | None, work: Work, tier: Tier, route: Route) -> Charge | None:
        """The charge for `work`, the request actually taken: while the pool was asked another may
        have come first (a shared pool's await lets intake run); it is then priced instead, at once
        (the one start the race lets past the check, corrected by its usage after)."""
        if self._rate is None or self._models is None:
            return None
        model, cost = self._routes.rate_key(route, self._models.model_for(work)), request_cost(work)
        if charge is not None and charge.model == model and charge.tokens == cost:
            return charge
        await self._refund(charge)
        return await self._rate.take(model, tier, cost, force=True)


# What the backend reads besides the messages' text, counted in the prompt: the tool definitions
# and a response format's schema are rendered into the model's prompt.
PROMPT_PARAMS = ("tools", "response_format")


def request_cost(work: Work) -> int:
    """A request's tokens before its call: its record's `estimated_tokens`, else its prompt's
    characters / 4 plus its `max_tokens` (``max_completion_tokens``) for each of its `n` choices.
    The prompt is the messages' text and their `tool_calls`, the tool definitions and the response
    format (its schema), as the backend receives them. An embedding's cost is its texts' characters
    / 4 (it has no completion tokens)."""
    texts, estimated = work.request.embedding_input, work.request.estimated_tokens
    if texts is not None:
        if estimated is not None and estimated > 0:
            return estimated
        return max(1, sum(-(-len(text) // CHARS_PER_TOKEN) for text in texts))
    prompt_chars = [len(m.content) + len(m.tool_calls or "") for m in work.request.messages]
    # Their JSON text as the record carries it: nothing to encode again on each pricing.
    encoded = work.request.params or {}
    prompt_chars += [len(encoded[name]) for name in PROMPT_PARAMS if name in encoded]
    limit = work.params.get("max_tokens", work.params.get("max_completion_tokens"))
    max_tokens = limit if isinstance(limit, int) and not isinstance(limit, bool) else None
    n = work.params.get("n")
    choices = n if isinstance(n, int) and not isinstance(n, bool) else 1
    return estimate_tokens(prompt_chars, max_tokens, work.request.estimated_tokens, choices=choices)
