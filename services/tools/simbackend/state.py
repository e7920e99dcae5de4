"""The simulator's mutable state: injected faults and call counters, both served by `/stats`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class FaultState:
    """Faults an operator switches at runtime through `POST /admin/faults`."""

    outage: bool = False
    error_rate: float = 0.0
    degradation: float = 1.0
    # The fraction of streamed calls whose connection breaks mid-stream.
    stream_drop_rate: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.error_rate <= 1:
            raise ValueError(f"error_rate must be in [0, 1], got {self.error_rate}")
        if not 0 <= self.stream_drop_rate <= 1:
            raise ValueError(f"stream_drop_rate must be in [0, 1], got {self.stream_drop_rate}")
        if self.degradation <= 0:
            raise ValueError(f"degradation must be positive, got {self.degradation}")

    def as_dict(self) -> dict[str, bool | float]:
        return {
            "outage": self.outage,
            "error_rate": self.error_rate,
            "degradation": self.degradation,
            "stream_drop_rate": self.stream_drop_rate,
        }


@dataclass
class CallStats:
    """Counters for chat-completion calls.

    `in_flight` and `max_in_flight` count admitted calls only; `total`, `by_status` and `by_model` count every
    answered request, rejected ones included; `streams_dropped` the streams broken by the fault.
    """

    in_flight: int = 0
    max_in_flight: int = 0
    total: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    by_model: Counter[str] = field(default_factory=Counter)
    streams_dropped: int = 0
    # The 429s the per-minute limits (--rpm, --tpm) answered: a client that dispatched past them.
    rate_limited: int = 0

    def enter(self) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def leave(self) -> None:
        if self.in_flight <= 0:
            raise RuntimeError("leave() without a matching enter()")
        self.in_flight -= 1

    def record(self, status: int, model: str | None) -> None:
        self.total += 1
        self.by_status[str(status)] += 1
        if model is not None:
            self.by_model[model] += 1

    def reset(self) -> None:
        # Calls still running stay counted: zeroing in_flight would let their leave() drive it negative.
        self.max_in_flight = self.in_flight
        self.total = 0
        self.streams_dropped = 0
        self.rate_limited = 0
        self.by_status.clear()
        self.by_model.clear()
