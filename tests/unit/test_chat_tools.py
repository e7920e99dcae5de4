"""Function calling and structured output at ingest, in-process with the official openai SDK: what
the record carries, what the caller gets back (checked against the SDK's own types), and the
hostile bodies each refused with a 400 naming the problem (or 403 for a tenant not entitled).

The harness (ingest on loopback, a fake reply topic the test answers on) is test_chat_completions'.
The same through the real broker, dispatcher and simulated backend: tests/e2e/test_openai_sdk.py.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion

from inferq.ingest.chat import answers
from inferq.ingest.validation import SubmitRequest, describe
from inferq.messaging import limits
from inferq.messaging.records import ChatMessage, InferenceRequest, InferenceResult, Status
from inferq.messaging.tiers import Tier
from inferq.results.table import ResultsTable
from inferq.results.view import public_view
from inferq.tenancy.entitlements import apply_entitlements
from inferq.tenancy.model import Entitlements, NameSet
from tests.unit.test_chat_completions import HI, NARROW, answered, assert_refused_400, ingest, run

WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "strict": True,
    },
}
CALL = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
MOOD = {
    "type": "json_schema",
    "json_schema": {
        "name": "mood",
        "schema": {"type": "object", "properties": {"mood": {"type": "string"}}, "required": ["mood"]},
        "strict": True,
    },
}


def deep_schema(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def a_result(**fields: Any) -> InferenceResult:
    return InferenceResult(
        **{
            "request_id": "r-1",
            "tier": Tier.HIGH,
            "status": Status.OK,
            "model": "inferq-fast",
            "enqueued_at_ms": 1_000,
            "completed_at_ms": 2_000,
            "attempts": 1,
            "dispatcher_id": "d",
        }
        | fields
    )


@run
async def test_a_tool_call_round_trip_carries_the_tools_and_the_history_and_returns_the_call(
    tmp_path: Path,
) -> None:
    async with ingest(tmp_path) as svc:
        client = svc.sdk()
        first = await answered(
            svc,
            client.chat.completions.create(
                model="inferq", messages=HI, tools=[WEATHER], tool_choice="auto", parallel_tool_calls=False
            ),
            output="",
            finish_reason="tool_calls",
            tool_calls=json.dumps([CALL]),
        )
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        assert choice.message.tool_calls[0].id == "call_1"
        assert json.loads(choice.message.tool_calls[0].function.arguments) == {"city": "Oslo"}
        asked = await svc.next_request(0)
        assert asked.decoded_params() == {
            "tools": [WEATHER],
            "tool_choice": "auto",
            "parallel_tool_calls": False,
        }

        history = [*HI, choice.message.model_dump(exclude_none=True)]
        history.append({"role": "tool", "tool_call_id": "call_1", "content": "18 degrees"})
        final = await answered(
            svc,
            client.chat.completions.create(model="inferq", messages=history, tools=[WEATHER]),
            output="18 °C",
        )
        assert final.choices[0].message.content == "18 °C" and final.choices[0].message.tool_calls is None
        record = await svc.next_request(1)
        assert record.openai_messages()[1:] == [
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "content": "18 degrees", "tool_call_id": "call_1"},
        ]
        await client.close()


@run
async def test_a_json_schema_format_reaches_the_record_unchanged(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        client = svc.sdk()
        completion = await answered(
            svc,
            client.chat.completions.create(model="inferq", messages=HI, response_format=MOOD),  # type: ignore[arg-type]
            output='{"mood": "calm"}',
        )
        assert json.loads(completion.choices[0].message.content) == {"mood": "calm"}
        assert (await svc.next_request(0)).decoded_params() == {"response_format": MOOD}
        await client.close()


def test_the_answer_with_tool_calls_is_an_sdk_chat_completion_and_the_results_view_carries_them() -> None:
    called = a_result(output="", finish_reason="tool_calls", tool_calls=json.dumps([CALL]))
    body = ChatCompletion.model_validate(answers.completion(called))
    assert body.choices[0].message.content is None
    assert body.choices[0].message.tool_calls is not None
    assert body.choices[0].message.tool_calls[0].function.name == "weather"
    assert public_view(called)["tool_calls"] == [CALL]
    # Text besides the calls stays; an answer without calls has none, and its view no key.
    both = answers.completion(a_result(output="let me look", tool_calls=json.dumps([CALL])))
    assert both["choices"][0]["message"]["content"] == "let me look"
    plain = a_result(output="hi")
    assert "tool_calls" not in answers.completion(plain)["choices"][0]["message"]
    assert "tool_calls" not in public_view(plain)


def too_many_tools() -> list[dict[str, Any]]:
    return [WEATHER] * (limits.MAX_TOOLS + 1)


def huge_schema_tool() -> dict[str, Any]:
    big = {"type": "object", "description": "x" * (limits.MAX_TOOL_SCHEMA_BYTES + 1)}
    return {"type": "function", "function": {"name": "big", "parameters": big}}


def deep_call() -> dict[str, Any]:
    arguments = "[" * 40 + "]" * 40
    return {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": arguments}}


# (case, the body's fields besides model, what the 400 names, a phrase of its message)
HOSTILE_TOOLS: list[tuple[str, dict[str, Any], str | None, str]] = [
    ("too many tools", {"tools": too_many_tools()}, "tools", "at most 128 tools, not 129"),
    ("too many tools streamed", {"tools": too_many_tools(), "stream": True}, "tools", "at most 128 tools"),
    ("a huge schema streamed", {"tools": [huge_schema_tool()], "stream": True}, "tools", "over 16384 bytes"),
    ("a huge schema", {"tools": [huge_schema_tool()]}, "tools", "over 16384 bytes"),
    (
        "a deep schema",
        {"tools": [{**WEATHER, "function": {"name": "d", "parameters": deep_schema(40)}}]},
        None,  # ingest's JSON guard refuses the body first: it nests past 32 levels
        "deeper",
    ),
    (
        "a description too long",
        {"tools": [{**WEATHER, "function": {"name": "w", "description": "x" * 4097}}]},
        "tools",
        "description: must be text of at most 4096 characters",
    ),
    (
        "a schema description not text",
        {"response_format": {"type": "json_schema", "json_schema": {"name": "r", "description": 7}}},
        "response_format",
        "json_schema.description: must be text",
    ),
    ("tools not a list", {"tools": {"type": "function"}}, "tools", "must be a non-empty list"),
    ("tools a string", {"tools": "weather"}, "tools", "must be a non-empty list"),
    ("a tool without a name", {"tools": [{"type": "function", "function": {}}]}, "tools", "function.name"),
    ("tool_choice alone", {"tool_choice": "auto"}, "tool_choice", "only allowed with tools"),
    ("tool_choice unknown", {"tools": [WEATHER], "tool_choice": "always"}, "tool_choice", "must be"),
    (
        "parallel_tool_calls not a bool",
        {"tools": [WEATHER], "parallel_tool_calls": "yes"},
        "parallel_tool_calls",
        "bool",
    ),
    (
        "a huge response schema",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "m", "schema": {"d": "x" * 70_000}},
            }
        },
        "response_format",
        "over 65536 bytes",
    ),
    (
        "json_schema without its schema object",
        {"response_format": {"type": "json_schema"}},
        "response_format",
        "json_schema",
    ),
    (
        "deep JSON in arguments",
        {"messages": [*HI, {"role": "assistant", "content": None, "tool_calls": [deep_call()]}]},
        "messages[1].tool_calls",
        "nests deeper than 32",
    ),
    (
        "arguments too long",
        {
            "messages": [
                *HI,
                {
                    "role": "assistant",
                    "tool_calls": [{**CALL, "function": {"name": "w", "arguments": "x" * 70_000}}],
                },
            ]
        },
        "messages[1].tool_calls",
        "65536",
    ),
    (
        "too many calls",
        {"messages": [*HI, {"role": "assistant", "tool_calls": [CALL] * 129}]},
        "messages[1].tool_calls",
        "at most 128 calls",
    ),
    (
        "a tool message without tool_call_id",
        {"messages": [*HI, {"role": "tool", "content": "18"}]},
        "messages[1]",
        "tool_call_id",
    ),
    (
        "tool_call_id on a user message",
        {"messages": [{"role": "user", "content": "hi", "tool_call_id": "call_1"}]},
        "messages[0]",
        "only allowed on a tool message",
    ),
    (
        "tool_calls on a user message",
        {"messages": [{"role": "user", "content": "hi", "tool_calls": [CALL]}]},
        "messages[0]",
        "assistant",
    ),
    (
        "null content without calls",
        {"messages": [{"role": "user", "content": None}]},
        "messages[0].content",
        "required",
    ),
    (
        "a tool_call_id not an id",
        {"messages": [*HI, {"role": "tool", "content": "x", "tool_call_id": "a b"}]},
        "messages[1].tool_call_id",
        "must be",
    ),
]


@pytest.mark.parametrize(
    ("case", "fields", "param", "phrase"), HOSTILE_TOOLS, ids=[c[0] for c in HOSTILE_TOOLS]
)
def test_hostile_function_calling_bodies_are_400_naming_the_problem_and_nothing_is_queued(
    tmp_path: Path, case: str, fields: dict[str, Any], param: str | None, phrase: str
) -> None:
    del case  # the test's id
    assert_refused_400(tmp_path, fields, param, phrase)


@run
async def test_a_tenant_not_entitled_to_tools_or_formats_is_403(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        narrow = svc.sdk(NARROW)
        with pytest.raises(openai.PermissionDeniedError) as refused:
            await narrow.chat.completions.create(model="inferq", messages=HI, tools=[WEATHER])  # type: ignore[list-item]
        assert "tools" in str(refused.value)
        with pytest.raises(openai.PermissionDeniedError) as refused:
            await narrow.chat.completions.create(model="inferq", messages=HI, response_format=MOOD)  # type: ignore[arg-type]
        assert "response_format" in str(refused.value)
        assert svc.producer.sent == []
        await narrow.close()


def test_the_native_api_takes_the_same_fields_with_the_same_rules() -> None:
    body = SubmitRequest.model_validate(
        {
            "scenario": "realtime_chat",
            "messages": [
                *HI,
                {"role": "assistant", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": "18"},
            ],
            "params": {
                "tools": [WEATHER],
                "tool_choice": {"type": "function", "function": {"name": "weather"}},
                "response_format": MOOD,
            },
        }
    )
    assert body.messages[1].as_record().tool_calls == json.dumps([CALL], separators=(",", ":"))
    assert set(body.params.as_json_values()) == {"tools", "tool_choice", "response_format"}  # type: ignore[union-attr]
    with pytest.raises(ValueError) as refused:
        SubmitRequest.model_validate(
            {"scenario": "x", "messages": HI, "params": {"tools": too_many_tools()}, "stream": True}
        )
    fields = {p["field"]: p["problem"] for p in describe(refused.value)}  # type: ignore[arg-type]
    assert fields == {"params.tools": "at most 128 tools, not 129"}


def test_the_results_table_keeps_tool_calls_and_one_from_the_previous_release_gains_the_column(
    tmp_path: Path,
) -> None:
    path = tmp_path / "r.db"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE results (tenant TEXT NOT NULL DEFAULT 'default', request_id TEXT NOT NULL, "
            "tier TEXT NOT NULL, status TEXT NOT NULL, output TEXT, error TEXT, model TEXT NOT NULL, "
            "usage TEXT, enqueued_at_ms INTEGER NOT NULL, dispatched_at_ms INTEGER, "
            "completed_at_ms INTEGER NOT NULL, attempts INTEGER NOT NULL, dispatcher_id TEXT NOT NULL, "
            "finish_reason TEXT, system_fingerprint TEXT, "
            "stored_at_ms INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (tenant, request_id))"
        )
        db.execute(
            "INSERT INTO results (request_id, tier, status, output, model, enqueued_at_ms, "
            "completed_at_ms, attempts, dispatcher_id, finish_reason) "
            "VALUES ('old', 'HIGH', 'OK', 'o', 'm', 0, 30, 1, 'd', 'stop')"
        )
    table = ResultsTable(path)
    old = table.get("default", "old")
    assert old is not None and old.tool_calls is None and "tool_calls" not in public_view(old)
    called = a_result(output="", finish_reason="tool_calls", tool_calls=json.dumps([CALL]))
    assert table.put_many([called]) == (1, 0)
    table.close()
    stored = ResultsTable(path).get("default", "r-1")
    assert stored == called and public_view(stored)["tool_calls"] == [CALL]


def test_tools_entitles_tool_choice_and_parallel_calls_and_nothing_else_does() -> None:
    tools_params = {
        "tools": json.dumps([WEATHER]),
        "tool_choice": '"auto"',
        "parallel_tool_calls": "true",
    }
    request = InferenceRequest(
        "r-1",
        "realtime_chat",
        Tier.HIGH,
        created_at_ms=0,
        expire_at_ms=1_000,
        messages=(ChatMessage("user", "hi"),),
        params=tools_params,
    )

    def problems(params: dict[str, None]) -> set[str]:
        e = Entitlements(max_tier=Tier.HIGH, scenarios=NameSet.everything(), params=params)
        verdict = apply_entitlements(request, e, default_reply_topic="inferq.results")
        return {p.field for p in verdict.problems}

    assert problems({"tools": None}) == set()
    assert problems({"tool_choice": None, "parallel_tool_calls": None}) == {"params.tools"}
    assert problems({"response_format": None}) == {
        "params.tools",
        "params.tool_choice",
        "params.parallel_tool_calls",
    }
