"""ingest's chat answers against the OpenAI SDK's own types: every sync body validates as
`openai.types.chat.ChatCompletion`, every chunk as `ChatCompletionChunk`, and what the backend said
(finish_reason, system_fingerprint, the usage's details, its model) is what a caller reads. On
`answers.py` alone, then through the endpoint as raw HTTP (what any client parses, not only the SDK)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pydantic
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from inferq.ingest.chat import answers
from inferq.ingest.chat.chunks import StreamedAnswer
from inferq.messaging import limits
from inferq.messaging.records import Choice, InferenceChunk, InferenceResult, Status, Usage
from inferq.messaging.tiers import Tier
from tests.unit.test_chat_completions import HI, ingest, run

DETAILS = {"cached_tokens": 2, "audio_tokens": 0}
REASONING = {"reasoning_tokens": 1}
FULL_USAGE = Usage(4, 3, 7, MappingProxyType(DETAILS), MappingProxyType(REASONING))


def result(**fields: Any) -> InferenceResult:
    base: dict[str, Any] = {
        "request_id": "chatcmpl-1",
        "tier": Tier.HIGH,
        "status": Status.OK,
        "model": "served-model",
        "enqueued_at_ms": 1_700_000_000_000,
        "dispatched_at_ms": 1_700_000_000_010,
        "completed_at_ms": 1_700_000_001_000,
        "attempts": 1,
        "dispatcher_id": "d",
        "output": "cut sh",
        "usage": FULL_USAGE,
        "finish_reason": "length",
        "system_fingerprint": "fp_44709d6fcb",
    }
    return InferenceResult(**(base | fields))


def test_a_completion_cut_by_max_tokens_is_an_sdk_chat_completion_saying_length() -> None:
    completion = ChatCompletion.model_validate(answers.completion(result()))

    choice = completion.choices[0]
    assert (choice.finish_reason, choice.message.content, choice.message.role) == (
        "length",
        "cut sh",
        "assistant",
    )
    assert completion.system_fingerprint == "fp_44709d6fcb"
    assert completion.model == "served-model"
    assert completion.usage is not None
    assert (
        completion.usage.prompt_tokens,
        completion.usage.completion_tokens,
        completion.usage.total_tokens,
    ) == (
        4,
        3,
        7,
    )
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 2
    assert completion.usage.completion_tokens_details is not None
    assert completion.usage.completion_tokens_details.reasoning_tokens == 1


@pytest.mark.parametrize("reason", sorted(limits.FINISH_REASONS))
def test_every_finish_reason_the_api_has_reaches_the_caller(reason: str) -> None:
    completion = ChatCompletion.model_validate(answers.completion(result(finish_reason=reason)))
    assert completion.choices[0].finish_reason == reason


@pytest.mark.parametrize(
    "unknown",
    [None, "eos", "LENGTH", "x" * 10_000],
    ids=["written before results carried it", "not the API's", "not the API's case", "huge"],
)
def test_a_result_without_a_reason_the_api_knows_says_stop_and_still_validates(unknown: str | None) -> None:
    """A result from a dispatcher not yet upgraded (no reason), or a record written by someone
    else with a reason the SDK would refuse: "stop", as before, never a body the SDK rejects."""
    body = answers.completion(result(finish_reason=unknown, system_fingerprint=None, usage=Usage(1, 2, 3)))
    completion = ChatCompletion.model_validate(body)
    assert completion.choices[0].finish_reason == "stop"
    assert completion.system_fingerprint is None
    assert body["usage"] == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    assert completion.usage is not None and completion.usage.prompt_tokens_details is None


def test_a_result_without_usage_still_has_the_sdks_usage() -> None:
    completion = ChatCompletion.model_validate(answers.completion(result(usage=None)))
    assert completion.usage is not None and completion.usage.total_tokens == 0


def test_the_sdk_type_is_strict_enough_to_catch_a_wrong_body() -> None:
    """The contract tests above can fail: a body missing a field, or with a reason the API does not
    have, is refused by the SDK's type."""
    good = answers.completion(result())
    missing = {k: v for k, v in good.items() if k != "created"}
    wrong = good | {"choices": [good["choices"][0] | {"finish_reason": "eos"}]}
    for bad in (missing, wrong):
        with pytest.raises(pydantic.ValidationError):
            ChatCompletion.model_validate(bad)
    with pytest.raises(pydantic.ValidationError):
        ChatCompletionChunk.model_validate(answers.chunk("c", 1, "m", finish_reason="eos"))


def test_every_chunk_shape_is_an_sdk_chunk() -> None:
    done = result()
    chunks = [
        answers.chunk("chatcmpl-1", 1, "inferq", role=True, content=""),
        answers.chunk("chatcmpl-1", 1, "served-model", content="cut"),
        answers.chunk(
            "chatcmpl-1",
            1,
            "served-model",
            finish_reason="length",
            system_fingerprint=done.system_fingerprint,
        ),
    ]
    for raw in chunks:
        ChatCompletionChunk.model_validate(raw)
    last = ChatCompletionChunk.model_validate(chunks[-1])
    assert (last.choices[0].finish_reason, last.system_fingerprint) == ("length", "fp_44709d6fcb")
    usage = ChatCompletionChunk.model_validate(answers.usage_chunk(done, 1))
    assert usage.choices == [] and usage.usage is not None
    assert usage.usage.total_tokens == 7
    assert (
        usage.usage.prompt_tokens_details is not None and usage.usage.prompt_tokens_details.cached_tokens == 2
    )
    assert usage.system_fingerprint == "fp_44709d6fcb"


def chunk_record(seq: int, *, delta: str = "", **fields: Any) -> InferenceChunk:
    base = {"attempt": 1, "model": "served-model", "created_at_ms": 1, "dispatcher_id": "d", "tenant": "t"}
    return InferenceChunk("chatcmpl-1", seq=seq, delta=delta, **(base | fields))


CALL_A = {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}}
CALL_B = {"id": "call_b", "type": "function", "function": {"name": "clock", "arguments": "{}"}}
TOOL_RECORDS = [
    chunk_record(
        0, tool_calls=json.dumps([{"index": 0, **CALL_A, "function": {"name": "weather", "arguments": ""}}])
    ),
    chunk_record(1, tool_calls=json.dumps([{"index": 1, **CALL_B}])),
    chunk_record(2, tool_calls=json.dumps([{"index": 0, "function": {"arguments": '{"city":"Oslo"}'}}])),
    chunk_record(3, finish_reason="tool_calls"),
]


def streamed(records: list[InferenceChunk], done: InferenceResult) -> list[ChatCompletionChunk]:
    """The chunks a caller gets for `records` then `done` (the role chunk first, as the endpoint)."""
    sent = StreamedAnswer("chatcmpl-1", 1)
    raw = [answers.chunk("chatcmpl-1", 1, "inferq", role=True, content="")]
    raw += [c for c in (sent.chunk(r) for r in records) if c is not None]
    raw += sent.ending(done)
    return [ChatCompletionChunk.model_validate(c) for c in raw]


def assembled(chunks: list[ChatCompletionChunk]) -> Any:
    """The completion the SDK's own accumulator (`client.chat.completions.stream`'s) makes of them
    (its snapshot: the final one refuses a "length" or "content_filter" choice by raising)."""
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState()
    for c in chunks:
        state.handle_chunk(c)
    return state.current_completion_snapshot


def test_streamed_tool_call_deltas_are_sdk_chunks_that_the_sdk_assembles_into_the_calls() -> None:
    done = result(output="", finish_reason="tool_calls", tool_calls=json.dumps([CALL_A, CALL_B]))
    chunks = streamed(TOOL_RECORDS, done)
    final = assembled(chunks)
    (choice,) = final.choices
    assert choice.finish_reason == "tool_calls"
    calls = [c.model_dump(include={"id", "type", "function"}) for c in choice.message.tool_calls or []]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("call_a", "weather", '{"city":"Oslo"}'),
        ("call_b", "clock", "{}"),
    ]
    assert [c.choices[0].finish_reason for c in chunks].count("tool_calls") == 1


def test_tool_calls_no_chunk_carried_come_from_the_result_before_the_end() -> None:
    """A dispatcher that did not stream them (or chunks a slow reader lost): the result's calls."""
    done = result(output="", finish_reason="tool_calls", tool_calls=json.dumps([CALL_A, CALL_B]))
    final = assembled(streamed([], done))
    calls = final.choices[0].message.tool_calls or []
    assert [(c.id, c.function.arguments) for c in calls] == [("call_a", '{"city":"Oslo"}'), ("call_b", "{}")]


def test_call_pieces_no_chunk_carried_are_completed_from_the_result() -> None:
    """Chunks a slow reader lost (or a dispatcher that stopped streaming them): the rest of each
    call comes from the result, so the SDK still assembles the whole calls."""
    done = result(output="", finish_reason="tool_calls", tool_calls=json.dumps([CALL_A, CALL_B]))
    head_only = [
        TOOL_RECORDS[0],
        chunk_record(1, tool_calls=json.dumps([{"index": 0, "function": {"arguments": '{"ci'}}])),
    ]
    final = assembled(streamed(head_only, done))
    calls = final.choices[0].message.tool_calls or []
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [
        ("call_a", "weather", '{"city":"Oslo"}'),
        ("call_b", "clock", "{}"),
    ]


@pytest.mark.parametrize(
    "other",
    [
        {**CALL_A, "id": "call_z"},
        {**CALL_A, "function": {"name": "clock", "arguments": '{"city":"Oslo"}'}},
        {**CALL_A, "function": {"name": "weather", "arguments": '{"town":"Oslo"}'}},
    ],
    ids=["another id", "another name", "other arguments"],
)
def test_a_result_whose_calls_do_not_continue_the_pieces_sent_is_not_a_continuation(other: dict) -> None:
    """The answer started over after call pieces went out and came out otherwise: the endpoint's
    error event, never a call the caller would assemble from two answers."""
    sent = StreamedAnswer("chatcmpl-1", 1)
    for record in [
        *TOOL_RECORDS[:1],
        chunk_record(1, tool_calls=json.dumps([{"index": 0, "function": {"arguments": '{"ci'}}])),
    ]:
        sent.chunk(record)
    same = result(output="", finish_reason="tool_calls", tool_calls=json.dumps([CALL_A]))
    assert sent.continued_by(same)
    assert not sent.continued_by(
        result(output="", finish_reason="tool_calls", tool_calls=json.dumps([other]))
    )
    assert not sent.continued_by(result(output="", finish_reason="stop"))


def test_two_interleaved_choices_keep_their_index_text_and_finish_reason() -> None:
    records = [
        chunk_record(0, delta="Hel"),
        chunk_record(1, delta="Bon", choice_index=1),
        chunk_record(2, delta="lo"),
        chunk_record(3, delta="jour", choice_index=1, finish_reason="stop"),
        chunk_record(4, refusal="no", choice_index=2, finish_reason="content_filter"),
    ]
    chunks = streamed(records, result(output="Hello", finish_reason="length"))
    final = assembled(chunks)
    assert [(c.index, c.message.content, c.message.refusal, c.finish_reason) for c in final.choices] == [
        (0, "Hello", None, "length"),
        (1, "Bonjour", None, "stop"),
        (2, None, "no", "content_filter"),
    ]
    firsts = {c.choices[0].index: c.choices[0].delta.role for c in reversed(chunks)}
    assert firsts == {0: "assistant", 1: "assistant", 2: "assistant"}, (
        "each choice's first chunk has the role"
    )


def test_a_chunk_record_with_a_reason_the_api_lacks_or_broken_json_still_gives_sdk_chunks() -> None:
    """Records are the dispatcher's, checked there; one written otherwise must not break a caller."""
    records = [
        chunk_record(0, delta="a", tool_calls="not json", logprobs="[1]"),
        chunk_record(1, delta="", choice_index=1, finish_reason="went-home"),
    ]
    chunks = streamed(records, result(output="a", finish_reason="stop"))
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["stop", "stop"]
    assert all(c.choices[0].delta.tool_calls is None and c.choices[0].logprobs is None for c in chunks)


def test_logprobs_of_a_chunk_record_reach_the_sdk_chunk() -> None:
    entry = {"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": []}
    records = [chunk_record(0, delta="Hi", logprobs=json.dumps({"content": [entry], "refusal": None}))]
    chunks = streamed(records, result(output="Hi", finish_reason="stop"))
    (with_logprobs,) = [c for c in chunks if c.choices[0].logprobs is not None]
    content = with_logprobs.choices[0].logprobs.content if with_logprobs.choices[0].logprobs else None
    assert [(t.token, t.logprob) for t in content or []] == [("Hi", -0.5)]


# --- through the endpoint, as raw HTTP ------------------------------------------------------------


def sse_payloads(text: str) -> list[Any]:
    events = [e for e in text.split("\n\n") if e.startswith("data: ")]
    return [e[6:] if e[6:] == "[DONE]" else json.loads(e[6:]) for e in events]


ANSWERED = {
    "output": "cut sh",
    "model": "served-model",
    "usage": FULL_USAGE,
    "finish_reason": "length",
    "system_fingerprint": "fp_44709d6fcb",
}


@run
async def test_the_sync_body_on_the_wire_is_an_sdk_chat_completion_with_what_the_backend_said(
    tmp_path: Path,
) -> None:
    async with ingest(tmp_path) as svc, svc.http() as http:
        call = asyncio.ensure_future(
            http.post("/v1/chat/completions", json={"model": "inferq", "messages": HI, "max_tokens": 3})
        )
        svc.answer(await svc.next_request(0), **ANSWERED)
        response = await call
        assert response.status_code == 200
        completion = ChatCompletion.model_validate(response.json())
        assert completion.choices[0].finish_reason == "length"
        assert completion.system_fingerprint == "fp_44709d6fcb"
        assert completion.model == "served-model"
        assert completion.usage is not None and completion.usage.model_dump(exclude_none=True) == {
            "prompt_tokens": 4,
            "completion_tokens": 3,
            "total_tokens": 7,
            "prompt_tokens_details": DETAILS,
            "completion_tokens_details": REASONING,
        }


@pytest.mark.parametrize("include_usage", [True, False])
def test_every_streamed_chunk_on_the_wire_is_an_sdk_chunk_and_the_last_says_length(
    tmp_path: Path, include_usage: bool
) -> None:
    async def scenario() -> list[Any]:
        body: dict[str, Any] = {"model": "inferq", "messages": HI, "max_tokens": 3, "stream": True}
        if include_usage:
            body["stream_options"] = {"include_usage": True}
        async with ingest(tmp_path) as svc, svc.http() as http:
            call = asyncio.ensure_future(http.post("/v1/chat/completions", json=body))
            request = await svc.next_request(0)
            svc.chunks(request, "cut", model="served-model")
            svc.answer(request, **ANSWERED)
            response = await call
            assert response.status_code == 200
            return sse_payloads(response.text)

    payloads = asyncio.run(asyncio.wait_for(scenario(), 60))

    assert payloads[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(p) for p in payloads[:-1]]
    with_choices = [c for c in chunks if c.choices]
    assert "".join(c.choices[0].delta.content or "" for c in with_choices) == "cut sh"
    assert [c.choices[0].finish_reason for c in with_choices][-1] == "length"
    assert all(c.choices[0].finish_reason is None for c in with_choices[:-1])
    assert with_choices[-1].system_fingerprint == "fp_44709d6fcb"
    usage_chunks = [c for c in chunks if not c.choices]
    if include_usage:
        (usage,) = usage_chunks
        assert usage is chunks[-1] and usage.usage is not None
        assert usage.usage.model_dump(exclude_none=True) == {
            "prompt_tokens": 4,
            "completion_tokens": 3,
            "total_tokens": 7,
            "prompt_tokens_details": DETAILS,
            "completion_tokens_details": REASONING,
        }
    else:
        assert usage_chunks == [] and all(c.usage is None for c in chunks)


WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}


def test_streamed_tools_on_the_wire_are_sdk_chunks_with_the_calls_and_a_usage_chunk(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[Any], Any]:
        body: dict[str, Any] = {
            "model": "inferq",
            "messages": HI,
            "tools": [WEATHER],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        async with ingest(tmp_path) as svc, svc.http() as http:
            call = asyncio.ensure_future(http.post("/v1/chat/completions", json=body))
            request = await svc.next_request(0)
            for record in TOOL_RECORDS:
                fields = {k: v for k, v in record.to_record().items() if k in {"tool_calls", "finish_reason"}}
                svc.chunks(request, record.delta, first_seq=record.seq, model="served-model", **fields)
            calls = json.dumps([CALL_A, CALL_B])
            svc.answer(
                request, **(ANSWERED | {"output": "", "finish_reason": "tool_calls", "tool_calls": calls})
            )
            response = await call
            assert response.status_code == 200, response.text
            return sse_payloads(response.text), request

    payloads, request = asyncio.run(asyncio.wait_for(scenario(), 60))

    assert request.stream and json.loads((request.params or {})["tools"]) == [WEATHER]
    assert payloads[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(p) for p in payloads[:-1]]
    *answer, usage = chunks
    final = assembled(answer)
    (choice,) = final.choices
    assert choice.finish_reason == "tool_calls"
    assert [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls or []] == [
        ("call_a", "weather", '{"city":"Oslo"}'),
        ("call_b", "clock", "{}"),
    ]
    assert usage.choices == [] and usage.usage is not None and usage.usage.total_tokens == 7


def test_a_second_choice_whose_chunks_were_lost_is_completed_from_the_result() -> None:
    both = (Choice(0, "Hello", "stop"), Choice(1, "Bonjour", "length"))
    # Choice 1's "jour" was lost (a gap: nothing more is relayed), and choice 2... never streamed.
    records = [chunk_record(0, delta="Hel"), chunk_record(1, delta="Bon", choice_index=1)]
    final = assembled(streamed(records, result(output="Hello", finish_reason="stop", choices=both)))
    assert [(c.index, c.message.content, c.finish_reason) for c in final.choices] == [
        (0, "Hello", "stop"),
        (1, "Bonjour", "length"),
    ]
    whole = assembled(streamed(records[:1], result(output="Hello", finish_reason="stop", choices=both)))
    assert [(c.index, c.message.content) for c in whole.choices] == [(0, "Hello"), (1, "Bonjour")]
    other = (Choice(0, "Hello", "stop"), Choice(1, "Salut", "stop"))
    sent = StreamedAnswer("r1", 1)
    for record in records:
        sent.chunk(record)
    assert not sent.continued_by(result(output="Hello", choices=other)), "choice 1 came out otherwise"
