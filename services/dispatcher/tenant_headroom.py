"""Tenant headroom: the last free tokens are kept for the chat of tenants below their weighted share.

Calls are never preempted, so fair queueing alone cannot serve another tenant's chat while one
tenant's calls hold every token: it waits for the first call to end. While more than one tenant is
active (work waiting or running, or a request enqueued within the last `window_ms`), a tenant
already holding at least its weighted share of the budget (``budget x weight / the active tenants'
weights``) may not take the last `slots` free tokens; a tenant below its share may take them, the
very last one for a HIGH request only: it stays for the chat of tenants below their share (a
tenant's own MEDIUM or LOW work would otherwise fill it, and calls are not preempted), as HIGH's
headroom stays for HIGH (``policies.py``). Two slots by default: with one, a chat arriving while
the same tenant's previous chat held the kept token met a full backend (12 of B's 142 chats in
the fairness bench, B's HIGH p95 wait +13 ms with the flood; with two, 2 of 137, -0.9 ms), and
the second-last token is open to the MEDIUM and LOW work of a tenant below its share, which a
flood would otherwise keep waiting for the first call to end. With one active tenant nothing
changes (the scheduler stays work-conserving); `slots` 0 turns the rule off. At most
`budget - 1` tokens are kept (as for HIGH's headroom), so MEDIUM and LOW always have one to start
with, even with a budget of 1. It only ever holds a start back, so the budget is never exceeded.

A tenant's holding is the calls it has running in this process (``readahead.py``); with several
dispatchers each keeps its own headroom against the shared budget's free tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from inferq.messaging.tiers import Tier


class TenantHeadroom:
    def __init__(self, *, slots: int, window_ms: int, weight_of: Callable[[str], float]) -> None:
        if slots < 0 or window_ms < 0:
            raise ValueError("headroom slots and the activity window must not be negative")
        self.slots = slots
        self._window_ms = window_ms
        self._weight_of = weight_of
        # Per tenant, the newest enqueue time (epoch ms) of a request it sent; pruned past the window.
        self._last_seen: dict[str, int] = {}

    def seen(self, tenant: str, enqueued_ms: int) -> None:
        """A request of `tenant` enqueued at `enqueued_ms` arrived."""
        if self.slots and enqueued_ms > self._last_seen.get(tenant, enqueued_ms - 1):
            self._last_seen[tenant] = enqueued_ms

    def active(self, now_ms: int | None, busy: Collection[str]) -> set[str]:
        """The tenants active now: `busy` ones (work waiting or running) and those with a request
        enqueued within the window before `now_ms` (None: `busy` alone)."""
        if now_ms is None:
            return set(busy)
        since = now_ms - self._window_ms
        self._last_seen = {t: at for t, at in self._last_seen.items() if at >= since}
        return set(busy) | self._last_seen.keys()

    def kept(self, budget: int) -> int:
        """How many of the last free tokens of `budget` are kept: `slots`, at most `budget - 1`."""
        return max(0, min(self.slots, budget - 1))

    def allows(
        self, tenant: str, tier: Tier, *, running: int, free: int, budget: int, active: Collection[str]
    ) -> bool:
        """May `tenant`, with `running` calls, take one of `free` tokens of `budget` now for a
        request scheduled as `tier`?"""
        if free > self.kept(budget):
            return True
        others = [t for t in active if t != tenant]
        if not others:
            return True
        if tier is not Tier.HIGH and free <= 1:
            return False  # the last token stays for chat
        mine = self._weight(tenant)
        share = budget * mine / (mine + sum(self._weight(t) for t in others))
        return running < share

    def _weight(self, tenant: str) -> float:
        weight = self._weight_of(tenant)
        return weight if weight > 0 else 1.0
