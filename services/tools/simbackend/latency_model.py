"""How long one simulated call takes: a pure function of the model, the load and the fault state."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from inferq.tools.simbackend.settings import SimBackendSettings


@dataclass(frozen=True)
class LatencyModel:
    """Latency of one call, in seconds:

        base(model) / speed * degradation * (1 + slope * max(0, in_flight - optimal_concurrency)) * jitter

    The concurrency term lets a load test find the backend's best operating point: up to
    `optimal_concurrency` calls run at full speed, each call beyond it slows every newly admitted call.
    """

    latency_s: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    default_latency_s: float = 1.0
    speed: float = 1.0
    jitter: float = 0.0
    optimal_concurrency: int | None = None
    slope: float = 0.0

    def __post_init__(self) -> None:
        if self.speed <= 0:
            raise ValueError(f"speed must be positive, got {self.speed}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter}")
        if self.default_latency_s < 0 or any(seconds < 0 for seconds in self.latency_s.values()):
            raise ValueError("latencies must not be negative")
        if self.optimal_concurrency is not None and self.optimal_concurrency < 1:
            raise ValueError(f"optimal_concurrency must be at least 1, got {self.optimal_concurrency}")
        if self.slope < 0:
            raise ValueError(f"slope must not be negative, got {self.slope}")
        # Callers pass plain dicts; a read-only copy keeps the frozen model from changing under them.
        object.__setattr__(self, "latency_s", MappingProxyType(dict(self.latency_s)))

    @classmethod
    def from_settings(cls, settings: SimBackendSettings) -> LatencyModel:
        return cls(
            latency_s=settings.latency_s,
            default_latency_s=settings.default_latency_s,
            speed=settings.speed,
            jitter=settings.jitter,
            optimal_concurrency=settings.optimal_concurrency,
            slope=settings.slope,
        )

    def seconds(self, model: str, *, in_flight: int, degradation: float, rng: random.Random) -> float:
        """Latency of a call to `model` admitted with `in_flight` calls running, itself included."""
        seconds = self.latency_s.get(model, self.default_latency_s) / self.speed * degradation
        if self.optimal_concurrency is not None:
            seconds *= 1 + self.slope * max(0, in_flight - self.optimal_concurrency)
        if self.jitter:
            # No draw without jitter: a seeded run then gives the same error sequence whatever the latencies.
            seconds *= 1 + rng.uniform(-self.jitter, self.jitter)
        return seconds
