"""What the backend says about its answer (finish_reason, system_fingerprint, the usage's details,
its model) reaches the result record, sync and streamed; a hostile or broken value is dropped with
a log line that does not quote it, and the answer still goes through. Against a local HTTP server."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from aiohttp import web

from inferq.dispatcher.backend import ChatBackend, Completion
from inferq.dispatcher.outcomes import OutcomeBuilder
from inferq.messaging import limits
from inferq.messaging.codec import result_codec
from inferq.messaging.records import InferenceRequest, InferenceResult, Status
from inferq.messaging.tiers import Tier
from tests.unit.test_dispatcher_backend_errors import API_KEY, PROMPT, serving
from tests.unit.test_dispatcher_backend_stream import call, chunk, failure, sse, streaming

DETAILS_IN = {"cached_tokens": 2, "audio_tokens": 0}
REASONING_IN = {"reasoning_tokens": 1, "accepted_prediction_tokens": 0}
USAGE_IN = {
    "prompt_tokens": 4,
    "completion_tokens": 3,
    "total_tokens": 7,
    "prompt_tokens_details": DETAILS_IN,
    "completion_tokens_details": REASONING_IN,
}


def body(**overrides: Any) -> dict[str, Any]:
    """A chat.completion as OpenAI sends one cut by max_tokens."""
    return (
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "served-model",
            "system_fingerprint": "fp_44709d6fcb",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "cut sh"}, "finish_reason": "length"}
            ],
        }
        | {"usage": USAGE_IN}
        | overrides
    )


def completed(answer: dict[str, Any]) -> Completion:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(answer)

    async def scenario() -> Completion:
        async with serving(handler) as url:
            backend = ChatBackend(url, api_key=API_KEY, max_connections=2)
            try:
                return await backend.complete(
                    "asked-model", [{"role": "user", "content": PROMPT}], {}, timeout_s=5
                )
            finally:
                await backend.close()

    return asyncio.run(scenario())


def streamed(*events: dict[str, Any]) -> Completion:
    return asyncio.run(call(streaming(sse(*events, b"[DONE]")), []))


def as_result(completion: Completion) -> InferenceResult:
    request = InferenceRequest(
        "r-1", "realtime_chat", Tier.HIGH, created_at_ms=1, expire_at_ms=10_000, messages=(), tenant="acme"
    )
    result = OutcomeBuilder("d").ok(request, completion, dispatched_at_ms=2, now_ms=3)
    # What the results service and ingest read back from the reply topic.
    return result_codec().decode(result_codec().encode(result))


def test_a_sync_answer_cut_by_max_tokens_keeps_its_reason_fingerprint_and_usage_details() -> None:
    result = as_result(completed(body()))

    assert result.status is Status.OK
    assert (result.output, result.model) == ("cut sh", "served-model")
    assert result.finish_reason == "length"
    assert result.system_fingerprint == "fp_44709d6fcb"
    assert result.usage is not None and result.usage.as_openai() == USAGE_IN


def test_a_streamed_answer_keeps_the_last_chunks_reason_and_the_usage_chunks_details() -> None:
    fingerprinted = {"system_fingerprint": "fp_44709d6fcb"}
    completion = streamed(
        chunk("cut") | fingerprinted,
        chunk(" sh") | fingerprinted,
        chunk(finish="length") | fingerprinted,
        {"choices": [], "usage": USAGE_IN} | fingerprinted,
    )
    result = as_result(completion)

    assert (result.output, result.model) == ("cut sh", "served-model")
    assert result.finish_reason == "length"
    assert result.system_fingerprint == "fp_44709d6fcb"
    assert result.usage is not None and result.usage.as_openai() == USAGE_IN


def test_a_backend_that_says_nothing_more_leaves_the_fields_empty() -> None:
    plain = body(usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})
    del plain["system_fingerprint"], plain["choices"][0]["finish_reason"]
    result = as_result(completed(plain))

    assert (result.finish_reason, result.system_fingerprint) == (None, None)
    assert result.usage is not None
    assert result.usage.as_openai() == {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}


HUGE = "fp_" + "a" * 100_000
HOSTILE_FINGERPRINTS = [HUGE, "fp_" + "a" * 126, 17, {"fp": 1}, ["fp"], "fp with spaces", "fp\n_injected", ""]


@pytest.mark.parametrize("fingerprint", HOSTILE_FINGERPRINTS, ids=lambda v: repr(v)[:20])
def test_a_fingerprint_too_large_of_the_wrong_type_or_not_an_identifier_is_dropped(
    fingerprint: object, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="inferq.dispatcher.answer_facts")
    for completion in (
        completed(body(system_fingerprint=fingerprint)),
        streamed(chunk("cut sh", finish="length") | {"system_fingerprint": fingerprint}),
    ):
        result = as_result(completion)
        # The answer goes through; only the fingerprint is missing.
        assert (result.output, result.finish_reason, result.system_fingerprint) == ("cut sh", "length", None)
    assert "system_fingerprint dropped" in caplog.text
    if isinstance(fingerprint, str) and len(fingerprint) > 3:
        assert fingerprint not in caplog.text


def test_the_longest_fingerprint_allowed_goes_through() -> None:
    longest = "fp_" + "a" * 125
    assert as_result(completed(body(system_fingerprint=longest))).system_fingerprint == longest


@pytest.mark.parametrize("reason", ["eos", "STOP", 3, None, ["length"], "length" * 10_000])
def test_a_finish_reason_the_api_does_not_have_is_dropped(reason: object) -> None:
    answer = body()
    answer["choices"][0]["finish_reason"] = reason
    assert as_result(completed(answer)).finish_reason is None
    assert as_result(streamed(chunk("cut sh", finish=reason))).finish_reason is None  # type: ignore[arg-type]


@pytest.mark.parametrize("reason", sorted(limits.FINISH_REASONS))
def test_every_finish_reason_of_the_api_goes_through(reason: str) -> None:
    answer = body()
    answer["choices"][0]["finish_reason"] = reason
    assert as_result(completed(answer)).finish_reason == reason


@pytest.mark.parametrize(
    ("details", "kept"),
    [
        ("lots", None),  # not an object
        ([1, 2], None),
        ({"cached_tokens": -1}, {}),  # out of range
        ({"cached_tokens": 2**31}, {}),
        ({"cached_tokens": 2**31 - 1}, {"cached_tokens": 2**31 - 1}),
        ({"cached_tokens": 1.5}, {}),  # wrong type
        ({"cached_tokens": "3"}, {}),
        ({"cached_tokens": True}, {}),
        ({"cached_tokens": None, "audio_tokens": 0}, {"audio_tokens": 0}),  # null: left out, as the API does
        ({"Cached Tokens": 1, "x" * 65: 1, "ok_tokens": 1}, {"ok_tokens": 1}),  # names not identifiers
        ({f"c{i}": i for i in range(100)}, {f"c{i}": i for i in range(limits.MAX_TOKEN_DETAILS)}),  # too many
        ({"nested": {"deep": 1}}, {}),
    ],
    ids=lambda v: repr(v)[:30],
)
def test_usage_details_out_of_bounds_are_dropped_and_the_rest_kept(
    details: object, kept: dict[str, int] | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="inferq.dispatcher.answer_facts")
    usage = USAGE_IN | {"prompt_tokens_details": details}
    for completion in (
        completed(body(usage=usage)),
        streamed(chunk("cut sh"), {"choices": [], "usage": usage}),
    ):
        result = as_result(completion)
        assert result.output == "cut sh" and result.usage is not None
        assert (result.usage.prompt_tokens, result.usage.total_tokens) == (4, 7)
        assert result.usage.completion_tokens_details == REASONING_IN
        got = result.usage.prompt_tokens_details
        assert (None if got is None else dict(got)) == kept
    sent = {k: v for k, v in details.items() if v is not None} if isinstance(details, dict) else details
    assert ("prompt_tokens_details dropped" in caplog.text) == (kept != sent)


@pytest.mark.parametrize("model", ["m" * 129, "", 42, {"name": "m"}, "model\x00with-nul"], ids=repr)
def test_a_model_name_that_is_not_one_is_replaced_by_the_model_asked_for(model: object) -> None:
    assert as_result(completed(body(model=model))).model == "asked-model"
    assert as_result(streamed(chunk("cut sh") | {"model": model})).model == "m"  # `call` asks for "m"


def test_a_model_name_with_an_organisation_goes_through() -> None:
    name = "meta-llama/Llama-3.1-8B-Instruct"
    assert as_result(completed(body(model=name))).model == name


def test_the_worst_a_backend_can_send_keeps_the_record_small() -> None:
    """Everything at its bound: what the answer adds to a record stays within a few kilobytes."""
    worst = body(
        model="m" * limits.MAX_MODEL_CHARS,
        system_fingerprint="f" * 128,
        usage=USAGE_IN
        | {
            "prompt_tokens_details": {f"{'p' * 60}{i:04}": 2**31 - 1 for i in range(1000)},
            "completion_tokens_details": {f"{'c' * 60}{i:04}": 2**31 - 1 for i in range(1000)},
        },
    )
    plain = body(usage={"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7})
    del plain["system_fingerprint"]
    added = len(result_codec().encode(as_result(completed(worst)))) - len(
        result_codec().encode(as_result(completed(plain)))
    )
    assert 0 < added < 3_000


def test_an_event_over_the_line_limit_fails_the_call_cleanly_not_the_dispatcher() -> None:
    """A chunk of a megabyte (a fingerprint, a model, anything): a retriable failure named by its
    kind, as for any unreadable stream; nothing else escapes the backend client."""
    pieces: list[str] = []
    error = failure(streaming(sse(chunk("cut") | {"system_fingerprint": "fp_" + "a" * 1_000_000})), pieces)
    assert str(error) == "backend sent an unreadable stream (LineTooLong)"
    assert error.retriable
