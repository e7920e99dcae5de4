import copy
import io
import json
import struct
from dataclasses import replace
from pathlib import Path

import fastavro
import pytest

from inferq.messaging.codec import (
    AvroCodec,
    chunk_codec,
    earlier_schemas,
    load_schema,
    request_codec,
    result_codec,
)
from inferq.messaging.errors import DecodeError, UnknownSchemaError
from inferq.messaging.records import (
    CHUNK_KIND,
    KIND_HEADER,
    ChatMessage,
    InferenceChunk,
    InferenceRequest,
    InferenceResult,
    Status,
    Usage,
    is_chunk,
)
from inferq.messaging.tiers import Tier

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def a_record(**overrides):
    """The request as the Avro dict a producer outside inferq would write."""
    record = {
        "request_id": "r-1",
        "tenant": "acme",
        "origin_region": "eu-west",
        "scenario": "realtime_chat",
        "tier": "HIGH",
        "created_at_ms": 1_700_000_000_000,
        "expire_at_ms": 1_700_000_005_000,
        "attempt": 1,
        "estimated_tokens": 120,
        "reply_to": None,
        "session_id": "s-9",
        "model": None,
        "messages": [
            {
                "role": "user",
                "content": "你好, how are you?",
                "tool_calls": None,
                "tool_call_id": None,
                "name": None,
            }
        ],
        "params": {"temperature": "0.2"},
        "not_before_ms": None,
        "stream": False,
        "callback_url": None,
        "embedding_input": None,
        "embedding_dimensions": None,
    }
    record.update(overrides)
    return record


def test_request_round_trip_keeps_every_field():
    codec = request_codec()
    request = InferenceRequest.from_record(a_record())
    assert codec.decode(codec.encode(request)) == request
    assert request.to_record() == a_record()
    assert request.messages == (ChatMessage("user", "你好, how are you?"),)
    assert request.decoded_params() == {"temperature": 0.2}


def test_typed_fields_are_typed():
    request = InferenceRequest.from_record(a_record())
    assert request.tier is Tier.HIGH
    assert request.key == b"s-9"
    assert request.retry(not_before_ms=7).attempt == 2
    assert request.retry(not_before_ms=7).not_before_ms == 7


def test_result_round_trip():
    codec = result_codec()
    record = {
        "request_id": "r-1",
        "tier": "LOW",
        "status": "EXPIRED",
        "output": None,
        "error": "late",
        "model": "m",
        "usage": {
            "prompt_tokens": 1,
            "completion_tokens": 2,
            "total_tokens": 3,
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        },
        "enqueued_at_ms": 1,
        "dispatched_at_ms": None,
        "completed_at_ms": 5,
        "attempts": 1,
        "dispatcher_id": "d",
        "tenant": "acme",
        "callback_url": None,
        "finish_reason": None,
        "system_fingerprint": None,
        "tool_calls": None,
        "choices": None,
        "embeddings": None,
    }
    result = InferenceResult.from_record(record)
    assert codec.decode(codec.encode(result)) == result
    assert result.to_record() == record
    assert result.status is Status.EXPIRED and result.usage == Usage(1, 2, 3)
    assert result.end_to_end_ms == 4 and result.queue_wait_ms is None


def test_header_is_single_object_encoding_and_plain_fastavro_decodes_it():
    """A reader with only the .avsc file and fastavro decodes our records (no inferq code)."""
    data = request_codec().avro.encode(a_record())
    assert data[:2] == b"\xc3\x01"
    schema = fastavro.parse_schema(json.loads((SCHEMAS / "inference_request.avsc").read_text()))
    canonical = fastavro.schema.to_parsing_canonical_form(schema)
    expected = struct.pack("<Q", int(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"), 16))
    assert data[2:10] == expected
    assert fastavro.schemaless_reader(io.BytesIO(data[10:]), schema) == a_record()


@pytest.mark.parametrize(
    "garbage",
    [b"", b"hello world", b"\xc3\x01", b'{"request_id": "x"}', b"\x00" * 40],
)
def test_garbage_raises_decode_error(garbage):
    with pytest.raises(DecodeError):
        request_codec().decode(garbage)


def test_truncated_body_raises_decode_error():
    data = request_codec().avro.encode(a_record())
    with pytest.raises(DecodeError):
        request_codec().decode(data[:-7])


def test_trailing_bytes_raise_decode_error():
    data = request_codec().avro.encode(a_record())
    with pytest.raises(DecodeError, match="trailing"):
        request_codec().decode(data + b"\x01\x02")


def test_unknown_fingerprint_raises_typed_error():
    data = bytearray(request_codec().avro.encode(a_record()))
    data[2:10] = b"\x01" * 8
    with pytest.raises(UnknownSchemaError) as info:
        request_codec().decode(bytes(data))
    assert info.value.fingerprint == b"\x01" * 8


def test_result_record_is_not_a_record():
    data = result_codec().avro.encode(
        {
            "request_id": "r",
            "tier": "HIGH",
            "status": "OK",
            "model": "m",
            "enqueued_at_ms": 1,
            "completed_at_ms": 2,
            "attempts": 1,
            "dispatcher_id": "d",
        }
    )
    with pytest.raises(UnknownSchemaError):
        request_codec().decode(data)


def _v2_schema():
    schema = copy.deepcopy(load_schema("inference_request"))
    schema["fields"].append({"name": "priority_reason", "type": ["null", "string"], "default": None})
    return schema


def test_evolution_new_writer_old_reader():
    """A producer already on v2 (one added optional field): today's dispatcher still reads it."""
    v1 = load_schema("inference_request")
    new_writer = AvroCodec(_v2_schema())
    old_reader = AvroCodec(v1)
    old_reader.add_writer(_v2_schema())
    decoded = old_reader.decode(new_writer.encode(a_record(priority_reason="express")))
    assert decoded == a_record()
    assert "priority_reason" not in decoded


def test_evolution_old_writer_new_reader():
    """Records written before an upgrade are read by the new schema with the field's default."""
    old_writer = AvroCodec(load_schema("inference_request"))
    new_reader = AvroCodec(_v2_schema())
    new_reader.add_writer(load_schema("inference_request"))
    decoded = new_reader.decode(old_writer.encode(a_record()))
    assert decoded["priority_reason"] is None
    assert decoded["messages"] == a_record()["messages"]


def test_reader_without_the_writer_schema_refuses():
    with pytest.raises(UnknownSchemaError):
        AvroCodec(load_schema("inference_request")).decode(
            AvroCodec(_v2_schema()).encode(a_record(priority_reason=None))
        )


# A result as schema v1 has it (no tenant, no webhook, no output or usage).
V1_RESULT = {
    "request_id": "r-1",
    "tier": "HIGH",
    "status": "OK",
    "model": "m",
    "enqueued_at_ms": 1,
    "completed_at_ms": 2,
    "attempts": 1,
    "dispatcher_id": "d",
}


def test_a_result_written_before_tenants_decodes_as_tenant_default():
    """A dispatcher not yet upgraded writes schema v1 (no tenant): the results service still reads it."""
    v1, *_later = earlier_schemas("inference_result")
    assert "tenant" not in {f["name"] for f in v1["fields"]}
    old_record = dict(V1_RESULT)
    old_bytes = AvroCodec(v1).encode(old_record)
    decoded = result_codec().decode(old_bytes)
    assert (decoded.request_id, decoded.tenant) == ("r-1", "default")
    # And a v2 result with its tenant keeps it through the round trip.
    new_bytes = result_codec().encode(InferenceResult.from_record(old_record | {"tenant": "acme"}))
    assert result_codec().decode(new_bytes).tenant == "acme"


def test_a_request_written_before_streaming_decodes_without_stream_or_callback():
    """A producer not yet upgraded writes request v1: the dispatcher reads it as not streamed."""
    v1, *_later = earlier_schemas("inference_request")
    assert {"stream", "callback_url"}.isdisjoint(f["name"] for f in v1["fields"])
    old = a_record(messages=[{"role": "user", "content": "hi"}])
    del old["stream"], old["callback_url"]
    decoded = request_codec().decode(AvroCodec(v1).encode(old))
    assert (decoded.stream, decoded.callback_url) == (False, None)
    streamed = InferenceRequest.from_record(a_record(stream=True, callback_url="https://hooks.example/x"))
    assert request_codec().decode(request_codec().encode(streamed)) == streamed


def test_chunk_round_trip_and_its_header():
    chunk = InferenceChunk(
        "r-1", "acme", attempt=2, seq=7, delta="你好", model="m", created_at_ms=5, dispatcher_id="d"
    )
    assert chunk_codec().decode(chunk_codec().encode(chunk)) == chunk
    assert is_chunk([(KIND_HEADER, CHUNK_KIND)])
    assert is_chunk([("other", b"x"), (KIND_HEADER, "chunk")])
    assert not is_chunk(None) and not is_chunk([]) and not is_chunk([(KIND_HEADER, b"result")])
    # A chunk's bytes are not a result: the fingerprints differ, so a reader that ignores the header
    # gets a clear refusal rather than a garbled result.
    with pytest.raises(UnknownSchemaError):
        result_codec().decode(chunk_codec().encode(chunk))


def test_a_chunk_keeps_its_choice_and_deltas_and_v1_chunks_read_both_ways():
    (v1,) = earlier_schemas("inference_chunk")
    assert "choice_index" not in {f["name"] for f in v1["fields"]}
    base = InferenceChunk(
        "r-1", "acme", attempt=1, seq=3, delta="hi", model="m", created_at_ms=5, dispatcher_id="d"
    )
    full = replace(
        base,
        choice_index=1,
        tool_calls='[{"index":0,"function":{"arguments":"{}"}}]',
        refusal="no",
        finish_reason="tool_calls",
        logprobs='{"content":[],"refusal":null}',
    )
    assert chunk_codec().decode(chunk_codec().encode(full)) == full
    assert full.openai_tool_calls() == [{"index": 0, "function": {"arguments": "{}"}}]
    # A dispatcher not yet upgraded writes v1: read as the first choice, text only.
    assert chunk_codec().decode(AvroCodec(v1).encode(base.to_record())) == base
    # A reader not yet upgraded (v1, told of v2) reads a v2 chunk's text and drops the rest.
    old_reader = AvroCodec(v1)
    old_reader.add_writer(load_schema("inference_chunk"))
    assert old_reader.decode(chunk_codec().encode(full)) == {
        k: v for k, v in full.to_record().items() if k in {f["name"] for f in v1["fields"]}
    }


def test_a_result_keeps_its_webhook_and_one_written_before_webhooks_has_none():
    _v1, v2, *_later = earlier_schemas("inference_result")
    assert "callback_url" not in {f["name"] for f in v2["fields"]}
    old_record = V1_RESULT | {"tier": "LOW", "tenant": "acme"}
    assert result_codec().decode(AvroCodec(v2).encode(old_record)).callback_url is None
    hooked = InferenceResult.from_record(old_record | {"callback_url": "https://hooks.example/r"})
    assert result_codec().decode(result_codec().encode(hooked)).callback_url == "https://hooks.example/r"


def test_a_result_keeps_what_the_backend_said_and_one_written_before_has_none():
    """v4 carries the finish reason, the fingerprint and the usage's details; a v3 record (a
    dispatcher not yet upgraded) still reads, with none of them."""
    _v1, _v2, v3, *_later = earlier_schemas("inference_result")
    assert {"finish_reason", "system_fingerprint"}.isdisjoint(f["name"] for f in v3["fields"])
    old_record = V1_RESULT | {
        "output": "cut sh",
        "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7},
        "tenant": "acme",
        "callback_url": None,
    }
    old = result_codec().decode(AvroCodec(v3).encode(old_record))
    assert (old.finish_reason, old.system_fingerprint) == (None, None)
    assert old.usage == Usage(4, 3, 7)
    assert old.usage.as_openai() == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}

    details = {"cached_tokens": 2, "audio_tokens": 0}
    told = InferenceResult.from_record(
        old_record
        | {
            "finish_reason": "length",
            "system_fingerprint": "fp_44709d6fcb",
            "usage": old_record["usage"]
            | {"prompt_tokens_details": details, "completion_tokens_details": {"reasoning_tokens": 1}},
        }
    )
    back = result_codec().decode(result_codec().encode(told))
    assert back == told
    assert (back.finish_reason, back.system_fingerprint) == ("length", "fp_44709d6fcb")
    assert back.usage is not None and back.usage.as_openai() == {
        "prompt_tokens": 4,
        "completion_tokens": 3,
        "total_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 2, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 1},
    }


@pytest.mark.parametrize(
    "hostile",
    [
        {"finish_reason": 3},
        {"system_fingerprint": ["fp"]},
        {"usage": Usage(1, 1, 2).to_record() | {"prompt_tokens_details": "x"}},
        {"usage": Usage(1, 1, 2).to_record() | {"completion_tokens_details": {"reasoning_tokens": 2**31}}},
    ],
)
def test_a_new_field_of_the_wrong_type_is_refused_by_the_codec(hostile):
    """Avro's types are the last guard: a wrong type or a counter past an int never reaches Kafka."""
    base = InferenceResult(
        "r-1", Tier.HIGH, Status.OK, "m", enqueued_at_ms=1, completed_at_ms=2, attempts=1, dispatcher_id="d"
    ).to_record()
    with pytest.raises((ValueError, TypeError)):
        result_codec().avro.encode(base | hostile)


CALLS = '[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\\"q\\":\\"tea\\"}"}}]'


def test_a_request_keeps_its_tool_calls_and_one_written_before_tools_has_none():
    """v3 messages carry an assistant's tool calls, a tool answer's call id and a name; a v2 record
    (a producer not yet upgraded) still reads, its messages with none of them."""
    _v1, v2, *_later = earlier_schemas("inference_request")
    message_fields = next(f for f in v2["fields"] if f["name"] == "messages")["type"]["items"]["fields"]
    assert [f["name"] for f in message_fields] == ["role", "content"]
    old = a_record(messages=[{"role": "user", "content": "hi"}])
    decoded = request_codec().decode(AvroCodec(v2).encode(old))
    assert decoded.messages == (ChatMessage("user", "hi"),)
    assert decoded.openai_messages() == [{"role": "user", "content": "hi"}]

    asked = ChatMessage("assistant", "", tool_calls=CALLS)
    answered = ChatMessage("tool", "18 degrees", tool_call_id="call_1", name="lookup")
    request = InferenceRequest.from_record(a_record())
    request = InferenceRequest.from_record(
        request.to_record() | {"messages": [m.to_record() for m in (*request.messages, asked, answered)]}
    )
    back = request_codec().decode(request_codec().encode(request))
    assert back == request
    assert back.openai_messages()[1:] == [
        {"role": "assistant", "content": None, "tool_calls": json.loads(CALLS)},
        {"role": "tool", "content": "18 degrees", "tool_call_id": "call_1", "name": "lookup"},
    ]


def test_a_result_keeps_its_tool_calls_and_a_v4_one_reads_with_none():
    _v1, _v2, _v3, v4, *_later = earlier_schemas("inference_result")
    assert "tool_calls" not in {f["name"] for f in v4["fields"]}
    old_record = {
        "request_id": "r-1",
        "tier": "HIGH",
        "status": "OK",
        "output": "hello",
        "model": "m",
        "enqueued_at_ms": 1,
        "completed_at_ms": 2,
        "attempts": 1,
        "dispatcher_id": "d",
        "finish_reason": "stop",
    }
    old = result_codec().decode(AvroCodec(v4).encode(old_record))
    assert (old.output, old.finish_reason, old.tool_calls, old.openai_tool_calls()) == (
        "hello",
        "stop",
        None,
        None,
    )
    called = InferenceResult.from_record(
        old_record | {"output": "", "finish_reason": "tool_calls", "tool_calls": CALLS}
    )
    back = result_codec().decode(result_codec().encode(called))
    assert back == called and back.openai_tool_calls() == json.loads(CALLS)
