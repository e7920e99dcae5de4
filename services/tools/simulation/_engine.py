"""The simulation's machinery: an event heap over the dispatcher's read-ahead and scheduler.

See `inferq.tools.simulation.simulate` for what is modelled; this module is its implementation.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter, deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from inferq.dispatcher.call_times import CallTimes
from inferq.dispatcher.forecast import forecast_lending
from inferq.dispatcher.next_start import NextStart
from inferq.dispatcher.offsets import PartitionOffsets
from inferq.dispatcher.policies import Clock, Scheduler
from inferq.dispatcher.preemption import RunningCall, discarded_estimate, victim_to_cancel
from inferq.dispatcher.readahead import ReadAhead
from inferq.dispatcher.starting import request_cost
from inferq.dispatcher.tenant_headroom import TenantHeadroom
from inferq.dispatcher.tenant_limits import EqualTenants
from inferq.dispatcher.work import Work
from inferq.messaging.records import ChatMessage, InferenceRequest
from inferq.messaging.tiers import DEFAULT_MEAN_LATENCY_S, Tier
from inferq.tools.measures import MeasuredRequest
from inferq.tools.traces.arrival import Arrival


class SchedulerFactory(Protocol):
    """Builds the policy around the simulation's clock; `preemptible`: the tiers lent every idle
    slot behind a preemptible backend (``policies.build_scheduler``)."""

    def __call__(self, clock: Clock, preemptible: Collection[Tier] = ...) -> Scheduler: ...


# Every UTC offset in use is a multiple of 15 minutes, so every local full hour (a possible window
# change) falls on one of these.
_WAKE_GRID_MS = 15 * 60_000
_COMPLETE, _SWEEP, _WAKE = 0, 1, 2
_EXPIRY, _PROMOTION = 0, 1


@dataclass(frozen=True)
class SimConfig:
    """The dispatcher's settings that shape scheduling, with its defaults; `jitter` and `seed` shape
    the simulated backend."""

    budget: int = 10
    promotion_age_ms: int = 1_800_000
    # The dispatcher's early drop: its typical latency per tier (empty: early drop off).
    early_drop_ms: Mapping[Tier, int] = field(
        default_factory=lambda: {t: round(s * 1000) for t, s in DEFAULT_MEAN_LATENCY_S.items()}
    )
    readahead_per_tier: int = 20
    # The dispatcher's typical call time per tier (learned from the simulated calls when
    # `learn_latency`, as the dispatcher's ``call_times.py``) and its forecast lending.
    typical_ms: Mapping[Tier, int] = field(
        default_factory=lambda: {t: round(s * 1000) for t, s in DEFAULT_MEAN_LATENCY_S.items()}
    )
    # Off unless asked (`sim_config` asks as the dispatcher's settings say, on by default): with
    # it, early drop follows the simulated calls rather than `typical_ms`.
    learn_latency: bool = False
    forecast_lending: bool = False
    # The dispatcher's tenant headroom (``tenant_headroom.py``); every tenant weighs 1 here.
    tenant_headroom_slots: int = 2
    tenant_active_window_ms: int = 10_000
    housekeeping_interval_ms: int = 250
    # Preemption (``preemption.py``): the tiers whose every backend frees its slot at hang-up
    # (``settings.preemptible_tiers``; empty: off), and the times a request may be preempted.
    preemptible: frozenset[Tier] = frozenset()
    max_preemptions: int = 3
    jitter: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.budget < 1 or self.readahead_per_tier < 1 or self.housekeeping_interval_ms < 1:
            raise ValueError("budget, readahead_per_tier and housekeeping_interval_ms must be at least 1")
        if self.tenant_headroom_slots < 0 or self.tenant_active_window_ms < 0:
            raise ValueError("tenant_headroom_slots and tenant_active_window_ms must not be negative")
        if self.promotion_age_ms <= 0 or self.jitter < 0:
            raise ValueError("promotion_age_ms must be positive and jitter not negative")
        if self.max_preemptions < 0:
            raise ValueError("max_preemptions must not be negative")


@dataclass(frozen=True)
class PreemptionCost:
    """What preemption cost in a simulation, per tier as the dispatcher counts it (the tier the
    cancelled call's token counted in): calls cancelled, the tokens they had generated (estimated as
    the dispatcher estimates them for a call not streamed: ``preemption.discarded_estimate`` over
    ``starting.request_cost``), requests that reached `max_preemptions`. Beside them, over all
    tiers, the call time the cancelled calls had run, and the call time and estimated tokens of the
    calls that answered, to see the discarded share."""

    preemptions: Mapping[Tier, int] = field(default_factory=lambda: dict.fromkeys(Tier, 0))
    discarded_tokens: Mapping[Tier, int] = field(default_factory=lambda: dict.fromkeys(Tier, 0))
    limit_reached: Mapping[Tier, int] = field(default_factory=lambda: dict.fromkeys(Tier, 0))
    discarded_call_ms: int = 0
    served_call_ms: int = 0
    served_tokens: int = 0


@dataclass(frozen=True)
class SimResult:
    outcomes: list[MeasuredRequest]  # one per arrival, in the order of `arrivals`
    max_in_flight: int
    promoted: int  # LOW requests scheduled as MEDIUM after waiting past the promotion age
    events: int  # distinct instants at which something happened
    preemption: PreemptionCost = field(default_factory=PreemptionCost)


class Simulation:
    def __init__(
        self,
        arrivals: Sequence[Arrival],
        scheduler: SchedulerFactory,
        latency_by_tier: Mapping[Tier, float],
        config: SimConfig,
    ) -> None:
        missing = [t.value for t in Tier if t not in latency_by_tier]
        if missing:
            raise ValueError(f"no latency for {', '.join(missing)}")
        self.arrivals = arrivals
        self.order = sorted(range(len(arrivals)), key=lambda i: arrivals[i].created_at_ms)
        self.config = config
        self.latency_ms = {t: s * 1000 for t, s in latency_by_tier.items()}
        self.rng = random.Random(config.seed)  # noqa: S311 - reproducible jitter, not a secret
        self.now_ms = arrivals[self.order[0]].created_at_ms if arrivals else 0
        self.origin_ms = self.now_ms
        self.scheduler = (
            scheduler(self._clock, config.preemptible) if config.preemptible else scheduler(self._clock)
        )
        # As the dispatcher's `bootstrap.preemptor_of`: the baselines lend nothing past a ceiling.
        self.preempting = bool(config.preemptible) and self.scheduler.name == "inferq"
        headroom = TenantHeadroom(
            slots=config.tenant_headroom_slots,
            window_ms=config.tenant_active_window_ms,
            weight_of=EqualTenants().weight,
        )
        calls = CallTimes(config.typical_ms, learn=config.learn_latency)
        self.call_times = calls
        self.readahead = ReadAhead(
            promotion_age_ms=config.promotion_age_ms,
            early_drop_ms=config.early_drop_ms,
            headroom=headroom,
            calls=calls,
            lending=forecast_lending(calls) if config.forecast_lending else None,
        )
        # One NextStart for the whole run, as the dispatcher's: its read-ahead keeps the forecast's state.
        limit = config.max_preemptions if self.preempting else None
        self.next_start = NextStart(self.readahead, self.scheduler, max_preemptions=limit)
        self.sources = {t: PartitionOffsets(f"sim.{t.value.lower()}", 0) for t in Tier}
        self.kafka: dict[Tier, deque[int]] = {t: deque() for t in Tier}
        self.in_readahead: set[int] = set()
        self.in_use = dict.fromkeys(Tier, 0)
        self.events: list[tuple[int, int, int, int]] = []  # (at ms, kind, seq, payload)
        self.dues: list[tuple[int, int, int]] = []  # (at ms, index, expiry or promotion)
        self.seq = 0
        self.sweep_at: int | None = None
        self.wake_at: int | None = None
        self.dispatched: list[int | None] = [None] * len(arrivals)
        self.completed: list[int | None] = [None] * len(arrivals)
        self.status: list[str | None] = [None] * len(arrivals)
        # The tier each running call took its token as (MEDIUM for a promoted LOW request).
        self.token_tier: dict[int, Tier] = {}
        # Each running call's request: its end frees its tenant's share (`NextStart.ended`).
        self.calls: dict[int, Work] = {}
        # Each running call's completion event (its seq): a preempted call's event is void.
        self.call_event: dict[int, int] = {}
        # The running calls started lent (``policies.next_start``): preemption may take them back.
        self.lent_calls: set[int] = set()
        self.preempted: Counter[Tier] = Counter()
        self.limit_reached: Counter[Tier] = Counter()
        self.discarded_tokens: Counter[Tier] = Counter()
        self.discarded_call_ms = self.served_call_ms = self.served_tokens = 0
        self.max_in_flight = self.promoted = self.batches = 0

    def _clock(self) -> datetime:
        return datetime.fromtimestamp(self.now_ms / 1000, UTC)

    def _push(self, at_ms: int, kind: int, payload: int) -> int:
        self.seq += 1
        heapq.heappush(self.events, (at_ms, kind, self.seq, payload))
        return self.seq

    def run(self) -> SimResult:
        pending = 0  # position in `order` of the next arrival
        while pending < len(self.order) or self.events:
            next_arrival = (
                self.arrivals[self.order[pending]].created_at_ms if pending < len(self.order) else math.inf
            )
            self.now_ms = int(min(next_arrival, self.events[0][0] if self.events else math.inf))
            sweep = False
            while self.events and self.events[0][0] == self.now_ms:
                _, kind, seq, payload = heapq.heappop(self.events)
                if kind == _COMPLETE and self.call_event.get(payload) == seq:
                    self._complete(payload)
                elif kind == _SWEEP and self.sweep_at == self.now_ms:
                    sweep = True
            while pending < len(self.order) and next_arrival == self.now_ms:
                index = self.order[pending]
                self.kafka[self.arrivals[index].tier].append(index)
                pending += 1
                if pending < len(self.order):
                    next_arrival = self.arrivals[self.order[pending]].created_at_ms
            if sweep:
                self._sweep()
            for tier in Tier:
                self._fetch(tier)
            self._start_ready()
            while self.preempting and self._preempt():
                self._start_ready()
            self._plan()
            self.batches += 1
        return self._result()

    # -- the dispatcher's steps ----------------------------------------------------------------

    def _fetch(self, tier: Tier) -> None:
        """Take `tier`'s backlog into the read-ahead up to its bound; expired requests are answered
        at intake, as the dispatcher's `Intake.admit` does."""
        backlog = self.kafka[tier]
        while backlog and self.readahead.held(tier) < self.config.readahead_per_tier:
            index = backlog.popleft()
            work = self._work(index, tier)
            if self.readahead.check(work, self.now_ms) is not None:
                self._answer(index, "EXPIRED")
                continue
            self.readahead.add(work)
            self.in_readahead.add(index)
            self._due(index)

    def _due(self, index: int) -> None:
        """When the sweep must look at a request now in the read-ahead: its expiry, its promotion."""
        arrival = self.arrivals[index]
        early = math.ceil(self.readahead.early_drop_ms(arrival.tier))
        # First instant at which `ReadAhead.check` says no: remaining <= 0 or < early.
        heapq.heappush(self.dues, (arrival.expire_at_ms - max(early - 1, 0), index, _EXPIRY))
        if arrival.tier is Tier.LOW:
            heapq.heappush(
                self.dues, (arrival.created_at_ms + self.config.promotion_age_ms, index, _PROMOTION)
            )

    def _work(self, index: int, tier: Tier) -> Work:
        """The request as the dispatcher reads it; what a load generator sends (messages,
        `max_tokens`, `estimated_tokens`) is carried when the arrival has it, for the token estimate
        (``starting.request_cost``), which a recorded trace leaves to the dispatcher's default."""
        arrival = self.arrivals[index]
        generated = arrival.kind != "recorded"
        return Work(
            request=InferenceRequest(
                request_id=arrival.request_id,
                scenario=arrival.scenario,
                tier=tier,
                created_at_ms=arrival.created_at_ms,
                expire_at_ms=arrival.expire_at_ms,
                messages=tuple(ChatMessage(role, content) for role, content in arrival.messages),
                estimated_tokens=arrival.estimated_tokens or None,
            ),
            tier=tier,
            offsets=self.sources[tier],
            offset=index,
            params={"max_tokens": arrival.max_tokens} if generated else {},
        )

    def _start_ready(self) -> None:
        """Start what the scheduler allows, one request at a time, with the dispatcher's own
        `NextStart` (its token pool, exact here, never refuses)."""
        next_start = self.next_start
        while True:
            lent = Counter(self.token_tier[i] for i in self.lent_calls) if self.preempting else None
            tier = next_start.tier(self.in_use, self.config.budget, self.now_ms, lent)
            if tier is None:
                return
            start = next_start.take(tier, self.now_ms)
            if start is None:
                raise RuntimeError(f"{self.scheduler.name} chose {tier} with nothing waiting in it")
            index = start.work.offset
            self.in_readahead.discard(index)
            self._fetch(start.work.tier)
            if start.expired is not None:
                self._answer(index, "EXPIRED")
                continue
            self.in_use[tier] += 1
            in_flight = sum(self.in_use.values())
            if in_flight > self.config.budget:
                raise RuntimeError(f"{in_flight} calls in flight, over the budget of {self.config.budget}")
            self.token_tier[index] = tier
            self.calls[index] = start.work
            if start.lent:
                self.lent_calls.add(index)
            self.max_in_flight = max(self.max_in_flight, in_flight)
            self.dispatched[index] = self.now_ms
            ends_at = self.now_ms + self._latency_ms(start.work.tier)
            self.call_event[index] = self._push(ends_at, _COMPLETE, index)

    def _preempt(self) -> bool:
        """When the scheduler said wait while work waits: cancel the call the dispatcher's own
        decision names (``preemption.victim_to_cancel``). Its backend frees the slot at hang-up, so
        its token is back at once; its request waits again at its place (`put_back`), not answered.
        True when one was cancelled (the freed slot is then offered again)."""
        next_start, budget = self.next_start, self.config.budget
        if not self.calls or not next_start.waiting():
            return False
        views = [
            RunningCall(
                index,
                self.token_tier[index],
                self.dispatched[index] or 0,
                # The call went to its token tier's backend, as the dispatcher routes it.
                self.token_tier[index] in self.config.preemptible,
                work.preemptions,
                lent=index in self.lent_calls,
            )
            for index, work in self.calls.items()
        ]
        victim = victim_to_cancel(
            views,
            in_use=self.in_use,
            waiting=next_start.waiting_by_tier(),
            window=next_start.window_for(budget),
            budget=budget,
            max_preemptions=self.config.max_preemptions,
            next_tier=lambda after, waiting, lent: next_start.would_start(after, waiting, budget, lent),
        )
        if victim is None:
            return False
        index = victim.key
        work = self.calls.pop(index)
        self.lent_calls.discard(index)
        del self.call_event[index]  # its completion event is void
        elapsed_ms = self.now_ms - victim.started_ms
        # In the dispatcher's order: back to waiting first, then the token (``execution.py``).
        work.wait_again()
        self.readahead.put_back(work)
        self.in_readahead.add(index)
        self._due(index)
        self.in_use[self.token_tier.pop(index)] -= 1
        next_start.ended(work, self.now_ms, completed=False)
        self.preempted[victim.tier] += 1
        if work.preemptions == self.config.max_preemptions:
            self.limit_reached[victim.tier] += 1
        self.discarded_call_ms += elapsed_ms
        typical_ms = self.call_times.typical_ms(work.tier)
        self.discarded_tokens[victim.tier] += discarded_estimate(elapsed_ms, typical_ms, request_cost(work))
        return True

    def _latency_ms(self, tier: Tier) -> int:
        mean = self.latency_ms[tier]
        if self.config.jitter == 0:
            return round(mean)
        sigma = self.config.jitter
        # Log-normal with mean 1: right-skewed like real inference times, never negative.
        return round(mean * self.rng.lognormvariate(-sigma * sigma / 2, sigma))

    def _complete(self, index: int) -> None:
        del self.call_event[index]
        self.lent_calls.discard(index)
        self.in_use[self.token_tier.pop(index)] -= 1
        work = self.calls.pop(index)
        self.next_start.ended(work, self.now_ms)
        self.served_call_ms += self.now_ms - (self.dispatched[index] or 0)
        self.served_tokens += request_cost(work)
        self._answer(index, "OK")

    def _sweep(self) -> None:
        expired, promoted = self.readahead.sweep(self.now_ms)
        self.promoted += promoted
        for item in expired:
            self.in_readahead.discard(item.work.offset)
            self._answer(item.work.offset, "EXPIRED")
        while self.dues and self.dues[0][0] <= self.now_ms:
            _, index, kind = heapq.heappop(self.dues)
            if kind == _EXPIRY and index in self.in_readahead:
                # Not expired yet after all (the read-ahead's rule is the authority): look again next tick.
                heapq.heappush(self.dues, (self.now_ms + 1, index, kind))

    def _answer(self, index: int, status: str) -> None:
        if self.status[index] is not None:
            raise RuntimeError(f"{self.arrivals[index].request_id} answered twice")
        self.status[index] = status
        self.completed[index] = self.now_ms

    def _plan(self) -> None:
        """Schedule the next sweep tick that can change the read-ahead, and a wake at the next quarter
        hour while anything waits."""
        while self.dues and self.dues[0][1] not in self.in_readahead:
            heapq.heappop(self.dues)
        if self.dues:
            due = max(self.dues[0][0], self.now_ms + 1)
            step = self.config.housekeeping_interval_ms
            tick = self.origin_ms + -(-(due - self.origin_ms) // step) * step
            if self.sweep_at is None or self.sweep_at <= self.now_ms or tick < self.sweep_at:
                self.sweep_at = tick
                self._push(tick, _SWEEP, -1)
        waiting = self.in_readahead or any(self.kafka.values())
        if waiting and (self.wake_at is None or self.wake_at <= self.now_ms):
            self.wake_at = (self.now_ms // _WAKE_GRID_MS + 1) * _WAKE_GRID_MS
            self._push(self.wake_at, _WAKE, -1)

    def _result(self) -> SimResult:
        outcomes = []
        for index, arrival in enumerate(self.arrivals):
            status, completed = self.status[index], self.completed[index]
            if status is None or completed is None:
                raise RuntimeError(f"simulation ended with {arrival.request_id} unanswered")
            outcomes.append(
                MeasuredRequest(
                    arrival.request_id,
                    arrival.tier,
                    status,
                    arrival.created_at_ms,
                    self.dispatched[index],
                    completed,
                )
            )
        cost = PreemptionCost(
            {t: self.preempted[t] for t in Tier},
            {t: self.discarded_tokens[t] for t in Tier},
            {t: self.limit_reached[t] for t in Tier},
            self.discarded_call_ms,
            self.served_call_ms,
            self.served_tokens,
        )
        return SimResult(outcomes, self.max_in_flight, self.promoted, self.batches, cost)
