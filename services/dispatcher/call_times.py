"""Call times learned online: each tier's typical backend call, and when the running calls should end.

The tier of a request picks its model (``models.py``), so a call's time is learned per source tier.
Each learned value starts from the configured typical latency (`INFERQ_TYPICAL_LATENCY_S`) and
follows the calls that completed as an exponentially weighted mean (weight `weight` per call); a
call that failed or that the deadline cut says nothing about the model's speed and is not learned.
Bounded: a sample is clamped to [default / `bound`, default x `bound`], so neither one stuck call nor
a burst of instant answers moves the estimate out of that range. The predictive early drop
(``readahead.py``) and the forecast lending (``forecast.py``) read it; `learn` False keeps the defaults.

Pure: times are epoch ms given by the caller (the dispatcher's clock, the simulator's).
"""

from __future__ import annotations

from collections.abc import Mapping

from inferq.messaging.tiers import Tier

DEFAULT_WEIGHT = 0.1
DEFAULT_BOUND = 4.0


class CallTimes:
    def __init__(
        self,
        defaults_ms: Mapping[Tier, float],
        *,
        learn: bool = True,
        weight: float = DEFAULT_WEIGHT,
        bound: float = DEFAULT_BOUND,
    ) -> None:
        if not 0 < weight <= 1 or bound < 1:
            raise ValueError(f"need 0 < weight <= 1 and bound >= 1, got {weight}, {bound}")
        if any(ms < 0 for ms in defaults_ms.values()):
            raise ValueError("typical call times must not be negative")
        self._defaults = dict(defaults_ms)
        self._typical = dict(defaults_ms)
        self._learn = learn
        self._weight = weight
        self._bound = bound
        # Calls running now: key (the caller's, one per call) -> (tier, started at epoch ms).
        self._running: dict[int, tuple[Tier, int]] = {}

    def typical_ms(self, tier: Tier) -> float:
        """The tier's typical call time now (the default until calls complete; 0 if none is known)."""
        return self._typical.get(tier, 0.0)

    def default_ms(self, tier: Tier) -> float:
        """The tier's configured typical call time (0 if none is configured)."""
        return self._defaults.get(tier, 0.0)

    def started(self, key: int, tier: Tier, now_ms: int) -> None:
        """A call of `tier` started at `now_ms`; `key` names it until `ended` (the read-ahead uses the
        request's `id()`: the caller holds the request while its call runs)."""
        self._running[key] = (tier, now_ms)

    def ended(self, key: int, now_ms: int | None, *, completed: bool) -> None:
        """The call `key` gave its token back at `now_ms`; a `completed` one teaches its tier's time."""
        call = self._running.pop(key, None)
        if call is None or now_ms is None or not completed or not self._learn:
            return
        tier, started_ms = call
        default = self._defaults.get(tier)
        if default is None or default <= 0:
            return
        sample = min(max(now_ms - started_ms, default / self._bound), default * self._bound)
        self._typical[tier] += self._weight * (sample - self._typical[tier])

    def running(self) -> int:
        return len(self._running)

    def remaining_ms(self, now_ms: int) -> list[float]:
        """Per running call, how long until it should end (0 for one past its typical time), sorted."""
        return sorted(
            max(0.0, started + self.typical_ms(tier) - now_ms) for tier, started in self._running.values()
        )
