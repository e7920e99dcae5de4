"""A streamed answer's per-choice deltas through the backend client, against a local HTTP server:
tool calls assembled from their pieces (two in parallel, interleaved by index), each choice's text
and finish_reason, refusal and logprobs handed on; a tool-call piece out of shape or too large
fails the call as retriable, named without the value; what only informs is dropped with a log line."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from inferq.dispatcher.backend import ChatBackend, Completion
from inferq.dispatcher.deltas import StreamDelta, ToolCallDelta
from inferq.dispatcher.errors import BackendError
from inferq.messaging import limits
from tests.unit.test_dispatcher_backend_errors import API_KEY, PROMPT, assert_clean, serving
from tests.unit.test_dispatcher_backend_stream import USAGE, sse, streaming


def event(*choices: dict[str, object]) -> dict[str, object]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "served-model",
        "choices": list(choices),
    }


def choice(index: int = 0, finish: str | None = None, **delta: object) -> dict[str, object]:
    return {"index": index, "delta": delta, "finish_reason": finish}


def piece(index: int, arguments: str = "", *, call_id: str | None = None, name: str | None = None) -> dict:
    """One `delta.tool_calls` entry as OpenAI streams it: id, type and name on the first piece only."""
    entry: dict[str, object] = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        entry |= {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return entry


def calls(*pieces: dict) -> dict[str, object]:
    return event(choice(tool_calls=list(pieces)))


async def _read(
    events: tuple[object, ...], params: dict[str, object]
) -> tuple[Completion, list[StreamDelta]]:
    handed: list[StreamDelta] = []
    async with serving(streaming(sse(*events, b"[DONE]"))) as url:
        backend = ChatBackend(url, api_key=API_KEY, max_connections=2)
        try:
            completion = await backend.stream(
                "m", [{"role": "user", "content": PROMPT}], params, timeout_s=5.0, on_delta=handed.append
            )
        finally:
            await backend.close()
    return completion, handed


def read(*events: object, n: int | None = None) -> tuple[Completion, list[StreamDelta]]:
    return asyncio.run(_read(events, {} if n is None else {"n": n}))


def refused(*events: object) -> BackendError:
    with pytest.raises(BackendError) as caught:
        read(*events)
    assert_clean(caught.value)
    assert caught.value.retriable
    return caught.value


def test_a_tool_call_in_pieces_is_handed_on_and_assembled_with_finish_reason_tool_calls() -> None:
    completion, handed = read(
        event(choice(role="assistant", content=None)),
        calls(piece(0, call_id="call_1", name="weather")),
        calls(piece(0, '{"ci')),
        calls(piece(0, 'ty": "Oslo"}')),
        event(choice(finish="tool_calls")),
        USAGE,
    )
    assert json.loads(completion.tool_calls or "") == [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
    ]
    assert (completion.output, completion.finish_reason) == ("", "tool_calls")
    assert handed == [
        StreamDelta(tool_calls=(ToolCallDelta(0, "call_1", "weather", ""),)),
        StreamDelta(tool_calls=(ToolCallDelta(0, arguments='{"ci'),)),
        StreamDelta(tool_calls=(ToolCallDelta(0, arguments='ty": "Oslo"}'),)),
        StreamDelta(finish_reason="tool_calls"),
    ]


def test_two_parallel_calls_interleaved_by_index_are_assembled_apart_in_index_order() -> None:
    completion, _ = read(
        calls(piece(1, call_id="call_b", name="clock")),
        calls(piece(0, call_id="call_a", name="weather")),
        calls(piece(0, '{"city":'), piece(1, "{}")),
        calls(piece(0, '"Oslo"}')),
        event(choice(finish="tool_calls")),
    )
    assembled = json.loads(completion.tool_calls or "")
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in assembled] == [
        ("call_a", "weather", '{"city":"Oslo"}'),
        ("call_b", "clock", "{}"),
    ]


def test_each_choice_keeps_its_own_text_and_finish_reason() -> None:
    completion, handed = read(
        event(choice(0, content="Hel"), choice(1, content="Bon")),
        event(choice(1, content="jour")),
        event(choice(0, content="lo", finish="length")),
        event(choice(1, finish="stop")),
        n=2,
    )
    assert (completion.output, completion.finish_reason) == ("Hello", "length")
    assert [(d.choice, d.content, d.finish_reason) for d in handed] == [
        (0, "Hel", None),
        (1, "Bon", None),
        (1, "jour", None),
        (0, "lo", "length"),
        (1, "", "stop"),
    ]


def test_a_choice_not_asked_for_and_a_finish_reason_the_api_lacks_are_dropped_with_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="inferq.dispatcher.answer_facts"):
        completion, handed = read(
            event(choice(0, content="mine"), choice(1, content=PROMPT)),
            event(choice(0, finish="went-home")),
        )
    assert (completion.output, completion.finish_reason) == ("mine", None)
    assert [d.content for d in handed] == ["mine"]
    assert "choices[].index" in caplog.text and "finish_reason" in caplog.text
    assert PROMPT not in caplog.text and "went-home" not in caplog.text


def test_refusal_and_logprobs_are_handed_on_and_oversized_logprobs_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    entry = {"token": "No", "logprob": -0.1, "bytes": [78, 111], "top_logprobs": []}
    huge = [{"token": "x" * limits.MAX_STREAM_LOGPROBS_CHARS, "logprob": 0.0, "top_logprobs": []}]
    with caplog.at_level(logging.DEBUG, logger="inferq.dispatcher.answer_facts"):
        _, handed = read(
            event({**choice(refusal="No"), "logprobs": {"content": [entry], "refusal": None}}),
            event({**choice(refusal=" thanks"), "logprobs": {"content": huge}}),
            event({**choice(refusal=7), "logprobs": "text"}),
        )
    assert [(d.refusal, d.logprobs) for d in handed] == [("No", (entry,)), (" thanks", ())]
    assert "logprobs dropped: over" in caplog.text and "refusal dropped" in caplog.text


@pytest.mark.parametrize(
    ("pieces", "why"),
    [
        ({"index": 0}, "not a list"),
        ([{"function": {"arguments": "{}"}}], "index"),
        ([{"index": -1}], "index"),
        ([{"index": True}], "index"),
        ([{"index": limits.MAX_TOOL_CALLS}], "index"),
        ([{"index": 0, "id": f"call {PROMPT}"}], "id not an identifier"),
        ([{"index": 0, "type": "retrieval"}], "type"),
        ([{"index": 0, "function": "weather"}], "function not an object"),
        ([{"index": 0, "function": {"name": PROMPT}}], "function.name"),
        ([{"index": 0, "function": {"arguments": {"city": "Oslo"}}}], "arguments not text"),
        ([{"index": 0, "function": {"arguments": "x" * (limits.MAX_TOOL_ARGUMENTS_CHARS + 1)}}], "at most"),
    ],
)
def test_a_tool_call_piece_out_of_shape_fails_the_call_retriable_without_its_value(
    pieces: object, why: str
) -> None:
    error = refused(event(choice(tool_calls=pieces)))
    assert str(error).startswith("backend sent a bad tool-call delta")
    assert why in str(error)


def test_arguments_grown_past_the_bound_in_small_pieces_fail_the_call() -> None:
    step = 8_192
    pieces = [calls(piece(0, call_id="call_1", name="weather"))]
    pieces += [calls(piece(0, "x" * step)) for _ in range(limits.MAX_TOOL_ARGUMENTS_CHARS // step + 1)]
    assert "arguments over" in str(refused(*pieces))


def test_as_many_calls_as_allowed_pass_and_one_more_fails_the_call() -> None:
    most = [piece(i, call_id=f"call_{i}", name="f") for i in range(limits.MAX_TOOL_CALLS)]
    completion, _ = read(calls(*most[:64]), calls(*most[64:]))
    assert len(json.loads(completion.tool_calls or "")) == limits.MAX_TOOL_CALLS
    # Each index is a call: the index bound is the count bound.
    assert "index" in str(
        refused(calls(*most[:64]), calls(piece(limits.MAX_TOOL_CALLS, call_id="c", name="f")))
    )


def test_all_calls_arguments_past_the_bound_fail_the_call() -> None:
    per_call = limits.MAX_TOOL_ARGUMENTS_CHARS
    count = limits.MAX_TOOL_CALLS_CHARS // per_call + 1
    pieces = [calls(piece(i, "x" * per_call, call_id=f"call_{i}", name="f")) for i in range(count)]
    assert "all arguments over" in str(refused(*pieces))


def test_a_call_that_changes_its_id_or_name_or_never_says_them_fails_the_call() -> None:
    first = calls(piece(0, call_id="a", name="f"))
    assert "second id" in str(refused(first, calls(piece(0, call_id="b", name="f"))))
    assert "second name" in str(refused(first, calls(piece(0, call_id="a", name="g"))))
    # Pieces without a first one: nothing names the call, so the assembled call is not one.
    error = refused(calls(piece(0, "{}")), event(choice(finish="tool_calls")))
    assert str(error) == "backend streamed tool calls that are not usable"


def test_arguments_nested_deeper_than_allowed_fail_the_call_once_assembled() -> None:
    deep = "[" * (limits.MAX_TOOL_JSON_DEPTH + 1) + "]" * (limits.MAX_TOOL_JSON_DEPTH + 1)
    halves = deep[: len(deep) // 2], deep[len(deep) // 2 :]
    error = refused(calls(piece(0, halves[0], call_id="c", name="f")), calls(piece(0, halves[1])))
    assert str(error) == "backend streamed tool calls that are not usable"


def test_an_event_nested_past_the_json_parser_fails_the_call_cleanly() -> None:
    deep = b"[" * 3_000 + b"]" * 3_000
    assert "unreadable" in str(refused(deep))


def test_a_streamed_answer_keeps_every_choice_its_refusal_and_logprobs_as_a_sync_one_would() -> None:
    """n=2 streamed: the result holds both choices (each its own text or refusal, finish_reason and
    logprobs), not only the first."""
    entry = {"token": "Hi", "logprob": -0.2, "bytes": [72, 105], "top_logprobs": []}
    completion, _ = read(
        event({**choice(0, content="Hi"), "logprobs": {"content": [entry]}}, choice(1, refusal="I can't")),
        event(
            {**choice(0, content="!"), "logprobs": {"content": [entry]}}, choice(1, "stop", refusal=" help")
        ),
        event(choice(0, finish="length")),
        n=2,
    )
    first, second = completion.choices
    assert (completion.output, completion.finish_reason) == ("Hi!", "length")
    assert (first.content, first.finish_reason, first.refusal) == ("Hi!", "length", None)
    assert json.loads(first.logprobs or "") == {"content": [entry, entry], "refusal": None}
    assert (second.index, second.content, second.refusal, second.logprobs) == (1, None, "I can't help", None)
