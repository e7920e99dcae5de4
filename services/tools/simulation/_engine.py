"""The simulation's machinery: an event heap over the dispatcher's read-ahead and scheduler.

See `inferq.tools.simulation.simulate` for what is modelled; this module is its implementation.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from inferq.dispatcher.call_times import CallTimes
from inferq.dispatcher.forecast import forecast_lending
from inferq.dispatcher.next_start import NextStart
from inferq.dispatcher.offsets import PartitionOffsets
from inferq.dispatcher.policies import Clock, Scheduler
from inferq.dispatcher.readahead import ReadAhead
from inferq.dispatcher.tenant_headroom import TenantHeadroom
from inferq.dispatcher.tenant_limits import EqualTenants
from inferq.dispatcher.work import Work
from inferq.messaging.records import InferenceRequest
from inferq.messaging.tiers import DEFAULT_MEAN_LATENCY_S, Tier
from inferq.tools.measures import MeasuredRequest
from inferq.tools.traces.arrival import Arrival

SchedulerFactory = Callable[[Clock], Scheduler]
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
    jitter: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.budget < 1 or self.readahead_per_tier < 1 or self.housekeeping_interval_ms < 1:
            raise ValueError("budget, readahead_per_tier and housekeeping_interval_ms must be at least 1")
        if self.tenant_headroom_slots < 0 or self.tenant_active_window_ms < 0:
            raise ValueError("tenant_headroom_slots and tenant_active_window_ms must not be negative")
        if self.promotion_age_ms <= 0 or self.jitter < 0:
            raise ValueError("promotion_age_ms must be positive and jitter not negative")


@dataclass(frozen=True)
class SimResult:
    outcomes: list[MeasuredRequest]  # one per arrival, in the order of `arrivals`
    max_in_flight: int
    promoted: int  # LOW requests scheduled as MEDIUM after waiting past the promotion age
    events: int  # distinct instants at which something happened


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
        self.scheduler = scheduler(self._clock)
        headroom = TenantHeadroom(
            slots=config.tenant_headroom_slots,
            window_ms=config.tenant_active_window_ms,
            weight_of=EqualTenants().weight,
        )
        calls = CallTimes(config.typical_ms, learn=config.learn_latency)
        self.readahead = ReadAhead(
            promotion_age_ms=config.promotion_age_ms,
            early_drop_ms=config.early_drop_ms,
            headroom=headroom,
            calls=calls,
            lending=forecast_lending(calls) if config.forecast_lending else None,
        )
        # One NextStart for the whole run, as the dispatcher's: its read-ahead keeps the forecast's state.
        self.next_start = NextStart(self.readahead, self.scheduler)
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
        self.max_in_flight = self.promoted = self.batches = 0

    def _clock(self) -> datetime:
        return datetime.fromtimestamp(self.now_ms / 1000, UTC)

    def _push(self, at_ms: int, kind: int, payload: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at_ms, kind, self.seq, payload))

    def run(self) -> SimResult:
        pending = 0  # position in `order` of the next arrival
        while pending < len(self.order) or self.events:
            next_arrival = (
                self.arrivals[self.order[pending]].created_at_ms if pending < len(self.order) else math.inf
            )
            self.now_ms = int(min(next_arrival, self.events[0][0] if self.events else math.inf))
            sweep = False
            while self.events and self.events[0][0] == self.now_ms:
                _, kind, _, payload = heapq.heappop(self.events)
                if kind == _COMPLETE:
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
            arrival = self.arrivals[index]
            work = Work(
                request=InferenceRequest(
                    request_id=arrival.request_id,
                    scenario=arrival.scenario,
                    tier=tier,
                    created_at_ms=arrival.created_at_ms,
                    expire_at_ms=arrival.expire_at_ms,
                    messages=(),
                ),
                tier=tier,
                offsets=self.sources[tier],
                offset=index,
            )
            if self.readahead.check(work, self.now_ms) is not None:
                self._answer(index, "EXPIRED")
                continue
            self.readahead.add(work)
            self.in_readahead.add(index)
            early = math.ceil(self.readahead.early_drop_ms(tier))
            # First instant at which `ReadAhead.check` says no: remaining <= 0 or < early.
            heapq.heappush(self.dues, (arrival.expire_at_ms - max(early - 1, 0), index, _EXPIRY))
            if tier is Tier.LOW:
                heapq.heappush(
                    self.dues, (arrival.created_at_ms + self.config.promotion_age_ms, index, _PROMOTION)
                )

    def _start_ready(self) -> None:
        """Start what the scheduler allows, one request at a time, with the dispatcher's own
        `NextStart` (its token pool, exact here, never refuses)."""
        next_start = self.next_start
        while True:
            tier = next_start.tier(self.in_use, self.config.budget, self.now_ms)
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
            self.token_tier[index] = tier
            self.calls[index] = start.work
            self.max_in_flight = max(self.max_in_flight, sum(self.in_use.values()))
            self.dispatched[index] = self.now_ms
            self._push(self.now_ms + self._latency_ms(start.work.tier), _COMPLETE, index)

    def _latency_ms(self, tier: Tier) -> int:
        mean = self.latency_ms[tier]
        if self.config.jitter == 0:
            return round(mean)
        sigma = self.config.jitter
        # Log-normal with mean 1: right-skewed like real inference times, never negative.
        return round(mean * self.rng.lognormvariate(-sigma * sigma / 2, sigma))

    def _complete(self, index: int) -> None:
        self.in_use[self.token_tier.pop(index)] -= 1
        self.next_start.ended(self.calls.pop(index), self.now_ms)
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
        return SimResult(outcomes, self.max_in_flight, self.promoted, self.batches)
