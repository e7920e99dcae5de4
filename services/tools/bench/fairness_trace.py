"""The fairness benchmark's trace: a steady tenant B and a flooding tenant A, as one scenario of the
one trace generator (`inferq.tools.traces.generator`), generated once.

- **B** (weight 3 by default) sends the evening peak's steady mix: chat and emotion analysis at 60 a
  minute real time (2/3 chat), and morning briefs at 1.2 x its weighted share of LOW's peak slots,
  so B's briefs wait for LOW's one peak slot once A floods it.
- **A** (weight 1) floods HIGH and LOW at `flood` (10) x its weighted share of each tier's peak slots:
  share = wA / (wA + wB) of (the tier's peak floor / its compressed call time).

B's streams come first, so their arrivals are the same with or without A's (the generator seeds each
stream by its position): B alone is the trace without tenant A's arrivals. Time is compressed by S
as in the scheduling bench: rates x S, call times / S.

Built here, not in `infra/scenarios/*.toml`: A's and B's rates follow from the options (weights,
flood, budget, S) and the dispatcher's default schedule (each tier's peak floor), which a scenario
file, with fixed rates, cannot say.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from inferq.dispatcher.schedule import Schedule
from inferq.messaging.tiers import DEFAULT_MEAN_LATENCY_S, Tier
from inferq.tools.bench.scheduling_trace import (
    ANALYSIS,
    BRIEF,
    CHAT,
    CHAT_SESSIONS,
    DEFAULT_SEED,
    PROMPT_CHARS,
)
from inferq.tools.traces.arrival import Arrival
from inferq.tools.traces.scenario import Scenario, Size, Stream

TENANT_A = "a"  # floods
TENANT_B = "b"  # steady


@dataclass(frozen=True)
class FairnessSpec:
    seed: int = DEFAULT_SEED
    duration_s: float = 40.0
    compress: float = 5.0
    budget: int = 10
    flood: float = 10.0
    weight_a: float = 1.0
    weight_b: float = 3.0
    b_rate_per_min_real: float = 60.0
    b_chat_share: float = 2 / 3
    b_low_over_share: float = 1.2
    # A's max_concurrency in the tenants file (None: no cap, the budget bounds it).
    a_max_concurrency: int | None = None

    def __post_init__(self) -> None:
        if min(self.duration_s, self.compress, self.weight_a, self.weight_b) <= 0 or self.budget < 1:
            raise ValueError("duration, compress and weights must be positive, the budget at least 1")
        if self.flood <= 0 or self.b_rate_per_min_real < 0 or self.b_low_over_share < 0:
            raise ValueError("flood must be positive; B's rates not negative")
        if not 0 <= self.b_chat_share <= 1:
            raise ValueError("b_chat_share must be in [0, 1]")
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
        b_per_min = self.b_rate_per_min_real * self.compress

        def stream(scenario: str, tenant: str, per_min: float, sessions: int = 0) -> Stream:
            return Stream(
                scenario=scenario,
                rate_per_min=per_min,
                prompt=Size(PROMPT_CHARS),
                sessions=sessions,
                tenant=tenant,
            )

        return Scenario(
            name=f"fairness-bench-S{self.compress:g}",
            description="a steady tenant and one flooding HIGH and LOW, compressed evening peak",
            duration_s=self.duration_s,
            streams=(
                stream(CHAT, TENANT_B, b_per_min * self.b_chat_share, CHAT_SESSIONS),
                stream(ANALYSIS, TENANT_B, b_per_min * (1 - self.b_chat_share)),
                stream(BRIEF, TENANT_B, 60 * self.b_low_rate_per_s()),
                stream(CHAT, TENANT_A, 60 * self.a_rate_per_s(Tier.HIGH), CHAT_SESSIONS),
                stream(BRIEF, TENANT_A, 60 * self.a_rate_per_s(Tier.LOW)),
            ),
            seed=self.seed,
        )


def describe(spec: FairnessSpec, trace: Sequence[Arrival]) -> dict[str, object]:
    """The spec, the rates it implies and the counts by tenant and scenario, for the report."""
    counts = Counter(f"{a.tenant}/{a.scenario}" for a in trace)
    return {
        "spec": asdict(spec),
        "rates_per_s": {
            "a_high": spec.a_rate_per_s(Tier.HIGH),
            "a_low": spec.a_rate_per_s(Tier.LOW),
            "b_low": spec.b_low_rate_per_s(),
            "b_chat_and_analysis": spec.b_rate_per_min_real * spec.compress / 60,
            "high_peak_floor_calls": spec.tier_rate_per_s(Tier.HIGH),
            "low_peak_floor_calls": spec.tier_rate_per_s(Tier.LOW),
        },
        "total": len(trace),
        "counts": dict(sorted(counts.items())),
    }
