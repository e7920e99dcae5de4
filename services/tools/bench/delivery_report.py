"""The delivery benchmark's analysis (pure): what the client waited beyond the backend's own time.

Each call is stamped by the client (sent, first content chunk, answered) and by the simulated
backend (`services/tools/simbackend/timings.py`: received, first token, done), on the same
machine's clock. Per call:

* overhead = (answered - sent) - (done - received): what the client waited that the backend did
  not spend on the call. Measured the same way for the direct calls and the calls through inferq,
  so the direct run gives the baseline of the client and one HTTP hop, and the queue's added
  latency is the inferq overhead (headline, conservative: it also holds the client's own hop) and
  the difference of the two.
* first chunk delay = client's first content chunk - backend's first token.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from inferq.tools.bench.machine import Column, columns_table, figure, table
from inferq.tools.measures import Stats, stats

# Backend stamps per marker: [received_ns, first_token_ns, done_ns] (None: not stamped).
BackendStamps = Mapping[str, Sequence[int | None]]


@dataclass(frozen=True)
class Call:
    request_id: str
    due_ns: int  # when the open loop meant to send it: sent_ns - due_ns is the client's own lag
    sent_ns: int
    answered_ns: int
    first_chunk_ns: int | None
    status: int | None
    complete: bool  # a 200 with the whole answer ([DONE] for a stream)
    inferq_id: str | None = None  # through inferq: the request_id of its records (x-inferq-request-id)


@dataclass(frozen=True)
class Phase:
    """One side of the comparison: the same calls, direct or through inferq, streamed or not."""

    via: str  # "direct" or "inferq"
    stream: bool
    calls: list[Call]

    @property
    def label(self) -> str:
        return f"{self.via}, {'stream' if self.stream else 'sync'}"


@dataclass(frozen=True)
class PhaseStats:
    label: str
    sent: int
    complete: int
    unmatched: int  # complete calls with no backend stamps
    client_lag_ms: Stats | None
    to_backend_ms: Stats | None  # sent → the backend received the call
    total_ms: Stats | None
    backend_ms: Stats | None
    overhead_ms: Stats | None
    first_chunk_delay_ms: Stats | None


def overheads_ms(calls: Sequence[Call], backend: BackendStamps) -> list[float]:
    """Per complete call with backend stamps: client wait minus the backend's own time, in ms."""
    out: list[float] = []
    for call in calls:
        stamps = backend.get(call.request_id)
        if not call.complete or stamps is None or stamps[0] is None or stamps[2] is None:
            continue
        out.append(((call.answered_ns - call.sent_ns) - (stamps[2] - stamps[0])) / 1e6)
    return out


def first_chunk_delays_ms(calls: Sequence[Call], backend: BackendStamps) -> list[float]:
    """Per complete streamed call: client's first content chunk minus the backend's first token."""
    out: list[float] = []
    for call in calls:
        stamps = backend.get(call.request_id)
        if not call.complete or call.first_chunk_ns is None or stamps is None or stamps[1] is None:
            continue
        out.append((call.first_chunk_ns - stamps[1]) / 1e6)
    return out


def phase_stats(phase: Phase, backend: BackendStamps) -> PhaseStats:
    complete = [c for c in phase.calls if c.complete]
    matched = [c for c in complete if c.request_id in backend]
    backend_ms = [
        (s[2] - s[0]) / 1e6
        for c in matched
        if (s := backend[c.request_id])[0] is not None and s[2] is not None
    ]
    return PhaseStats(
        label=phase.label,
        sent=len(phase.calls),
        complete=len(complete),
        unmatched=len(complete) - len(matched),
        client_lag_ms=stats([(c.sent_ns - c.due_ns) / 1e6 for c in phase.calls]),
        to_backend_ms=stats(
            [
                (s[0] - c.sent_ns) / 1e6
                for c in matched
                if (s := backend[c.request_id])[0] is not None and s[2] is not None
            ]
        ),
        total_ms=stats([(c.answered_ns - c.sent_ns) / 1e6 for c in complete]),
        backend_ms=stats(backend_ms),
        overhead_ms=stats(overheads_ms(phase.calls, backend)),
        first_chunk_delay_ms=stats(first_chunk_delays_ms(phase.calls, backend)) if phase.stream else None,
    )


PHASE_COLUMNS: list[Column] = [
    ("calls", lambda r: r.label),
    ("sent", lambda r: r.sent),
    ("complete", lambda r: r.complete),
    ("client lag p50/p99", lambda r: f"{figure('client_lag_ms.p50')(r)}/{figure('client_lag_ms.p99')(r)}"),
    ("sent → backend p50", figure("to_backend_ms.p50")),
    ("client total p50", figure("total_ms.p50")),
    ("backend p50", figure("backend_ms.p50")),
    ("overhead p50", figure("overhead_ms.p50")),
    ("p95", figure("overhead_ms.p95")),
    ("p99", figure("overhead_ms.p99")),
    ("first chunk delay p50", figure("first_chunk_delay_ms.p50")),
    ("p95", figure("first_chunk_delay_ms.p95")),
]


def phase_table(rows: Sequence[PhaseStats]) -> str:
    return columns_table(PHASE_COLUMNS, rows)


@dataclass(frozen=True)
class ReplyStamps:
    """Broker-side instants of one request's reply records (epoch ms; the reply topic is switched to
    LogAppendTime): its first chunk's created_at_ms (the dispatcher) and append time, its
    result's append time, how many chunk records it took, and the request record's append time."""

    chunk_created_ms: int | None = None
    chunk_appended_ms: int | None = None
    result_appended_ms: int | None = None
    chunks: int = 0  # chunk records written for the request
    request_appended_ms: int | None = None  # the request record's append (HIGH is LogAppendTime)


def legs_ms(
    calls: Sequence[Call], backend: BackendStamps, replies: Mapping[str, ReplyStamps], *, stream: bool
) -> dict[str, Stats | None]:
    """Where the time goes through inferq, per leg (ms; the broker's clock has ms resolution). Both:
    client sent → request appended (ingest) → backend received (the dispatcher). Sync: backend done
    → result appended → client answered. Stream: backend first token → first chunk created by the
    dispatcher → appended → client's first chunk."""
    legs: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        legs.setdefault(name, []).append(value)

    for call in calls:
        stamps = backend.get(call.request_id)
        reply = replies.get(call.inferq_id or "")
        if not call.complete or stamps is None or reply is None:
            continue
        if reply.request_appended_ms is not None and stamps[0] is not None:
            add("client sent → request appended", reply.request_appended_ms - call.sent_ns / 1e6)
            add("request appended → backend received", stamps[0] / 1e6 - reply.request_appended_ms)
        if not stream and stamps[2] is not None and reply.result_appended_ms is not None:
            add("backend done → result appended", reply.result_appended_ms - stamps[2] / 1e6)
            add("result appended → client answered", call.answered_ns / 1e6 - reply.result_appended_ms)
        first, created, appended = stamps[1], reply.chunk_created_ms, reply.chunk_appended_ms
        if stream and first is not None and created is not None and appended is not None:
            add("backend first token → chunk created", created - first / 1e6)
            add("chunk created → appended", appended - created)
            if call.first_chunk_ns is not None:
                add("chunk appended → client first chunk", call.first_chunk_ns / 1e6 - appended)
    return {name: stats(values) for name, values in legs.items()}


def legs_table(legs: Mapping[str, Stats | None]) -> str:
    quantiles = ("p50", "p95", "p99")
    rows = [(name, s.count if s else 0, *(figure(q)(s) for q in quantiles)) for name, s in legs.items()]
    return "\n".join(table(("leg", "n", *quantiles), rows))
