"""The effective budget follows the backend's health.

Two loops, as in TCP congestion control (AIMD):

- fast: an overload answer (429, 503, a timeout) cuts the budget multiplicatively at once, at most
  once per `cut_cooldown_s` so one burst of 429s is one signal, not ten;
- slow: every `window_s`, the mean inference latency of each model is compared with its baseline.
  Above `latency_threshold` (1.2: 20% slower) the budget is set in proportion, max / ratio, so a
  backend twice as slow gets half the concurrency; a healthy window (no overload, latency within
  the threshold) adds `recover_step` back, up to the configured budget.

More concurrency is not more throughput past the backend's best point: when latency grows with
concurrency, this loop settles near the point where it stops growing. The budget never falls below
`min_budget`, so HIGH always progresses. The clock is injected (monotonic seconds).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger("inferq.dispatcher")


class Budget(Protocol):
    """The concurrency budget in force now: fixed, or following the backend's health."""

    @property
    def effective(self) -> int: ...


@dataclass(frozen=True)
class FixedBudget:
    """The configured budget, when adaptation is off (or the policy is a fixed baseline)."""

    effective: int


@dataclass(frozen=True)
class AdaptivePolicy:
    max_budget: int
    min_budget: int = 1
    cut_factor: float = 0.7
    cut_cooldown_s: float = 1.0
    latency_threshold: float = 1.2
    window_s: float = 5.0
    recover_step: int = 1
    min_samples: int = 5
    baseline_weight: float = 0.1

    def __post_init__(self) -> None:
        if not 1 <= self.min_budget <= self.max_budget:
            raise ValueError(f"need 1 <= min_budget <= max_budget, got {self.min_budget}, {self.max_budget}")
        if not 0 < self.cut_factor < 1:
            raise ValueError("cut_factor must be in (0, 1)")
        if self.latency_threshold <= 1:
            raise ValueError("latency_threshold must be above 1")
        if self.window_s <= 0 or self.cut_cooldown_s < 0:
            raise ValueError("window_s must be positive and cut_cooldown_s not negative")


# Models whose latency is learnt. A request may name any model (a record written straight to Kafka
# too), so the table is bounded: latencies of models beyond the first this many are not learnt.
MAX_MODELS = 64


@dataclass
class _Window:
    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    overloads: int = 0


class AdaptiveBudget:
    def __init__(self, policy: AdaptivePolicy, clock: Callable[[], float]) -> None:
        self.policy = policy
        self._clock = clock
        self.effective = policy.max_budget
        self._baseline: dict[str, float] = {}
        self._window = _Window()
        self._window_started = clock()
        self._last_cut = -math.inf
        self.last_reason = "start"

    def baseline(self, model: str) -> float | None:
        return self._baseline.get(model)

    def record_success(self, model: str, latency_s: float) -> None:
        known = model in self._baseline or model in self._window.counts
        if not known and len(self._baseline.keys() | self._window.counts.keys()) >= MAX_MODELS:
            self.tick()
            return
        self._window.sums[model] = self._window.sums.get(model, 0.0) + latency_s
        self._window.counts[model] = self._window.counts.get(model, 0) + 1
        self.tick()

    def record_overload(self) -> None:
        """A 429, a 503 or a timeout: the backend is past its limit right now."""
        self._window.overloads += 1
        now = self._clock()
        if now - self._last_cut >= self.policy.cut_cooldown_s:
            self._last_cut = now
            self._set(math.floor(self.effective * self.policy.cut_factor), "overload")
        self.tick()

    def tick(self) -> None:
        """Close the latency window when it is due; cheap to call often."""
        now = self._clock()
        if now - self._window_started < self.policy.window_s:
            return
        window, self._window, self._window_started = self._window, _Window(), now
        worst = 1.0
        for model, count in window.counts.items():
            if count < self.policy.min_samples:
                continue
            mean = window.sums[model] / count
            base = self._baseline.get(model)
            if base is None:
                self._baseline[model] = mean
                continue
            ratio = mean / base if base > 0 else 1.0
            worst = max(worst, ratio)
            if ratio <= self.policy.latency_threshold:
                weight = self.policy.baseline_weight
                self._baseline[model] = (1 - weight) * base + weight * mean
        if worst > self.policy.latency_threshold:
            self._set(
                min(self.effective, math.floor(self.policy.max_budget / worst)), f"latency x{worst:.2f}"
            )
        elif window.overloads == 0 and self.effective < self.policy.max_budget:
            self._set(self.effective + self.policy.recover_step, "recovering")

    def _set(self, value: int, reason: str) -> None:
        self.effective = max(self.policy.min_budget, min(self.policy.max_budget, value))
        self.last_reason = reason


def warn_on_change(budget: AdaptiveBudget, before: int) -> None:
    """Log a change of the effective budget (from `before`), with its reason."""
    if budget.effective != before:
        log.warning("effective budget %d -> %d (%s)", before, budget.effective, budget.last_reason)
