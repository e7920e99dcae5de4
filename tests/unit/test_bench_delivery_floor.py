"""The delivery bench's floor: two HTTP exchanges and two Kafka trips for a sync call, one trip and
the SSE write for a first chunk, from figures measured in the same run."""

from __future__ import annotations

from inferq.tools.bench.delivery_floor import KafkaTrip, floor, floor_table
from inferq.tools.measures import stats


def a_trip(*read_ms: float) -> KafkaTrip:
    return KafkaTrip(20, stats([0.5, 0.7, 0.9]), stats(list(read_ms)), len(read_ms), len(read_ms))


def test_the_sync_floor_is_two_exchanges_and_two_trips_and_a_chunks_one_trip_and_its_write() -> None:
    found = floor(a_trip(1.0, 1.2, 1.4), direct_sync_p50=1.5, direct_first_chunk_p50=0.2)
    assert found.sync_ms == 2 * 1.5 + 2 * 1.2
    assert found.first_chunk_ms is not None and abs(found.first_chunk_ms - 1.4) < 1e-9


def test_a_missing_part_leaves_its_floor_unknown_and_the_table_says_so() -> None:
    nothing_read = floor(KafkaTrip(200, None, None, 10, 0), direct_sync_p50=1.5, direct_first_chunk_p50=0.2)
    assert (nothing_read.sync_ms, nothing_read.first_chunk_ms) == (None, None)
    no_direct = floor(a_trip(1.0), direct_sync_p50=None, direct_first_chunk_p50=None)
    assert (no_direct.sync_ms, no_direct.first_chunk_ms) == (None, None)
    lines = floor_table([(nothing_read, 9.0, None)])
    assert lines[-1] == "| 200 | - / - | - / - / - | - / 9.0 | - / - |"
