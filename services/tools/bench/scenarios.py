"""The traces of the two benches that replay one through the real pipeline, from
`infra/scenarios/bench/*.toml` (written at each bench's defaults) adapted to the bench's options.

- scheduling: the evening peak compressed S times (Poisson clusters of chat and analysis, a burst of
  analyses, a dump of briefs at the start); `--compress` multiplies the rates and divides the
  clusters' spread, `--duration` stretches it (the burst stays at its fraction), `--briefs` sizes
  the dump. `--surge X` adds an analysis surge: MEDIUM arrives at X times its rate for
  `--surge-seconds` from `--surge-at` (a fraction of the trace), deadlines as configured (the extra
  analyses are a burst of the same stream, spread evenly over the window). By default 10x for 5 s
  (the surge issue 22 measured lending on) from 10% of the trace, while the briefs dumped at the
  start still drain, so lent slots are busy when it comes; `--surge 1` is the trace without it.
- fairness: a steady tenant B and a tenant A flooding HIGH and LOW at `flood` x its weighted share
  of each tier's peak slots: share = wA / (wA + wB) of (the tier's peak floor / its compressed call
  time). The file holds the streams' shape; these rates follow from the options and the
  dispatcher's default schedule, so they are set here. B's streams come first, so B's arrivals are
  the same with or without A's (the generator seeds each stream by its position).

Light on purpose: `inferq bench --help` reads the defaults from here without loading Kafka clients.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from inferq.dispatcher.schedule import Schedule
from inferq.messaging.tiers import DEFAULT_MEAN_LATENCY_S, Tier, TierPolicy
from inferq.tools.paths import SCENARIO_DIR
from inferq.tools.traces.arrival import Arrival
from inferq.tools.traces.scenario import Burst, Scenario, Stream, load

FAIRNESS_FILE = SCENARIO_DIR / "bench" / "fairness.toml"
FAIRNESS_COMPRESS = 5.0  # the S the file's steady rates are written at
TENANT_A = "a"  # floods
TENANT_B = "b"  # steady
SCHEDULING_FILE = SCENARIO_DIR / "bench" / "scheduling.toml"
SCHEDULING_COMPRESS = 10.0  # the S the file's rates and spreads are written at


@dataclass(frozen=True)
class TraceSpec:
    """The bench's options that shape its trace; `from_file()` gives the file's own."""

    seed: int
    duration_s: float
    compress: float = SCHEDULING_COMPRESS
    briefs: int = 0
    # MEDIUM's rate multiplier during the analysis surge; 1: no surge.
    surge: float = 10.0
    surge_s: float = 5.0
    # When the surge starts, as a fraction of the trace (it moves with --duration, as the burst does).
    surge_at: float = 0.1

    @classmethod
    def from_file(cls, **options: Any) -> TraceSpec:
        base = load(str(SCHEDULING_FILE))
        briefs = sum(d.count for s in base.streams for d in s.dumps)
        return replace(cls(seed=base.seed, duration_s=base.duration_s, briefs=briefs), **options)

    def __post_init__(self) -> None:
        if self.duration_s <= 0 or self.compress <= 0 or self.briefs < 0:
            raise ValueError("duration and compress must be positive, briefs not negative")
        if not 1 <= self.surge <= 100 or self.surge_s <= 0 or not 0 <= self.surge_at < 1:
            raise ValueError(
                "surge must be 1-100 (x the analyses' rate), its seconds positive, surge_at in [0, 1)"
            )

    def scenario(self) -> Scenario:
        """The file rescaled: rates x (S / 10), the clusters' spread / (S / 10), the bursts moved with
        the duration (they stay at the same fraction of it), the dump sized to `briefs`, and with a
        `surge` the analysis surge added to each MEDIUM stream (`surge_window_s`)."""
        base = load(str(SCHEDULING_FILE))
        speed = self.compress / SCHEDULING_COMPRESS
        stretch = self.duration_s / base.duration_s
        streams = tuple(
            replace(
                s,
                rate_per_min=s.rate_per_min * speed,
                cluster_spread_s=s.cluster_spread_s / speed,
                bursts=tuple(replace(b, at_s=None if b.at_s is None else b.at_s * stretch) for b in s.bursts),
                dumps=tuple(replace(d, count=self.briefs) for d in s.dumps if self.briefs),
            )
            for s in base.streams
        )
        streams = tuple(self._with_surge(s) for s in streams)
        name = f"{base.name}-S{self.compress:g}" + (f"-surge{self.surge:g}" if self.surge > 1 else "")
        return replace(base, name=name, duration_s=self.duration_s, streams=streams, seed=self.seed)

    def surge_window_s(self) -> tuple[float, float]:
        """When the surge runs: from `surge_at` of the trace, `surge_s` long (cut at its end)."""
        start = round(self.duration_s * self.surge_at, 3)  # ms: the trace's own resolution
        return start, min(round(start + self.surge_s, 3), self.duration_s)

    def _with_surge(self, stream: Stream) -> Stream:
        """A MEDIUM stream with (surge - 1) x its rate more arrivals in the window, as a burst:
        the stream's own deadline and prompt. Appended last, so the stream's other arrivals are
        drawn as before (the generator draws a stream's bursts after its Poisson arrivals)."""
        tier = TierPolicy().tier_for(stream.scenario, stream.priority)
        if self.surge <= 1 or tier is not Tier.MEDIUM or stream.rate_per_min <= 0:
            return stream
        start, end = self.surge_window_s()
        extra = round((self.surge - 1) * stream.rate_per_min / 60 * (end - start))
        if extra < 1:
            return stream
        return replace(stream, bursts=(*stream.bursts, Burst(count=extra, within_s=end - start, at_s=start)))


def describe_scheduling(spec: TraceSpec, trace: Sequence[Arrival]) -> dict[str, object]:
    """The spec and counts by kind and scenario (and the surge's window), for the report."""
    counts = Counter(f"{a.kind}/{a.scenario}" for a in trace)
    described: dict[str, object] = {
        "spec": asdict(spec),
        "total": len(trace),
        "counts": dict(sorted(counts.items())),
    }
    if spec.surge > 1:
        # The surge's analyses are counted among the bursts; its window says where they are.
        start, end = spec.surge_window_s()
        described["surge_window_s"] = [start, end]
    return described


@dataclass(frozen=True)
class FairnessSpec:
    seed: int = 2233
    duration_s: float = 40.0
    compress: float = 5.0
    budget: int = 10
    flood: float = 10.0
    weight_a: float = 1.0
    weight_b: float = 3.0
    b_low_over_share: float = 1.2
    # A's max_concurrency in the tenants file (None: no cap, the budget bounds it).
    a_max_concurrency: int | None = None

    def __post_init__(self) -> None:
        if min(self.duration_s, self.compress, self.weight_a, self.weight_b) <= 0 or self.budget < 1:
            raise ValueError("duration, compress and weights must be positive, the budget at least 1")
        if self.flood <= 0 or self.b_low_over_share < 0:
            raise ValueError("flood must be positive; B's rates not negative")
        if self.a_max_concurrency is not None and not 1 <= self.a_max_concurrency <= self.budget:
            raise ValueError(f"A's max_concurrency must be 1-{self.budget} (the budget)")

    def weight_share(self, tenant: str) -> float:
        """The tenant's weight over both tenants' weights."""
        mine = self.weight_a if tenant == TENANT_A else self.weight_b
        return mine / (self.weight_a + self.weight_b)

    def peak_slots(self, tier: Tier) -> int:
        """The tier's floor in the default schedule's peak window (HIGH 6, LOW 1 of 10)."""
        peak = next(w for w in Schedule.default(budget=self.budget).windows if w.name == "peak")
        return peak.limits[tier].floor

    def tier_rate_per_s(self, tier: Tier) -> float:
        """Calls a second the tier's peak floor serves at the compressed call time."""
        return self.peak_slots(tier) / (DEFAULT_MEAN_LATENCY_S[tier] / self.compress)

    def a_rate_per_s(self, tier: Tier) -> float:
        return self.flood * self.weight_share(TENANT_A) * self.tier_rate_per_s(tier)

    def b_low_rate_per_s(self) -> float:
        return self.b_low_over_share * self.weight_share(TENANT_B) * self.tier_rate_per_s(Tier.LOW)

    def scenario(self) -> Scenario:
        """The file's streams with their rates for these options: B's chat and analysis x (S / 5),
        B's briefs and A's streams at the rates above."""
        base = load(str(FAIRNESS_FILE))
        set_rates = {
            (TENANT_B, Tier.LOW): self.b_low_rate_per_s(),
            (TENANT_A, Tier.HIGH): self.a_rate_per_s(Tier.HIGH),
            (TENANT_A, Tier.LOW): self.a_rate_per_s(Tier.LOW),
        }
        policy = TierPolicy()

        def rate_per_min(s: Stream) -> float:
            per_s = set_rates.get((s.tenant, policy.tier_for(s.scenario, s.priority)))
            return s.rate_per_min * self.compress / FAIRNESS_COMPRESS if per_s is None else 60 * per_s

        streams = tuple(replace(s, rate_per_min=rate_per_min(s)) for s in base.streams)
        name = f"{base.name}-S{self.compress:g}"
        return replace(base, name=name, duration_s=self.duration_s, streams=streams, seed=self.seed)


def describe_fairness(spec: FairnessSpec, trace: Sequence[Arrival]) -> dict[str, object]:
    """The spec, the rates it implies and the counts by tenant and scenario, for the report."""
    counts = Counter(f"{a.tenant}/{a.scenario}" for a in trace)
    policy = TierPolicy()
    b_steady = [
        s.rate_per_min
        for s in spec.scenario().streams
        if s.tenant == TENANT_B and policy.tier_for(s.scenario, s.priority) is not Tier.LOW
    ]
    return {
        "spec": asdict(spec),
        "rates_per_s": {
            "a_high": spec.a_rate_per_s(Tier.HIGH),
            "a_low": spec.a_rate_per_s(Tier.LOW),
            "b_low": spec.b_low_rate_per_s(),
            "b_chat_and_analysis": sum(b_steady) / 60,
            "high_peak_floor_calls": spec.tier_rate_per_s(Tier.HIGH),
            "low_peak_floor_calls": spec.tier_rate_per_s(Tier.LOW),
        },
        "total": len(trace),
        "counts": dict(sorted(counts.items())),
    }
