"""Admission and fate of one simulated call, with no HTTP in sight."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from inferq.tools.simbackend.latency_model import LatencyModel
from inferq.tools.simbackend.state import CallStats, FaultState


@dataclass(frozen=True)
class Admitted:
    """A call that runs: it holds a concurrency slot for `latency_s`, then is answered with `status`."""

    latency_s: float
    status: int  # 200, or an injected 500/503
    # A streamed call whose connection the simulator breaks mid-stream (the `stream_drop_rate` fault).
    drops_stream: bool = False


@dataclass(frozen=True)
class Rejected:
    """A call answered at once without running: during an outage, or with `limit` calls already running."""

    reason: Literal["outage", "at_limit"]


class SimBackend:
    """Decides, per call, whether it runs, how long it takes and how it ends.

    Every random draw happens inside `admit`, in arrival order, so a seeded run is reproducible whatever order
    the calls finish in.
    """

    def __init__(self, *, limit: int, latency: LatencyModel, faults: FaultState, rng: random.Random) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.limit = limit
        self.latency = latency
        self.faults = faults
        self.stats = CallStats()
        self._rng = rng

    def admit(self, model: str, *, stream: bool = False) -> Admitted | Rejected:
        """Take a slot for a call to `model`, or say why not. The caller must `release()` every admitted call.

        Synchronous on purpose: with no await between the limit check and `stats.enter()`, no other asyncio
        task can slip in between, so at most `limit` calls are ever admitted.
        """
        if self.faults.outage:
            return Rejected("outage")
        if self.stats.in_flight >= self.limit:
            return Rejected("at_limit")
        self.stats.enter()
        latency_s = self.latency.seconds(
            model, in_flight=self.stats.in_flight, degradation=self.faults.degradation, rng=self._rng
        )
        status = 200
        if self._rng.random() < self.faults.error_rate:
            status = self._rng.choice((500, 503))
        # Drawn only for streams with the fault on, so other runs keep their seeded sequences.
        drop_rate = self.faults.stream_drop_rate
        drops = stream and drop_rate > 0 and self._rng.random() < drop_rate
        return Admitted(latency_s=latency_s, status=status, drops_stream=drops)

    def release(self) -> None:
        self.stats.leave()

    def snapshot(self) -> dict[str, object]:
        """The `/stats` document."""
        stats = self.stats
        return {
            "in_flight": stats.in_flight,
            "max_in_flight": stats.max_in_flight,
            "limit": self.limit,
            "total": stats.total,
            "by_status": dict(stats.by_status),
            "by_model": dict(stats.by_model),
            "streams_dropped": stats.streams_dropped,
            "rate_limited": stats.rate_limited,
            "abandoned": stats.abandoned,
            "abandoned_tokens": stats.abandoned_tokens,
            "completed_tokens": stats.completed_tokens,
            "faults": self.faults.as_dict(),
        }
