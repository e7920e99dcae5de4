"""The dispatcher's backend call with function calling: the tools and the history go to the backend
unchanged, the assistant's tool calls come back into the result record (content null read as ""),
and tool calls the backend got wrong are dropped with a log line that does not quote them."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from aiohttp import web

from inferq.dispatcher.backend import ChatBackend, Completion
from inferq.messaging.codec import result_codec
from inferq.messaging.records import ChatMessage
from tests.unit.test_dispatcher_answer_facts import as_result, body
from tests.unit.test_dispatcher_backend_errors import API_KEY, serving

TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
HISTORY = (
    ChatMessage("user", "weather?"),
    ChatMessage("assistant", "", tool_calls=json.dumps([CALL])),
    ChatMessage("tool", "18 degrees", tool_call_id="call_1"),
)


def called(message: dict[str, Any]) -> tuple[Completion, dict[str, Any]]:
    """The completion of a backend answering `message`, and the payload it was sent."""
    sent: dict[str, Any] = {}

    async def handler(request: web.Request) -> web.Response:
        sent.update(await request.json())
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
        return web.json_response(body(choices=[choice]))

    async def scenario() -> Completion:
        async with serving(handler) as url:
            backend = ChatBackend(url, api_key=API_KEY, max_connections=2)
            try:
                messages = [m.as_openai() for m in HISTORY]
                params = {"tools": TOOLS, "tool_choice": "auto", "parallel_tool_calls": False}
                return await backend.complete("m", messages, params, timeout_s=5)
            finally:
                await backend.close()

    return asyncio.run(scenario()), sent


def test_the_tools_and_history_go_unchanged_and_the_calls_come_back_in_the_result() -> None:
    completion, sent = called({"role": "assistant", "content": None, "tool_calls": [CALL]})
    assert sent["tools"] == TOOLS and sent["tool_choice"] == "auto" and sent["parallel_tool_calls"] is False
    assert sent["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "content": "18 degrees", "tool_call_id": "call_1"},
    ]
    assert completion.output == "" and completion.finish_reason == "tool_calls"
    result = result_codec().decode(result_codec().encode(as_result(completion)))
    assert result.openai_tool_calls() == [CALL] and result.finish_reason == "tool_calls"


@pytest.mark.parametrize(
    "calls",
    [
        "weather(city='Oslo')",
        [{"id": "call_1", "type": "function"}],
        [CALL] * 129,
        [{**CALL, "function": {"name": "weather", "arguments": "[" * 50 + "]" * 50}}],
    ],
    ids=["not a list", "no function", "too many", "too deep"],
)
def test_tool_calls_the_backend_got_wrong_are_dropped_without_quoting_them(
    calls: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="inferq.dispatcher.answer_facts"):
        completion, _ = called({"role": "assistant", "content": "text", "tool_calls": calls})
    assert completion.tool_calls is None and completion.output == "text"
    assert "tool_calls dropped" in caplog.text and "Oslo" not in caplog.text
