"""The Prometheus text format read into plain samples, and what `top` needs from them.

A `Scrape` is one service's /metrics at one moment: every sample's name, labels and value. Sums
over labels (`total`, `by`) ignore the labels `top` does not show (tenant, the exporter's
otel_scope_*), so several dispatchers' or tenants' series add up per tier.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class Scrape:
    """The samples of one or more /metrics pages read at `at` (monotonic seconds)."""

    at: float
    samples: tuple[Sample, ...] = field(default_factory=tuple)

    @classmethod
    def parse(cls, text: str, at: float) -> Scrape:
        return cls(at, tuple(_samples(text)))

    def merged(self, other: Scrape) -> Scrape:
        return Scrape(max(self.at, other.at), self.samples + other.samples)

    def select(self, name: str, **match: str) -> Iterable[Sample]:
        for s in self.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in match.items()):
                yield s

    def has(self, name: str) -> bool:
        return any(True for _ in self.select(name))

    def total(self, name: str, **match: str) -> float:
        return sum(s.value for s in self.select(name, **match))

    def by(self, name: str, label: str, **match: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for s in self.select(name, **match):
            key = s.labels.get(label)
            if key is not None:
                out[key] = out.get(key, 0.0) + s.value
        return out

    def peak(self, name: str, label: str, **match: str) -> dict[str, float]:
        """The largest value per label value (a figure every replica reports for the whole group)."""
        out: dict[str, float] = {}
        for s in self.select(name, **match):
            key = s.labels.get(label)
            if key is not None:
                out[key] = max(out.get(key, s.value), s.value)
        return out

    def buckets(self, name: str, **match: str) -> dict[float, float]:
        """A histogram's cumulative buckets (upper bound to count), summed over the other labels."""
        out: dict[float, float] = {}
        for s in self.select(f"{name}_bucket", **match):
            bound = float(s.labels.get("le", "nan"))
            if not math.isnan(bound):
                out[bound] = out.get(bound, 0.0) + s.value
        return out


def _samples(text: str) -> Iterable[Sample]:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            yield Sample(s.name, dict(s.labels), float(s.value))


def quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The q-quantile of cumulative `buckets`, interpolated within a bucket as Prometheus'
    `histogram_quantile` does; None without observations. Past the last finite bound: that bound."""
    if not buckets:
        return None
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def delta(newer: Mapping[float, float], older: Mapping[float, float]) -> dict[float, float]:
    """Cumulative buckets' increase; a counter that went down (a restart) counts from zero."""
    out: dict[float, float] = {}
    for bound, count in newer.items():
        before = older.get(bound, 0.0)
        out[bound] = count - before if count >= before else count
    return out
