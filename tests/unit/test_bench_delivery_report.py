"""The delivery benchmark's analysis: overhead and first-chunk delay from client and backend stamps."""

from __future__ import annotations

from inferq.tools.bench.delivery_report import (
    Call,
    Phase,
    PhaseStats,
    ReplyStamps,
    first_chunk_delays_ms,
    legs_ms,
    overheads_ms,
    phase_stats,
    phase_table,
)
from inferq.tools.measures import Stats

MS = 1_000_000


def call(
    rid: str, sent_ms: float, answered_ms: float, first_ms: float | None = None, ok: bool = True
) -> Call:
    first = None if first_ms is None else int(first_ms * MS)
    sent = int(sent_ms * MS)
    return Call(rid, sent, sent, int(answered_ms * MS), first, 200 if ok else 502, ok)


def test_overhead_is_the_client_wait_minus_the_backends_own_time() -> None:
    # The backend spent 100 ms on each; the client waited 103, 110 and 150 ms.
    calls = [call("a", 0, 103), call("b", 1000, 1110), call("c", 2000, 2150)]
    backend = {
        "a": [1 * MS, None, 101 * MS],
        "b": [1002 * MS, None, 1102 * MS],
        "c": [2001 * MS, None, 2101 * MS],
    }
    assert overheads_ms(calls, backend) == [3.0, 10.0, 50.0]


def test_percentiles_of_the_overhead_over_many_calls() -> None:
    # Overheads 1..100 ms: p50 50.5, p95 95.05, p99 99.01 (linear interpolation between ranks).
    calls = [call(str(i), 0, 200 + i) for i in range(1, 101)]
    backend = {str(i): [0, None, 200 * MS] for i in range(1, 101)}
    stats = phase_stats(Phase("inferq", False, calls), backend)
    assert stats.overhead_ms is not None
    assert (stats.overhead_ms.count, stats.overhead_ms.p50) == (100, 50.5)
    assert round(stats.overhead_ms.p95, 2) == 95.05
    assert round(stats.overhead_ms.p99, 2) == 99.01
    assert stats.first_chunk_delay_ms is None  # not streamed


def test_failed_calls_and_calls_the_backend_never_saw_are_left_out_and_counted() -> None:
    calls = [call("a", 0, 105), call("b", 0, 30, ok=False), call("lost", 0, 500)]
    backend = {"a": [0, None, 100 * MS], "b": [0, None, 20 * MS]}
    stats = phase_stats(Phase("inferq", False, calls), backend)
    assert (stats.sent, stats.complete, stats.unmatched) == (3, 2, 1)
    assert stats.overhead_ms is not None and stats.overhead_ms.count == 1 and stats.overhead_ms.p50 == 5.0


def test_first_chunk_delay_is_from_the_backends_first_token() -> None:
    calls = [call("a", 0, 120, first_ms=38), call("b", 0, 120, first_ms=None), call("c", 0, 130, first_ms=60)]
    backend = {"a": [0, 30 * MS, 110 * MS], "b": [0, 30 * MS, 110 * MS], "c": [0, 40 * MS, 120 * MS]}
    assert first_chunk_delays_ms(calls, backend) == [8.0, 20.0]


def test_legs_split_the_time_through_inferq_at_the_reply_records() -> None:
    sync = [
        Call("a", 0, 0, 130 * MS, None, 200, True, "q-a"),
        Call("b", 0, 0, 9 * MS, None, 502, False, "q-b"),
    ]
    streamed = [Call("s", 0, 0, 200 * MS, 45 * MS, 200, True, "q-s")]
    backend = {"a": [5 * MS, None, 100 * MS], "b": [0, None, 5 * MS], "s": [0, 30 * MS, 150 * MS]}
    replies = {
        "q-a": ReplyStamps(result_appended_ms=104, request_appended_ms=2),
        "q-b": ReplyStamps(result_appended_ms=6),
        "q-s": ReplyStamps(chunk_created_ms=32, chunk_appended_ms=36, result_appended_ms=155),
    }
    sync_legs = legs_ms(sync, backend, replies, stream=False)
    assert {k: (s.count, s.p50) for k, s in sync_legs.items() if s} == {
        # Sent at 0, the request appended at 2, the backend received it at 5.
        "client sent → request appended": (1, 2.0),
        "request appended → backend received": (1, 3.0),
        "backend done → result appended": (1, 4.0),
        "result appended → client answered": (1, 26.0),
    }
    stream_legs = legs_ms(streamed, backend, replies, stream=True)
    assert {k: s.p50 for k, s in stream_legs.items() if s} == {
        "backend first token → chunk created": 2.0,
        "chunk created → appended": 4.0,
        "chunk appended → client first chunk": 9.0,
    }


def test_phase_table_has_a_column_per_figure_and_a_dash_where_a_phase_has_none() -> None:
    s = Stats(3, 1.25, 2.5, 7.75, 9.125)
    rows = [
        PhaseStats("direct, sync", 10, 9, 1, s, s, s, None, s, None),
        PhaseStats("inferq, stream", 5, 5, 0, None, s, s, s, s, s),
    ]
    assert phase_table(rows).splitlines() == [
        "| calls | sent | complete | client lag p50/p99 | sent → backend p50 | client total p50 "
        "| backend p50 | overhead p50 | p95 | p99 | first chunk delay p50 | p95 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        "| direct, sync | 10 | 9 | 2.5/9.1 | 2.5 | 2.5 | - | 2.5 | 7.8 | 9.1 | - | - |",
        "| inferq, stream | 5 | 5 | -/- | 2.5 | 2.5 | 2.5 | 2.5 | 7.8 | 9.1 | 2.5 | 7.8 |",
    ]
