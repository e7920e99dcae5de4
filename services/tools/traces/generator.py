"""A scenario turned into a trace of arrivals: pure, and the same seed always gives the same trace.

Each stream draws from its own generator, seeded by (seed, stream position, scenario), so editing
one stream of a file leaves the others' arrivals unchanged. Poisson arrivals have exponential gaps
at the stream's rate, alone or in clusters (`Stream.cluster_mean`); a burst puts `count` arrivals
uniformly within `within` seconds of its start; a dump is a burst that happens once. Offsets are
milliseconds after the scenario's start: a generated trace is not anchored (`Arrival.start_ms` 0).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace

from inferq.messaging.tiers import Tier, TierPolicy
from inferq.tools.traces.arrival import Arrival
from inferq.tools.traces.scenario import Scenario, Stream

# Filler vocabulary of a companion app's diary and chat; the text's content does not matter, its size does.
_VOCABULARY = (
    "today tired hopeful rain coffee meeting walk dinner friend sleep morning weather calendar mood "
    "remember plan recipe garden music quiet busy happy worried call sister train late early weekend "
    "book window evening light tea office lunch run park dream message home travel city river"
)
_WORDS = _VOCABULARY.split()
_CORPUS_WORDS = 4_000


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
        yield from ((t, "poisson") for t in _poisson_times(stream, duration_s, rng))
    for kind, bursts in (("burst", stream.bursts), ("dump", stream.dumps)):
        for burst in bursts:
            for start in burst.starts(duration_s):
                for _ in range(burst.count):
                    at = start + rng.uniform(0, burst.within_s) if burst.within_s else start
                    # A burst straddling the end is cut there, like the Poisson arrivals.
                    if at < duration_s:
                        yield at, kind


def _poisson_times(stream: Stream, duration_s: float, rng: random.Random) -> Iterator[float]:
    """Poisson clusters: cluster starts at rate_per_min / cluster_mean, each cluster 1 + Poisson(
    cluster_mean - 1) arrivals spread uniformly over cluster_spread_s, cut at the end. With a mean
    of 1 and no spread nothing more is drawn than for plain Poisson arrivals, so such a stream gives
    exactly the arrivals it gave before clusters existed."""
    cluster_rate_per_s = stream.rate_per_min / 60 / stream.cluster_mean
    spread_s = stream.cluster_spread_s
    t = rng.expovariate(cluster_rate_per_s)
    while t < duration_s:
        for _ in range(1 + _poisson(rng, stream.cluster_mean - 1)):
            at = t + rng.uniform(0, spread_s) if spread_s else t
            if at < duration_s:
                yield at
        t += rng.expovariate(cluster_rate_per_s)


def _poisson(rng: random.Random, mean: float) -> int:
    """A Poisson draw by Knuth's method: fine for the small means of cluster sizes."""
    if mean <= 0:
        return 0
    limit, k, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        k += 1
        product *= rng.random()
    return k


def _arrival(
    stream: Stream, tier: Tier, rng: random.Random, corpus: str, *, seq: int, at_s: float, kind: str
) -> Arrival:
    session = f"{stream.scenario}-{rng.randrange(stream.sessions) if stream.sessions else seq}"
    head = f"[{stream.scenario} {seq}] "
    want = max(stream.prompt.chars - len(head), 0)
    start = rng.randrange(max(1, len(corpus) - want))
    content = (head + corpus[start : start + want])[: max(stream.prompt.chars, 1)]
    return Arrival(
        offset_ms=round(at_s * 1000),
        scenario=stream.scenario,
        tier=tier,
        deadline_ms=stream.deadline_ms,
        kind=kind,
        session_id=session,
        messages=(("user", content),),
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
