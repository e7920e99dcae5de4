"""The load-test tools' pure parts: the replay rewrite, time ranges, progress text, the loadgen pacer."""

from __future__ import annotations

import asyncio
import io
import json
import time
from dataclasses import replace
from pathlib import Path

import fastavro
import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from inferq.ingest.validation import SubmitRequest
from inferq.messaging.codec import request_codec
from inferq.messaging.errors import DecodeError
from inferq.messaging.records import InferenceRequest
from inferq.messaging.tiers import Tier
from inferq.tools.loadtest.errors import LoadtestError, TimeRangeError, TraceFileError
from inferq.tools.loadtest.loadgen import LoadOptions, run_load
from inferq.tools.loadtest.progress import ProgressLine, Tally, bar, loadgen_line
from inferq.tools.loadtest.rewrite import Rewriter, zigzag_varint
from inferq.tools.loadtest.runs import RequestRecord, RunWriter, check_run_id, new_run_id, read_records
from inferq.tools.loadtest.senders import Answer, HttpSender, http_body
from inferq.tools.loadtest.source import TraceFileSource
from inferq.tools.loadtest.timerange import TimeRange, parse_instant
from inferq.tools.loadtest.tracefile import read_trace, trace_metadata, write_trace
from inferq.tools.traces.arrival import Arrival
from tests.support.clock import ManualClock
from tests.support.kafka import a_request
from tests.support.loop import in_loop
from tests.support.waiting import eventually

NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def expected_replay(request: InferenceRequest, run_id: str, now_ms: int) -> InferenceRequest:
    return replace(
        request,
        request_id=f"{run_id}:{request.request_id}",
        created_at_ms=now_ms,
        expire_at_ms=now_ms + request.expire_at_ms - request.created_at_ms,
        attempt=1,
        not_before_ms=None,
        callback_url=None,
    )


@settings(max_examples=300, deadline=None)
# A retry's not_before_ms of 0 ends the record in 02 00: the fast path must not mistake it for null.
@example(
    request_id="0",
    tenant="0",
    created=2**34,
    deadline=0,
    attempt=1,
    not_before=0,
    tier="HIGH",
    stream=False,
    callback=None,
)
@given(
    request_id=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=90),
    tenant=st.text(min_size=1, max_size=70),
    created=st.integers(min_value=0, max_value=2**45),
    deadline=st.integers(min_value=-10_000, max_value=7 * 24 * 3_600_000),
    attempt=st.integers(min_value=1, max_value=200),
    not_before=st.none() | st.integers(min_value=0, max_value=2**45),
    tier=st.sampled_from(["HIGH", "MEDIUM", "LOW"]),
    stream=st.booleans(),
    callback=st.none() | st.sampled_from(["", "https://hooks.example/a", "x"]),
)
def test_the_rewrite_is_exactly_a_fresh_first_attempt_in_the_run_namespace(
    request_id: str,
    tenant: str,
    created: int,
    deadline: int,
    attempt: int,
    not_before: int | None,
    tier: str,
    stream: bool,
    callback: str | None,
) -> None:
    """Fast path or slow path, the bytes decode to the record a full decode/encode would produce."""
    record = a_request(
        tier,
        request_id=request_id,
        tenant=tenant,
        created_at_ms=created,
        expire_at_ms=created + deadline,
        attempt=attempt,
        not_before_ms=not_before,
        session_id="s-1",
        stream=stream,
        callback_url=callback,
    )
    codec = request_codec()
    fresh = Rewriter("run-7").rewrite(codec.encode(record), NOW)
    assert fresh is not None
    assert codec.decode(fresh) == expected_replay(record, "run-7", NOW)


def test_ingest_shaped_records_take_the_fast_path() -> None:
    codec = request_codec()
    rewriter = Rewriter("r1")
    rewrite = rewriter.at(NOW)
    for tier, deadline in ((Tier.HIGH, 5_000), (Tier.MEDIUM, 30_000), (Tier.LOW, 12 * 3_600_000)):
        record = a_request(tier.value, deadline_ms=deadline, session_id="chat-1")
        fresh = rewrite(codec.encode(record))
        assert fresh is not None
        assert codec.decode(fresh) == expected_replay(record, "r1", NOW)
    assert rewriter.slow == 0


def test_the_scenario_filter_holds_on_both_paths() -> None:
    codec = request_codec()
    rewriter = Rewriter("r1", scenarios={"emotion_analysis"})
    chat, analysis = a_request("HIGH"), a_request("MEDIUM")
    assert rewriter.rewrite(codec.encode(chat), NOW) is None
    assert rewriter.rewrite(codec.encode(analysis), NOW) is not None
    long_tenant = a_request("HIGH", tenant="t" * 100)  # a 2-byte length: the slow path
    assert rewriter.rewrite(codec.encode(long_tenant), NOW) is None
    assert rewriter.slow == 1


def test_garbage_is_refused_as_undecodable() -> None:
    with pytest.raises(DecodeError):
        Rewriter("r1").rewrite(b"\xc3\x01not a record at all", NOW)
    truncated = request_codec().encode(a_request("HIGH"))[:30]
    with pytest.raises(DecodeError):
        Rewriter("r1").rewrite(truncated, NOW)


def test_zigzag_varint_matches_avro() -> None:
    assert zigzag_varint(0) == b"\x00"
    assert zigzag_varint(-1) == b"\x01"
    assert zigzag_varint(1) == b"\x02"
    assert zigzag_varint(64) == b"\x80\x01"


def test_instants_are_read_as_iso_8601_or_epoch_ms() -> None:
    assert parse_instant("1767225600000") == NOW
    assert parse_instant("2026-01-01T00:00:00Z") == NOW
    assert parse_instant("2026-01-01T08:00:00+08:00") == NOW
    local = parse_instant("2026-01-01T00:00")
    assert abs(local - NOW) <= 14 * 3_600_000  # the machine's local time, whatever its zone
    with pytest.raises(TimeRangeError, match="neither epoch milliseconds nor an ISO-8601"):
        parse_instant("yesterday")
    with pytest.raises(TimeRangeError, match="must be after"):
        TimeRange.parse("2026-01-01T01:00Z", "2026-01-01T00:00Z")
    window = TimeRange(NOW, NOW + 10)
    assert window.contains(NOW) and window.contains(NOW + 9) and not window.contains(NOW + 10)


def test_progress_text_and_throttling() -> None:
    assert bar(0, 10, width=4) == "[----]"
    assert bar(5, 10, width=4) == "[##--]"
    tally = Tally()
    tally.add("HIGH", "accepted")
    tally.add("HIGH", "refused")
    tally.add("LOW", "unavailable")
    line = loadgen_line(tally, 10, 2.0)
    assert "3/10" in line and "HIGH 2/1/1" in line and "LOW 1/0/1" in line and "1.5/s" in line
    clock = ManualClock(0)
    out = io.StringIO()
    progress = ProgressLine(out, tty=False, interval_s=5.0, clock_s=clock.seconds)
    progress.show("a")
    progress.show("b")  # within the interval: not drawn
    clock.advance(s=6)
    progress.show("c")
    progress.finish("d")
    assert out.getvalue() == "a\nc\nd\n"


def test_run_ids_and_the_records_file(tmp_path: Path) -> None:
    assert new_run_id().startswith("lg-")
    assert check_run_id("evening_1.a-b") == "evening_1.a-b"
    with pytest.raises(ValueError, match="run id"):
        check_run_id("has space")
    writer = RunWriter(tmp_path / "r" / "requests.jsonl")
    record = RequestRecord(0, "x:0", "realtime_chat", "HIGH", "poisson", "s", 0, 1, 2, 3, "accepted", 202)
    writer.write(record)
    meta = writer.close({"run_id": "x"})
    assert read_records(tmp_path / "r" / "requests.jsonl") == [record]
    assert meta == tmp_path / "r" / "run.json"


def arrival(index: int, offset_ms: int) -> Arrival:
    return Arrival(
        offset_ms,
        "realtime_chat",
        Tier.HIGH,
        index=index,
        kind="poisson",
        session_id="s",
        messages=(("user", "hi"),),
    )


class FakeSender:
    """Answers after `delay_s`; remembers when each request came and the most ever outstanding."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.sent: dict[str, float] = {}
        self.outstanding = 0
        self.most = 0

    async def send(self, a: Arrival, request_id: str) -> Answer:
        self.sent[request_id] = time.monotonic()
        self.outstanding += 1
        self.most = max(self.most, self.outstanding)
        await asyncio.sleep(self.delay_s)
        self.outstanding -= 1
        return Answer("accepted", 202, "HIGH")


def test_arrivals_are_sent_at_their_offsets_divided_by_speed() -> None:
    sender = FakeSender()
    records: list[RequestRecord] = []
    trace = [arrival(0, 0), arrival(1, 2_000), arrival(2, 4_000)]
    options = LoadOptions(run_id="t", speed=10.0, start_delay_s=0.05)
    result = asyncio.run(run_load(trace, sender, options, stop=asyncio.Event(), on_record=records.append))
    assert sorted(sender.sent) == ["t:0", "t:1", "t:2"]
    gaps = [sender.sent["t:1"] - sender.sent["t:0"], sender.sent["t:2"] - sender.sent["t:1"]]
    assert all(0.15 <= g <= 0.3 for g in gaps), gaps  # 2 s of trace at speed 10
    assert result.sent == 3 and result.tally.total().accepted == 3 and not result.interrupted
    assert [r.due_ms - records[0].due_ms for r in sorted(records, key=lambda r: r.n)] == [0, 200, 400]


def test_a_shared_start_instant_anchors_every_due_time() -> None:
    """What the benches use: two processes posting parts of one trace start it at the same instant."""
    sender = FakeSender()
    records: list[RequestRecord] = []
    start_s = time.time() + 0.1
    options = LoadOptions(run_id="t", start_at_s=start_s)
    trace = [arrival(0, 0), arrival(1, 100)]
    asyncio.run(run_load(trace, sender, options, stop=asyncio.Event(), on_record=records.append))
    start_ms = round(start_s * 1000)
    assert sorted(r.due_ms - start_ms for r in records) == [0, 100]
    assert all(r.sent_ms >= r.due_ms - 5 for r in records), records


@in_loop
async def test_concurrency_is_bounded_and_a_stop_ends_the_run_with_what_was_sent() -> None:
    sender = FakeSender(delay_s=0.05)
    trace = [arrival(i, 0) for i in range(40)] + [arrival(40, 60_000)]
    records: list[RequestRecord] = []

    stop = asyncio.Event()
    task = asyncio.create_task(
        run_load(trace, sender, LoadOptions("t", max_in_flight=4), stop=stop, on_record=records.append)
    )
    await eventually(lambda: len(records) >= 40, "40 records", 10.0, interval_s=0.01)
    stop.set()  # as Ctrl-C does: the last arrival, a minute away, is never sent
    result = await asyncio.wait_for(task, 5.0)
    assert sender.most == 4
    assert result.interrupted and result.sent == 40 and len(records) == 40


def test_the_http_body_passes_ingest_validation() -> None:
    a = Arrival(
        0,
        "morning_brief",
        Tier.HIGH,
        90_000,
        index=3,
        kind="dump",
        session_id="u",
        messages=(("user", "hi"),),
        priority=Tier.HIGH,
    )
    body = SubmitRequest.model_validate(http_body(a, "lg-1:3"))
    assert body.params is not None
    assert (body.request_id, body.priority, body.deadline_ms, body.params.as_json_values()) == (
        "lg-1:3",
        Tier.HIGH,
        90_000,
        {"max_tokens": 100},
    )


def fake_ingest(request: httpx.Request) -> httpx.Response:
    """Answers as ingest does, by the scenario of the body: 202, 429, 503 or a 500."""
    if request.url.path == "/healthz":
        return httpx.Response(200, json={"status": "ok"})
    body = json.loads(request.content)
    answers = {
        "realtime_chat": httpx.Response(
            202, json={"request_id": body["request_id"], "tier": "HIGH", "expire_at_ms": 9}
        ),
        "morning_brief": httpx.Response(
            429, headers={"Retry-After": "3"}, json={"error": "LOW backlog full"}
        ),
        "emotion_analysis": httpx.Response(503, headers={"Retry-After": "1"}, json={"error": "kafka"}),
    }
    return answers.get(body["scenario"], httpx.Response(500, text="boom"))


@in_loop
async def test_http_answers_are_classified_as_a_report_needs_them() -> None:
    sender = HttpSender(
        "http://ingest", max_connections=4, timeout_s=5, transport=httpx.MockTransport(fake_ingest)
    )
    async with sender:
        accepted, refused, unavailable, error = [
            await sender.send(replace(arrival(i, 0), scenario=s), f"t:{i}")
            for i, s in enumerate(("realtime_chat", "morning_brief", "emotion_analysis", "recipe_recommend"))
        ]
    assert (accepted.outcome, accepted.status, accepted.answer_tier, accepted.expire_at_ms) == (
        "accepted",
        202,
        "HIGH",
        9,
    )
    assert (refused.outcome, refused.status, refused.retry_after_s) == ("refused", 429, 3.0)
    assert (unavailable.outcome, unavailable.status) == ("unavailable", 503)
    assert (error.outcome, error.status, error.error) == ("error", 500, "boom")


def test_with_keys_each_request_carries_its_tenants_api_key() -> None:
    seen: list[str | None] = []

    def ingest(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return fake_ingest(request)

    async def go() -> None:
        keys = {"a": "key-a", "b": "key-b"}
        transport = httpx.MockTransport(ingest)
        async with HttpSender(
            "http://ingest", max_connections=4, timeout_s=5, transport=transport, keys=keys
        ) as s:
            for i, tenant in enumerate(("a", "b")):
                await s.send(replace(arrival(i, 0), tenant=tenant), f"t:{i}")

    asyncio.run(go())
    assert seen == [None, "Bearer key-a", "Bearer key-b"]  # the health check, then each tenant's key


def test_an_ingest_that_does_not_answer_stops_the_run_before_it_starts() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async def go() -> None:
        async with HttpSender(
            "http://ingest", max_connections=4, timeout_s=5, transport=httpx.MockTransport(down)
        ):
            pass

    with pytest.raises(LoadtestError, match="does not answer"):
        asyncio.run(go())


def test_a_trace_file_is_self_contained_avro_and_other_files_are_refused(tmp_path: Path) -> None:
    records = [
        {"timestamp_ms": NOW + i, "topic": "inferq.requests.high", "partition": 0, "offset": i, "key": b"s",
         "request": a_request("HIGH", request_id=f"r{i}").to_record()}
        for i in range(3)
    ]  # fmt: skip
    path = tmp_path / "t.avro"
    assert write_trace(path, records, {"inferq.source": "test"}) == 3
    with path.open("rb") as f:
        reader = fastavro.reader(f)  # any Avro reader, no inferq code: the schema travels in the file
        assert reader.writer_schema["name"] == "io.inferq.TraceRecord"
        assert [r["request"]["request_id"] for r in reader] == ["r0", "r1", "r2"]
    assert list(read_trace(path)) == records
    assert trace_metadata(path) == {"inferq.source": "test"}
    only_late = TraceFileSource(path, ["HIGH"], TimeRange(NOW + 1, None))
    assert [(r[0], r[1], r[6]) for r in only_late.ordered()] == [(NOW + 1, "HIGH", 1), (NOW + 2, "HIGH", 2)]
    assert list(TraceFileSource(path, ["LOW"], TimeRange()).batches()) == []

    not_avro = tmp_path / "x.avro"
    not_avro.write_bytes(b"hello")
    with pytest.raises(TraceFileError, match="not an Avro object container file"):
        list(read_trace(not_avro))
    other = tmp_path / "other.avro"
    with other.open("wb") as f:
        fastavro.writer(
            f, {"type": "record", "name": "Other", "fields": [{"name": "a", "type": "int"}]}, [{"a": 1}]
        )
    with pytest.raises(TraceFileError, match=r"'Other' records, not io\.inferq\.TraceRecord"):
        list(read_trace(other))
