"""Preemption: which running call gives its slot back to a higher tier's request. Pure.

Self-hosted inference servers (vLLM, TGI, llama.cpp's server, SGLang) stop generating and free the
slot when the client closes the connection. Behind such a backend (declared ``preemptible``,
``backend_specs.py``) a lent slot (past a tier's ceiling, or in the HIGH headroom) can be taken
back when a higher tier needs it, so lending costs the higher tiers nothing; what it costs is the
tokens the cancelled call had produced.

`choose_victim` answers, when no slot is free: does a higher tier need one, and if so which call
to cancel. A tier *needs* a slot when it has work waiting and runs fewer calls than its ceiling
(the squeezed window's; HIGH's is the budget), counting the slots of calls already being
cancelled as free: one cancellation per slot needed, never more. The call cancelled is the
**youngest** (the least work lost) among those that may be:

- of a tier below the one in need, and never HIGH;
- **lent**: started past its tier's ceiling or into the HIGH headroom (the scheduler's
  `next_start` says so and the dispatcher marks the call), or running while its tier is past its
  ceiling; a call within its tier's own share (its ceiling, outside the headroom) is never
  cancelled, and none that would bring its tier below its floor;
- on a preemptible backend;
- not a streamed call that has sent a chunk to its caller (the caller would see tokens twice);
- not a call whose answer has arrived (its outcome is being written);
- not a request already preempted `max_preemptions` times (so none is preempted more than that).

Cancelling never starts anything: the cancelled call's token comes back only once its task has
ended (``execution.py``), and the starter then asks the scheduler as for any token, which gives it
to the tier in need (a higher one comes first, and the victim's tier stays at or above its
floor). The budget therefore holds by construction, also while a slot is
being freed. `victim_to_cancel` adds the check made before cancelling: would the scheduler give
the freed slot to a tier above the victim's (a tier kept out of the HIGH headroom might not take
it)? The dispatcher (``preempting.py``) and the simulator (``inferq.tools.simulation``) both ask it.
`discarded_estimate` is what a cancelled call that was not streamed had generated, estimated.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from inferq.dispatcher.schedule import Window
from inferq.messaging.tiers import TIERS_BY_PRIORITY, Tier

# The tier the scheduler would start next given tokens in use, waiting requests and lent calls per tier.
NextTier = Callable[[Mapping[Tier, int], Mapping[Tier, int], Mapping[Tier, int]], Tier | None]


@dataclass(frozen=True)
class RunningCall:
    """One backend call of this dispatcher as the decision sees it; `key` names it to the caller."""

    key: int
    tier: Tier
    started_ms: int
    # Its backend frees the slot when the client hangs up.
    backend_preemptible: bool
    # Times its request was preempted before this call.
    preemptions: int = 0
    # A streamed call that has handed a chunk to its caller.
    chunks_sent: bool = False
    # Its answer has arrived (its outcome is being written).
    answered: bool = False
    # Cancelled already, its slot not yet back.
    cancelling: bool = False
    # Started past its tier's ceiling or into the HIGH headroom (``policies.next_start``).
    lent: bool = False


def ceiling_of(window: Window, tier: Tier, budget: int) -> int:
    """`tier`'s ceiling in `window` (already squeezed to `budget`), never above the budget."""
    return min(window.limits[tier].ceiling, budget)


def choose_victim(
    calls: Sequence[RunningCall],
    *,
    in_use: Mapping[Tier, int],
    waiting: Mapping[Tier, int],
    window: Window,
    budget: int,
    max_preemptions: int,
) -> RunningCall | None:
    """The call to cancel now so a higher tier's waiting request gets a slot; None when no tier
    needs one or none may be cancelled. `in_use` counts every token held (a shared pool's: the
    group's), `calls` this process's calls (those being cancelled included)."""
    cancelling = Counter(c.tier for c in calls if c.cancelling)
    live = {t: max(0, in_use.get(t, 0) - cancelling[t]) for t in Tier}
    # Slots free now or soon (the ones being freed): each goes to the tiers in need first.
    slots = budget - sum(in_use.values()) + sum(cancelling.values())
    for needy in TIERS_BY_PRIORITY[:-1]:
        wanted = min(waiting.get(needy, 0), ceiling_of(window, needy, budget) - live[needy])
        if wanted <= 0:
            continue
        if wanted <= slots:
            slots -= wanted
            continue
        below = TIERS_BY_PRIORITY[TIERS_BY_PRIORITY.index(needy) + 1 :]
        candidates = [
            c
            for c in calls
            if c.tier in below
            and c.tier is not Tier.HIGH
            and (c.lent or live[c.tier] > ceiling_of(window, c.tier, budget))
            and live[c.tier] > window.limits[c.tier].floor
            and _may_be_cancelled(c, max_preemptions)
        ]
        if candidates:
            return max(candidates, key=lambda c: (c.started_ms, c.key))
        return None  # the slots it needs are held within the shares below it: it waits
    return None


def victim_to_cancel(
    calls: Sequence[RunningCall],
    *,
    in_use: Mapping[Tier, int],
    waiting: Mapping[Tier, int],
    window: Window,
    budget: int,
    max_preemptions: int,
    next_tier: NextTier,
) -> RunningCall | None:
    """The call `choose_victim` names, if the scheduler (`next_tier`) would give its slot to a tier
    above the victim's once the slots being freed are back (and the victim's request waits again):
    a freed slot the victim's own tier would take again is not worth its tokens. None otherwise."""
    victim = choose_victim(
        calls, in_use=in_use, waiting=waiting, window=window, budget=budget, max_preemptions=max_preemptions
    )
    if victim is None:
        return None
    freed = Counter(c.tier for c in calls if c.cancelling or c.key == victim.key)
    after = {t: max(0, in_use.get(t, 0) - freed[t]) for t in Tier}
    waiting_after = {t: waiting.get(t, 0) + freed[t] for t in Tier}
    lent_after = Counter(c.tier for c in calls if c.lent and not c.cancelling and c.key != victim.key)
    taker = next_tier(after, waiting_after, lent_after)
    if taker is None or taker.rank >= victim.tier.rank:
        return None
    return victim


def discarded_estimate(elapsed_ms: float, typical_ms: float, estimate: int) -> int:
    """The tokens a cancelled call had generated when nothing counted them (not streamed): its
    request's token `estimate` x the share of its tier's typical call time it ran, at most the
    estimate (a call with no typical time known counts whole)."""
    share = min(1.0, max(0.0, elapsed_ms) / typical_ms) if typical_ms > 0 else 1.0
    return round(share * estimate)


def _may_be_cancelled(call: RunningCall, max_preemptions: int) -> bool:
    return (
        call.backend_preemptible
        and not call.chunks_sent
        and not call.answered
        and not call.cancelling
        and call.preemptions < max_preemptions
    )
