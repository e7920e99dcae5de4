"""The official openai SDK against inferq on the real broker: the services as processes (ingest,
dispatcher, results, the simulated backend), a tenants file, the SDK pointed at ingest with
`base_url` and nothing else changed. Also the results service's long poll and event stream, woken
by the reply topic.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessageParam,
    ChatCompletionToolParam,
)

from inferq.messaging import limits
from inferq.tools.bench.recorder import marked_content
from inferq.tools.simbackend.choices import REFUSAL_TEXT, REFUSE_MARKER
from inferq.tools.stack.pipeline import Pipeline
from tests.support.pipeline import running_pipeline
from tests.support.scrape import metric_sum
from tests.support.sse import sse_events
from tests.support.tenants import TenantSpec, write_tenants
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

WIDE = {"models": ["*"], "roles": ["user", "assistant", "system", "tool"]}
# acme may also pass through a field the API gained after inferq knew it.
PASSTHROUGH = "safety_checks"
ACME = TenantSpec(
    "acme", entitlements=WIDE, params=dict.fromkeys([*limits.ALLOWED_PARAMS, PASSTHROUGH], True)
)
BETA = TenantSpec("beta")
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
HI = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    work_dir = tmp_path_factory.mktemp("openai")
    with running_pipeline(
        kafka_bootstrap,
        work_dir,
        name="e2eo",
        budget=4,
        backend_args=["--speed", "5"],
        extra_env={"INFERQ_TENANTS_FILE": str(write_tenants(work_dir / "tenants.toml", ACME, BETA))},
    ) as stack:
        yield stack


def sdk(pipeline: Pipeline, spec: TenantSpec = ACME) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{pipeline.ingest_url}/v1", api_key=spec.key, max_retries=0, timeout=30)


def stored(pipeline: Pipeline, request_id: str, spec: TenantSpec) -> httpx.Response:
    """The results service's answer for the id, waiting for it with a long poll (no polling loop)."""
    return httpx.get(
        f"{pipeline.results_url}/v1/requests/{request_id}",
        params={"wait": 20},
        headers=spec.headers(),
        timeout=30,
    )


def test_the_sync_sdk_gets_a_completion_and_the_results_service_the_same_outcome(pipeline: Pipeline) -> None:
    client = sdk(pipeline)
    completion = client.chat.completions.create(
        model="inferq", messages=HI, temperature=0.3, max_tokens=64, user="someone"
    )
    text = completion.choices[0].message.content
    assert text
    assert completion.object == "chat.completion"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens > 0
    outcome = stored(pipeline, completion.id, ACME)
    assert outcome.status_code == 200
    assert outcome.json()["output"] == text
    assert outcome.json()["tier"] == "HIGH"
    # Another tenant's key: like an id nobody sent.
    assert (
        httpx.get(
            f"{pipeline.results_url}/v1/requests/{completion.id}", headers=BETA.headers(), timeout=10
        ).status_code
        == 404
    )
    models = [m.id for m in client.models.list()]
    assert models[0] == "inferq" and "inferq-fast" in models
    client.close()


def test_the_async_sdk_gets_concurrent_completions(pipeline: Pipeline) -> None:
    async def scenario() -> list[str]:
        client = openai.AsyncOpenAI(
            base_url=f"{pipeline.ingest_url}/v1", api_key=ACME.key, max_retries=0, timeout=30
        )
        try:
            answers = await asyncio.gather(
                *(
                    client.chat.completions.create(
                        model="inferq-fast", messages=[{"role": "user", "content": f"question {i}"}]
                    )
                    for i in range(6)
                )
            )
        finally:
            await client.close()
        return [a.choices[0].message.content or "" for a in answers]

    texts = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert len(texts) == 6 and all(texts)


def test_the_sdk_streams_and_the_text_is_the_outcome(pipeline: Pipeline) -> None:
    client = sdk(pipeline)
    pieces: list[str] = []
    finish: list[str | None] = []
    request_id = None
    with client.chat.completions.create(
        model="inferq", messages=HI, stream=True, stream_options={"include_usage": True}
    ) as stream:
        for chunk in stream:
            request_id = chunk.id
            for choice in chunk.choices:
                pieces.append(choice.delta.content or "")
                finish.append(choice.finish_reason)
    assert finish[-1] == "stop"
    assert request_id is not None
    # The dispatcher streamed: the text came in pieces (the role chunk and the end carry none).
    assert len([p for p in pieces if p]) > 1, pieces
    outcome = stored(pipeline, request_id, ACME)
    assert outcome.status_code == 200
    assert "".join(pieces) == outcome.json()["output"] != ""
    client.close()


# The simulated backend's fingerprint, and its prompt cache: HI's system message, "be brief" (2 tokens).
SIM_FINGERPRINT = "fp_inferqsim01"
HI_CACHED_TOKENS = 2


def test_max_tokens_cuts_the_answer_and_the_sdk_reads_length_usage_and_fingerprint(
    pipeline: Pipeline,
) -> None:
    """Through the queue and back, unchanged SDK: an answer cut by max_tokens says so, sync and
    streamed, and the results service holds the same; the bodies validate as the SDK's types."""
    client = sdk(pipeline)
    raw = client.chat.completions.with_raw_response.create(model="inferq", messages=HI, max_tokens=3)
    ChatCompletion.model_validate(json.loads(raw.text))  # strict: the SDK's parse alone does not check
    cut = raw.parse()
    assert cut.choices[0].finish_reason == "length"
    assert cut.system_fingerprint == SIM_FINGERPRINT
    usage = cut.usage
    assert usage is not None and usage.completion_tokens == 3
    assert usage.total_tokens == usage.prompt_tokens + 3
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == HI_CACHED_TOKENS
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 0

    outcome = stored(pipeline, cut.id, ACME).json()
    assert outcome["finish_reason"] == "length"
    assert outcome["system_fingerprint"] == SIM_FINGERPRINT
    assert outcome["usage"] == usage.model_dump(exclude_none=True)
    assert outcome["output"] == cut.choices[0].message.content
    assert outcome["model"] == cut.model

    with client.chat.completions.create(
        model="inferq", messages=HI, max_tokens=3, stream=True, stream_options={"include_usage": True}
    ) as stream:
        chunks = list(stream)
    client.close()
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk.model_dump(exclude_unset=True))
    with_choices = [c for c in chunks if c.choices]
    assert [c.choices[0].finish_reason for c in with_choices][-1] == "length"
    assert all(c.choices[0].finish_reason is None for c in with_choices[:-1])
    assert with_choices[-1].system_fingerprint == SIM_FINGERPRINT
    assert "".join(c.choices[0].delta.content or "" for c in with_choices) == cut.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage == usage
    streamed = stored(pipeline, chunks[0].id, ACME).json()
    assert (streamed["finish_reason"], streamed["system_fingerprint"]) == ("length", SIM_FINGERPRINT)
    assert streamed["usage"] == outcome["usage"]


def test_priority_from_a_header_and_an_expired_deadline_is_504(pipeline: Pipeline) -> None:
    client = sdk(pipeline)
    low = client.chat.completions.create(
        model="inferq", messages=HI, extra_headers={"X-Inferq-Priority": "LOW"}
    )
    assert stored(pipeline, low.id, ACME).json()["tier"] == "LOW"
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(
            model="inferq", messages=HI, extra_headers={"X-Inferq-Deadline-Ms": "1"}
        )
    assert raised.value.status_code == 504
    assert raised.value.body["code"] == "deadline_exceeded"  # type: ignore[index]
    client.close()


def test_refusals_reach_the_sdk_as_its_own_errors(pipeline: Pipeline) -> None:
    client = sdk(pipeline)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="inferq", messages=HI, n=limits.MAX_CHOICES + 1)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="inferq", messages=HI, top_logprobs=2)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-nothing", messages=HI)
    with pytest.raises(openai.PermissionDeniedError):
        sdk(pipeline, BETA).chat.completions.create(model="inferq-accurate", messages=HI)
    stranger = openai.OpenAI(base_url=f"{pipeline.ingest_url}/v1", api_key="iq_wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.chat.completions.create(model="inferq", messages=HI)
    client.close()


def submit(pipeline: Pipeline, spec: TenantSpec = ACME, **fields: Any) -> str:
    body = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "hello"}]} | fields
    response = httpx.post(f"{pipeline.ingest_url}/v1/requests", json=body, headers=spec.headers(), timeout=10)
    assert response.status_code == 202, response.text
    request_id: str = response.json()["request_id"]
    return request_id


def test_a_long_poll_answers_when_the_outcome_is_written(pipeline: Pipeline) -> None:
    request_id = submit(pipeline)
    outcome = stored(pipeline, request_id, ACME)
    assert outcome.status_code == 200
    assert outcome.json()["status"] == "OK"
    # Another tenant waits like for an id nobody sent, then hears it is pending.
    other = httpx.get(
        f"{pipeline.results_url}/v1/requests/{request_id}",
        params={"wait": 1},
        headers=BETA.headers(),
        timeout=10,
    )
    assert other.status_code == 202 and other.json()["status"] == "PENDING"


def test_events_carry_the_outcome_as_sse(pipeline: Pipeline) -> None:
    request_id = submit(pipeline, scenario="emotion_analysis")
    events: list[tuple[str, Any]] = []
    with httpx.stream(
        "GET", f"{pipeline.results_url}/v1/requests/{request_id}/events", headers=ACME.headers(), timeout=30
    ) as response:
        assert response.status_code == 200
        events.extend(sse_events(response.iter_lines()))
    assert events[-1][0] == "result"
    assert events[-1][1]["request_id"] == request_id
    assert events[-1][1]["tier"] == "MEDIUM"
    assert all(name == "chunk" for name, _ in events[:-1])


def test_events_relay_a_streamed_requests_chunks_in_order_then_its_result(pipeline: Pipeline) -> None:
    request_id = f"streamed-{uuid.uuid4().hex}"
    events: list[tuple[str, Any]] = []
    # Listening before the request exists: every piece is seen live, once the replica reads the chunk
    # topics (it starts to when a stream opens: an answer over before that comes whole with its result).
    with httpx.stream(
        "GET", f"{pipeline.results_url}/v1/requests/{request_id}/events", headers=ACME.headers(), timeout=60
    ) as response:
        assert response.status_code == 200
        wait_until(
            lambda: metric_sum(
                f"{pipeline.results_metrics_url()}/metrics", "inferq_results_chunk_reader_running"
            ),
            "the results replica reading the chunk topics",
            15,
            interval_s=0.05,
            done=lambda running: running == 1,
        )
        assert submit(pipeline, scenario="emotion_analysis", stream=True, request_id=request_id) == request_id
        events.extend(sse_events(response.iter_lines()))
    chunks = [data for name, data in events if name == "chunk"]
    assert len(chunks) > 1, "a streamed request's pieces are relayed as they come"
    assert [c["seq"] for c in chunks] == list(range(len(chunks)))
    assert events[-1][0] == "result"
    assert "".join(c["delta"] for c in chunks) == events[-1][1]["output"]


def test_a_backend_that_drops_the_stream_is_an_error_event_and_a_failed_outcome(pipeline: Pipeline) -> None:
    faults = f"{pipeline.backend_url}/admin/faults"
    assert httpx.post(faults, json={"stream_drop_rate": 1.0}, timeout=5).status_code == 200
    client = sdk(pipeline)
    pieces: list[str] = []
    try:
        stream = client.chat.completions.create(
            model="inferq",
            messages=HI,
            stream=True,
            extra_headers={"X-Inferq-Scenario": "emotion_analysis", "X-Inferq-Deadline-Ms": "30000"},
        )
        request_id = stream.response.headers["x-inferq-request-id"]
        with pytest.raises(openai.APIError) as raised:
            for chunk in stream:
                pieces.extend(c.delta.content or "" for c in chunk.choices)
    finally:
        httpx.post(faults, json={"stream_drop_rate": 0.0}, timeout=5)
        client.close()
    assert raised.value.body["code"] == "backend_failed"  # type: ignore[index]
    assert stored(pipeline, request_id, ACME).json()["status"] == "FAILED"


# --- n, logprobs and refusals (the simulated backend's choice i answers "sim reply <i+1> to: ...",
# and refuses a user turn holding its marker) ---


def test_n_2_gives_two_distinct_choices_and_the_results_service_holds_both(pipeline: Pipeline) -> None:
    client = sdk(pipeline)
    # 6 tokens: the first choice's text (25 characters) is cut, and so is the second's (27).
    asked = [{"role": "user", "content": "hello ther"}]
    raw = client.chat.completions.with_raw_response.create(model="inferq", messages=asked, n=2, max_tokens=6)
    completion = ChatCompletion.model_validate(json.loads(raw.text))
    client.close()

    assert [c.index for c in completion.choices] == [0, 1]
    texts = [c.message.content for c in completion.choices]
    assert texts == ["sim reply to: hello ther", "sim reply 2 to: hello th"]
    assert [c.finish_reason for c in completion.choices] == ["stop", "length"]
    outcome = stored(pipeline, completion.id, ACME).json()
    assert [(c["index"], c["content"], c["finish_reason"]) for c in outcome["choices"]] == [
        (0, texts[0], "stop"),
        (1, texts[1], "length"),
    ]
    assert (outcome["output"], outcome["finish_reason"]) == (texts[0], "stop")


def test_logprobs_with_top_logprobs_reach_the_sdk(pipeline: Pipeline) -> None:
    client = sdk(pipeline)
    raw = client.chat.completions.with_raw_response.create(
        model="inferq", messages=HI, logprobs=True, top_logprobs=2
    )
    ChatCompletion.model_validate(json.loads(raw.text))
    choice = raw.parse().choices[0]
    client.close()
    assert choice.logprobs is not None and choice.logprobs.content
    assert "".join(t.token for t in choice.logprobs.content) == choice.message.content
    assert all(
        len(t.top_logprobs) == 2 and t.top_logprobs[0].token == t.token for t in choice.logprobs.content
    )


def test_n_2_with_logprobs_streamed_gives_each_choice_by_its_index_and_the_result_holds_both(
    pipeline: Pipeline,
) -> None:
    """Streamed through the queue: each chunk names its choice, each choice ends with its own
    finish_reason and carries its tokens' logprobs, and the stored result is the sync answer's."""
    client = sdk(pipeline)
    asked: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello ther"}]
    fields: dict[str, Any] = {"n": 2, "max_tokens": 6, "logprobs": True, "top_logprobs": 2}
    with client.chat.completions.create(model="inferq", messages=asked, stream=True, **fields) as stream:
        chunks = list(stream)
    sync = client.chat.completions.create(model="inferq", messages=asked, **fields)
    client.close()
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk.model_dump(exclude_unset=True))
    for index, answer in enumerate(sync.choices):
        mine = [choice for chunk in chunks for choice in chunk.choices if choice.index == index]
        assert "".join(c.delta.content or "" for c in mine) == answer.message.content
        assert [c.finish_reason for c in mine if c.finish_reason] == [answer.finish_reason]
        tokens = [t.token for c in mine if c.logprobs for t in c.logprobs.content or []]
        assert answer.logprobs is not None and tokens == [t.token for t in answer.logprobs.content or []]
    outcome = stored(pipeline, chunks[0].id, ACME).json()
    assert [(c["index"], c["content"], c["finish_reason"]) for c in outcome["choices"]] == [
        (c.index, c.message.content, c.finish_reason) for c in sync.choices
    ]
    assert all(c["logprobs"]["content"] for c in outcome["choices"])


def test_a_refusal_reaches_the_sdk_with_no_content(pipeline: Pipeline) -> None:
    client = sdk(pipeline)
    refused = client.chat.completions.create(
        model="inferq", messages=[{"role": "user", "content": f"do it {REFUSE_MARKER}"}]
    )
    client.close()
    message = refused.choices[0].message
    assert (message.content, message.refusal) == (None, REFUSAL_TEXT)


def test_a_native_request_with_n_2_has_both_choices_in_its_result(pipeline: Pipeline) -> None:
    request_id = submit(pipeline, params={"n": 2})
    outcome = stored(pipeline, request_id, ACME).json()
    assert outcome["status"] == "OK"
    assert [(c["index"], c["content"]) for c in outcome["choices"]] == [
        (0, "sim reply to: hello"),
        (1, "sim reply 2 to: hello"),
    ]


# --- function calling and structured output (the simulated backend calls the first tool on a user
# turn, answers in text after a tool message, and fills a json_schema's required properties) ---


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


def streamed_chunks(
    client: openai.OpenAI, messages: list[ChatCompletionMessageParam]
) -> list[ChatCompletionChunk]:
    """A streamed call with tools and `include_usage`; each chunk checked against the SDK's type."""
    with client.chat.completions.create(
        model="inferq",
        messages=messages,
        tools=[WEATHER],
        stream=True,
        stream_options={"include_usage": True},
    ) as stream:
        chunks = list(stream)
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk.model_dump(exclude_unset=True))
    return chunks


def test_a_streamed_tool_call_then_the_tools_result_then_a_streamed_answer(pipeline: Pipeline) -> None:
    """Function calling streamed through the queue: the call assembled from its deltas as any
    OpenAI client does (by index: id and name first, the arguments in pieces), finish_reason
    tool_calls, a usage chunk last; then the tool's result and the streamed answer."""
    client = sdk(pipeline)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "weather in Oslo?"}]
    chunks = streamed_chunks(client, messages)
    *answer, usage = chunks
    pieces = [d for c in answer for d in c.choices[0].delta.tool_calls or []]
    assert len(pieces) > 2 and {p.index for p in pieces} == {0}, "the call came in pieces"
    assert all(c.choices[0].delta.content is None for c in answer[1:]), "no text besides the call"
    assert [c.choices[0].finish_reason for c in answer if c.choices[0].finish_reason] == ["tool_calls"]
    call_id = next(p.id for p in pieces if p.id)
    name = next(p.function.name for p in pieces if p.function and p.function.name)
    arguments = "".join(p.function.arguments or "" for p in pieces if p.function)
    assert (name, json.loads(arguments)) == ("weather", {"city": "sim"})
    assert usage.choices == [] and usage.usage is not None and usage.usage.completion_tokens > 0
    # The results service holds the same call and usage.
    outcome = stored(pipeline, usage.id, ACME).json()
    assert outcome["finish_reason"] == "tool_calls"
    assert outcome["tool_calls"] == [
        {"id": call_id, "type": "function", "function": {"name": "weather", "arguments": arguments}}
    ]
    assert outcome["usage"]["total_tokens"] == usage.usage.total_tokens

    messages.append({"role": "assistant", "content": None, "tool_calls": outcome["tool_calls"]})
    messages.append({"role": "tool", "tool_call_id": call_id, "content": '{"celsius": 18}'})
    *answer, usage = streamed_chunks(client, messages)
    text = "".join(c.choices[0].delta.content or "" for c in answer)
    assert text == "sim reply to: weather in Oslo?"
    assert len([c for c in answer if c.choices[0].delta.content]) > 1, "the answer came in pieces"
    assert all(c.choices[0].delta.tool_calls is None for c in answer)
    assert [c.choices[0].finish_reason for c in answer if c.choices[0].finish_reason] == ["stop"]
    assert usage.usage is not None and usage.usage.prompt_tokens > 0
    client.close()


def test_events_relay_a_streamed_tool_calls_deltas_then_its_result(pipeline: Pipeline) -> None:
    request_id = f"streamed-tools-{uuid.uuid4().hex}"
    events: list[tuple[str, Any]] = []
    with httpx.stream(
        "GET", f"{pipeline.results_url}/v1/requests/{request_id}/events", headers=ACME.headers(), timeout=60
    ) as response:
        assert response.status_code == 200
        submitted = submit(
            pipeline,
            scenario="emotion_analysis",
            stream=True,
            request_id=request_id,
            params={"tools": [WEATHER]},
        )
        assert submitted == request_id
        events.extend(sse_events(response.iter_lines()))
    chunks = [data for name, data in events if name == "chunk"]
    assert [c["seq"] for c in chunks] == list(range(len(chunks)))
    assert {c["index"] for c in chunks} == {0}
    pieces = [p for c in chunks for p in c.get("tool_calls", [])]
    assert pieces[0]["id"] and pieces[0]["function"]["name"] == "weather"
    assert chunks[-1]["finish_reason"] == "tool_calls"
    name, result = events[-1]
    assert name == "result" and result["finish_reason"] == "tool_calls"
    assert result["tool_calls"][0]["function"]["arguments"] == "".join(
        p["function"]["arguments"] for p in pieces
    )


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


def test_the_newer_parameters_and_a_pass_through_field_reach_the_backend_unchanged(
    pipeline: Pipeline,
) -> None:
    """What the simulated backend received (`GET /received/{marker}`), through ingest, Kafka and the
    dispatcher: every value as the SDK sent it, `max_completion_tokens` under its own name,
    `metadata` without inferq's own key."""
    marker = f"params-{uuid.uuid4().hex[:8]}"
    sent: dict[str, Any] = {
        "logit_bias": {"50256": -100, "13": 7},
        "user": "end-user-42",
        "max_completion_tokens": 40,
        "reasoning_effort": "low",
        "modalities": ["text"],
        "store": False,
        "prompt_cache_key": "persona-ada",
        "service_tier": "flex",
        "verbosity": "high",
        "prediction": {"type": "content", "content": "def greet(): return 'hi'"},
        "seed": 7,
    }
    client = sdk(pipeline)
    completion = client.chat.completions.create(
        model="inferq",
        messages=[{"role": "user", "content": marked_content(marker)}],
        metadata={"app": "companion", "inferq_priority": "HIGH"},
        extra_body={PASSTHROUGH: {"level": "strict", "categories": ["violence"]}},
        **sent,
    )
    assert completion.choices[0].message.content
    received = httpx.get(f"{pipeline.backend_url}/received/{marker}", timeout=10).json()
    assert {name: received.get(name) for name in sent} == sent
    assert received["metadata"] == {"app": "companion"}
    assert received[PASSTHROUGH] == {"level": "strict", "categories": ["violence"]}
    assert "max_tokens" not in received
    client.close()
