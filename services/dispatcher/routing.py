"""Which backend a start calls: per tier an ordered list of backends, each behind a circuit breaker.

The default is one backend (``INFERQ_DISPATCHER_BACKEND_URL``) for every tier, and then nothing
here changes a call: no breaker (there is nowhere else to send the traffic; retries and the
adaptive budget handle a failing backend). With ``INFERQ_DISPATCHER_BACKENDS`` and
``INFERQ_DISPATCHER_TIER_BACKENDS`` a tier lists its backends in order (LOW to a cheaper
deployment first, say); a start goes to the first one that

- its breaker admits (``circuit.py``: open after failures in a row or a 429 storm; after a pause
  one probe call at a time; a probe that answers brings the traffic back; a request on its last
  attempt is never the probe, since a failed probe would be its final failure, unless
  every request is: `max_attempts` 1), and
- is below its own concurrency limit (`max_concurrency`, calls in flight from this dispatcher).

When none of a tier's backends may be called now, `choose` returns None and the tier waits, as it
waits for a token: its requests stay in the read-ahead (their deadlines still drop them) until a
breaker lets a probe through or a call ends.

Each backend also has its own rate budget: with several backends, the rate budget's key for a
model is ``<backend>/<model>`` (``INFERQ_DISPATCHER_RATE_LIMITS`` names them so), so their minutes never mix.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from inferq.dispatcher.backend import Backend
from inferq.dispatcher.circuit import BreakerPolicy, CallEnd, CircuitBreaker, State
from inferq.dispatcher.errors import BackendError
from inferq.messaging.tiers import Tier

log = logging.getLogger("inferq.dispatcher")

STATE_GAUGE = {State.CLOSED: 0, State.HALF_OPEN: 1, State.OPEN: 2}

# The backend of ``INFERQ_DISPATCHER_BACKEND_URL``, the one every tier calls unless configured otherwise.
DEFAULT_BACKEND = "default"


@dataclass
class Route:
    """One named backend: its client, its breaker, its concurrency limit and its calls in flight."""

    name: str
    backend: Backend
    breaker: CircuitBreaker
    max_concurrency: int | None = None
    in_flight: int = 0

    def has_room(self) -> bool:
        return self.max_concurrency is None or self.in_flight < self.max_concurrency


class BackendRoutes:
    def __init__(
        self,
        backends: Mapping[str, Backend],
        tiers: Mapping[Tier, Sequence[str]] | None = None,
        *,
        max_concurrency: Mapping[str, int] | None = None,
        policy: BreakerPolicy | None = None,
        on_change: Callable[[str, State], None] | None = None,
    ) -> None:
        if not backends:
            raise ValueError("at least one backend is needed")
        policy = policy or BreakerPolicy()
        limits = max_concurrency or {}
        self._routes = {
            name: Route(name, backend, CircuitBreaker(policy), limits.get(name))
            for name, backend in backends.items()
        }
        first = next(iter(backends))
        orders = {t: tuple((tiers or {}).get(t) or (first,)) for t in Tier}
        check_tier_backends(orders, list(self._routes))
        self._orders = orders
        self._on_change = on_change

    @classmethod
    def single(cls, backend: Backend) -> BackendRoutes:
        return cls({DEFAULT_BACKEND: backend})

    @property
    def several(self) -> bool:
        """More than one backend: the rate budget keys each model by its backend."""
        return len(self._routes) > 1

    def routes(self) -> list[Route]:
        return list(self._routes.values())

    def order(self, tier: Tier) -> tuple[str, ...]:
        return self._orders[tier]

    def choose(self, tier: Tier, now_ms: int, *, may_probe: bool = True) -> Route | None:
        """The backend a start of `tier` calls now; None when none of its backends may be called.
        `may_probe` False (the request's last attempt): not a backend whose breaker is half-open."""
        order = self._orders[tier]
        if len(order) == 1:
            route = self._routes[order[0]]
            return route if route.has_room() else None
        for name in order:
            route = self._routes[name]
            if not route.has_room() or not route.breaker.admits(now_ms):
                continue
            if may_probe or route.breaker.state(now_ms) is State.CLOSED:
                return route
        return None

    def rate_key(self, route: Route, model: str) -> str:
        """The rate budget's name for `model` on `route`'s backend."""
        return f"{route.name}/{model}" if self.several else model

    def started(self, route: Route, now_ms: int) -> bool:
        """A call goes to `route`; True when it is its half-open breaker's probe."""
        route.in_flight += 1
        return self.several and route.breaker.started(now_ms)

    def ended(
        self,
        route: Route,
        failure: BackendError | None,
        now_ms: int,
        *,
        cut: bool = False,
        probe: bool = False,
    ) -> None:
        """A call on `route` ended: answered (`failure` None), failed, or `cut` by its deadline;
        `probe`: what `started` said of it."""
        route.in_flight = max(0, route.in_flight - 1)
        if not self.several:
            return  # no breaker: nowhere else to send the traffic (its circuit stays closed)
        end = call_end_of(failure, cut=cut)
        before = route.breaker.state(now_ms)
        after = route.breaker.ended(end, now_ms, probe=probe)
        if after is before:
            return
        if after is State.OPEN:
            log.warning(
                "backend %r: circuit open (%s); its traffic goes to the next backend of each tier",
                route.name,
                route.breaker.reason,
            )
        elif after is State.CLOSED:
            log.warning(
                "backend %r: circuit closed, a probe call answered; its traffic comes back", route.name
            )
        if self._on_change is not None:
            self._on_change(route.name, after)

    def in_service(self, route: Route, tier: Tier, now_ms: int) -> bool:
        """Whether `route` takes `tier`'s traffic: always when it is the tier's only backend (which
        calls it whatever its breaker says), else while its circuit is closed (an open or probed
        one's failures are the breaker's business, not the budget's)."""
        return len(self._orders[tier]) == 1 or route.breaker.state(now_ms) is State.CLOSED

    def states(self, now_ms: int) -> dict[str, State]:
        return {name: route.breaker.state(now_ms) for name, route in self._routes.items()}

    def gauge(self, now_ms: int) -> dict[str, int]:
        """Each backend's circuit as a number: 0 closed, 1 half-open, 2 open."""
        return {name: STATE_GAUGE[state] for name, state in self.states(now_ms).items()}

    async def close(self) -> None:
        for route in self._routes.values():
            await route.backend.close()


def check_tier_backends(tiers: Mapping[Tier, Sequence[str]], known: Sequence[str]) -> None:
    for tier, order in tiers.items():
        if not order:
            raise ValueError(f"{tier.value} lists no backend")
        if len(set(order)) != len(order):
            raise ValueError(f"{tier.value} lists a backend twice: {list(order)}")
        unknown = [name for name in order if name not in known]
        if unknown:
            raise ValueError(f"{tier.value} lists unknown backends {unknown}; known: {sorted(known)}")


def call_end_of(failure: BackendError | None, *, cut: bool = False) -> CallEnd:
    """How a call's end counts for its backend's breaker: a 5xx, a timeout or a lost connection is a
    failure, a 429 a rate limit, any other answer (a 4xx is the request's fault) an answer; a call
    the request's own deadline cut says nothing about the backend."""
    if cut:
        return CallEnd.NEUTRAL
    if failure is None:
        return CallEnd.ANSWERED
    if failure.status == 429:
        return CallEnd.RATE_LIMITED
    if failure.status is not None and failure.status < 500:
        return CallEnd.ANSWERED
    return CallEnd.FAILED
