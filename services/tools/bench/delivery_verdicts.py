"""The delivery bench's verdicts (pure): CPU per call, medians over runs, the issue's targets.

Per run and rate (`RateRun`), the four phases' figures (`delivery_report`), the CPU the queue used
per complete call, and the chunk records a streamed call wrote. Over the runs of a rate
(`summarize`), the median of each figure: a run is one sample of the machine's state, and the
median of three keeps one disturbed run out of the verdict. The targets (issue 25) are judged on
the medians at 20 calls/s; 200 calls/s is reported beside them, with no target.

CPU per call counts inferq's processes and the broker (not the client, not the simulated backend):
what each used while the calls went through inferq, minus what it used over the direct phase of
the same mode (the queue idle: timers, heartbeats, empty fetches), scaled to the same wall time,
divided by the calls answered in the window.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from inferq.tools.bench.cpu import CpuUse
from inferq.tools.bench.delivery_report import (
    BackendStamps,
    Phase,
    PhaseStats,
    ReplyStamps,
    legs_ms,
    phase_stats,
)
from inferq.tools.bench.machine import cell, table, verdict
from inferq.tools.measures import Stats, median

TARGET_RATE_PER_S = 20.0
BROKER = "broker"
# Process names of the queue (the pipeline's services, the broker); the client and the backend are not.
QUEUE_PROCESSES = ("ingest", "dispatcher", "results", BROKER)
PATHS = ("direct, sync", "inferq, sync", "direct, stream", "inferq, stream")


def is_queue_process(name: str) -> bool:
    return name.startswith(QUEUE_PROCESSES)


@dataclass(frozen=True)
class CpuPerCall:
    """Milliseconds of CPU per complete call, by process, the idle baseline taken off."""

    calls: int
    by_process_ms: dict[str, float]

    @property
    def total_ms(self) -> float:
        return sum(self.by_process_ms.values())


def cpu_per_call(through: CpuUse, idle: CpuUse, calls: int) -> CpuPerCall | None:
    """The queue's CPU per call: `through` is the inferq phase's window, `idle` the direct phase's
    (same mode, the queue unused); None when no call completed or a window is empty."""
    if calls <= 0 or through.wall_s <= 0 or idle.wall_s <= 0:
        return None
    scale = through.wall_s / idle.wall_s
    by_process = {
        name: (used - idle.by_process_s.get(name, 0.0) * scale) * 1000 / calls
        for name, used in sorted(through.by_process_s.items())
        if is_queue_process(name)
    }
    return CpuPerCall(calls, by_process)


@dataclass(frozen=True)
class RateRun:
    """One run's figures at one rate."""

    rate_per_s: float
    phases: dict[str, PhaseStats]  # by PhaseStats.label
    legs: dict[str, dict[str, Stats | None]]  # by inferq phase label, then leg
    cpu: dict[str, CpuPerCall | None]  # by inferq phase label
    chunk_records_per_call: float | None  # mean over the complete streamed calls through inferq
    # By phase label: the machine's busy share, and the share used by no process of this bench (the
    # other work on a shared machine). A rate whose phases saturate the machine caps its CPU per call.
    machine_busy: dict[str, float] = field(default_factory=dict)
    others_busy: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RateSample:
    """What one run measured at one rate, before the analysis: its four phases (counted calls), the
    CPU window of each (warm-up included) and the calls answered within each window."""

    rate_per_s: float
    phases: list[Phase]
    cpu: dict[str, CpuUse]  # by Phase.label
    answered: dict[str, int]  # by Phase.label: complete calls in the CPU window, warm-up included


def rate_run(sample: RateSample, backend: BackendStamps, replies: Mapping[str, ReplyStamps]) -> RateRun:
    """One run's figures at one rate, from its sample, the backend's stamps and the reply records."""
    cpu: dict[str, CpuPerCall | None] = {}
    chunk_counts: list[float] = []
    for phase in sample.phases:
        if phase.via != "inferq":
            continue
        idle = sample.cpu.get(Phase("direct", phase.stream, []).label)
        through = sample.cpu.get(phase.label)
        answered = sample.answered.get(phase.label, 0)
        cpu[phase.label] = cpu_per_call(through, idle, answered) if through and idle else None
        if phase.stream:
            # Every complete call through inferq counts, with its chunk records (0 when it wrote none).
            chunk_counts += [
                r.chunks
                for c in phase.calls
                if c.complete and (r := replies.get(c.inferq_id or "")) is not None
            ]
    return RateRun(
        rate_per_s=sample.rate_per_s,
        phases={p.label: phase_stats(p, backend) for p in sample.phases},
        legs={
            p.label: legs_ms(p.calls, backend, replies, stream=p.stream)
            for p in sample.phases
            if p.via == "inferq"
        },
        cpu=cpu,
        chunk_records_per_call=statistics.fmean(chunk_counts) if chunk_counts else None,
        machine_busy={label: _share(use.machine_busy_s, use) for label, use in sample.cpu.items()},
        others_busy={label: _share(use.others_s, use) for label, use in sample.cpu.items()},
    )


def _share(seconds: float, use: CpuUse) -> float:
    return seconds / use.machine_capacity_s if use.machine_capacity_s > 0 else 0.0


def median_stats(samples: Sequence[Stats | None]) -> Stats | None:
    """Per field, the median over runs (count: the samples of all runs)."""
    known = [s for s in samples if s is not None]
    if not known:
        return None
    return Stats(
        count=sum(s.count for s in known),
        mean=statistics.median(s.mean for s in known),
        p50=statistics.median(s.p50 for s in known),
        p95=statistics.median(s.p95 for s in known),
        p99=statistics.median(s.p99 for s in known),
    )


@dataclass(frozen=True)
class PathSummary:
    """One path at one rate, medians over the runs."""

    label: str
    sent: int  # over all runs
    complete: int
    overhead_ms: Stats | None
    first_chunk_delay_ms: Stats | None
    cpu_ms_per_call: float | None = None
    cpu_by_process_ms: dict[str, float] = field(default_factory=dict)
    chunk_records_per_call: float | None = None
    machine_busy: float | None = None  # median share of the machine's cores
    others_busy: float | None = None  # of which, by no process of this bench


@dataclass(frozen=True)
class RateSummary:
    rate_per_s: float
    runs: int
    paths: dict[str, PathSummary]
    legs: dict[str, dict[str, Stats | None]]


def summarize(runs: Sequence[RateRun]) -> RateSummary:
    """The medians over the runs of one rate."""
    rates = {r.rate_per_s for r in runs}
    if len(rates) != 1:
        raise ValueError(f"summarize takes the runs of one rate, got rates {sorted(rates)}")
    paths: dict[str, PathSummary] = {}
    for label in PATHS:
        rows = [r.phases[label] for r in runs if label in r.phases]
        if not rows:
            continue
        cpus = [c for r in runs if (c := r.cpu.get(label)) is not None]
        names = sorted({n for c in cpus for n in c.by_process_ms})
        stream = label.endswith("stream") and label.startswith("inferq")
        paths[label] = PathSummary(
            label=label,
            sent=sum(r.sent for r in rows),
            complete=sum(r.complete for r in rows),
            overhead_ms=median_stats([r.overhead_ms for r in rows]),
            first_chunk_delay_ms=median_stats([r.first_chunk_delay_ms for r in rows]),
            cpu_ms_per_call=median(c.total_ms for c in cpus),
            cpu_by_process_ms={
                n: m for n in names if (m := median(c.by_process_ms.get(n) for c in cpus)) is not None
            },
            chunk_records_per_call=median(r.chunk_records_per_call for r in runs) if stream else None,
            machine_busy=median(r.machine_busy.get(label) for r in runs),
            others_busy=median(r.others_busy.get(label) for r in runs),
        )
    leg_labels = sorted({label for r in runs for label in r.legs})
    legs = {
        label: {
            leg: median_stats([r.legs.get(label, {}).get(leg) for r in runs])
            for leg in dict.fromkeys(leg for r in runs for leg in r.legs.get(label, {}))
        }
        for label in leg_labels
    }
    return RateSummary(runs[0].rate_per_s, len(runs), paths, legs)


def cpu_ratio(summary: RateSummary) -> float | None:
    """CPU per streamed call over CPU per sync call, through inferq (ratio of the medians)."""
    sync = summary.paths.get("inferq, sync")
    stream = summary.paths.get("inferq, stream")
    if sync is None or stream is None or sync.cpu_ms_per_call is None or stream.cpu_ms_per_call is None:
        return None
    return stream.cpu_ms_per_call / sync.cpu_ms_per_call if sync.cpu_ms_per_call > 0 else None


@dataclass(frozen=True)
class Target:
    name: str
    measured: float | None
    limit: float
    unit: str  # " ms" or "x"

    @property
    def verdict(self) -> str:
        return verdict(None if self.measured is None else self.measured <= self.limit)


def targets(summaries: Sequence[RateSummary]) -> list[Target]:
    """Issue 25's targets, on the medians at 20 calls/s (n/a when that rate was not run)."""
    at = next((s for s in summaries if s.rate_per_s == TARGET_RATE_PER_S), None)
    paths: Mapping[str, PathSummary] = at.paths if at else {}
    sync = paths.get("inferq, sync")
    stream = paths.get("inferq, stream")
    added = sync.overhead_ms if sync else None
    first = stream.first_chunk_delay_ms if stream else None
    rate = f"{TARGET_RATE_PER_S:g}/s"
    return [
        Target(f"sync added latency p50, {rate}", added.p50 if added else None, 6.0, " ms"),
        Target(f"sync added latency p99, {rate}", added.p99 if added else None, 15.0, " ms"),
        Target(
            f"first chunk after the backend's first token p50, {rate}",
            first.p50 if first else None,
            3.0,
            " ms",
        ),
        Target(f"CPU per streamed call / per sync call, {rate}", cpu_ratio(at) if at else None, 2.0, "x"),
    ]


def summary_table(summaries: Sequence[RateSummary]) -> list[str]:
    """The one table: per rate and path, the added latency, the first chunk's delay, the queue's CPU
    per call and the chunk records per streamed call (medians over the runs)."""
    rows = []
    for s in summaries:
        for p in s.paths.values():
            o, f = p.overhead_ms, p.first_chunk_delay_ms
            rows.append(
                (
                    f"{s.rate_per_s:g}",
                    p.label,
                    f"{p.complete}/{p.sent}",
                    " / ".join(cell(getattr(o, q) if o else None) for q in ("p50", "p95", "p99")),
                    " / ".join(cell(getattr(f, q) if f else None) for q in ("p50", "p95")),
                    cell(p.cpu_ms_per_call),
                    cell(p.chunk_records_per_call),
                )
            )
    head = (
        "calls/s",
        "path",
        "complete/sent",
        "added p50 / p95 / p99 ms",
        "first chunk p50 / p95 ms",
        "CPU ms/call",
        "chunk records/call",
    )
    return table(head, rows)


def cpu_table(summaries: Sequence[RateSummary]) -> list[str]:
    """CPU per call through inferq, by process (ms, medians over the runs), and stream/sync; beside
    it, how busy the machine was in every phase and how much of that was no process of this bench."""
    names = sorted({n for s in summaries for p in s.paths.values() for n in p.cpu_by_process_ms})
    rows = []
    for s in summaries:
        for p in s.paths.values():
            by = p.cpu_by_process_ms
            rows.append(
                (
                    f"{s.rate_per_s:g}",
                    p.label,
                    *(cell(by.get(n)) for n in names),
                    cell(p.cpu_ms_per_call),
                    cell(None if p.machine_busy is None else p.machine_busy * 100, ".0f", "%"),
                    cell(None if p.others_busy is None else p.others_busy * 100, ".0f", "%"),
                )
            )
        ratio = cpu_ratio(s)
        rows.append(
            (f"{s.rate_per_s:g}", "stream / sync", *("" for _ in names), cell(ratio, ".2f", "x"), "", "")
        )
    return table(("calls/s", "path", *names, "total", "machine busy", "not this bench"), rows)


def targets_table(found: Sequence[Target]) -> list[str]:
    rows = [
        (
            t.name,
            cell(t.measured, ".1f" if t.unit == " ms" else ".2f", t.unit),
            f"<= {t.limit:g}{t.unit}",
            t.verdict,
        )
        for t in found
    ]
    return table(("target", "measured (median of runs)", "threshold", "verdict"), rows)
