"""A request's token estimate (`request_cost`: the rate budget's price of a start) counts what the
backend reads: the messages' text, their tool calls, the tool definitions and a response format's
schema, not only the text."""

from __future__ import annotations

import json
from dataclasses import replace

from inferq.dispatcher.rate_budget import CHARS_PER_TOKEN
from inferq.dispatcher.starting import request_cost
from inferq.dispatcher.work import Work
from inferq.messaging.records import ChatMessage
from inferq.messaging.tiers import Tier
from tests.support.work import a_work

TOOL = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "Today's weather in a city, with the wind and the chance of rain " * 4,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
SCHEMA_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "mood",
        "schema": {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(40)}},
    },
}
CALLS = json.dumps(
    [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"city": "Paris"}' * 20},
        }
    ]
)


def with_params(work: Work, **params: object) -> Work:
    """`work` with `params`, as intake makes it: the record's JSON texts and their decoded values."""
    given = {"max_tokens": 10} | params
    encoded = {name: json.dumps(value) for name, value in given.items()}
    return replace(work, request=replace(work.request, params=encoded), params=given)


def test_the_estimate_grows_with_each_tool_definition() -> None:
    plain = with_params(a_work(Tier.HIGH))
    one = with_params(a_work(Tier.HIGH), tools=[TOOL])
    two = with_params(a_work(Tier.HIGH), tools=[TOOL, TOOL])
    tool_tokens = len(json.dumps(TOOL)) // CHARS_PER_TOKEN
    assert request_cost(one) >= request_cost(plain) + tool_tokens
    assert request_cost(two) >= request_cost(one) + tool_tokens


def test_the_estimate_counts_a_response_formats_schema() -> None:
    plain = with_params(a_work(Tier.HIGH))
    schema = with_params(a_work(Tier.HIGH), response_format=SCHEMA_FORMAT)
    assert request_cost(schema) >= request_cost(plain) + len(json.dumps(SCHEMA_FORMAT)) // CHARS_PER_TOKEN


def test_the_estimate_counts_the_assistants_tool_calls_in_the_history() -> None:
    history = (ChatMessage("user", "weather?"), ChatMessage("assistant", "", tool_calls=CALLS))
    without = with_params(a_work(Tier.HIGH, messages=history[:1]))
    with_calls = with_params(a_work(Tier.HIGH, messages=history))
    assert request_cost(with_calls) >= request_cost(without) + len(CALLS) // CHARS_PER_TOKEN


def test_max_completion_tokens_is_the_answers_share_when_max_tokens_is_not_given() -> None:
    work = a_work(Tier.HIGH)
    small = replace(work, params={"max_completion_tokens": 10})
    large = replace(work, params={"max_completion_tokens": 5_000})
    assert request_cost(large) - request_cost(small) == 4_990


def test_a_records_own_estimate_still_wins() -> None:
    work = with_params(a_work(Tier.HIGH, estimated_tokens=7), tools=[TOOL] * 10)
    assert request_cost(work) == 7
