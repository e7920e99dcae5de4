"""What starts next: the one decision the dispatcher and the simulator share.

Pure and synchronous. Given the read-ahead (`ReadAhead`), the scheduling policy, the tokens in use
and the effective budget, `NextStart.tier` names the tier whose oldest waiting request may take a
token now; `NextStart.take` then removes that request (within the tier, the next tenant's by fair
share, ``fair_queue.py``, among the tenants `tier` let start: below their cap and outside the
tenant headroom, which only a HIGH request of a tenant below its share may take,
``tenant_headroom.py``) and says whether it must be answered EXPIRED
instead (its deadline came while it waited). Between the two the dispatcher asks its token pool for
the token, which may refuse (another dispatcher was quicker); the simulator, whose tokens are exact,
takes it at once. `inferq.tools.analysis` replays traces through this very class.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from inferq.dispatcher.policies import Demand, Scheduler
from inferq.dispatcher.readahead import ReadAhead
from inferq.dispatcher.schedule import Window
from inferq.dispatcher.work import Work
from inferq.messaging.tiers import Tier


@dataclass(frozen=True)
class Start:
    """A request taken from the read-ahead to start with a token of `tier` (its scheduling tier)."""

    work: Work
    tier: Tier
    # Why it must be answered EXPIRED rather than called (None: call it).
    expired: str | None
    # Lent its slot (past its tier's ceiling or into the HIGH headroom): preemption may take it back.
    lent: bool = False


class NextStart:
    def __init__(
        self, readahead: ReadAhead, scheduler: Scheduler, max_preemptions: int | None = None
    ) -> None:
        self._readahead = readahead
        self._scheduler = scheduler
        # With preemption: a request preempted this many times is lent no slot.
        self._max_preemptions = max_preemptions
        # Whether the start the last `tier` decision named is lent (``policies.next_start``).
        self._lent = False
        # The gates of a lent start at the last `tier` decision (its requests preempted too often left out).
        self._lending_gates: dict[Tier, Callable[[str], bool]] | None = None
        # Per tier, which tenants the last `tier` decision let start (None: those below their cap).
        self._gates: dict[Tier, Callable[[str], bool]] | None = None
        # The requests per tier that could start at the last `tier` decision.
        self._waiting: Mapping[Tier, int] = {}

    def waiting(self) -> bool:
        """Anything in the read-ahead at all."""
        return len(self._readahead) > 0

    def tier(
        self,
        in_use: Mapping[Tier, int],
        budget: int,
        now_ms: int | None = None,
        lent: Mapping[Tier, int] | None = None,
    ) -> Tier | None:
        """The tier that may start one request now; None when nothing waits or the policy says wait.
        `now_ms` dates the tenant headroom's window of recent activity (None: busy tenants only) and
        the forecast lending's outlook (None: no lending past the ceilings); `lent`: the running
        calls lent their slots, per tier (None: counted as those past each ceiling)."""
        free = budget - sum(in_use.values())
        self._gates = self._readahead.start_gates(free=free, budget=budget, now_ms=now_ms)
        demand = self._readahead.demand(self._gates, now_ms)
        self._waiting = demand.waiting
        self._lent = False
        if not any(demand.waiting.values()):
            return None
        if self._max_preemptions is not None:
            self._lending_gates = self._lendable_gates(self._max_preemptions)
            lendable = self._readahead.demand(self._lending_gates).waiting
            demand = replace(demand, lendable=lendable, lent=lent)
        start = self._scheduler.next_start(in_use, demand, budget)
        if start is None:
            return None
        tier, self._lent = start
        return tier

    def _lendable_gates(self, max_preemptions: int) -> dict[Tier, Callable[[str], bool]]:
        gates = self._gates or dict.fromkeys(Tier, self._readahead.may_start)
        return self._readahead.lendable_gates(gates, max_preemptions)

    def peek(self, tier: Tier) -> Work | None:
        """The request `take` would remove now (after `tier` named `tier`), left waiting: what the
        rate budget is asked about before the token is taken."""
        gates = self._gates
        return self._readahead.peek(tier, gates[tier] if gates is not None else None)

    def waiting_by_tier(self) -> Mapping[Tier, int]:
        """The requests per tier that could start at the last `tier` decision (what preemption
        serves when it said wait)."""
        return self._waiting

    def would_start(
        self,
        in_use: Mapping[Tier, int],
        waiting: Mapping[Tier, int],
        budget: int,
        lent: Mapping[Tier, int] | None = None,
    ) -> Tier | None:
        """The tier the scheduler would start with `waiting` requests per tier and `lent` calls
        running (no forecast asked): preemption checks that a freed slot goes above the call it
        cancels."""
        return self._scheduler.next_tier(in_use, Demand(waiting, dict.fromkeys(Tier), lent=lent), budget)

    def window_for(self, budget: int) -> Window:
        """The scheduler's window in force, squeezed to `budget`."""
        return self._scheduler.window_for(budget)

    def floor_shares(self, budget: int) -> dict[Tier, float]:
        """Each tier's floor as a share of `budget` in the window in force (none under FIFO, which
        knows no tiers): the tiers' reserved shares of the rate budget (``rate_budget.py``)."""
        if self._scheduler.name == "fifo" or budget <= 0:
            return {}
        floors = {t: limits.floor for t, limits in self._scheduler.window().limits.items()}
        whole = max(budget, sum(floors.values()))
        return {t: floor / whole for t, floor in floors.items()}

    def take(self, tier: Tier, now_ms: int) -> Start | None:
        """Remove the next request waiting as `tier` (its tenant's turn by fair share, below its
        concurrency cap); None if there is none (its partition was revoked meanwhile). A request
        that will be called counts against its tenant's cap until `ended` is called for it."""
        lent, self._lent = self._lent, False
        if lent and self._lending_gates is not None:
            self._gates = self._lending_gates  # a lent start: not a request preempted too often
        gates, self._gates, self._lending_gates = self._gates, None, None
        work = self._readahead.pop(tier, gates[tier] if gates is not None else None)
        if work is None:
            return None
        expired = self._readahead.check(work, now_ms)
        if expired is None:
            self._readahead.call_started(work, now_ms)
        return Start(work, tier, expired, lent)

    def ended(self, work: Work, now_ms: int | None = None, *, completed: bool = True) -> None:
        """The call of a request `take` started gave its token back at `now_ms`; `completed`: it
        answered (its time teaches the tier's typical call time, ``call_times.py``)."""
        self._readahead.call_ended(work, now_ms, completed=completed)
