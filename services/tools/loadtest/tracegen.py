"""A scenario turned into a trace of arrivals: pure, and the same seed always gives the same trace.

Each stream draws from its own generator, seeded by (seed, stream position, scenario), so editing
one stream of a file leaves the others' arrivals unchanged. Poisson arrivals have exponential gaps
at the stream's rate; a burst puts `count` arrivals uniformly within `within` seconds of its start;
a dump is a burst that happens once. Offsets are milliseconds after the scenario's start.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace

from services.messaging.tiers import Tier, TierPolicy
from services.tools.loadtest.scenario import Scenario, Stream

# Filler vocabulary of a companion app's diary and chat; the text's content does not matter, its size does.
_VOCABULARY = (
    "today tired hopeful rain coffee meeting walk dinner friend sleep morning weather calendar mood "
    "remember plan recipe garden music quiet busy happy worried call sister train late early weekend "
    "book window evening light tea office lunch run park dream message home travel city river"
)
_WORDS = _VOCABULARY.split()
_CORPUS_WORDS = 4_000


@dataclass(frozen=True)
class Arrival:
    """One request of the trace: when (ms after the start), what, for whom, and how long it may wait."""

    index: int
    offset_ms: int
    scenario: str
    tier: Tier  # the tier ingest will choose: a hint for progress and reports
    session_id: str
    messages: tuple[tuple[str, str], ...]  # (role, content)
    deadline_ms: int | None  # None: the tier's default deadline
    kind: str  # "poisson", "burst" or "dump"
    priority: Tier | None = None  # sent as an explicit priority (an express request)
    model: str | None = None
    max_tokens: int = 100
    estimated_tokens: int = 0
    tenant: str = "loadtest"

    def message_dicts(self) -> list[dict[str, str]]:
        return [{"role": role, "content": content} for role, content in self.messages]


def generate(
    scenario: Scenario, *, seed: int | None = None, policy: TierPolicy | None = None
) -> list[Arrival]:
    """Every arrival of `scenario`, sorted by offset; `seed` overrides the scenario's own."""
    base_seed = scenario.seed if seed is None else seed
    tiers = policy or TierPolicy()
    drafts: list[tuple[int, int, int, Arrival]] = []
    for position, stream in enumerate(scenario.streams):
        rng = random.Random(f"{base_seed}/{position}/{stream.scenario}")  # noqa: S311 - reproducible, not secret
        tier = tiers.tier_for(stream.scenario, stream.priority)
        corpus = " ".join(rng.choice(_WORDS) for _ in range(_CORPUS_WORDS))
        for seq, (at_s, kind) in enumerate(_times(stream, scenario.duration_s, rng)):
            arrival = _arrival(stream, tier, rng, corpus, seq=seq, at_s=at_s, kind=kind)
            drafts.append((arrival.offset_ms, position, seq, arrival))
    drafts.sort(key=lambda d: d[:3])
    return [replace(a, index=i) for i, (*_, a) in enumerate(drafts)]


def _times(stream: Stream, duration_s: float, rng: random.Random) -> Iterator[tuple[float, str]]:
    """Arrival times of one stream, in seconds, each with the part of the process it came from."""
    if stream.rate_per_min > 0:
        rate_per_s = stream.rate_per_min / 60
        t = rng.expovariate(rate_per_s)
        while t < duration_s:
            yield t, "poisson"
            t += rng.expovariate(rate_per_s)
    for kind, bursts in (("burst", stream.bursts), ("dump", stream.dumps)):
        for burst in bursts:
            for start in burst.starts(duration_s):
                for _ in range(burst.count):
                    at = start + rng.uniform(0, burst.within_s) if burst.within_s else start
                    # A burst straddling the end is cut there, like the Poisson arrivals.
                    if at < duration_s:
                        yield at, kind


def _arrival(
    stream: Stream, tier: Tier, rng: random.Random, corpus: str, *, seq: int, at_s: float, kind: str
) -> Arrival:
    session = f"{stream.scenario}-{rng.randrange(stream.sessions) if stream.sessions else seq}"
    head = f"[{stream.scenario} {seq}] "
    want = max(stream.prompt.chars - len(head), 0)
    start = rng.randrange(max(1, len(corpus) - want))
    content = (head + corpus[start : start + want])[: max(stream.prompt.chars, 1)]
    return Arrival(
        index=0,
        offset_ms=round(at_s * 1000),
        scenario=stream.scenario,
        tier=tier,
        session_id=session,
        messages=(("user", content),),
        deadline_ms=stream.deadline_ms,
        kind=kind,
        priority=stream.priority,
        model=stream.model,
        max_tokens=stream.output.tokens,
        estimated_tokens=stream.prompt.tokens + stream.output.tokens,
        tenant=stream.tenant,
    )


def describe(trace: list[Arrival]) -> str:
    """One line per scenario: how many arrivals and how they came (poisson / burst / dump)."""
    counts = Counter((a.scenario, a.kind) for a in trace)
    lines = []
    for scenario in sorted({a.scenario for a in trace}):
        parts = ", ".join(
            f"{kind} {counts[(scenario, kind)]}"
            for kind in ("poisson", "burst", "dump")
            if counts[(scenario, kind)]
        )
        total = sum(n for (s, _), n in counts.items() if s == scenario)
        lines.append(f"  {scenario:18} {total:7,}  ({parts})")
    return "\n".join(lines)
