"""A discrete-event simulation of the dispatcher: the trace's arrivals, the real scheduling code.

What is the dispatcher's own code, imported, not re-implemented: the policy (`Scheduler.next_tier`,
asked one start at a time after every arrival and completion through `NextStart`, as the dispatcher does),
the schedule and its windows (the scheduler reads the simulated clock), and the `ReadAhead`
(expiry at intake, at start and by the housekeeping sweep; early drop; LOW promotion).

What is modelled, with the dispatcher's defaults:

- Kafka holds each tier's backlog in arrival order; the read-ahead holds at most
  `readahead_per_tier` requests per source tier, refilled as requests
  start (fetching is instant: no poll latency, no batching).
- The sweep runs on the housekeeping grid (every 250 ms from the first arrival); it is only
  evaluated at the ticks where something in the read-ahead can expire or be promoted, which gives the
  same answers as evaluating every tick, at a fraction of the cost.
- With `forecast_lending`, the read-ahead feeds the dispatcher's forecast (``forecast.py``) with the
  simulated arrivals and calls; the typical call times are learned from the simulated calls.
- A call takes its source tier's latency (the tier picks the model), deterministic or, with
  `jitter` > 0, times a seeded log-normal factor of mean 1. Calls never fail and the budget is
  fixed: no retries, no adaptive cuts, no eviction.
- The scheduler is also asked at every quarter hour while work waits, so a window change (peak
  ends at 22:00) takes effect even when nothing arrives or completes.
- Preemption, when the tiers' backends are preemptible (`preemptible`, from the dispatcher's
  `backend_preemptible` and backends' `preemptible`; the tiered policy only): the scheduler lends
  those tiers every idle slot, and when it says wait while work waits the dispatcher's own
  decision (``preemption.victim_to_cancel``) names a call to cancel. The simulated backend frees
  the slot at hang-up (a self-hosted server's behaviour): the call's completion is void, its token
  back at once, its request back in the read-ahead at its place (`put_back`, one more preemption,
  `max_preemptions` at most). Nothing streams here, so no call is spared for having sent chunks.
  The cost (`SimResult.preemption`): cancellations per tier, requests that reached the limit,
  the call time discarded and the tokens discarded, estimated the dispatcher's way (the elapsed
  share of the tier's typical call time x ``starting.request_cost``: a recorded trace carries no
  prompt or `max_tokens`, so each request counts the dispatcher's default completion tokens).

Time is integer epoch milliseconds, as on the wire; nothing sleeps and no wall clock is read.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from inferq.dispatcher.policies import Clock, Scheduler, build_scheduler
from inferq.dispatcher.schedule import Schedule
from inferq.dispatcher.settings import DispatcherSettings, preemptible_tiers
from inferq.messaging.tiers import Tier
from inferq.tools.simulation._engine import (
    PreemptionCost,
    SchedulerFactory,
    SimConfig,
    SimResult,
    Simulation,
)
from inferq.tools.traces.arrival import Arrival

__all__ = [
    "PreemptionCost",
    "SchedulerFactory",
    "SimConfig",
    "SimResult",
    "sim_config",
    "sim_scheduler",
    "simulate",
]


def sim_scheduler(policy: str, schedule: Schedule) -> SchedulerFactory:
    """The factory `simulate` needs: `policy` over `schedule`, reading the simulated clock, with
    the tiers the config's `preemptible` names."""

    def build(clock: Clock, preemptible: Collection[Tier] = ()) -> Scheduler:
        return build_scheduler(policy, schedule, clock, preemptible=preemptible)

    return build


def sim_config(settings: DispatcherSettings, *, jitter: float = 0.0, seed: int = 0) -> SimConfig:
    """The scheduling knobs of the dispatcher's settings (budget, promotion age, early drop by its
    typical latencies and whether they are learned, forecast lending, read-ahead, housekeeping tick,
    tenant headroom, the tiers whose backends are preemptible and the preemption limit) as the
    simulation's config."""
    return SimConfig(
        budget=settings.budget,
        promotion_age_ms=round(settings.promotion_age_s * 1000),
        early_drop_ms={t: round(s * 1000) for t, s in settings.typical_latency_s.items()}
        if settings.early_drop
        else {},
        typical_ms={t: round(s * 1000) for t, s in settings.typical_latency_s.items()},
        learn_latency=settings.learn_latency,
        forecast_lending=settings.forecast_lending,
        readahead_per_tier=settings.readahead,
        housekeeping_interval_ms=max(1, round(settings.housekeeping_interval_s * 1000)),
        tenant_headroom_slots=settings.tenant_headroom_slots,
        tenant_active_window_ms=round(settings.tenant_active_window_s * 1000),
        preemptible=preemptible_tiers(settings),
        max_preemptions=settings.max_preemptions,
        jitter=jitter,
        seed=seed,
    )


def simulate(
    arrivals: Sequence[Arrival],
    scheduler: SchedulerFactory,
    latency_by_tier: Mapping[Tier, float],
    config: SimConfig | None = None,
) -> SimResult:
    """Replay `arrivals` (epoch ms) through the dispatcher's scheduling code.

    `scheduler` builds the policy around the simulation's clock (`sim_scheduler(policy, schedule)`),
    so windows follow simulated time. `latency_by_tier` is each tier's backend call in seconds.
    Deterministic: the same inputs (and `config.seed`) give the same result."""
    return Simulation(arrivals, scheduler, latency_by_tier, config or SimConfig()).run()
