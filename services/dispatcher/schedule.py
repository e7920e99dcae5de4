"""The budget schedule: for each window of the day, each tier's guaranteed floor and ceiling.

The default table (`infra/schedule.toml`) gives each tier a floor (peak 20-22: HIGH 6 / MEDIUM 3 /
LOW 1; normal: 5 / 3 / 2; night 0-6: LOW 8). Ceilings say how far a tier may borrow capacity
another tier leaves idle: HIGH up to the whole budget, MEDIUM up to the budget minus the HIGH
headroom, LOW as the table says
(1 at peak, 2 normally, 8 at night, and the whole budget at night when nothing else waits or runs).
Users edit the table as a TOML file (`Schedule.from_toml`); `pinned` forces one window by name,
for tests and load tests.

Hours are local to `timezone`. Windows are half-open `[start_hour, end_hour)` and together cover
every hour of the day exactly once.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any
from zoneinfo import ZoneInfo

from inferq.messaging.tiers import TIERS_BY_PRIORITY, Tier

DEFAULT_HEADROOM = 2


class ScheduleError(ValueError):
    """A schedule that cannot be honoured: overlapping windows, floors above the budget..."""


@dataclass(frozen=True)
class TierLimits:
    floor: int
    ceiling: int

    def __post_init__(self) -> None:
        if not 0 <= self.floor <= self.ceiling:
            raise ScheduleError(f"need 0 <= floor <= ceiling, got floor {self.floor}, ceiling {self.ceiling}")


@dataclass(frozen=True)
class Window:
    name: str
    start_hour: int
    end_hour: int
    limits: Mapping[Tier, TierLimits]
    # Slots lower tiers may not borrow, so a burst of chat finds a free slot at once.
    high_headroom: int = DEFAULT_HEADROOM
    # LOW's ceiling when HIGH and MEDIUM have nothing waiting and nothing running (None: no change).
    low_idle_ceiling: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.start_hour < self.end_hour <= 24:
            raise ScheduleError(
                f"window {self.name}: need 0 <= start < end <= 24, got {self.start_hour}-{self.end_hour}"
            )
        if set(self.limits) != set(Tier):
            raise ScheduleError(f"window {self.name}: limits for every tier are needed")
        object.__setattr__(self, "limits", MappingProxyType(dict(self.limits)))

    def covers(self, hour: int) -> bool:
        return self.start_hour <= hour < self.end_hour

    def check_budget(self, budget: int) -> None:
        floors = sum(limit.floor for limit in self.limits.values())
        if floors > budget:
            raise ScheduleError(f"window {self.name}: floors add up to {floors}, above the budget {budget}")
        for tier, limit in self.limits.items():
            if limit.ceiling > budget:
                raise ScheduleError(
                    f"window {self.name}: {tier} ceiling {limit.ceiling} above the budget {budget}"
                )
        if not 0 <= self.high_headroom < budget:
            raise ScheduleError(f"window {self.name}: headroom {self.high_headroom} must be in [0, budget)")
        if self.low_idle_ceiling is not None and not 0 <= self.low_idle_ceiling <= budget:
            raise ScheduleError(f"window {self.name}: low_idle_ceiling must be in [0, budget]")

    def squeezed(self, cut: int) -> Window:
        """The window under a budget reduced by `cut` slots: LOW gives up its share first, then
        MEDIUM; HIGH's floor is cut last. Ceilings shrink the same way."""
        if cut <= 0:
            return self
        floors = {t: self.limits[t].floor for t in Tier}
        ceilings = {t: self.limits[t].ceiling for t in Tier}
        remaining = cut
        for tier in reversed(TIERS_BY_PRIORITY):
            taken = min(floors[tier], remaining)
            floors[tier] -= taken
            remaining -= taken
        for tier in (Tier.LOW, Tier.MEDIUM):
            ceilings[tier] = max(floors[tier], ceilings[tier] - cut)
        idle = None if self.low_idle_ceiling is None else max(0, self.low_idle_ceiling - cut)
        limits = {t: TierLimits(floors[t], max(floors[t], ceilings[t])) for t in Tier}
        return replace(self, limits=limits, low_idle_ceiling=idle)


def _limits(h: tuple[int, int], m: tuple[int, int], lo: tuple[int, int]) -> dict[Tier, TierLimits]:
    return {Tier.HIGH: TierLimits(*h), Tier.MEDIUM: TierLimits(*m), Tier.LOW: TierLimits(*lo)}


@dataclass(frozen=True)
class Schedule:
    budget: int
    windows: tuple[Window, ...]
    timezone: str = "UTC"
    pinned: str | None = None
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise ScheduleError(f"budget must be at least 1, got {self.budget}")
        for hour in range(24):
            owners = [w.name for w in self.windows if w.covers(hour)]
            if len(owners) != 1:
                raise ScheduleError(
                    f"hour {hour} is covered by {len(owners)} windows ({owners}); need exactly 1"
                )
        for window in self.windows:
            window.check_budget(self.budget)
        if self.pinned is not None and self.pinned not in {w.name for w in self.windows}:
            raise ScheduleError(f"pinned window {self.pinned!r} is not in the schedule")
        object.__setattr__(self, "_zone", ZoneInfo(self.timezone))

    def window_at(self, now: datetime) -> Window:
        """The window in force at `now` (an aware datetime), or the pinned one."""
        if self.pinned is not None:
            return next(w for w in self.windows if w.name == self.pinned)
        if now.tzinfo is None:
            raise ScheduleError("window_at needs an aware datetime")
        hour = now.astimezone(self._zone).hour
        return next(w for w in self.windows if w.covers(hour))

    def pin(self, name: str | None) -> Schedule:
        return replace(self, pinned=name)

    @classmethod
    def default(cls, budget: int = 10, timezone: str = "UTC", headroom: int | None = None) -> Schedule:
        """The built-in table (written out in `infra/schedule.toml`). Its numbers are for a budget of
        10; other budgets scale them in proportion (floors rounded down so they fit, LOW's ceilings
        at least 1 so LOW can borrow), and the HIGH headroom defaults to 20% of the budget (2 of 10)."""
        b = budget

        def scaled(slots: int) -> int:
            return slots * b // 10

        room = headroom if headroom is not None else min(b - 1, round(0.2 * b))
        mid = b - room

        def limits(high: int, medium: int, low: int, low_ceiling: int) -> dict[Tier, TierLimits]:
            floors = (scaled(high), scaled(medium), scaled(low))
            return _limits(
                (floors[0], b),
                (floors[1], max(floors[1], mid)),
                (floors[2], max(floors[2], 1, scaled(low_ceiling))),
            )

        normal = limits(5, 3, 2, 2)
        return cls(
            budget=budget,
            timezone=timezone,
            windows=(
                Window("night", 0, 6, limits(1, 1, 8, 8), room, low_idle_ceiling=b),
                Window("normal", 6, 20, normal, room),
                Window("peak", 20, 22, limits(6, 3, 1, 1), room),
                Window("normal", 22, 24, normal, room),
            ),
        )

    @classmethod
    def from_toml(cls, path: Path, *, budget: int | None = None, pinned: str | None = None) -> Schedule:
        """Read a schedule file; see `infra/schedule.toml` for the format."""
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        return cls.from_dict(data, budget=budget, pinned=pinned)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, budget: int | None = None, pinned: str | None = None
    ) -> Schedule:
        try:
            windows = tuple(
                Window(
                    name=str(w["name"]),
                    start_hour=int(w["start_hour"]),
                    end_hour=int(w["end_hour"]),
                    limits={
                        Tier(t.upper()): TierLimits(int(v["floor"]), int(v["ceiling"]))
                        for t, v in w["tiers"].items()
                    },
                    high_headroom=int(w.get("high_headroom", DEFAULT_HEADROOM)),
                    low_idle_ceiling=None
                    if w.get("low_idle_ceiling") is None
                    else int(w["low_idle_ceiling"]),
                )
                for w in data["windows"]
            )
            return cls(
                budget=budget if budget is not None else int(data["budget"]),
                windows=windows,
                timezone=str(data.get("timezone", "UTC")),
                pinned=pinned if pinned is not None else data.get("pinned"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ScheduleError):
                raise
            raise ScheduleError(f"malformed schedule: {exc!r}") from exc
