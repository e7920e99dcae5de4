"""Streaming through the queue, on fakes: a streamed request's tokens reach the reply topic as ordered
chunks before its result; a failure before any chunk is retried, one after is FAILED exactly once."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

import pytest
from confluent_kafka import KafkaError

from inferq.dispatcher.deltas import StreamDelta, ToolCallDelta, merged
from inferq.dispatcher.errors import BackendError
from inferq.dispatcher.streaming import ChunkPolicy, ChunkStream
from inferq.messaging import limits
from inferq.messaging.codec import chunk_codec, request_codec
from inferq.messaging.producer import ProduceError
from inferq.messaging.records import KIND_HEADER, InferenceChunk, Status, is_chunk
from tests.support.dispatcher_fakes import Produced, Rig, encoded, rig, running
from tests.support.kafka import a_request
from tests.support.loop import in_loop
from tests.support.waiting import eventually

# --- ChunkStream on its own ---------------------------------------------------------------------------


@dataclass
class Sink:
    """Records chunks; holds each acknowledgement while `gate` is clear; refuses chunk `refuse_at`."""

    chunks: list[tuple[int, str]] = field(default_factory=list)
    deltas: list[StreamDelta] = field(default_factory=list)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    refuse_at: int | None = None

    def __post_init__(self) -> None:
        self.gate.set()

    async def __call__(self, seq: int, delta: StreamDelta) -> ProduceError | None:
        if seq == self.refuse_at:
            return ProduceError("t.chunks", KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        self.chunks.append((seq, delta.content))
        self.deltas.append(delta)
        await self.gate.wait()
        return None


@in_loop
async def test_tokens_are_batched_by_count_and_the_rest_written_at_the_end() -> None:
    sink = Sink()
    stream = ChunkStream(sink, ChunkPolicy(tokens=3, linger_ms=10_000))
    stream.start()
    for count, tokens in enumerate(["abc", "def"], start=1):
        for token in tokens:
            stream.add(StreamDelta(content=token))
        await eventually(lambda n=count: len(sink.chunks) == n, "a full chunk written at once")
    stream.add(StreamDelta(content="g"))
    assert await stream.finish() is None
    assert stream.written == len(sink.chunks)
    assert sink.chunks == [(0, "abc"), (1, "def"), (2, "g")]


@in_loop
async def test_a_lone_token_is_written_after_the_linger_without_waiting_for_more() -> None:
    sink = Sink()
    stream = ChunkStream(sink, ChunkPolicy(tokens=100, linger_ms=1))
    stream.start()
    stream.add(StreamDelta(content="first"))
    await eventually(lambda: len(sink.chunks) == 1, "the first chunk, before the call ends")
    stream.add(StreamDelta(content="second"))
    await stream.finish()
    assert sink.chunks == [(0, "first"), (1, "second")]


@in_loop
async def test_a_chunk_is_written_once_its_characters_reach_the_bound_without_waiting_the_linger() -> None:
    sink = Sink()
    stream = ChunkStream(sink, ChunkPolicy(tokens=100, linger_ms=10_000, chars=8))
    stream.start()
    stream.add(StreamDelta(content="first"))
    await eventually(lambda: len(sink.chunks) == 1, "the first token written at once")
    stream.add(StreamDelta(content="abcd"))
    stream.add(StreamDelta(content="efgh"))
    await eventually(lambda: len(sink.chunks) == 2, "8 characters make a chunk, far before the 10 s linger")
    stream.add(StreamDelta(content="i"))
    await asyncio.sleep(0.05)
    before_end = list(sink.chunks)
    await stream.finish()
    assert before_end == [(0, "first"), (1, "abcdefgh")]
    assert sink.chunks == [*before_end, (2, "i")]


@in_loop
async def test_by_default_a_token_every_5_ms_makes_a_few_chunks_not_one_a_token() -> None:
    # The bench's answer: 14 tokens of 4 characters, the simulator's ~5 ms apart.
    tokens = [f"t{i:02d} " for i in range(14)]
    sink = Sink()
    stream = ChunkStream(sink, ChunkPolicy())
    stream.start()
    for token in tokens:
        stream.add(StreamDelta(content=token))
        await asyncio.sleep(0.005)
    await stream.finish()
    assert sink.chunks[0] == (0, tokens[0]), "the first token alone, at once"
    assert "".join(text for _, text in sink.chunks) == "".join(tokens)
    assert len(sink.chunks) <= 5, f"{len(sink.chunks)} chunks for 14 tokens over ~70 ms"


@in_loop
async def test_tokens_gather_while_a_chunk_is_being_acknowledged() -> None:
    sink = Sink()
    sink.gate.clear()
    stream = ChunkStream(sink, ChunkPolicy(tokens=2, linger_ms=0))
    stream.start()
    stream.add(StreamDelta(content="a"))
    await eventually(lambda: len(sink.chunks) == 1, "the first chunk handed over")
    for token in "bcde":
        stream.add(StreamDelta(content=token))
    sink.gate.set()
    await stream.finish()
    chunks = sink.chunks
    assert chunks == [(0, "a"), (1, "bcde")], "one chunk at a time, in order, nothing lost"


@in_loop
async def test_a_lost_chunk_is_counted_and_the_next_takes_the_following_seq() -> None:
    sink = Sink(refuse_at=1)
    stream = ChunkStream(sink, ChunkPolicy(tokens=1, linger_ms=0))
    stream.start()
    for token in "abc":
        stream.add(StreamDelta(content=token))
        await asyncio.sleep(0)
    await stream.finish()
    # seq 1 is missing: a reader sees the gap (and takes the rest from the result).
    assert sink.chunks == [(0, "a"), (2, "c")]
    assert (stream.written, stream.lost) == (2, 1)
    refused = ProduceError("t.chunks", KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    assert stream.first_loss == refused.reason, "why the first was lost, for the call's one log line"


@in_loop
async def test_the_first_token_goes_at_once_and_later_ones_wait_for_their_batch() -> None:
    sink = Sink()
    stream = ChunkStream(sink, ChunkPolicy(tokens=100, linger_ms=10_000))
    stream.start()
    stream.add(StreamDelta(content="first"))
    await eventually(lambda: len(sink.chunks) == 1, "the first token written without its batch")
    stream.add(StreamDelta(content="second"))
    stream.add(StreamDelta(content="third"))
    await asyncio.sleep(0.05)  # far below the 10 s linger: nothing more may have been written
    before_end = list(sink.chunks)
    await stream.finish()
    chunks = sink.chunks
    assert before_end == [(0, "first")]
    assert chunks == [(0, "first"), (1, "secondthird")]


@in_loop
async def test_abort_drops_gathered_tokens_and_ends_the_flusher() -> None:
    sink = Sink()
    stream = ChunkStream(sink, ChunkPolicy(tokens=100, linger_ms=10_000))
    stream.start()
    stream.add(StreamDelta(content="first"))
    await eventually(lambda: len(sink.chunks) == 1, "the first chunk")
    stream.add(StreamDelta(content="never"))
    await asyncio.sleep(0.01)
    await stream.abort()
    stream.add(StreamDelta(content="after"))
    assert (sink.chunks, stream.started) == ([(0, "first")], True)


@in_loop
async def test_abort_before_any_chunk_writes_nothing() -> None:
    sink = Sink()
    stream = ChunkStream(sink, ChunkPolicy(tokens=100, linger_ms=10_000))
    stream.start()
    await stream.abort()
    stream.add(StreamDelta(content="after"))
    await asyncio.sleep(0.01)
    assert (sink.chunks, stream.started) == ([], False)


@in_loop
async def test_two_interleaved_choices_become_chunks_of_one_choice_each_in_order() -> None:
    sink = Sink()
    stream = ChunkStream(sink, ChunkPolicy(tokens=100, linger_ms=10_000))
    stream.start()
    stream.add(StreamDelta(choice=0, content="first"))
    await eventually(lambda: len(sink.deltas) == 1, "the first chunk at once")
    for delta in [
        StreamDelta(choice=0, content="He"),
        StreamDelta(choice=0, content="llo"),
        StreamDelta(choice=1, content="Bon"),
        StreamDelta(choice=0, content="!", finish_reason="stop"),
        StreamDelta(choice=0, content="late"),
        StreamDelta(choice=1, content="jour", finish_reason="length"),
    ]:
        stream.add(delta)
    assert await stream.finish() is None
    assert [(d.choice, d.content, d.finish_reason) for d in sink.deltas] == [
        (0, "first", None),
        (0, "Hello", None),
        (1, "Bon", None),
        (0, "!", "stop"),
        (0, "late", None),  # a choice's end closes its chunk: what follows is another
        (1, "jour", "length"),
    ]
    assert [seq for seq, _ in sink.chunks] == [0, 1, 2, 3, 4, 5]


@in_loop
async def test_tool_call_pieces_gathered_in_one_chunk_are_joined_per_call() -> None:
    sink = Sink()
    stream = ChunkStream(sink, ChunkPolicy(tokens=100, linger_ms=10_000))
    stream.start()
    stream.add(StreamDelta(tool_calls=(ToolCallDelta(0, "call_a", "weather"),)))
    await eventually(lambda: len(sink.deltas) == 1, "the first chunk at once")
    for pieces in [
        (ToolCallDelta(1, "call_b", "clock"),),
        (ToolCallDelta(0, arguments='{"city":'), ToolCallDelta(1, arguments="{}")),
        (ToolCallDelta(0, arguments='"Oslo"}'),),
    ]:
        stream.add(StreamDelta(tool_calls=pieces))
    stream.add(StreamDelta(finish_reason="tool_calls"))
    assert await stream.finish() is None
    first, joined = sink.deltas
    assert first.tool_calls_json() == (
        '[{"index":0,"id":"call_a","type":"function","function":{"name":"weather","arguments":""}}]'
    )
    assert joined.finish_reason == "tool_calls"
    assert json.loads(joined.tool_calls_json() or "") == [
        {"index": 1, "id": "call_b", "type": "function", "function": {"name": "clock", "arguments": "{}"}},
        {"index": 0, "function": {"arguments": '{"city":"Oslo"}'}},
    ]


def test_pieces_piled_up_behind_a_slow_broker_are_cut_into_chunks_within_the_size_bound() -> None:
    third = limits.MAX_CHUNK_CHARS // 3
    entry = {"token": "x", "logprob": -1.0, "bytes": [120], "top_logprobs": []}
    pieces = [StreamDelta(content="a" * third) for _ in range(5)]
    pieces.append(StreamDelta(content="b", logprobs=(entry,) * (limits.MAX_CHUNK_CHARS // 40)))
    pieces.append(StreamDelta(tool_calls=(ToolCallDelta(0, arguments="c" * limits.MAX_CHUNK_CHARS),)))
    chunks = merged(pieces)
    assert [len(c.content) for c in chunks] == [3 * third, 2 * third, 1, 0]
    assert all(c.size_chars() <= limits.MAX_CHUNK_CHARS for c in chunks[:2])
    assert "".join(c.content for c in chunks) == "".join(p.content for p in pieces), "nothing lost"
    assert chunks[-1].tool_calls == pieces[-1].tool_calls, "a piece over the bound alone"


@pytest.mark.parametrize(("tokens", "linger_ms"), [(0, 5.0), (-1, 5.0), (8, -1.0), (8, 10_001.0)])
def test_a_chunk_policy_out_of_range_is_refused(tokens: int, linger_ms: float) -> None:
    with pytest.raises(ValueError, match=r"token|linger"):
        ChunkPolicy(tokens=tokens, linger_ms=linger_ms)


# --- the dispatcher -------------------------------------------------------------------------------------


def streaming_rig(**overrides: object) -> Rig:
    # One chunk per token: with the fake's pieces, the chunks a test expects are exact.
    return rig(stream_chunk_tokens=1, stream_chunk_linger_ms=0, max_attempts=3, **overrides)


def chunks_on(r: Rig, topic: str) -> list[tuple[Produced, InferenceChunk]]:
    codec = chunk_codec()
    return [(p, codec.decode(p.value)) for p in r.producer.on(topic) if is_chunk(list(p.headers.items()))]


@in_loop
async def test_a_streamed_request_writes_ordered_chunks_then_its_result() -> None:
    streamed = a_request("HIGH", stream=True)
    plain = a_request("HIGH")

    r = streaming_rig()
    r.backend.pieces = ["Hel", "lo", ", ", "wor", "ld"]
    async with running(r):
        r.consumer.produce(r.partition("HIGH"), encoded(streamed))
        r.consumer.produce(r.partition("HIGH"), encoded(plain))
        await eventually(lambda: len(r.results()) == 2, "both results")
    chunks = chunks_on(r, r.topics.chunks)
    assert [c.seq for _, c in chunks] == [0, 1, 2, 3, 4]
    assert {c.request_id for _, c in chunks} == {streamed.request_id}, "no chunks for a plain request"
    assert all(p.key == streamed.request_id.encode() for p, _ in chunks), "keyed like the result"
    assert all(p.headers[KIND_HEADER] == b"chunk" for p, _ in chunks)
    assert {(c.attempt, c.tenant, c.dispatcher_id, c.model) for _, c in chunks} == {
        (1, streamed.tenant, "unit", "inferq-fast")
    }
    result = r.results()[streamed.request_id]
    assert result.status is Status.OK
    assert result.output == "".join(c.delta for _, c in chunks) == "Hello, world"
    assert not any(is_chunk(list(p.headers.items())) for p in r.producer.on(r.topics.results))
    sent = [(p.topic, p.key) for p in r.producer.sent]
    assert sent.index((r.topics.results, streamed.request_id.encode())) > max(
        i for i, (topic, _) in enumerate(sent) if topic == r.topics.chunks
    ), "the chunks are acknowledged before the result is written"
    assert r.backend.streamed == ["inferq-fast"], "only the streamed request is called with stream on"
    assert r.results()[plain.request_id].output == "hi"


@in_loop
async def test_chunk_records_carry_each_choice_its_tool_call_deltas_and_its_end() -> None:
    streamed = a_request("HIGH", stream=True)
    r = streaming_rig()
    r.backend.pieces = [
        StreamDelta(tool_calls=(ToolCallDelta(0, "call_1", "weather"),)),
        StreamDelta(choice=1, content="Hi", refusal="no"),
        StreamDelta(tool_calls=(ToolCallDelta(0, arguments="{}"),), finish_reason="tool_calls"),
    ]
    async with running(r):
        r.consumer.produce(r.partition("HIGH"), encoded(streamed))
        await eventually(lambda: len(r.results()) == 1, "the result")
    chunks = [c for _, c in chunks_on(r, r.topics.chunks)]
    assert [(c.seq, c.choice_index, c.delta, c.refusal, c.finish_reason) for c in chunks] == [
        (0, 0, "", None, None),
        (1, 1, "Hi", "no", None),
        (2, 0, "", None, "tool_calls"),
    ]
    assert [c.openai_tool_calls() for c in chunks] == [
        [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "weather", "arguments": ""}}],
        None,
        [{"index": 0, "function": {"arguments": "{}"}}],
    ]


@in_loop
async def test_a_regional_request_writes_its_chunks_to_its_regions_chunk_topic() -> None:
    r = streaming_rig()
    regional = f"{r.topics.results}.eu"
    request = a_request("MEDIUM", stream=True, reply_to=regional)
    async with running(r):
        r.consumer.produce(r.partition("MEDIUM"), encoded(request))
        await eventually(lambda: len(r.results(regional)) == 1, "the result on the regional topic")
    assert len(chunks_on(r, f"{r.topics.chunks}.eu")) == 2
    assert chunks_on(r, r.topics.chunks) == []
    assert chunks_on(r, regional) == []


@in_loop
async def test_a_failure_before_any_chunk_is_retried_as_before() -> None:
    request = a_request("HIGH", stream=True)

    r = streaming_rig()
    r.backend.stream_failure = (0, BackendError("backend answered 503", retriable=True, status=503))
    async with running(r):
        r.consumer.produce(r.partition("HIGH"), encoded(request))
        await eventually(lambda: len(r.producer.on(r.topics.retry)) == 1, "the retry")
    retry = request_codec().decode(r.producer.on(r.topics.retry)[0].value)
    assert (retry.request_id, retry.attempt, retry.stream) == (request.request_id, 2, True)
    assert r.producer.on(r.topics.results) == [], "no chunk, no result: the retry answers"
    assert r.dead_letters() == []


@in_loop
async def test_a_failure_after_chunks_is_one_failed_outcome_never_retried() -> None:
    request = a_request("HIGH", stream=True)

    r = streaming_rig()
    r.backend.pieces = ["one ", "two ", "three"]
    r.backend.stream_failure = (2, BackendError("backend closed the connection", retriable=True))
    async with running(r):
        r.consumer.produce(r.partition("HIGH"), encoded(request))
        await eventually(lambda: len(r.results()) == 1, "the outcome")
        await eventually(lambda: r.consumer.committed_offset(r.partition("HIGH")) == 1, "the commit")
    assert [c.delta for _, c in chunks_on(r, r.topics.chunks)] == ["one ", "two "]
    result = r.results()[request.request_id]
    assert result.status is Status.FAILED
    assert result.error == "failed mid-stream after 2 chunks: backend closed the connection"
    assert r.producer.on(r.topics.retry) == [], "a retry would send the same tokens again"
    outcomes = [p for p in r.producer.on(r.topics.results) if not is_chunk(list(p.headers.items()))]
    assert len(outcomes) == 1
    (dead,) = r.dead_letters()
    assert dead.headers["inferq.error"] == result.error.encode()
    assert dead.key == request.request_id.encode()


@in_loop
async def test_a_chunk_topic_that_loses_chunks_changes_no_outcome() -> None:
    r = streaming_rig()
    r.producer.refuse(r.topics.chunks, KafkaError._MSG_TIMED_OUT)
    r.backend.pieces = ["Hel", "lo"]
    request = a_request("HIGH", stream=True)
    async with running(r):
        r.consumer.produce(r.partition("HIGH"), encoded(request))
        await eventually(lambda: len(r.results()) == 1, "the result")
        await eventually(lambda: r.consumer.committed_offset(r.partition("HIGH")) == 1, "the commit")
    result = r.results()[request.request_id]
    # Chunks are transient: the result holds the whole answer, and nothing is dead-lettered.
    assert (result.status, result.output) == (Status.OK, "Hello")
    assert chunks_on(r, r.topics.chunks) == []
    assert r.dead_letters() == []
    assert r.producer.on(r.topics.retry) == []
    assert r.producer.attempts.count(r.topics.chunks) == 2, "each chunk tried once, then given up"


@in_loop
async def test_a_stream_cut_by_shutdown_leaves_no_outcome_and_no_flusher() -> None:
    request = a_request("HIGH", stream=True, deadline_ms=60_000)

    r = streaming_rig(drain_timeout_s=0.2)
    async with running(r):
        r.backend.hold()
        r.consumer.produce(r.partition("HIGH"), encoded(request))
        await eventually(lambda: r.backend.in_flight == 1, "the call running")
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "chunk-flusher"]
    assert r.results() == {}, "the next owner redoes it"
