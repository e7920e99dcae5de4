"""Generated bodies and headers against ``POST /v1/chat/completions`` and ``POST /v1/embeddings``,
in-process with a producer that keeps what it gets and no reply topic (an accepted call waits 10 ms
and is answered 504 ``wait_exceeded``, its record written): every answer is an OpenAI error object
with a 4xx, or that 504; never another 5xx; nothing is written for a refusal, exactly one record,
within every bound, for an acceptance. Then the extremes of the function-calling, choice and
embedding fields, each a 400 naming its parameter."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from inferq.ingest.app import create_app
from inferq.ingest.settings import IngestSettings
from inferq.messaging.topics import TopicNames
from tests.hostile.conftest import HostileFigures
from tests.hostile.record_rules import broken_rules
from tests.hostile.test_http_ingest_fuzz import json_values
from tests.support.fakes import FakeBacklog, RecordingProducer

TOPICS = TopicNames("inferq")
REFUSALS = {400, 403, 404, 413, 422, 429}
VALID = {
    "model": "inferq",
    "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    "temperature": 0.5,
    "max_tokens": 10,
    "stream": False,
    "metadata": {"inferq_priority": "LOW"},
}
KEYS = sorted(
    {
        *VALID,
        "n",
        "stop",
        "seed",
        "top_p",
        "user",
        "stream_options",
        "response_format",
        "max_completion_tokens",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "reasoning_effort",
        "modalities",
        "prediction",
        "web_search_options",
        "service_tier",
        "verbosity",
        "store",
        "prompt_cache_key",
        "safety_identifier",
        "presence_penalty",
    }
)
EMBEDDING = {
    "model": "inferq",
    "input": ["a memory", "another one"],
    "dimensions": 64,
    "encoding_format": "float",
}
EMBEDDING_KEYS = sorted({*EMBEDDING, "user"})
HEADERS = ["X-Inferq-Priority", "X-Inferq-Scenario", "X-Inferq-Deadline-Ms", "X-Stainless-Read-Timeout"]
FUZZ = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


class Chat:
    def __init__(self, client: TestClient, producer: RecordingProducer) -> None:
        self.client = client
        self.producer = producer

    def post(
        self,
        raw: bytes,
        headers: dict[str, str],
        figures: HostileFigures,
        area: str,
        path: str = "/v1/chat/completions",
    ) -> int:
        before = len(self.producer.sent)
        response = self.client.post(path, content=raw, headers={"content-type": "application/json"} | headers)
        figures.tried(area)
        status = response.status_code
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, error
        if status == 504:
            assert error["code"] == "wait_exceeded", error
            new = self.producer.sent[before:]
            assert len(new) == 1
            assert broken_rules(new[0][1], new[0][2], TOPICS) == []
        else:
            if status >= 500:
                figures.server_errors += 1
            assert status in REFUSALS, (status, error, raw[:300], headers)
            assert len(self.producer.sent) == before
        return status


@pytest.fixture(scope="module")
def chat() -> Iterator[Chat]:
    producer = RecordingProducer()
    # No reply topic is followed: accepted completions end at the (tiny) wait bound.
    app = create_app(
        IngestSettings(chat_max_wait_s=0.01), producer=producer, check_topics=False, backlog=FakeBacklog()
    )
    with TestClient(app) as client:
        yield Chat(client, producer)


@st.composite
def mutated(draw: st.DrawFn) -> Any:
    value: Any = json.loads(json.dumps(VALID))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["set", "drop", "add", "message", "part", "metadata", "retype"]))
        if not isinstance(value, dict):
            break
        if op == "set":
            value[draw(st.sampled_from(KEYS))] = draw(json_values)
        elif op == "drop" and value:
            del value[draw(st.sampled_from(sorted(value)))]
        elif op == "add":
            value[draw(st.text(min_size=1, max_size=20))] = draw(json_values)
        elif op == "message":
            value["messages"] = [draw(json_values)]
        elif op == "part":
            value["messages"] = [{"role": "user", "content": [{"type": "text", "text": draw(json_values)}]}]
        elif op == "metadata":
            value["metadata"] = draw(st.dictionaries(st.text(max_size=70), json_values, max_size=18))
        elif op == "retype":
            value = draw(json_values)
    return value


header_values = st.one_of(
    st.sampled_from(["HIGH", "low", "0", "-1", "1e3", "99999999999999", "nan", "", "realtime_chat", "a b"]),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40),
)


@FUZZ
@given(body=mutated(), headers=st.dictionaries(st.sampled_from(HEADERS), header_values, max_size=3))
def test_mutated_chat_bodies_and_headers_get_openai_errors_never_a_5xx(
    chat: Chat, hostile_figures: HostileFigures, body: Any, headers: dict[str, str]
) -> None:
    chat.post(json.dumps(body).encode(), headers, hostile_figures, "http chat: mutated bodies and headers")


@FUZZ
@given(data=st.data())
def test_damaged_chat_bytes_get_openai_errors_never_a_5xx(
    chat: Chat, hostile_figures: HostileFigures, data: st.DataObject
) -> None:
    raw = bytearray(json.dumps(VALID).encode())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw)))
        if data.draw(st.booleans()) and raw:
            del raw[at : at + data.draw(st.integers(1, 8))]
        else:
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=8))
    chat.post(bytes(raw), {}, hostile_figures, "http chat: damaged bytes")


@st.composite
def mutated_embedding(draw: st.DrawFn) -> Any:
    value: Any = json.loads(json.dumps(EMBEDDING))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["set", "drop", "add", "texts", "retype"]))
        if not isinstance(value, dict):
            break
        if op == "set":
            value[draw(st.sampled_from(EMBEDDING_KEYS))] = draw(json_values)
        elif op == "drop" and value:
            del value[draw(st.sampled_from(sorted(value)))]
        elif op == "add":
            value[draw(st.text(min_size=1, max_size=20))] = draw(json_values)
        elif op == "texts":
            value["input"] = draw(st.lists(st.one_of(st.text(max_size=40), json_values), max_size=5))
        elif op == "retype":
            value = draw(json_values)
    return value


@FUZZ
@given(body=mutated_embedding(), headers=st.dictionaries(st.sampled_from(HEADERS), header_values, max_size=3))
def test_mutated_embedding_bodies_and_headers_get_openai_errors_never_a_5xx(
    chat: Chat, hostile_figures: HostileFigures, body: Any, headers: dict[str, str]
) -> None:
    raw = json.dumps(body).encode()
    chat.post(raw, headers, hostile_figures, "http embeddings: mutated bodies and headers", "/v1/embeddings")


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


def _tool(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


_CALL = {"id": "call_1", "type": "function", "function": {"name": "t", "arguments": json.dumps(_nested(33))}}
EXTREMES: list[tuple[str, str, dict[str, Any], str]] = [
    ("too many tools", "/v1/chat/completions", {"tools": [_tool(f"t{i}", {}) for i in range(129)]}, "tools"),
    (
        "a huge schema",
        "/v1/chat/completions",
        {"tools": [_tool("t", {"type": "object", "description": "x" * 20_000})]},
        "tools",
    ),
    (
        "deep JSON in arguments",
        "/v1/chat/completions",
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [_CALL]},
            ]
        },
        "messages[1].tool_calls",
    ),
    ("n past 8", "/v1/chat/completions", {"n": 9}, "n"),
    ("top_logprobs past 20", "/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    (
        "logit_bias of 301 tokens",
        "/v1/chat/completions",
        {"logit_bias": {str(i): 1 for i in range(301)}},
        "logit_bias",
    ),
    ("audio output", "/v1/chat/completions", {"modalities": ["text", "audio"]}, "modalities"),
    ("2,049 texts", "/v1/embeddings", {"input": ["x"] * 2049}, "input"),
    ("a text of 32,769 characters", "/v1/embeddings", {"input": "x" * 32_769}, "input[0]"),
    ("4,097 dimensions", "/v1/embeddings", {"dimensions": 4097}, "dimensions"),
    # 98 texts x 1,536 dimensions x 4 bytes: past the 600,000 one result record may carry.
    ("vectors past one record", "/v1/embeddings", {"input": ["x"] * 98, "dimensions": 1536}, "input"),
]


@pytest.mark.parametrize(("case", "path", "fields", "param"), EXTREMES, ids=[c[0] for c in EXTREMES])
def test_the_extremes_of_the_new_fields_are_400s_naming_them_and_nothing_is_written(
    chat: Chat, hostile_figures: HostileFigures, case: str, path: str, fields: dict[str, Any], param: str
) -> None:
    base = VALID if path == "/v1/chat/completions" else EMBEDDING
    before = len(chat.producer.sent)
    status = chat.post(
        json.dumps(base | fields).encode(), {}, hostile_figures, f"http {path}: extremes", path
    )
    response = chat.client.post(path, json=base | fields)
    assert (status, response.status_code) == (400, 400), case
    assert response.json()["error"]["param"] == param, response.json()
    assert len(chat.producer.sent) == before
