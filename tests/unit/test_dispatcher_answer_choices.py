"""Every choice of a backend's sync answer reaches the result record, at most the `n` asked, each
with its finish_reason, tool_calls, refusal and logprobs; a hostile backend (too many choices,
logprobs far too large or of the wrong shape, a refusal that is not text) loses only the value at
fault, with a log line naming the field and never quoting the value. Against a local HTTP server."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from aiohttp import web

from inferq.dispatcher.backend import ChatBackend, Completion
from inferq.dispatcher.errors import BackendError
from inferq.messaging import limits
from inferq.messaging.codec import AvroCodec, earlier_schemas, load_schema, result_codec
from inferq.messaging.records import InferenceResult
from tests.unit.test_dispatcher_answer_facts import as_result, body, streamed
from tests.unit.test_dispatcher_backend_errors import API_KEY, PROMPT, serving
from tests.unit.test_dispatcher_backend_stream import chunk

# A value that must never appear in a log line.
ECHOED = "secret-prompt-echo"


def choice(index: int, content: str | None = "text", **fields: Any) -> dict[str, Any]:
    message = {"role": "assistant", "content": content} | fields.pop("message", {})
    return {"index": index, "message": message, "finish_reason": "stop"} | fields


def token(text: str, top: int = 2) -> dict[str, Any]:
    alternatives = [{"token": f"{text}{k}", "logprob": -1.0 - k, "bytes": [65]} for k in range(top)]
    return {"token": text, "logprob": -0.5, "bytes": list(text.encode()), "top_logprobs": alternatives}


def logprobs(tokens: int) -> dict[str, Any]:
    return {"content": [token(f"t{i}") for i in range(tokens)], "refusal": None}


def answered(choices: list[Any], params: dict[str, Any] | None = None) -> Completion:
    """The backend's answer with these `choices`, to a call with these `params`."""
    sent: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        sent.append(await request.json())
        return web.json_response(body(choices=choices))

    async def scenario() -> Completion:
        async with serving(handler) as url:
            backend = ChatBackend(url, api_key=API_KEY, max_connections=2)
            try:
                return await backend.complete(
                    "asked-model", [{"role": "user", "content": PROMPT}], params or {}, timeout_s=5
                )
            finally:
                await backend.close()

    completion = asyncio.run(scenario())
    # The parameters went to the backend as the request carries them.
    assert {k: sent[0][k] for k in params or {}} == (params or {})
    return completion


def test_two_choices_asked_are_two_choices_in_the_result_the_first_also_at_the_top() -> None:
    first = choice(0, "one", logprobs=logprobs(2))
    second = choice(1, "two, cu", finish_reason="length")
    result = as_result(answered([first, second], {"n": 2, "logprobs": True, "top_logprobs": 2}))

    assert result.choices is not None
    assert [(c.index, c.content, c.finish_reason) for c in result.choices] == [
        (0, "one", "stop"),
        (1, "two, cu", "length"),
    ]
    assert (result.output, result.finish_reason) == ("one", "stop")
    assert result.choices[0].openai_logprobs() == logprobs(2)
    assert result.choices[1].logprobs is None


def test_one_plain_choice_writes_no_choices_and_reads_as_one() -> None:
    result = as_result(answered([choice(0, "only")]))
    assert result.choices is None
    assert [(c.index, c.content) for c in result.all_choices()] == [(0, "only")]


def test_a_streamed_answer_is_one_choice_as_before() -> None:
    result = as_result(streamed(chunk("cut sh", finish="length")))
    assert result.choices is None and result.all_choices()[0].content == "cut sh"


def test_choices_sent_out_of_order_are_put_in_the_backends_index_order() -> None:
    result = as_result(answered([choice(1, "b"), choice(0, "a")], {"n": 2}))
    assert [(c.index, c.content) for c in result.all_choices()] == [(0, "a"), (1, "b")]
    assert result.output == "a"


@pytest.mark.parametrize("indices", [(0, 0), (None, 1), ("0", "1"), (True, False)], ids=repr)
def test_indices_that_are_not_distinct_whole_numbers_keep_the_order_sent(
    indices: tuple[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="inferq.dispatcher.answer_facts")
    sent = [choice(0, "a") | {"index": indices[0]}, choice(0, "b") | {"index": indices[1]}]
    result = as_result(answered(sent, {"n": 2}))
    assert [(c.index, c.content) for c in result.all_choices()] == [(0, "a"), (1, "b")]
    assert "choices.index dropped" in caplog.text


def test_a_backend_sending_50_choices_when_2_were_asked_gets_2_in_the_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="inferq.dispatcher.answer_facts")
    result = as_result(answered([choice(i, f"{ECHOED} {i}") for i in range(50)], {"n": 2}))

    assert [c.content for c in result.all_choices()] == [f"{ECHOED} 0", f"{ECHOED} 1"]
    assert "choices dropped: more than the 2 asked" in caplog.text
    assert ECHOED not in caplog.text


def test_more_choices_than_any_request_may_ask_are_cut_at_the_global_bound() -> None:
    """A record written straight to Kafka cannot ask past `MAX_CHOICES` either (record_rules)."""
    result = as_result(answered([choice(i) for i in range(100)], {"n": 1000}))
    assert len(result.all_choices()) == limits.MAX_CHOICES


def test_unasked_choices_are_dropped_when_n_was_not_asked() -> None:
    result = as_result(answered([choice(0, "a"), choice(1, "b")]))
    assert result.choices is None and result.output == "a"


def test_a_later_choice_that_is_not_a_choice_is_dropped_and_the_rest_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="inferq.dispatcher.answer_facts")
    sent = [choice(0, "a"), "junk", {"index": 2, "message": ECHOED}, choice(3, "d")]
    result = as_result(answered(sent, {"n": 4}))
    assert [(c.index, c.content) for c in result.all_choices()] == [(0, "a"), (1, "d")]
    assert "a choice is not an object with a message object" in caplog.text
    assert ECHOED not in caplog.text


@pytest.mark.parametrize("choices", [[], ["junk"], [{"index": 0}], [{"message": "x"}]], ids=repr)
def test_no_readable_first_choice_is_an_unreadable_answer_retried(choices: list[Any]) -> None:
    with pytest.raises(BackendError) as raised:
        answered(choices)
    assert raised.value.retriable and "unreadable body" in str(raised.value)


def test_a_refusal_reaches_the_record() -> None:
    refused = choice(0, None, message={"refusal": "I can't help with that."})
    result = as_result(answered([refused]))
    assert result.choices is not None
    assert (result.choices[0].content, result.choices[0].refusal) == (None, "I can't help with that.")
    assert result.output == ""


@pytest.mark.parametrize(
    "refusal",
    [42, True, ["no"], {"text": ECHOED}, ECHOED * (limits.MAX_REFUSAL_CHARS // len(ECHOED) + 1)],
    ids=["int", "bool", "list", "object", "too long"],
)
def test_a_refusal_that_is_not_text_or_too_long_is_dropped_and_the_answer_kept(
    refusal: object, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="inferq.dispatcher.answer_facts")
    result = as_result(answered([choice(0, "kept", message={"refusal": refusal})]))
    assert result.output == "kept" and all(c.refusal is None for c in result.all_choices())
    assert "refusal dropped" in caplog.text
    assert ECHOED not in caplog.text


def test_the_longest_refusal_allowed_goes_through() -> None:
    longest = "n" * limits.MAX_REFUSAL_CHARS
    result = as_result(answered([choice(0, None, message={"refusal": longest})]))
    assert result.all_choices()[0].refusal == longest


def test_logprobs_far_too_large_are_dropped_and_the_answer_kept(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="inferq.dispatcher.answer_facts")
    huge = {"content": [token(ECHOED, top=20) for _ in range(2_000)], "refusal": None}
    assert len(json.dumps(huge)) > limits.MAX_LOGPROBS_CHARS
    result = as_result(answered([choice(0, "kept", logprobs=huge)], {"logprobs": True}))
    assert result.output == "kept" and result.choices is None
    assert f"logprobs dropped: over {limits.MAX_LOGPROBS_CHARS} characters" in caplog.text
    assert ECHOED not in caplog.text


def test_eight_choices_of_large_logprobs_stay_within_one_kafka_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each choice's logprobs within its bound, all of them past the answer's: the later ones go,
    and the record stays under Kafka's default 1 MB."""
    caplog.set_level(logging.DEBUG, logger="inferq.dispatcher.answer_facts")
    large = {"content": [token("x" * 40, top=20) for _ in range(130)], "refusal": None}
    size = len(json.dumps(large, separators=(",", ":")))
    assert limits.MAX_LOGPROBS_CHARS // 2 < size <= limits.MAX_LOGPROBS_CHARS
    sent = [choice(i, "x" * 1_000, logprobs=large) for i in range(limits.MAX_CHOICES)]
    result = as_result(answered(sent, {"n": limits.MAX_CHOICES, "logprobs": True}))

    kept = [c for c in result.all_choices() if c.logprobs is not None]
    assert len(result.all_choices()) == limits.MAX_CHOICES
    assert 0 < len(kept) < limits.MAX_CHOICES
    assert sum(len(c.logprobs or "") for c in kept) <= limits.MAX_ANSWER_LOGPROBS_CHARS
    assert len(result_codec().encode(result)) < 1_000_000
    assert "in all choices" in caplog.text


def _deep() -> dict[str, Any]:
    nested: Any = [0]
    for _ in range(10):
        nested = [nested]
    return {"content": [token("a") | {"bytes": nested}]}


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("lots", "not an object"),
        ([token("a")], "not an object"),
        ({"content": "a"}, "content is not a list"),
        ({"content": [ECHOED]}, "not an object with its text"),
        ({"content": [token("a") | {"logprob": "-1"}]}, "logprob is not a finite number"),
        ({"content": [token("a") | {"logprob": float("nan")}]}, "logprob is not a finite number"),
        ({"content": [token("a") | {"logprob": True}]}, "logprob is not a finite number"),
        ({"content": [token("a") | {"bytes": [300]}]}, "bytes is not a list of byte values"),
        ({"content": [token("a") | {"bytes": ECHOED}]}, "bytes is not a list of byte values"),
        ({"content": [{k: v for k, v in token("a").items() if k != "top_logprobs"}]}, "top_logprobs"),
        ({"content": [token("a", top=limits.MAX_TOP_LOGPROBS + 1)]}, "top_logprobs"),
        ({"content": [token("a") | {"top_logprobs": [{"token": 1, "logprob": 0}]}]}, "with its text"),
        ({"refusal": [{"token": ECHOED}]}, "refusal: a token's logprob"),
        (_deep(), "nests deeper"),
    ],
    ids=lambda v: repr(v)[:30],
)
def test_logprobs_of_the_wrong_shape_are_dropped_naming_the_problem_not_the_value(
    value: object, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="inferq.dispatcher.answer_facts")
    result = as_result(answered([choice(0, "kept", logprobs=value)], {"logprobs": True}))
    assert result.output == "kept" and result.choices is None
    assert "logprobs dropped" in caplog.text and why in caplog.text
    assert ECHOED not in caplog.text


def test_a_result_with_choices_written_by_v6_reads_with_a_v5_reader() -> None:
    """An old results service (schema v5) reads a v6 record: the first choice, as before."""
    v5 = earlier_schemas("inference_result")[4]
    assert "choices" not in {f["name"] for f in v5["fields"]}
    result = as_result(answered([choice(0, "one"), choice(1, "two")], {"n": 2}))
    new = AvroCodec(load_schema("inference_result"))
    old = AvroCodec(v5)
    old.add_writer(load_schema("inference_result"))
    record = old.decode(new.encode(result.to_record()))
    assert (record["output"], record["finish_reason"]) == ("one", "stop") and "choices" not in record
    assert InferenceResult.from_record(record).all_choices()[0].content == "one"
