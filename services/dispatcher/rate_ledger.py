"""The rate budget as the starter and the execution use it: one process's, or the group's.

`RateLedger` is what a start needs from the per-minute budget (``rate_budget.py`` says what is
counted and why). Two implementations, chosen by ``INFERQ_COORDINATION`` like the token pool:

- `LocalRateLedger`: this process's `RateBudget`, exactly as before. Its methods never suspend, so
  awaiting them changes nothing in the starter's order of events.
- `SharedRateBudget` (``shared_rate/``): one window per model in Redis for the whole group, checked
  and added to atomically; a local share when Redis is away.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from inferq.dispatcher.rate_budget import Charge, RateBudget, RateHeaders
from inferq.messaging.tiers import Tier


class RateLedger(Protocol):
    def set_floor_shares(self, floor_shares: Mapping[Tier, float]) -> None:
        """The tiers' shares of each limit (their floors' share of the concurrency budget)."""
        ...

    async def take(self, model: str, tier: Tier, tokens: int, *, force: bool = False) -> Charge | None:
        """Enter a start of `tokens` if it fits in the minute (or `force`); None if not."""
        ...

    async def refund(self, charge: Charge) -> None:
        """The start `charge` entered did not happen after all."""
        ...

    async def settle(self, charge: Charge, used_tokens: int) -> None:
        """The call's `usage` replaces the start's estimate."""
        ...

    async def observe(self, model: str, headers: RateHeaders) -> None:
        """Learn from a response's rate-limit headers."""
        ...

    def status(self) -> dict[str, object]:
        """What ``/healthz`` shows of the rate budget."""
        ...


class LocalRateLedger:
    """The rate budget of one dispatcher process (`RateBudget`), behind the async `RateLedger`."""

    def __init__(self, budget: RateBudget) -> None:
        self.budget = budget

    def set_floor_shares(self, floor_shares: Mapping[Tier, float]) -> None:
        self.budget.set_floor_shares(floor_shares)

    async def take(self, model: str, tier: Tier, tokens: int, *, force: bool = False) -> Charge | None:
        return self.budget.take(model, tier, tokens, force=force)

    async def refund(self, charge: Charge) -> None:
        self.budget.refund(charge)

    async def settle(self, charge: Charge, used_tokens: int) -> None:
        self.budget.settle(charge, used_tokens)

    async def observe(self, model: str, headers: RateHeaders) -> None:
        self.budget.observe(model, headers)

    def status(self) -> dict[str, object]:
        return {"shared": False}


if TYPE_CHECKING:
    _protocol_check: type[RateLedger] = LocalRateLedger
