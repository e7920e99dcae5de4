"""The delivery bench's verdicts: CPU per call, medians over runs, the issue's targets, the broker's pid."""

from __future__ import annotations

import pytest

from inferq.tools.bench.cpu import CpuUse
from inferq.tools.bench.delivery_broker import listening_inodes, local_port
from inferq.tools.bench.delivery_report import Call, Phase, PhaseStats, ReplyStamps
from inferq.tools.bench.delivery_verdicts import (
    CpuPerCall,
    RateRun,
    RateSample,
    cpu_per_call,
    cpu_table,
    median_stats,
    rate_run,
    summarize,
    summary_table,
    targets,
)
from inferq.tools.measures import Stats

MS = 1_000_000


def use(wall_s: float, **by_process_s: float) -> CpuUse:
    return CpuUse(wall_s, 0.0, 0.0, by_process_s)


def test_cpu_per_call_takes_off_the_idle_baseline_and_leaves_out_the_client_and_the_backend() -> None:
    # 10 s through inferq, 100 calls; the direct phase (queue idle) lasted 5 s.
    through = use(10.0, ingest=0.5, **{"dispatcher-0": 0.3, "broker": 0.6, "client": 2.0, "sim-backend": 1.0})
    idle = use(5.0, ingest=0.05, **{"dispatcher-0": 0.05, "broker": 0.1, "client": 1.0, "sim-backend": 1.0})
    found = cpu_per_call(through, idle, calls=100)
    assert found is not None
    # ingest: 0.5 - 0.05 x 2 = 0.4 s over 100 calls = 4 ms; dispatcher 2 ms; broker 4 ms.
    assert found.by_process_ms == pytest.approx({"broker": 4.0, "dispatcher-0": 2.0, "ingest": 4.0})
    assert found.total_ms == pytest.approx(10.0)


def test_no_cpu_per_call_without_an_answered_call() -> None:
    assert cpu_per_call(use(10.0, ingest=1.0), use(10.0, ingest=0.1), calls=0) is None


def run_at(
    rate: float, *, sync_p50: float, sync_p99: float, first_p50: float, sync_cpu: float, stream_cpu: float
) -> RateRun:
    def s(p50: float, p99: float) -> Stats:
        return Stats(10, p50, p50, p99, p99)

    def row(label: str, overhead: Stats, first: Stats | None) -> PhaseStats:
        return PhaseStats(label, 10, 10, 0, None, None, None, None, overhead, first)

    return RateRun(
        rate_per_s=rate,
        phases={
            "direct, sync": row("direct, sync", s(1.0, 2.0), None),
            "inferq, sync": row("inferq, sync", s(sync_p50, sync_p99), None),
            "direct, stream": row("direct, stream", s(1.0, 2.0), s(0.3, 0.5)),
            "inferq, stream": row("inferq, stream", s(20.0, 40.0), s(first_p50, first_p50 * 2)),
        },
        legs={},
        cpu={
            "inferq, sync": CpuPerCall(10, {"ingest": sync_cpu}),
            "inferq, stream": CpuPerCall(10, {"ingest": stream_cpu}),
        },
        chunk_records_per_call=14.0,
    )


def test_figures_are_medians_over_the_runs_so_one_disturbed_run_does_not_decide() -> None:
    runs = [
        run_at(20, sync_p50=5.0, sync_p99=12.0, first_p50=2.0, sync_cpu=10.0, stream_cpu=18.0),
        run_at(20, sync_p50=5.5, sync_p99=14.0, first_p50=2.5, sync_cpu=11.0, stream_cpu=20.0),
        run_at(20, sync_p50=40.0, sync_p99=90.0, first_p50=30.0, sync_cpu=30.0, stream_cpu=120.0),
    ]
    summary = summarize(runs)
    sync = summary.paths["inferq, sync"]
    assert sync.overhead_ms is not None
    assert (sync.overhead_ms.p50, sync.overhead_ms.p99, sync.overhead_ms.count) == (5.5, 14.0, 30)
    assert sync.cpu_ms_per_call == 11.0
    verdicts = {t.name: (t.measured, t.verdict) for t in targets([summary])}
    assert verdicts == {
        "sync added latency p50, 20/s": (5.5, "PASS"),
        "sync added latency p99, 20/s": (14.0, "PASS"),
        "first chunk after the backend's first token p50, 20/s": (2.5, "PASS"),
        "CPU per streamed call / per sync call, 20/s": (pytest.approx(20.0 / 11.0), "PASS"),
    }


def test_targets_are_judged_at_20_per_s_only_and_say_miss_or_na() -> None:
    at_20 = summarize(
        [run_at(20, sync_p50=16.0, sync_p99=30.0, first_p50=4.9, sync_cpu=15.0, stream_cpu=57.0)]
    )
    at_200 = summarize([run_at(200, sync_p50=1.0, sync_p99=2.0, first_p50=1.0, sync_cpu=1.0, stream_cpu=1.0)])
    assert [t.verdict for t in targets([at_20, at_200])] == ["MISS", "MISS", "MISS", "MISS"]
    # 200/s alone has no target: nothing to judge.
    assert [t.verdict for t in targets([at_200])] == ["n/a"] * 4


def test_summarize_refuses_runs_of_different_rates() -> None:
    with pytest.raises(ValueError, match="one rate"):
        summarize(
            [
                run_at(20, sync_p50=1, sync_p99=1, first_p50=1, sync_cpu=1, stream_cpu=1),
                run_at(200, sync_p50=1, sync_p99=1, first_p50=1, sync_cpu=1, stream_cpu=1),
            ]
        )


def test_median_stats_of_no_samples_is_none() -> None:
    assert median_stats([None, None]) is None


def test_rate_run_counts_chunk_records_per_streamed_call_and_cpu_per_answered_call() -> None:
    def call(rid: str, inferq_id: str | None, ok: bool = True) -> Call:
        return Call(rid, 0, 0, 150 * MS, 40 * MS, 200 if ok else 502, ok, inferq_id)

    phases = [
        Phase("direct", True, [call("d", None)]),
        Phase("inferq", True, [call("a", "q-a"), call("b", "q-b"), call("c", "q-c", ok=False)]),
    ]
    sample = RateSample(
        rate_per_s=20,
        phases=phases,
        # Two cores for 10 s: 20 s of capacity; 15 s busy through inferq, 0.7 s of it ingest's, 8.3 s
        # nobody's of this bench (another process on the machine).
        cpu={
            "direct, stream": use(10.0, ingest=0.1),
            "inferq, stream": CpuUse(10.0, 15.0, 20.0, {"ingest": 0.7, "sim-backend": 6.0}),
        },
        answered={"direct, stream": 4, "inferq, stream": 30},  # warm-up calls included
    )
    backend = {rid: [0, 30 * MS, 130 * MS] for rid in ("d", "a", "b", "c")}
    replies = {
        "q-a": ReplyStamps(chunk_created_ms=31, chunk_appended_ms=32, result_appended_ms=131, chunks=14),
        "q-b": ReplyStamps(chunk_created_ms=31, chunk_appended_ms=32, result_appended_ms=131, chunks=4),
        "q-c": ReplyStamps(chunks=3),  # failed call: not counted
    }
    found = rate_run(sample, backend, replies)
    assert found.chunk_records_per_call == 9.0
    cpu = found.cpu["inferq, stream"]
    assert cpu is not None and cpu.by_process_ms == pytest.approx({"ingest": 20.0})  # 0.6 s / 30 calls
    assert set(found.legs) == {"inferq, stream"}
    assert found.machine_busy["inferq, stream"] == 0.75
    assert found.others_busy["inferq, stream"] == pytest.approx(0.415)


def test_cpu_table_puts_the_stream_sync_ratio_under_each_rate() -> None:
    summary = summarize([run_at(20, sync_p50=5, sync_p99=9, first_p50=2, sync_cpu=10, stream_cpu=30)])
    lines = cpu_table([summary])
    assert lines[0] == "| calls/s | path | ingest | total | machine busy | not this bench |"
    assert lines[3] == "| 20 | inferq, sync | 10.0 | 10.0 | - | - |"
    assert lines[-1] == "| 20 | stream / sync |  | 3.00x |  |  |"


def test_summary_table_has_a_row_per_rate_and_path() -> None:
    lines = summary_table(
        [summarize([run_at(20, sync_p50=5, sync_p99=9, first_p50=2, sync_cpu=10, stream_cpu=30)])]
    )
    assert lines[0].startswith("| calls/s | path | complete/sent | added p50 / p95 / p99 ms")
    assert lines[3] == "| 20 | inferq, sync | 10/10 | 5.0 / 9.0 / 9.0 | - / - | 10.0 | - |"
    assert lines[5] == "| 20 | inferq, stream | 10/10 | 20.0 / 40.0 / 40.0 | 2.0 / 4.0 | 30.0 | 14.0 |"


PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2384 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0
   1: 0100007F:2384 0100007F:A76B 01 00000000:00000000 00:00000000 00000000  1000        0 5151 1 0
   2: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1 0
"""


def test_the_broker_is_the_socket_listening_on_the_bootstrap_port() -> None:
    # 0x2384 = 9092; the established connection on the same port is not the listener.
    assert listening_inodes(PROC_NET_TCP, 9092) == {4242}
    assert listening_inodes(PROC_NET_TCP, 9093) == set()


def test_only_a_bootstrap_on_this_machine_has_a_port_to_look_up() -> None:
    assert local_port("127.0.0.1:9092,127.0.0.1:9093") == 9092
    assert local_port("PLAINTEXT://localhost:19092") == 19092
    assert local_port("kafka.internal:9092") is None
