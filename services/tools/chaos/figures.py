"""What a fault cost, from what callers saw: refusals and their longest run, and how long the
pipeline's throughput took to come back. Pure functions of the answers and completion times."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from inferq.tools.chaos.traffic import Submitted

# Throughput counts as recovered once a window holds this share of the pre-fault rate.
RECOVERED_SHARE = 0.7
WINDOW_S = 3.0
STEP_S = 0.5
BASELINE_S = 10.0


@dataclass(frozen=True, slots=True)
class Refusals:
    """Ingest's answers other than 202: by status ("none": no answer), and the longest run of them
    in the order sent (how many, and from the first one's sending to the last one's answer)."""

    by_status: dict[str, int]
    longest_run: int
    longest_run_s: float

    @property
    def total(self) -> int:
        return sum(self.by_status.values())


def refusals(answers: Sequence[Submitted]) -> Refusals:
    ordered = sorted(answers, key=lambda a: a.sent_at)
    by_status = Counter("none" if a.status is None else str(a.status) for a in ordered if a.status != 202)
    longest, longest_s = 0, 0.0
    run: list[Submitted] = []
    for answer in [*ordered, None]:
        if answer is not None and answer.status != 202:
            run.append(answer)
            continue
        if len(run) > longest:
            longest, longest_s = len(run), max(a.answered_at for a in run) - run[0].sent_at
        run = []
    return Refusals(dict(sorted(by_status.items())), longest, longest_s)


def rate(completions_ms: Sequence[int], start_ms: float, end_ms: float) -> float:
    """Completions per second in [start, end)."""
    span_s = (end_ms - start_ms) / 1000
    if span_s <= 0:
        return 0.0
    return sum(1 for c in completions_ms if start_ms <= c < end_ms) / span_s


@dataclass(frozen=True, slots=True)
class Recovery:
    """`baseline_per_s`: completions/s in the `BASELINE_S` before the fault (from the first
    completion, when traffic began less than that before it); `dipped`: whether a
    `WINDOW_S` window after it fell below `RECOVERED_SHARE` of that; `recovered_s`: from the fault to
    the end of the first window back above it after the dip (0 without a dip, None: not within the
    horizon); `longest_gap_s`: the longest time without a completion after the fault."""

    baseline_per_s: float
    dipped: bool
    recovered_s: float | None
    longest_gap_s: float


def recovery(completions_ms: Sequence[int], fault_ms: int, horizon_ms: int) -> Recovery:
    ordered = sorted(completions_ms)
    since = max(fault_ms - BASELINE_S * 1000, ordered[0] if ordered else fault_ms)
    baseline = rate(ordered, since, fault_ms)
    after = [c for c in ordered if fault_ms <= c < horizon_ms]
    gaps = [b - a for a, b in zip([fault_ms, *after], [*after, horizon_ms], strict=True)]
    longest_gap_s = max(gaps, default=0) / 1000
    threshold = RECOVERED_SHARE * baseline
    dipped = False
    start = float(fault_ms)
    while start + WINDOW_S * 1000 <= horizon_ms:
        end = start + WINDOW_S * 1000
        current = rate(ordered, start, end)
        if current < threshold:
            dipped = True
        elif dipped:
            return Recovery(baseline, True, (end - fault_ms) / 1000, longest_gap_s)
        start += STEP_S * 1000
    return Recovery(baseline, dipped, None if dipped else 0.0, longest_gap_s)
