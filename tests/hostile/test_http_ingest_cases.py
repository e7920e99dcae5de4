"""The bodies of issue 9 and their neighbours, each against the ingest app in-process: the answer
(never a 5xx but the producer's deliberate 503), the field it names, and that nothing was written."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from starlette.testclient import TestClient

from inferq.ingest.app import create_app
from inferq.ingest.settings import IngestSettings
from inferq.messaging import limits
from inferq.messaging.codec import request_codec
from inferq.messaging.producer import ProduceError
from inferq.messaging.topics import TopicNames
from tests.hostile.conftest import HostileFigures
from tests.hostile.record_rules import broken_rules
from tests.support.fakes import FakeBacklog, SwitchableProducer

MIB = 1_048_576
TOPICS = TopicNames("inferq")
CHAT: dict[str, Any] = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "hi"}]}


class Ingest:
    def __init__(self, client: TestClient, producer: SwitchableProducer, figures: HostileFigures) -> None:
        self.client = client
        self.producer = producer
        self.figures = figures

    def post(self, area: str, raw: bytes | None = None, *, body: Any = None, **kwargs: Any) -> Any:
        if raw is None:
            raw = json.dumps(body).encode()
        sent_before = len(self.producer.sent)
        response = self.client.post("/v1/requests", content=raw, **kwargs)
        self.figures.tried(f"http cases: {area}")
        if response.status_code >= 500 and not self.producer.refusing:
            self.figures.server_errors += 1
        assert response.status_code < 500 or self.producer.refusing, response.text[:300]
        if response.status_code != 202:
            assert len(self.producer.sent) == sent_before, "a refused request was written"
            assert response.json()["error"]
        return response

    def refused(self, area: str, status: int, body: Any = None, raw: bytes | None = None) -> dict[str, Any]:
        response = self.post(area, raw, body=body)
        assert response.status_code == status, response.text[:300]
        answer: dict[str, Any] = response.json()
        return answer

    def fields(self, area: str, body: Any) -> set[str]:
        """The fields a 422 names."""
        answer = self.refused(area, 422, body)
        return {p["field"] for p in answer["problems"]}

    def accepted(self, area: str, body: Any = None, raw: bytes | None = None) -> Any:
        response = self.post(area, raw, body=body)
        assert response.status_code == 202, response.text[:300]
        _, value, key = self.producer.sent[-1]
        assert broken_rules(value, key, TOPICS) == []
        return request_codec().decode(value)


@pytest.fixture
def ingest(hostile_figures: HostileFigures) -> Iterator[Ingest]:
    producer = SwitchableProducer()
    app = create_app(IngestSettings(), producer=producer, check_topics=False, backlog=FakeBacklog())
    with TestClient(app) as client:
        yield Ingest(client, producer, hostile_figures)


# --- the four bodies that answered 500 ------------------------------------------------------------


def test_an_estimated_tokens_past_the_avro_int_is_422(ingest):
    for value in (2**31, 2**31 - 1, 2**63, -1):
        assert ingest.fields("integers", CHAT | {"estimated_tokens": value}) == {"estimated_tokens"}
    assert ingest.accepted("integers", CHAT | {"estimated_tokens": limits.MAX_ESTIMATED_TOKENS})


def test_an_expire_at_ms_past_the_avro_long_or_a_week_ahead_is_422(ingest):
    now_ms = time.time_ns() // 1_000_000
    for value in (2**63, 2**62, now_ms + limits.MAX_DEADLINE_MS + 60_000, now_ms - 1, 0, -(2**63)):
        assert ingest.fields("deadlines", CHAT | {"expire_at_ms": value}) == {"expire_at_ms"}
    record = ingest.accepted("deadlines", CHAT | {"expire_at_ms": now_ms + 60_000})
    assert record.expire_at_ms == now_ms + 60_000


def test_both_deadlines_are_refused_naming_both(ingest):
    both = CHAT | {"deadline_ms": 1_000, "expire_at_ms": time.time_ns() // 1_000_000 + 60_000}
    answer = ingest.refused("deadlines", 422, both)
    assert [p["field"] for p in answer["problems"]] == ["deadline_ms", "expire_at_ms"]
    assert "not both" in answer["error"]


def test_json_nested_100000_levels_is_400_at_once(ingest):
    for raw in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000, b"[" * MIB):
        started = time.monotonic()
        answer = ingest.refused("json bounds", 400, raw=raw)
        assert time.monotonic() - started < 2.0
        assert "deeper than 32 levels" in answer["error"] or "never closed" in answer["error"]


def test_a_5000_digit_number_is_400(ingest):
    for number in ("9" * 5_000, "-" + "9" * 5_000, "1" + "0" * 4_999 + ".5", "1e" + "9" * 5_000):
        raw = json.dumps(CHAT)[:-1].encode() + b', "estimated_tokens": ' + number.encode() + b"}"
        answer = ingest.refused("json bounds", 400, raw=raw)
        assert answer["error"] == "body has a number longer than 40 characters"


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e999"])
def test_numbers_json_cannot_carry_are_400(ingest, literal):
    raw = b'{"scenario": "x", "messages": [], "params": {"temperature": ' + literal + b"}}"
    ingest.refused("json bounds", 400, raw=raw)


def test_a_key_twice_is_400(ingest):
    raw = b'{"scenario": "x", "scenario": "realtime_chat", "messages": [{"role": "user", "content": "a"}]}'
    assert ingest.refused("json bounds", 400, raw=raw)["error"] == "an object has the same key twice"


# --- bytes that are not UTF-8 JSON ----------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"scenario": "\xff"}',
        b'{"scenario": "\xc0\xaf"}',  # overlong '/'
        b'{"scenario": "\x80"}',  # a lone continuation byte
        b'{"scenario": "\xed\xa0\x80"}',  # a surrogate spelt in UTF-8
        b'{"scenario": "\xe2\x82"}',  # a character cut short
        json.dumps(CHAT).encode("utf-16"),
        b"\xef\xbb\xbf" + json.dumps(CHAT).encode(),
        b"",
        b"\x00",
    ],
)
def test_a_body_that_is_not_utf8_json_is_400(ingest, raw):
    ingest.refused("utf-8", 400, raw=raw)


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "a\\ud83d", "\\ude00b"])
def test_a_lone_surrogate_in_text_is_422_naming_the_field(ingest, escape):
    content = b'{"scenario": "x", "messages": [{"role": "user", "content": "' + escape.encode() + b'"}]}'
    answer = ingest.refused("utf-8", 422, raw=content)
    assert answer["problems"][0]["field"] == "messages.0.content"
    stop = json.dumps(CHAT)[:-1] + ', "params": {"stop": ["' + escape + '"]}}'
    assert ingest.refused("utf-8", 422, raw=stop.encode())["problems"][0]["field"].startswith("params.stop")


def test_a_surrogate_pair_is_text(ingest):
    raw = b'{"scenario": "x", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}'
    assert ingest.accepted("utf-8", raw=raw).messages[0].content == "\N{GRINNING FACE}"


# --- reply_to --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "topic",
    [
        "bad/name",
        "inferq.requests.high",
        "inferq.requests.medium",
        "inferq.requests.low",
        "inferq.retry",
        "inferq.dlq",
        "inferq.results.retry",
        "inferq.results.dlq",
        "inferq.results.requests",
        "other.results",
        "inferq.results.EU",
        "inferq.results.eu_west",
        "inferq.results." + "a" * 33,
        "x" * 250,
        "",
        "inferq.results\n",
        "../inferq.results",
        "inferq.results.é",
    ],
)
def test_a_reply_topic_that_is_not_ours_is_422(ingest, topic):
    assert ingest.fields("reply_to", CHAT | {"reply_to": topic}) == {"reply_to"}


@pytest.mark.parametrize("topic", ["inferq.results", "inferq.results.eu-west-1", "inferq.results.a"])
def test_the_reply_topics_are_accepted(ingest, topic):
    assert ingest.accepted("reply_to", CHAT | {"reply_to": topic}).reply_to == topic


# --- params ----------------------------------------------------------------------------------------

TOOL = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    "params",
    [
        {"stream": True},
        {"model": "gpt-4o"},
        {"messages": [{"role": "system", "content": "obey"}]},
        {"best_of": 3},
        {"audio": {"voice": "alloy"}},
        {"functions": [{"name": "f"}]},
        {"stream_options": {"include_usage": True}},
        {"safety_checks": True},
        {"stream": True, "model": "any"},
    ],
)
def test_a_parameter_off_the_allow_list_is_422_naming_it(ingest, params):
    answer = ingest.refused("params", 422, CHAT | {"params": params})
    assert {p["field"] for p in answer["problems"]} == {f"params.{name}" for name in params}
    assert all("not an allowed parameter" in p["problem"] for p in answer["problems"])


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("temperature", 2.01),
        ("temperature", -0.1),
        ("temperature", "1"),
        ("temperature", True),
        ("top_p", 1.5),
        ("max_tokens", 0),
        ("max_tokens", limits.MAX_COMPLETION_TOKENS + 1),
        ("max_tokens", 1.5),
        ("stop", ["a"] * 5),
        ("stop", "x" * 129),
        ("stop", ""),
        ("stop", []),
        ("stop", [1]),
        ("seed", 2**63),
        ("seed", "1"),
        ("presence_penalty", 2.5),
        ("frequency_penalty", -3),
        ("response_format", {"type": "xml"}),
        ("response_format", {"type": "text", "schema": {}}),
        ("response_format", "json_object"),
        (
            "response_format",
            {"type": "json_schema", "json_schema": {"name": "m", "schema": {"d": "x" * 70_000}}},
        ),
        ("tools", []),
        ("tools", "weather"),
        ("tools", [TOOL] * (limits.MAX_TOOLS + 1)),
        ("tools", [{"type": "function", "function": {"name": "f", "parameters": {"d": "x" * 20_000}}}]),
        ("tools", [{"type": "function", "function": {"name": "no spaces"}}]),
        ("tool_choice", "always"),
        ("parallel_tool_calls", "yes"),
        ("n", 0),
        ("n", limits.MAX_CHOICES + 1),
        ("n", "2"),
        ("n", True),
        ("logprobs", "yes"),
    ],
)
def test_a_parameter_out_of_bounds_is_422_naming_it(ingest, name, value):
    fields = ingest.fields("params", CHAT | {"params": {name: value}})
    assert fields and all(f.startswith(f"params.{name}") for f in fields), fields


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"logprobs": True, "top_logprobs": limits.MAX_TOP_LOGPROBS + 1}, "params.top_logprobs"),
        ({"logprobs": True, "top_logprobs": -1}, "params.top_logprobs"),
        ({"top_logprobs": 2}, "params"),
        ({"logprobs": False, "top_logprobs": 2}, "params"),
    ],
)
def test_top_logprobs_out_of_bounds_or_without_logprobs_is_422(ingest, params, field):
    answer = ingest.refused("params", 422, CHAT | {"params": params})
    assert [p["field"] for p in answer["problems"]] == [field]
    if field == "params":
        assert answer["problems"][0]["problem"] == "top_logprobs is only allowed with logprobs true"


def test_every_allowed_parameter_at_its_bounds_reaches_the_record(ingest):
    params = {
        "temperature": 2,
        "top_p": 0,
        "max_tokens": limits.MAX_COMPLETION_TOKENS,
        "stop": ["a", "b", "c", "x" * 128],
        "seed": -(2**63),
        "presence_penalty": -2,
        "frequency_penalty": 2.0,
        "response_format": {"type": "json_object"},
        "tools": [TOOL] * limits.MAX_TOOLS,
        "tool_choice": "required",
        "parallel_tool_calls": True,
        "n": limits.MAX_CHOICES,
        "logprobs": True,
        "top_logprobs": limits.MAX_TOP_LOGPROBS,
    }
    record = ingest.accepted("params", CHAT | {"params": params})
    assert record.decoded_params() == params


# --- wrong types and many problems ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("estimated_tokens", True),
        ("estimated_tokens", "5"),
        ("estimated_tokens", 5.0),
        ("deadline_ms", 0),
        ("deadline_ms", limits.MAX_DEADLINE_MS + 1),
        ("scenario", 5),
        ("scenario", "a b"),
        ("scenario", "x" * 65),
        ("session_id", "s\n"),
        ("session_id", "user@example.com"),
        ("request_id", "r" * 129),
        ("tenant", ""),
        ("priority", "URGENT"),
        ("messages", []),
        ("messages", [{"role": "user", "content": "x" * (limits.MAX_MESSAGE_CHARS + 1)}]),
        ("messages", [{"role": "user", "content": "a"}] * (limits.MAX_MESSAGES + 1)),
    ],
)
def test_a_field_of_the_wrong_type_or_shape_is_422_naming_it(ingest, field, value):
    fields = ingest.fields("fields", CHAT | {field: value})
    assert fields and all(f.split(".")[0] == field for f in fields), fields


def test_a_body_breaking_thousands_of_rules_gets_a_bounded_answer(ingest):
    body = CHAT | {f"unknown_{i}": i for i in range(5_000)} | {"k" * 100_000: 1}
    response = ingest.post("fields", body=body)
    assert response.status_code == 422
    problems = response.json()["problems"]
    assert len(problems) == 21 and problems[-1]["problem"] == "and 4981 more problems"
    assert len(response.content) < 10_000
    assert all(len(p["field"]) <= 64 for p in problems)


# --- sizes -----------------------------------------------------------------------------------------


def padded_to(size: int) -> bytes:
    """A valid request body of exactly `size` bytes (JSON whitespace before the closing brace)."""
    raw = json.dumps(CHAT).encode()
    return raw[:-1] + b" " * (size - len(raw)) + b"}"


def test_a_body_of_exactly_the_limit_is_accepted_and_one_byte_more_is_413(ingest):
    assert ingest.accepted("sizes", raw=padded_to(MIB))
    answer = ingest.refused("sizes", 413, raw=padded_to(MIB + 1))
    assert answer["error"] == f"body larger than {MIB} bytes"


def test_a_content_length_that_lies_is_400(ingest):
    raw = json.dumps(CHAT).encode()
    for declared in (len(raw) - 1, len(raw) + 1, 0):
        response = ingest.post("sizes", raw, headers={"content-length": str(declared)})
        assert response.status_code == 400, response.text
        assert response.json()["error"] == f"body is {len(raw)} bytes but its Content-Length says {declared}"
    for declared in (b"-1", b"1e3", b"0x10", "١٢".encode(), b"\xb2"):
        response = ingest.post("sizes", raw, headers={"content-length": declared})
        assert response.status_code == 400
    response = ingest.post("sizes", raw, headers={"content-length": str(MIB + 1)})
    assert response.status_code == 413


def test_a_chunked_body_of_2_mib_is_413(ingest):
    def chunks() -> Iterator[bytes]:
        yield json.dumps(CHAT).encode()[:-1]
        for _ in range(32):
            yield b" " * 65_536

    response = ingest.post("sizes", chunks())  # type: ignore[arg-type]
    assert response.status_code == 413


def test_text_that_grows_when_encoded_past_the_record_limit_is_413_not_503(ingest):
    # 500,000 characters: within the message bound and, at 2 bytes each, within the body limit too;
    # the record (1,000,000+ bytes) is over what the producer takes.
    content = "é" * 250_000
    body = {"scenario": "x", "messages": [{"role": "user", "content": content}] * 2}
    raw = json.dumps(body, ensure_ascii=False).encode()
    assert len(raw) < MIB
    answer = ingest.refused("sizes", 413, raw=raw)
    assert answer["error"].startswith("request too large: its record is ")
    # The same number of characters in ASCII fits.
    ascii_body = {"scenario": "x", "messages": [{"role": "user", "content": "e" * 250_000}] * 2}
    assert ingest.accepted("sizes", ascii_body)


def test_a_record_the_producer_refuses_for_size_is_413_not_503(hostile_figures):
    class TooLargeProducer(SwitchableProducer):
        async def produce(self, topic: str, value: bytes, *, key: bytes | None = None, **_: Any) -> Any:
            try:
                raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
            except KafkaException as exc:
                raise ProduceError(topic, exc.args[0]) from exc

    app = create_app(IngestSettings(), producer=TooLargeProducer(), check_topics=False, backlog=FakeBacklog())
    with TestClient(app) as client:
        response = client.post("/v1/requests", json=CHAT)
    hostile_figures.tried("http cases: sizes")
    assert response.status_code == 413


# --- the deliberate 503 ------------------------------------------------------------------------------


def test_a_produce_failure_is_503_with_a_fixed_reason(ingest):
    ingest.producer.reason = "Broker: Not enough in-sync replicas (broker 10.0.0.7:9092, sasl user svc)"
    ingest.producer.refusing = True
    response = ingest.post("503", body=CHAT)
    assert response.status_code == 503
    assert response.json() == {"error": "queue unavailable, retry later"}
    assert response.headers["retry-after"] == "1"
