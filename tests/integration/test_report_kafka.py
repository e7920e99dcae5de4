"""`inferq report` against the real broker: it finds exactly one run's results on the results topic."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from inferq.messaging.codec import result_codec
from inferq.messaging.kafka_config import KafkaSettings
from inferq.tools.report.cli import register

pytestmark = pytest.mark.kafka


def a_result(
    request_id: str, tier: str, enqueued: int, dispatched: int | None, status: str = "OK"
) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "tier": tier,
        "status": status,
        "output": "an answer nobody needs in a report" if status == "OK" else None,
        "error": None,
        "model": "inferq-fast",
        "usage": None,
        "enqueued_at_ms": enqueued,
        "dispatched_at_ms": dispatched,
        "completed_at_ms": (dispatched or enqueued) + 500,
        "attempts": 1,
        "dispatcher_id": "test",
    }


def produce(settings: KafkaSettings, records: list[dict[str, Any]]) -> None:
    producer = Producer(settings.producer_config(client_id="report-test"))
    codec = result_codec().avro  # results as any producer could write them
    for record in records:
        producer.produce(settings.topics.results, codec.encode(record), key=record["request_id"].encode())
    assert producer.flush(30.0) == 0


def report(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="inferq")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["report", *argv])
    code: int = args.func(args)
    return code


def test_report_reads_exactly_its_runs_results_and_writes_json_and_plots(
    kafka_settings: KafkaSettings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t0 = 1_700_000_000_000
    mine = [a_result(f"runA:{i}", "HIGH", t0 + 100 * i, t0 + 100 * i + 50) for i in range(6)]
    mine.append(a_result("runA:6", "LOW", t0, None, "EXPIRED"))
    others = [a_result(f"runB:{i}", "MEDIUM", t0, t0 + 10) for i in range(4)]
    # A run id that is a prefix of runA's without the separator must not match either.
    others.append(a_result("run:1", "HIGH", t0, t0))
    duplicate = a_result("runA:0", "HIGH", t0, t0 + 9_999)  # a redelivery: the first result wins
    produce(kafka_settings, [*mine[:3], *others, *mine[3:], duplicate])
    runs_dir = tmp_path / "runs"
    (runs_dir / "runA").mkdir(parents=True)
    (runs_dir / "runA" / "requests.jsonl").write_text(
        "".join(
            json.dumps(
                {"request_id": r["request_id"], "tier": r["tier"], "sent_at_ms": t0, "created_at_ms": t0}
            )
            + "\n"
            for r in mine
        )
        + json.dumps({"request_id": "runA:99", "tier": "HIGH", "sent_at_ms": t0})
        + "\n",
        encoding="utf-8",
    )

    code = report(
        [
            "runA",
            "--bootstrap",
            kafka_settings.bootstrap_servers,
            "--topic-prefix",
            kafka_settings.topic_prefix,
            "--runs-dir",
            str(runs_dir),
            "--budget",
            "5",
        ]
    )

    assert code == 0
    out = runs_dir / "runA" / "report"
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert sorted(o["request_id"] for o in doc["outcomes"]) == sorted(r["request_id"] for r in mine)
    first = next(o for o in doc["outcomes"] if o["request_id"] == "runA:0")
    assert first["dispatched_at_ms"] == t0 + 50  # not the duplicate's
    assert doc["requests"]["HIGH"] == {"submitted": 7, "accepted": 6, "missing": 0}
    assert doc["summary"]["tiers"][0]["by_status"] == {"OK": 6}
    assert doc["summary"]["max_in_flight"] == 5  # 0.5 s calls dispatched 0.1 s apart
    lines = (out / "results-runA.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 7 and all("output" not in json.loads(line) for line in lines)
    for name in ("queue_wait.png", "tokens_in_use.png", "backlog.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG")
    printed = capsys.readouterr().out
    assert "duplicates dropped 1" in printed and "HIGH queue wait s" in printed


def test_report_of_an_unknown_run_says_so(kafka_settings: KafkaSettings, tmp_path: Path) -> None:
    produce(kafka_settings, [a_result("runB:1", "HIGH", 0, 1)])
    code = report(
        [
            "nosuchrun",
            "--bootstrap",
            kafka_settings.bootstrap_servers,
            "--topic-prefix",
            kafka_settings.topic_prefix,
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert code == 1
    assert not (tmp_path / "out").exists()


def test_report_for_one_tenant_counts_only_its_results_and_requests(
    kafka_settings: KafkaSettings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t0 = 1_700_000_000_000
    # One run, two tenants: a's chats waited 1 s, b's 20 ms; b sent one more chat that was refused.
    a = [a_result(f"runT:{i}", "HIGH", t0, t0 + 1_000) | {"tenant": "a"} for i in range(5)]
    b = [a_result(f"runT:{i}", "HIGH", t0, t0 + 20) | {"tenant": "b"} for i in range(5, 8)]
    produce(kafka_settings, [*a, *b])
    runs_dir = tmp_path / "runs"
    (runs_dir / "runT").mkdir(parents=True)
    records = [
        {"request_id": r["request_id"], "tier": "HIGH", "sent_at_ms": t0, "created_at_ms": t0}
        | {"tenant": r["tenant"]}
        for r in [*a, *b]
    ]
    records.append({"request_id": "runT:99", "tier": "HIGH", "sent_at_ms": t0, "tenant": "b"})
    (runs_dir / "runT" / "requests.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records), encoding="utf-8"
    )
    common = [
        "--bootstrap",
        kafka_settings.bootstrap_servers,
        "--topic-prefix",
        kafka_settings.topic_prefix,
        "--runs-dir",
        str(runs_dir),
    ]

    assert report(["runT", "--tenant", "b", *common]) == 0

    out = runs_dir / "runT" / "report-b"
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert sorted(o["request_id"] for o in doc["outcomes"]) == ["runT:5", "runT:6", "runT:7"]
    assert {o["tenant"] for o in doc["outcomes"]} == {"b"}
    assert doc["requests"]["HIGH"] == {"submitted": 4, "accepted": 3, "missing": 0}
    assert doc["summary"]["tiers"][0]["queue_wait_s"]["mean"] == pytest.approx(0.02)
    lines = (out / "results-runT.jsonl").read_text(encoding="utf-8").splitlines()
    assert {json.loads(line)["tenant"] for line in lines} == {"b"} and len(lines) == 3
    printed = capsys.readouterr().out
    assert "tenants of runT: a 5, b 3" in printed

    # A tenant with nothing in the run is an error, not an empty report.
    assert report(["runT", "--tenant", "c", *common]) == 1
    assert "no results of tenant 'c' for run runT" in capsys.readouterr().out
    assert not (runs_dir / "runT" / "report-c").exists()
