"""Function calling and structured output with the official openai SDK on the real broker: the
services as processes (ingest, dispatcher, results, the simulated backend), the SDK pointed at
ingest with `base_url` and nothing else changed. The simulated backend calls the first tool on a
user turn and answers in text after a tool message; it fills a json_schema's required properties.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam, ChatCompletionToolParam

from inferq.messaging import limits
from inferq.tools.stack.pipeline import Pipeline
from tests.support.pipeline import running_pipeline
from tests.support.tenants import TenantSpec, write_tenants

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

WIDE = {"models": ["*"], "roles": ["user", "assistant", "system", "tool"]}
ACME = TenantSpec("acme", entitlements=WIDE, params=dict.fromkeys(limits.ALLOWED_PARAMS, True))
WEATHER: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "Today's weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    work_dir = tmp_path_factory.mktemp("openai-tools")
    with running_pipeline(
        kafka_bootstrap,
        work_dir,
        name="e2et",
        budget=4,
        backend_args=["--speed", "5"],
        extra_env={"INFERQ_TENANTS_FILE": str(write_tenants(work_dir / "tenants.toml", ACME))},
    ) as stack:
        yield stack


def sdk(pipeline: Pipeline) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{pipeline.ingest_url}/v1", api_key=ACME.key, max_retries=0, timeout=30)


def test_a_tool_call_then_the_tools_result_then_the_answer_through_the_queue(pipeline: Pipeline) -> None:
    client = sdk(pipeline)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "weather in Oslo?"}]
    first = client.chat.completions.create(model="inferq", messages=messages, tools=[WEATHER])
    ChatCompletion.model_validate(first.model_dump())
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "weather"
    assert json.loads(call.function.arguments) == {"city": "sim"}
    # The results service holds the same calls.
    outcome = httpx.get(
        f"{pipeline.results_url}/v1/requests/{first.id}",
        params={"wait": 20},
        headers=ACME.headers(),
        timeout=30,
    ).json()
    assert outcome["finish_reason"] == "tool_calls" and outcome["tool_calls"][0]["id"] == call.id

    messages.append(choice.message.model_dump(exclude_none=True))  # type: ignore[arg-type]
    messages.append({"role": "tool", "tool_call_id": call.id, "content": '{"celsius": 18}'})
    final = client.chat.completions.create(model="inferq", messages=messages, tools=[WEATHER])
    assert final.choices[0].finish_reason == "stop" and final.choices[0].message.tool_calls is None
    assert final.choices[0].message.content == "sim reply to: weather in Oslo?"
    client.close()


def test_a_json_schema_answer_parses_as_json_with_the_required_properties(pipeline: Pipeline) -> None:
    client = sdk(pipeline)
    schema = {
        "type": "object",
        "properties": {"mood": {"type": "string", "enum": ["calm", "busy"]}, "energy": {"type": "integer"}},
        "required": ["mood", "energy"],
        "additionalProperties": False,
    }
    completion = client.chat.completions.create(
        model="inferq",
        messages=[{"role": "user", "content": "how do I feel?"}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "mood", "schema": schema, "strict": True},
        },
    )
    assert completion.choices[0].finish_reason == "stop"
    assert json.loads(completion.choices[0].message.content or "") == {"mood": "calm", "energy": 1}
    client.close()


def test_hostile_tools_are_the_sdks_bad_request_and_never_reach_the_backend(pipeline: Pipeline) -> None:
    client = sdk(pipeline)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="inferq",
            messages=[{"role": "user", "content": "hi"}],
            tools=[WEATHER] * (limits.MAX_TOOLS + 1),
        )
    assert refused.value.param == "tools" and "at most 128 tools" in refused.value.message
    client.close()
