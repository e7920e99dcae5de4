"""The arrival trace of a time-compressed evening peak, generated once from a seed and replayed
identically for every policy.

Real-time shape (the seed's numbers): about 60 requests a minute, two thirds realtime chat and one
third emotion analysis, arriving in bursts; a burst of analyses partway through; a dump of morning
briefs at the start. Time is compressed by `compress` (S): the trace lasts `duration_s` of wall
clock, i.e. `duration_s x S` seconds of the real evening, and arrival rates are S times the real
ones. Everything here is wall-clock (compressed) seconds unless a name says `real`.

Bursts are Poisson clusters: cluster starts form a Poisson process; each cluster holds
1 + Poisson(cluster_mean - 1) requests spread uniformly over `cluster_spread_real_s` of real time.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass

CHAT = "realtime_chat"
ANALYSIS = "emotion_analysis"
BRIEF = "morning_brief"


@dataclass(frozen=True)
class TraceSpec:
    seed: int = 2024
    duration_s: float = 60.0
    compress: float = 10.0
    rate_per_min_real: float = 60.0
    chat_share: float = 2 / 3
    cluster_mean: float = 3.0
    cluster_spread_real_s: float = 2.0
    # 30 analyses within 1 s of wall clock, at this fraction of the trace.
    burst_size: int = 30
    burst_window_s: float = 1.0
    burst_at_fraction: float = 0.4
    briefs: int = 300

    def __post_init__(self) -> None:
        if self.duration_s <= 0 or self.compress <= 0 or self.rate_per_min_real < 0:
            raise ValueError("duration and compress must be positive, the rate not negative")
        if not 0 <= self.chat_share <= 1 or not 0 <= self.burst_at_fraction <= 1:
            raise ValueError("chat_share and burst_at_fraction must be in [0, 1]")
        if self.cluster_mean < 1 or self.burst_size < 0 or self.briefs < 0:
            raise ValueError("cluster_mean must be >= 1; burst_size and briefs not negative")


@dataclass(frozen=True)
class Arrival:
    """One request of the trace: when (wall seconds after the start), what, and which part of the trace."""

    index: int
    at_s: float
    scenario: str
    kind: str  # "dump", "steady" or "burst"
    session_id: str


def _poisson(rng: random.Random, mean: float) -> int:
    """Knuth's method: fine for the small means of cluster sizes."""
    if mean <= 0:
        return 0
    limit, k, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        k += 1
        product *= rng.random()
    return k


def generate(spec: TraceSpec) -> list[Arrival]:
    """The trace, sorted by time; the same spec always gives the same trace."""
    rng = random.Random(spec.seed)  # noqa: S311 - a reproducible trace, not a secret
    raw: list[tuple[float, str, str, str]] = [(0.0, BRIEF, "dump", f"brief-{i}") for i in range(spec.briefs)]
    rate_per_s = spec.rate_per_min_real / 60 * spec.compress
    cluster_rate = rate_per_s / spec.cluster_mean
    spread_s = spec.cluster_spread_real_s / spec.compress
    t = rng.expovariate(cluster_rate) if cluster_rate > 0 else math.inf
    n = 0
    while t < spec.duration_s:
        for _ in range(1 + _poisson(rng, spec.cluster_mean - 1)):
            at = t + rng.uniform(0, spread_s)
            if at < spec.duration_s:
                chat = rng.random() < spec.chat_share
                session = f"chat-{n % 40}" if chat else f"diary-{n}"
                raw.append((at, CHAT if chat else ANALYSIS, "steady", session))
                n += 1
        t += rng.expovariate(cluster_rate)
    burst_start = spec.burst_at_fraction * spec.duration_s
    for i in range(spec.burst_size):
        raw.append((burst_start + rng.uniform(0, spec.burst_window_s), ANALYSIS, "burst", f"burst-{i}"))
    raw.sort(key=lambda r: r[0])
    return [Arrival(i, at, scenario, kind, session) for i, (at, scenario, kind, session) in enumerate(raw)]


def describe(spec: TraceSpec, trace: list[Arrival]) -> dict[str, object]:
    """The spec and counts by kind and scenario, for the report."""
    counts: dict[str, int] = {}
    for a in trace:
        key = f"{a.kind}/{a.scenario}"
        counts[key] = counts.get(key, 0) + 1
    return {"spec": asdict(spec), "total": len(trace), "counts": counts}
