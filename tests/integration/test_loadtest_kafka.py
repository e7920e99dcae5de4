"""`inferq loadgen --via kafka`, `inferq trace export` and `inferq replay` against the real broker.

The commands run in-process through their argument parsers, exactly as the CLI runs them.
"""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from inferq.messaging.admin import create_topics
from inferq.messaging.codec import request_codec
from inferq.messaging.kafka_config import KafkaSettings
from inferq.tools.loadtest.cli import register
from inferq.tools.loadtest.runs import read_records
from inferq.tools.loadtest.source import TopicSource
from inferq.tools.loadtest.timerange import TimeRange
from inferq.tools.loadtest.tracefile import read_trace
from inferq.tools.stack.process import ServiceProcess
from inferq.tools.traces.generator import generate
from inferq.tools.traces.scenario import load
from tests.support.inprocess import free_port
from tests.support.kafka import a_request, read_all, use_create_time

pytestmark = pytest.mark.kafka

SMALL_SCENARIO = """
duration = "2s"
seed = 11
[[streams]]
scenario = "realtime_chat"
rate_per_min = 600
sessions = 3
prompt_chars = 50
[[streams]]
scenario = "emotion_analysis"
[[streams.bursts]]
count = 5
within = "500ms"
at = "1s"
[[streams]]
scenario = "morning_brief"
[streams.dump]
count = 10
"""

# (offset from t0 in ms, tier, scenario): a recorded evening, some of it outside the exported range.
RECORDED = [
    (0, "HIGH", "realtime_chat"),
    (100, "LOW", "morning_brief"),
    (100, "LOW", "morning_brief"),
    (100, "LOW", "morning_brief"),
    (200, "HIGH", "realtime_chat"),
    (250, "MEDIUM", "emotion_analysis"),
    (300, "HIGH", "realtime_chat"),
    (450, "MEDIUM", "recipe_recommend"),
    (700, "HIGH", "realtime_chat"),
    (800, "MEDIUM", "emotion_analysis"),
    (1200, "LOW", "morning_brief"),
    (1500, "HIGH", "realtime_chat"),
]
FROM, TO = 100, 1200  # [from, to): the records at 0, 1200 and 1500 are outside


def inferq(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="inferq")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    code: int = args.func(args)
    return code


def fresh_prefix(bootstrap: str) -> KafkaSettings:
    settings = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:12]}")
    create_topics(settings)
    return settings


def requests_on(settings: KafkaSettings) -> list[tuple[str, dict[str, Any], int, bytes | None]]:
    """(tier topic, decoded request, Kafka timestamp, key) of every record on the request topics."""
    codec = request_codec().avro  # the records as any Avro consumer sees them
    found = []
    for topic in settings.topics.all_requests:
        for m in read_all(settings.bootstrap_servers, topic):
            found.append((topic, codec.decode(m.value() or b""), m.timestamp()[1], m.key()))
    return found


@pytest.fixture
def recorded(kafka_settings: KafkaSettings) -> tuple[int, dict[str, dict[str, Any]]]:
    """RECORDED written to `kafka_settings`' request topics with Kafka timestamps t0 + offset."""
    t0 = int(time.time() * 1000) - 600_000
    # Recorded by a pipeline whose request topics kept the producers' timestamps (CreateTime): today's
    # are LogAppendTime, which would stamp these records with now.
    use_create_time(kafka_settings.bootstrap_servers, kafka_settings.topics.all_requests)
    codec = request_codec().avro  # the records as any Avro consumer sees them
    producer = Producer({"bootstrap.servers": kafka_settings.bootstrap_servers, "enable.idempotence": True})
    by_id = {}
    for i, (offset, tier, scenario) in enumerate(RECORDED):
        record = a_request(tier, scenario=scenario, request_id=f"rec-{i}", session_id=f"s{i % 4}").to_record()
        producer.produce(
            kafka_settings.topics.requests_by_name(tier),
            codec.encode(record),
            key=record["session_id"].encode(),
            timestamp=t0 + offset,
        )
        by_id[record["request_id"]] = record | {"offset": offset}
    assert producer.flush(15) == 0
    return t0, by_id


def test_loadgen_via_kafka_writes_every_arrival_with_run_id_request_ids(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    scenario_file = tmp_path / "small.toml"
    scenario_file.write_text(SMALL_SCENARIO, encoding="utf-8")
    trace = generate(load(str(scenario_file)))
    out = tmp_path / "run" / "requests.jsonl"
    code = inferq(
        "loadgen", str(scenario_file), "--via", "kafka", "--bootstrap", kafka_settings.bootstrap_servers,
        "--topic-prefix", kafka_settings.topic_prefix, "--speed", "4", "--run-id", "lt-1", "--out", str(out),
    )  # fmt: skip
    assert code == 0
    # What the load generator says of each first: a send that failed names its error here.
    records = read_records(out)
    assert len(records) == len(trace)
    assert [(r.request_id, r.error) for r in records if r.outcome != "accepted"] == []
    written = requests_on(kafka_settings)
    assert len(written) == len(trace) >= 30
    assert sorted(r["request_id"] for _, r, _, _ in written) == sorted(f"lt-1:{a.index}" for a in trace)
    by_id = {f"lt-1:{a.index}": a for a in trace}
    for topic, record, _, key in written:
        arrival = by_id[record["request_id"]]
        assert topic == kafka_settings.topics.requests(arrival.tier)
        assert (record["scenario"], record["session_id"], key) == (
            arrival.scenario,
            arrival.session_id,
            arrival.session_id.encode(),
        )
        no_tools = {"tool_calls": None, "tool_call_id": None, "name": None}
        assert record["messages"] == [m | no_tools for m in arrival.message_dicts()]
    assert (out.parent / "run.json").is_file()


def test_export_of_a_time_range_then_replay_keeps_the_gaps_scaled_by_speed(
    kafka_settings: KafkaSettings, recorded: tuple[int, dict[str, dict[str, Any]]], tmp_path: Path
) -> None:
    t0, originals = recorded
    trace_file = tmp_path / "evening.avro"
    code = inferq(
        "trace", "export", "--bootstrap", kafka_settings.bootstrap_servers, "--topic-prefix",
        kafka_settings.topic_prefix, "--from", str(t0 + FROM), "--to", str(t0 + TO), "--out", str(trace_file),
    )  # fmt: skip
    assert code == 0
    exported = list(read_trace(trace_file))
    in_range = sorted((o["offset"], rid) for rid, o in originals.items() if FROM <= o["offset"] < TO)
    assert sorted((r["timestamp_ms"] - t0, r["request"]["request_id"]) for r in exported) == in_range
    assert [r["timestamp_ms"] for r in exported] == sorted(r["timestamp_ms"] for r in exported)

    target = fresh_prefix(kafka_settings.bootstrap_servers)
    before = int(time.time() * 1000)
    code = inferq(
        "replay", "--trace", str(trace_file), "--target-bootstrap", kafka_settings.bootstrap_servers,
        "--target-prefix", target.topic_prefix, "--speed", "2", "--run-id", "rp-1",
    )  # fmt: skip
    assert code == 0
    replayed = requests_on(target)
    assert sorted(r["request_id"] for _, r, _, _ in replayed) == sorted(f"rp-1:{rid}" for _, rid in in_range)
    first_created = min(r["created_at_ms"] for _, r, _, _ in replayed)
    for topic, record, _, _ in replayed:
        original = originals[record["request_id"].removeprefix("rp-1:")]
        assert topic == target.topics.requests_by_name(original["tier"])
        assert record["created_at_ms"] >= before  # shifted to now
        assert (
            record["expire_at_ms"] - record["created_at_ms"]
            == original["expire_at_ms"] - original["created_at_ms"]
        )
        assert record["attempt"] == 1
        assert {
            k: v for k, v in record.items() if k not in ("request_id", "created_at_ms", "expire_at_ms")
        } == {
            k: v
            for k, v in original.items()
            if k not in ("request_id", "created_at_ms", "expire_at_ms", "offset")
        }
        # At speed 2 a record recorded 600 ms after the first goes out 300 ms after it (paced by due times).
        expected_ms = (original["offset"] - FROM) / 2
        assert abs((record["created_at_ms"] - first_created) - expected_ms) <= 80, (record, expected_ms)


def test_replay_from_topics_in_timestamp_order_across_partitions(
    kafka_settings: KafkaSettings, recorded: tuple[int, dict[str, dict[str, Any]]]
) -> None:
    _, originals = recorded
    target = fresh_prefix(kafka_settings.bootstrap_servers)
    code = inferq(
        "replay", "--source-bootstrap", kafka_settings.bootstrap_servers, "--source-prefix",
        kafka_settings.topic_prefix, "--target-prefix", target.topic_prefix, "--speed", "4",
        "--run-id", "rp-2",
    )  # fmt: skip
    assert code == 0
    replayed = requests_on(target)
    assert len(replayed) == len(RECORDED)
    first_created = min(r["created_at_ms"] for _, r, _, _ in replayed)
    for _, record, _, _ in replayed:
        # Three topics, twelve partitions, one timeline: each record at its own time, a quarter as far apart.
        offset = originals[record["request_id"].removeprefix("rp-2:")]["offset"]
        assert abs((record["created_at_ms"] - first_created) - offset / 4) <= 80, (record, offset)


def test_replay_filters_by_time_tier_and_scenario_as_fast_as_possible(
    kafka_settings: KafkaSettings, recorded: tuple[int, dict[str, dict[str, Any]]]
) -> None:
    t0, originals = recorded
    target = fresh_prefix(kafka_settings.bootstrap_servers)
    code = inferq(
        "replay", "--source-bootstrap", kafka_settings.bootstrap_servers, "--source-prefix",
        kafka_settings.topic_prefix, "--target-prefix", target.topic_prefix, "--speed", "max",
        "--run-id", "rp-3",
        "--from", str(t0 + FROM), "--to", str(t0 + TO), "--tier", "MEDIUM", "--tier", "HIGH",
        "--scenario", "emotion_analysis", "--scenario", "realtime_chat",
    )  # fmt: skip
    assert code == 0
    expected = {
        f"rp-3:{rid}"
        for rid, o in originals.items()
        if FROM <= o["offset"] < TO and o["scenario"] in ("emotion_analysis", "realtime_chat")
    }
    replayed = requests_on(target)
    assert {r["request_id"] for _, r, _, _ in replayed} == expected
    assert len(replayed) == len(expected) == 5
    for topic, record, _, key in replayed:
        original = originals[record["request_id"].removeprefix("rp-3:")]
        assert topic == target.topics.requests_by_name(original["tier"])
        assert key == original["session_id"].encode()


@pytest.mark.slow
def test_loadgen_over_http_through_a_running_ingest(kafka_settings: KafkaSettings, tmp_path: Path) -> None:
    scenario_file = tmp_path / "small.toml"
    scenario_file.write_text(SMALL_SCENARIO, encoding="utf-8")
    trace = generate(load(str(scenario_file)))
    port = free_port()
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "INFERQ_TOPIC_PREFIX": kafka_settings.topic_prefix,
        "INFERQ_INGEST_METRICS_PORT": "0",
    }
    ingest = ServiceProcess("ingest", ["ingest", "--port", str(port)], tmp_path / "ingest.log", env=env)
    out = tmp_path / "run" / "requests.jsonl"
    ingest.start()
    try:
        ingest.wait_http_ready(f"http://127.0.0.1:{port}/healthz", 60.0)
        code = inferq(
            "loadgen", str(scenario_file), "--ingest-url", f"http://127.0.0.1:{port}", "--speed", "4",
            "--run-id", "lt-h", "--out", str(out),
        )  # fmt: skip
    finally:
        assert ingest.stop() == 0
    assert code == 0
    records = read_records(out)
    assert sorted(r.request_id for r in records) == sorted(f"lt-h:{a.index}" for a in trace)
    assert {(r.outcome, r.status) for r in records} == {("accepted", 202)}
    assert all(r.answer_tier == r.tier and r.answered_ms >= r.sent_ms >= r.due_ms - 5 for r in records)
    written = requests_on(kafka_settings)
    assert sorted(r["request_id"] for _, r, _, _ in written) == sorted(r.request_id for r in records)


def test_the_timestamp_merge_stays_ordered_when_its_buffer_bound_pauses_partitions(
    kafka_settings: KafkaSettings, recorded: tuple[int, dict[str, dict[str, Any]]]
) -> None:
    """With room for 2 waiting records, partitions ahead are paused and laggards resumed, never deadlocked."""
    source = TopicSource(
        kafka_settings.admin_config(), kafka_settings.topics, ["HIGH", "MEDIUM", "LOW"], TimeRange(),
        batch_size=2, max_buffered=2, stall_timeout_s=20.0,
    )  # fmt: skip
    try:
        merged = [r[0] for r in source.ordered()]
    finally:
        source.close()
    t0, _ = recorded
    assert [ts - t0 for ts in merged] == sorted(offset for offset, _, _ in RECORDED)
