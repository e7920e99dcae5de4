"""The record rules, pure: what a request read from Kafka may not claim, clamped or refused."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from inferq.dispatcher.errors import RefusedRequestError
from inferq.dispatcher.record_rules import RecordRules
from inferq.messaging import limits
from inferq.messaging.errors import DecodeError
from inferq.messaging.records import ChatMessage, InferenceRequest
from inferq.messaging.tiers import Tier
from inferq.messaging.topics import TopicNames

TOPICS = TopicNames("unit")
NOW = 1_800_000_000_000
RULES = RecordRules(topics=TOPICS, max_attempts=3, max_backoff_ms=30_000)
HIGH = TOPICS.requests(Tier.HIGH)
TOOL = {
    "type": "function",
    "function": {
        "name": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CALL = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}


def a_request(**overrides: object) -> InferenceRequest:
    request = InferenceRequest(
        request_id="r-1",
        scenario="realtime_chat",
        tier=Tier.HIGH,
        created_at_ms=NOW - 100,
        expire_at_ms=NOW + 5_000,
        messages=(ChatMessage("user", "hello"),),
    )
    return replace(request, **overrides)  # type: ignore[arg-type]


def refusal(request: InferenceRequest, topic: str = HIGH) -> RefusedRequestError:
    with pytest.raises(RefusedRequestError) as caught:
        RULES.check(request, source_topic=topic, now_ms=NOW)
    return caught.value


# A value within bounds for each parameter `param_rules` checks.
SANE_PARAMS: dict[str, object] = {
    "logit_bias": {"50256": -100, "13": 5},
    "user": "end-user-42",
    "metadata": {"app": "companion"},
    "max_completion_tokens": 100,
    "reasoning_effort": "low",
    "modalities": ["text"],
    "store": False,
    "safety_identifier": "u-7",
    "prompt_cache_key": "persona-3",
    "prompt_cache_retention": "24h",
    "prompt_cache_options": {"mode": "implicit", "ttl": "30m"},
    "service_tier": "auto",
    "verbosity": "medium",
    "prediction": {"type": "content", "content": "def f(): pass"},
    "web_search_options": {
        "search_context_size": "low",
        "user_location": {"type": "approximate", "approximate": {"city": "Paris", "country": "FR"}},
    },
    "moderation": {"model": "omni-moderation-latest", "policy": {"input": {"mode": "score"}}},
}


def test_a_sane_request_passes_unchanged() -> None:
    params = {
        "temperature": "0.2",
        "top_p": "1",
        "max_tokens": "100",
        "stop": '["\\n"]',
        "seed": "-7",
        "presence_penalty": "-2",
        "frequency_penalty": "1.5",
        "response_format": '{"type": "json_object"}',
        "tools": json.dumps([TOOL]),
        "tool_choice": '"auto"',
        "parallel_tool_calls": "false",
        "n": "2",
        "logprobs": "true",
        "top_logprobs": "20",
    } | {name: json.dumps(value) for name, value in SANE_PARAMS.items()}
    request = a_request(params=params)
    checked = RULES.check(request, source_topic=HIGH, now_ms=NOW)
    assert checked.request == request
    assert {name: checked.params[name] for name in SANE_PARAMS} == SANE_PARAMS
    assert checked.clamped == ()
    assert checked.params["stop"] == ["\n"]
    assert checked.params["response_format"] == {"type": "json_object"}
    assert checked.params["tools"] == [TOOL]
    assert set(checked.params) == limits.ALLOWED_PARAMS
    assert checked.reply_topic is None


@pytest.mark.parametrize("request_id", ["", "a b", "x" * 129, "id\n", "../../etc"])
def test_a_request_id_that_is_not_an_id_is_poison(request_id: str) -> None:
    with pytest.raises(DecodeError, match="request_id"):
        RULES.check(a_request(request_id=request_id), source_topic=HIGH, now_ms=NOW)


@pytest.mark.parametrize(
    "reply_to",
    [
        "bad/name",
        "unit.requests.high",
        "unit.requests.low",
        "unit.retry",
        "unit.dlq",
        "unit.results.",
        "x" * 300,
    ],
)
def test_a_reply_topic_outside_the_pipeline_is_refused_and_answered_on_the_default(reply_to: str) -> None:
    refused = refusal(a_request(reply_to=reply_to))
    assert "reply_to" in refused.reason
    assert refused.reply_topic is None  # the FAILED result goes to the default results topic
    assert len(refused.reason) < 120


@pytest.mark.parametrize("reply_to", ["unit.results", "unit.results.eu-west-1"])
def test_the_results_topics_are_allowed_reply_topics(reply_to: str) -> None:
    assert RULES.check(a_request(reply_to=reply_to), source_topic=HIGH, now_ms=NOW).reply_topic == reply_to


def test_an_attempt_beyond_the_maximum_is_exhausted_not_obeyed() -> None:
    refused = refusal(a_request(attempt=1_000_000), TOPICS.retry)
    assert "exhausted" in refused.reason
    assert refused.request.attempt == 3
    assert RULES.check(a_request(attempt=3), source_topic=TOPICS.retry, now_ms=NOW).request.attempt == 3


def test_an_attempt_below_one_is_clamped() -> None:
    checked = RULES.check(a_request(attempt=-5), source_topic=HIGH, now_ms=NOW)
    assert checked.request.attempt == 1
    assert checked.clamped == ("attempt",)


def test_times_out_of_range_are_clamped() -> None:
    future = RULES.check(a_request(created_at_ms=NOW + 3_600_000), source_topic=HIGH, now_ms=NOW)
    assert future.request.created_at_ms == NOW
    slight = RULES.check(a_request(created_at_ms=NOW + 1_000), source_topic=HIGH, now_ms=NOW)
    assert slight.request.created_at_ms == NOW + 1_000  # within the clock skew allowed
    ancient = RULES.check(a_request(created_at_ms=0), source_topic=HIGH, now_ms=NOW)
    assert ancient.request.created_at_ms == NOW - limits.MAX_DEADLINE_MS
    endless = RULES.check(a_request(expire_at_ms=2**62), source_topic=HIGH, now_ms=NOW)
    assert endless.request.expire_at_ms == NOW - 100 + limits.MAX_DEADLINE_MS
    assert endless.clamped == ("expire_at_ms",)


def test_a_retry_is_due_at_most_the_maximum_backoff_from_now() -> None:
    assert RULES.due_ms(2**62, NOW) == NOW + 30_000
    assert RULES.due_ms(NOW + 1_000, NOW) == NOW + 1_000
    assert RULES.due_ms(None, NOW) == 0


def test_estimated_tokens_are_clamped() -> None:
    assert (
        RULES.check(a_request(estimated_tokens=-1), source_topic=HIGH, now_ms=NOW).request.estimated_tokens
        is None
    )
    big = RULES.check(a_request(estimated_tokens=2**31 - 1), source_topic=HIGH, now_ms=NOW)
    assert big.request.estimated_tokens == limits.MAX_ESTIMATED_TOKENS


def test_on_a_request_topic_the_topic_is_the_tier() -> None:
    checked = RULES.check(a_request(tier=Tier.HIGH), source_topic=TOPICS.requests(Tier.LOW), now_ms=NOW)
    assert checked.tier is Tier.LOW
    assert checked.request.tier is Tier.LOW


def test_a_retry_claiming_a_tier_above_its_scenario_is_served_at_the_scenario_tier() -> None:
    brief = a_request(scenario="morning_brief", tier=Tier.HIGH)
    checked = RULES.check(brief, source_topic=TOPICS.retry, now_ms=NOW)
    assert checked.tier is Tier.LOW
    assert checked.clamped == ("tier",)
    # A lower claim is kept, but never below the scenario's floor.
    chat = RULES.check(a_request(tier=Tier.LOW), source_topic=TOPICS.retry, now_ms=NOW)
    assert chat.tier is Tier.LOW
    emotion = a_request(scenario="emotion_analysis", tier=Tier.LOW)
    assert RULES.check(emotion, source_topic=TOPICS.retry, now_ms=NOW).tier is Tier.MEDIUM
    # An unknown scenario is HIGH, as ingest has it.
    odd = a_request(scenario="something_new", tier=Tier.HIGH)
    assert RULES.check(odd, source_topic=TOPICS.retry, now_ms=NOW).tier is Tier.HIGH


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("session_id", "s" * 129),
        ("session_id", ""),
        ("session_id", "has spaces"),
        ("tenant", "ten/ant"),
        ("model", "gpt 4\n"),
        ("tenant", "t" * 65),
        ("scenario", "x" * 65),
        ("model", "m" * 129),
        ("origin_region", "r" * 65),
        ("callback_url", "https://hooks.example/" + "a" * 2_048),
        ("callback_url", ""),
    ],
)
def test_strings_over_their_bounds_are_refused(field: str, value: str) -> None:
    assert field in refusal(a_request(**{field: value})).reason


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        (tuple(ChatMessage("user", "x") for _ in range(limits.MAX_MESSAGES + 1)), "messages must be"),
        ((ChatMessage("robot", "beep"),), "not a chat role"),
        ((ChatMessage("user", "x" * (limits.MAX_MESSAGE_CHARS + 1)),), "content is over"),
    ],
)
def test_messages_out_of_bounds_are_refused(messages: tuple[ChatMessage, ...], problem: str) -> None:
    assert problem in refusal(a_request(messages=messages)).reason


@pytest.mark.parametrize("name", sorted(limits.RESERVED_PARAMS))
def test_reserved_params_are_refused(name: str) -> None:
    value = json.dumps(True if name == "stream" else 5)
    assert "set by the dispatcher" in refusal(a_request(params={name: value})).reason


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"stream_options": "{}"}, "not a supported parameter"),
        ({"n": "0"}, "out of its bounds"),
        ({"n": str(limits.MAX_CHOICES + 1)}, "out of its bounds"),
        ({"n": '"2"'}, "out of its bounds"),
        ({"n": "true"}, "out of its bounds"),
        ({"logprobs": '"yes"'}, "out of its bounds"),
        ({"logprobs": "true", "top_logprobs": str(limits.MAX_TOP_LOGPROBS + 1)}, "out of its bounds"),
        ({"logprobs": "true", "top_logprobs": "-1"}, "out of its bounds"),
        ({"top_logprobs": "2"}, "top_logprobs is only allowed with params.logprobs true"),
        (
            {"logprobs": "false", "top_logprobs": "2"},
            "top_logprobs is only allowed with params.logprobs true",
        ),
        ({"temperature": "9"}, "out of its bounds"),
        ({"temperature": "NaN"}, "out of its bounds"),
        ({"temperature": "true"}, "out of its bounds"),
        ({"max_tokens": "0"}, "out of its bounds"),
        ({"max_tokens": "1.5"}, "out of its bounds"),
        ({"max_tokens": str(10**12)}, "out of its bounds"),
        ({"stop": json.dumps(["a"] * 5)}, "out of its bounds"),
        ({"stop": json.dumps({"a": 1})}, "out of its bounds"),
        ({"user": json.dumps(5)}, "user: must be text"),
        ({"max_completion_tokens": "0"}, "max_completion_tokens: must be an integer"),
        ({"functions": "[]"}, "not a supported parameter"),
        ({"Bad-Name": "1"}, "not a supported parameter"),
        ({"logit_bias": json.dumps({str(i): 1 for i in range(301)})}, "logit_bias: at most 300 tokens"),
        ({"logit_bias": '{"13": -101}'}, "logit_bias.13: must be an integer from -100 to 100"),
        ({"metadata": '{"inferq_priority": "HIGH"}'}, "inferq_* keys are inferq's own"),
        ({"metadata": json.dumps({f"k{i}": "v" for i in range(17)})}, "at most 16 pairs"),
        ({"modalities": '["audio"]'}, "audio output is not supported"),
        ({"max_tokens": "5", "max_completion_tokens": "6"}, "not two different values"),
        ({"safety_checks": json.dumps("x" * 8_193)}, "safety_checks: over 8192 bytes"),
        ({"safety_checks": "[" * 9 + "]" * 9}, "safety_checks: nests deeper than 8 levels"),
        ({"safety_checks": json.dumps("x" * 49_153)}, "over 49152 characters"),
        (
            {f"new_{i}": "1" for i in range(limits.MAX_PASSTHROUGH_PARAMS + 1)},
            "at most 8 pass-through fields",
        ),
        ({"max_tokens": str(limits.MAX_COMPLETION_TOKENS + 1)}, "out of its bounds"),
        ({"stop": json.dumps("x" * (limits.MAX_STOP_CHARS + 1))}, "out of its bounds"),
        ({"stop": json.dumps("")}, "out of its bounds"),
        ({"response_format": json.dumps({"type": "xml"})}, "response_format.type: must be"),
        ({"response_format": json.dumps({"type": "text", "schema": {}})}, "only json_schema takes more"),
        ({"stop": json.dumps("x" * 3000)}, "over 2048 characters"),
        ({f"k{i}": "1" for i in range(limits.MAX_PARAMS + 1)}, "at most"),
    ],
)
def test_params_off_the_allow_list_or_out_of_bounds_are_refused(params: dict[str, str], problem: str) -> None:
    assert problem in refusal(a_request(params=params)).reason


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (a_request(messages=()), "messages is empty"),
        (a_request(params={"temperature": "hot"}), "not a map of JSON values"),
    ],
)
def test_nothing_to_send_or_params_that_are_not_json_are_poison(
    request_: InferenceRequest, reason: str
) -> None:
    # As before the rules: nothing a caller could have meant; dead-lettered, not answered.
    with pytest.raises(DecodeError, match=reason):
        RULES.check(request_, source_topic=HIGH, now_ms=NOW)


def test_a_refusal_reason_shows_little_of_a_hostile_value() -> None:
    refused = refusal(a_request(messages=(ChatMessage("secret prompt " * 20, "x"),)))
    assert len(refused.reason) < 100


def _deep(depth: int) -> dict[str, object]:
    schema: dict[str, object] = {"type": "object"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def test_a_function_calling_conversation_from_a_producer_passes_unchanged() -> None:
    """What ingest accepts, written straight to Kafka: tools, a json_schema format, an assistant's
    call with null content and the tool's answer."""
    schema_format = {
        "type": "json_schema",
        "json_schema": {"name": "mood", "schema": {"type": "object"}, "strict": True},
    }
    request = a_request(
        params={"tools": json.dumps([TOOL]), "response_format": json.dumps(schema_format)},
        messages=(
            ChatMessage("user", "weather in Oslo?"),
            ChatMessage("assistant", "", tool_calls=json.dumps([CALL])),
            ChatMessage("tool", "18 degrees", tool_call_id="call_1"),
        ),
    )
    checked = RULES.check(request, source_topic=HIGH, now_ms=NOW)
    assert checked.request == request and checked.params["response_format"] == schema_format
    assert checked.request.openai_messages()[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [CALL],
    }


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"tools": json.dumps([TOOL] * (limits.MAX_TOOLS + 1))}, "at most 128 tools"),
        ({"tools": json.dumps({"type": "function"})}, "tools: must be a non-empty list"),
        ({"tools": json.dumps([{"type": "function", "function": {"name": "a b"}}])}, "function.name"),
        (
            {
                "tools": json.dumps(
                    [{"type": "function", "function": {"name": "f", "parameters": {"d": "x" * 20_000}}}]
                )
            },
            "over 16384 bytes",
        ),
        (
            {"tools": json.dumps([{"type": "function", "function": {"name": "f", "parameters": _deep(40)}}])},
            "nests deeper",
        ),
        ({"tools": json.dumps([TOOL]), "tool_choice": '"sometimes"'}, "tool_choice: must be"),
        ({"tool_choice": '"auto"'}, "only allowed with params.tools"),
        ({"tools": json.dumps([TOOL]), "parallel_tool_calls": '"yes"'}, "true or false"),
        (
            {
                "response_format": json.dumps(
                    {"type": "json_schema", "json_schema": {"name": "x", "schema": _deep(40)}}
                )
            },
            "nests deeper",
        ),
        ({"tools": "[" * 300_000}, "over 262144 characters"),
    ],
)
def test_function_calling_params_out_of_bounds_are_refused(params: dict[str, str], problem: str) -> None:
    assert problem in refusal(a_request(params=params)).reason


def test_deep_brackets_in_a_param_are_poison_not_a_crash() -> None:
    with pytest.raises(DecodeError, match="not a map of JSON values"):
        RULES.check(a_request(params={"tools": "[" * 100_000 + "]" * 100_000}), source_topic=HIGH, now_ms=NOW)


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        (ChatMessage("tool", "18 degrees"), "tool_call_id is required on a tool message"),
        (
            ChatMessage("user", "hi", tool_call_id="call_1"),
            "tool_call_id is required on a tool message, and only there",
        ),
        (ChatMessage("tool", "x", tool_call_id="a b"), "tool_call_id: must be"),
        (ChatMessage("user", "hi", tool_calls=json.dumps([CALL])), "only allowed on an assistant message"),
        (ChatMessage("assistant", "", tool_calls="{not json"), "tool_calls is not JSON"),
        (ChatMessage("assistant", "", tool_calls="[" * 5000 + "]" * 5000), "tool_calls is not JSON"),
        (ChatMessage("assistant", "", tool_calls='{"id": "call_1"}'), "tool_calls: must be a non-empty list"),
        (ChatMessage("assistant", "", tool_calls=json.dumps([CALL] * 129)), "at most 128 calls"),
        (
            ChatMessage(
                "assistant",
                "",
                tool_calls=json.dumps(
                    [{**CALL, "function": {"name": "f", "arguments": "[" * 40 + "]" * 40}}]
                ),
            ),
            "arguments: nests deeper than 32",
        ),
        (
            ChatMessage(
                "assistant",
                "",
                tool_calls=json.dumps([{**CALL, "function": {"name": "f", "arguments": "x" * 70_000}}]),
            ),
            "at most 65536 characters",
        ),
        (ChatMessage("user", "hi", name="n" * 65), "name must be 1-64"),
    ],
)
def test_function_calling_messages_out_of_bounds_are_refused(message: ChatMessage, problem: str) -> None:
    reason = refusal(a_request(messages=(ChatMessage("user", "hi"), message))).reason
    assert reason.startswith("messages[1].") and problem in reason


def test_tools_on_a_streamed_request_are_checked_as_unstreamed() -> None:
    tools = json.dumps([TOOL])
    checked = RULES.check(a_request(stream=True, params={"tools": tools}), source_topic=HIGH, now_ms=NOW)
    assert (checked.request.stream, checked.params) == (True, {"tools": [TOOL]})
