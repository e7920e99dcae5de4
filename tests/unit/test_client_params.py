"""The client library and the batch CLI carry function calling and every chat-completions parameter
to the record: tools, tool_choice, parallel_tool_calls, response_format, the newer parameters, and
a tool-call round trip's history (an assistant's tool_calls, a tool message's tool_call_id)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferq.batch.lines import read_lines
from inferq.client import HttpTransport, InferqClient, InvalidRequestError
from inferq.client.kafka import KafkaTransport
from inferq.ingest.record import submitted_record
from inferq.ingest.validation import SubmitRequest
from inferq.messaging.tiers import Tier
from tests.unit.test_chat_params import FORWARDED
from tests.unit.test_chat_tools import CALL, MOOD, WEATHER
from tests.unit.test_tiers_and_record import RULES

HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "weather in Oslo?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees"},
]
PARAMS: dict[str, Any] = {
    "tools": [WEATHER],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "response_format": MOOD,
} | FORWARDED


def test_the_http_client_sends_the_history_and_every_parameter_unchanged() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        return httpx.Response(
            202, json={"request_id": body["request_id"], "tier": "HIGH", "expire_at_ms": 2**41}
        )

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    client = InferqClient(HttpTransport("http://inferq", "iq_secret", http=http))
    asyncio.run(client.submit("realtime_chat", HISTORY, params=PARAMS))
    assert seen[0]["messages"] == HISTORY
    assert seen[0]["params"] == PARAMS
    # What ingest makes of that body: the record carries the calls and the parameters as sent.
    record = submitted_record(SubmitRequest.model_validate(seen[0]), RULES)
    assert record.openai_messages()[1:] == [
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "content": "18 degrees", "tool_call_id": "call_1"},
    ]
    assert record.decoded_params() == PARAMS


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"logit_bias": {"x": 1}}, "params.logit_bias"),
        ({"modalities": ["audio"]}, "params.modalities"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "params.metadata"),
        ({"tools": [WEATHER] * 129}, "params.tools"),
        ({"safety_checks": True}, "params.safety_checks"),
    ],
)
def test_the_kafka_client_refuses_what_ingest_refuses_before_producing(
    params: dict[str, Any], named: str
) -> None:
    async def body() -> None:
        async with InferqClient(KafkaTransport("127.0.0.1:1", region="eu")) as client:
            with pytest.raises(InvalidRequestError) as raised:
                await client.submit("realtime_chat", HISTORY, params=params)
            assert named in [p["field"] for p in raised.value.problems]

    asyncio.run(asyncio.wait_for(body(), 10))


def test_a_batch_line_carries_the_history_and_every_parameter(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    path.write_text(json.dumps({"messages": HISTORY, "params": PARAMS}) + "\n", encoding="utf-8")
    (line,) = read_lines(path, key="k", scenario="batch")
    assert line.problem is None and line.submission is not None
    assert line.submission.params == PARAMS
    # The submission's body is what `POST /v1/requests` gets: the calls kept, content null where it was.
    sent = line.submission.body()
    assert sent["messages"] == [
        HISTORY[0],
        {"role": "assistant", "tool_calls": [CALL]},
        HISTORY[2],
    ]
    assert submitted_record(SubmitRequest.model_validate(sent), RULES).tier is Tier.LOW
