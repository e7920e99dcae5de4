"""A second real client: LiteLLM's SDK with inferq as an OpenAI-compatible provider (`openai/<model>`,
`api_base` the ingest's /v1, the tenant's key), unchanged, against the pipeline on the real broker:
sync, streamed, and function calling in one round trip, sync and streamed. What LiteLLM hands its
caller is checked, and the results service holds the same outcome.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import httpx
import pytest

from inferq.messaging import limits
from inferq.tools.stack.pipeline import Pipeline
from tests.support.pipeline import running_pipeline
from tests.support.tenants import TenantSpec, write_tenants

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.slow,
    # LiteLLM's own types warn when pydantic builds them (its code, not ours, and not about inferq).
    pytest.mark.filterwarnings("ignore:Item .* is using the `ReadOnly` qualifier"),
]

TENANT = TenantSpec(
    "lite",
    entitlements={"models": ["*"], "roles": ["user", "assistant", "system", "tool"]},
    params=dict.fromkeys(limits.ALLOWED_PARAMS, True),
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "Today's weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
QUESTION = [{"role": "user", "content": "weather in Oslo?"}]


@pytest.fixture(scope="module")
def litellm() -> ModuleType:
    # Offline: LiteLLM's model price map from its own package, not fetched from GitHub.
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return importlib.import_module("litellm")


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    work_dir = tmp_path_factory.mktemp("litellm")
    with running_pipeline(
        kafka_bootstrap,
        work_dir,
        name="e2el",
        budget=4,
        backend_args=["--speed", "5"],
        extra_env={"INFERQ_TENANTS_FILE": str(write_tenants(work_dir / "tenants.toml", TENANT))},
    ) as stack:
        yield stack


def completion(litellm: ModuleType, pipeline: Pipeline, **asked: Any) -> Any:
    """LiteLLM's `completion` with inferq as its OpenAI-compatible provider."""
    return litellm.completion(
        model="openai/inferq",
        api_base=f"{pipeline.ingest_url}/v1",
        api_key=TENANT.key,
        num_retries=0,
        timeout=30,
        **asked,
    )


def stored(pipeline: Pipeline, request_id: str) -> dict[str, Any]:
    response = httpx.get(
        f"{pipeline.results_url}/v1/requests/{request_id}",
        params={"wait": 20},
        headers=TENANT.headers(),
        timeout=30,
    )
    assert response.status_code == 200, response.text
    outcome: dict[str, Any] = response.json()
    return outcome


def streamed(chunks: Iterator[Any]) -> tuple[str, list[Any], str | None, str]:
    """The text, the tool-call deltas, the last finish_reason and the id of a LiteLLM stream."""
    text, finish, request_id = "", None, ""
    calls: list[Any] = []
    for chunk in chunks:
        request_id = chunk.id
        for choice in chunk.choices:
            text += choice.delta.content or ""
            calls.extend(choice.delta.tool_calls or [])
            finish = choice.finish_reason or finish
    return text, calls, finish, request_id


def test_litellm_sync_gets_the_answer_and_its_usage(litellm: ModuleType, pipeline: Pipeline) -> None:
    answer = completion(litellm, pipeline, messages=QUESTION, max_tokens=3)
    choice = answer.choices[0]
    assert choice.finish_reason == "length"
    assert answer.usage.completion_tokens == 3
    outcome = stored(pipeline, answer.id)
    assert (outcome["status"], outcome["output"]) == ("OK", choice.message.content)


def test_litellm_streams_the_text_that_becomes_the_outcome(litellm: ModuleType, pipeline: Pipeline) -> None:
    text, calls, finish, request_id = streamed(
        completion(
            litellm, pipeline, messages=QUESTION, stream=True, extra_headers={"X-Inferq-Priority": "LOW"}
        )
    )
    assert finish == "stop" and calls == []
    outcome = stored(pipeline, request_id)
    assert outcome["tier"] == "LOW"
    assert text == outcome["output"] != ""


def test_litellm_function_calling_round_trip_sync(litellm: ModuleType, pipeline: Pipeline) -> None:
    first = completion(litellm, pipeline, messages=QUESTION, tools=[WEATHER])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.function.name == "weather" and json.loads(call.function.arguments) == {"city": "sim"}
    assert stored(pipeline, first.id)["tool_calls"][0]["id"] == call.id
    history = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"celsius": 18}'},
    ]
    final = completion(litellm, pipeline, messages=history, tools=[WEATHER])
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.content == "sim reply to: weather in Oslo?"


def test_litellm_function_calling_round_trip_streamed(litellm: ModuleType, pipeline: Pipeline) -> None:
    _, deltas, finish, request_id = streamed(
        completion(litellm, pipeline, messages=QUESTION, tools=[WEATHER], stream=True)
    )
    assert finish == "tool_calls"
    call_id = next(d.id for d in deltas if d.id)
    arguments = "".join(d.function.arguments or "" for d in deltas)
    assert json.loads(arguments) == {"city": "sim"}
    assert stored(pipeline, request_id)["tool_calls"][0]["id"] == call_id
    history = [
        *QUESTION,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "weather", "arguments": arguments}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": '{"celsius": 18}'},
    ]
    text, calls, finish, _ = streamed(
        completion(litellm, pipeline, messages=history, tools=[WEATHER], stream=True)
    )
    assert (finish, calls) == ("stop", [])
    assert text == "sim reply to: weather in Oslo?"
