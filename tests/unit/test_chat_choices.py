"""`n`, `logprobs` and `top_logprobs` through ingest's two APIs, and every choice back in the sync
body: each body validates as the SDK's `ChatCompletion` (several choices, logprobs, a refusal);
the parameters reach the record as asked; hostile values are refused naming the parameter, and
nothing is queued."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion

from inferq.ingest.chat import answers
from inferq.messaging import limits
from inferq.messaging.codec import result_codec
from inferq.messaging.records import Choice, InferenceResult
from tests.unit.test_chat_answers_contract import result
from tests.unit.test_chat_completions import ACME, HI, NARROW, answered, ingest, run

CALLS = '[{"id":"call_1","type":"function","function":{"name":"weather","arguments":"{}"}}]'


def token(text: str, logprob: float, top: int) -> dict[str, Any]:
    alternatives = [{"token": text + "~" * k, "logprob": logprob - k, "bytes": None} for k in range(top)]
    return {"token": text, "logprob": logprob, "bytes": list(text.encode()), "top_logprobs": alternatives}


LOGPROBS = {"content": [token("sim ", -0.25, 2), token("rep", -1.5, 2)], "refusal": None}
TWO = (
    Choice(0, "first", "stop", logprobs=json.dumps(LOGPROBS)),
    Choice(1, "second, cu", "length"),
)


def test_two_choices_are_two_sdk_choices_with_their_indices_texts_and_reasons() -> None:
    completion = ChatCompletion.model_validate(answers.completion(result(output="first", choices=TWO)))

    assert [(c.index, c.message.content, c.finish_reason) for c in completion.choices] == [
        (0, "first", "stop"),
        (1, "second, cu", "length"),
    ]
    assert completion.choices[1].logprobs is None


def test_logprobs_reach_the_sdk_as_its_own_type() -> None:
    completion = ChatCompletion.model_validate(answers.completion(result(output="first", choices=TWO)))

    logprobs = completion.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    assert [(t.token, t.logprob) for t in logprobs.content] == [("sim ", -0.25), ("rep", -1.5)]
    assert [t.token for t in logprobs.content[0].top_logprobs] == ["sim ", "sim ~"]
    assert logprobs.content[0].bytes == list(b"sim ")


def test_a_refusal_is_the_sdks_refusal_with_no_content() -> None:
    refused = (Choice(0, None, "stop", refusal="I can't help with that."),)
    completion = ChatCompletion.model_validate(answers.completion(result(output="", choices=refused)))

    message = completion.choices[0].message
    assert (message.content, message.refusal) == (None, "I can't help with that.")
    assert completion.choices[0].finish_reason == "stop"


def test_choices_that_call_tools_keep_their_calls_and_content_null() -> None:
    calling = (Choice(0, "", "tool_calls", tool_calls=CALLS), Choice(1, "in text", "stop"))
    completion = ChatCompletion.model_validate(answers.completion(result(output="", choices=calling)))

    first, second = completion.choices
    assert first.message.content is None and first.message.tool_calls is not None
    assert first.message.tool_calls[0].id == "call_1"
    assert (second.message.content, second.message.tool_calls) == ("in text", None)


def test_a_result_without_choices_is_one_choice_as_before() -> None:
    """A v5 result (a dispatcher not yet upgraded), or an answer with nothing but the first choice."""
    completion = ChatCompletion.model_validate(answers.completion(result(choices=None)))
    assert [(c.index, c.message.content, c.logprobs) for c in completion.choices] == [(0, "cut sh", None)]


@pytest.mark.parametrize(
    "stored",
    [
        Choice(0, "x", "eos"),
        Choice(0, "x", "stop", logprobs="not json"),
        Choice(0, "x", "stop", logprobs="[1]"),
    ],
    ids=["unknown reason", "logprobs not JSON", "logprobs not an object"],
)
def test_a_choice_a_record_writer_got_wrong_still_validates(stored: Choice) -> None:
    """A record written past the dispatcher's checks (a producer on the reply topic): "stop" and no
    logprobs rather than a body the SDK refuses."""
    body = answers.completion(result(output="x", choices=(stored,)))
    completion = ChatCompletion.model_validate(body)
    assert (completion.choices[0].finish_reason, completion.choices[0].logprobs) == ("stop", None)


# --- through the endpoint -------------------------------------------------------------------------


@run
async def test_n_and_logprobs_reach_the_record_and_every_choice_reaches_the_sdk(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        client = openai.AsyncOpenAI(base_url=f"{svc.url}/v1", api_key=ACME.key, max_retries=0)
        call = client.chat.completions.create(model="inferq", messages=HI, n=2, logprobs=True, top_logprobs=2)
        completion = await answered(svc, call, output="first", choices=TWO)
        await client.close()
        record = await svc.next_request(0)

    assert dict(record.params or {}) == {"n": "2", "logprobs": "true", "top_logprobs": "2"}
    assert [c.index for c in completion.choices] == [0, 1]
    assert [c.message.content for c in completion.choices] == ["first", "second, cu"]
    assert completion.choices[0].logprobs is not None


@run
async def test_the_defaults_ask_for_nothing_and_need_no_entitlement(tmp_path: Path) -> None:
    """n 1 and logprobs false are OpenAI's defaults: not written, so a tenant entitled to neither
    may send them (as some clients always do)."""
    async with ingest(tmp_path) as svc, svc.http(NARROW) as http:
        body = {"model": "inferq-fast", "messages": HI, "n": 1, "logprobs": False}
        response = await answered(svc, http.post("/v1/chat/completions", json=body))
        assert response.status_code == 200, response.text
        assert (await svc.next_request(0)).params is None
        refused = await http.post("/v1/chat/completions", json=body | {"n": 2})
        assert refused.status_code == 403
        assert refused.json()["error"]["param"] == "params.n"
        refused = await http.post("/v1/chat/completions", json=body | {"logprobs": True})
        assert refused.status_code == 403
        assert len(svc.producer.sent) == 1


HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("n 0", {"n": 0}, "n"),
    ("n over the bound", {"n": limits.MAX_CHOICES + 1}, "n"),
    ("n a string", {"n": "2"}, "n"),
    ("n a boolean", {"n": True}, "n"),
    ("n a float", {"n": 2.0}, "n"),
    ("logprobs a string", {"logprobs": "yes"}, "logprobs"),
    ("top_logprobs over 20", {"logprobs": True, "top_logprobs": limits.MAX_TOP_LOGPROBS + 1}, "top_logprobs"),
    ("top_logprobs negative", {"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ("top_logprobs alone", {"top_logprobs": 2}, "top_logprobs"),
    ("top_logprobs with logprobs false", {"logprobs": False, "top_logprobs": 2}, "top_logprobs"),
]


@run
async def test_hostile_n_and_logprobs_are_400s_naming_the_parameter_and_nothing_is_queued(
    tmp_path: Path,
) -> None:
    async with ingest(tmp_path) as svc, svc.http() as http:
        for case, fields, param in HOSTILE:
            body = {"model": "inferq", "messages": HI} | fields
            response = await http.post("/v1/chat/completions", json=body)
            assert response.status_code == 400, (case, response.text)
            error = response.json()["error"]
            assert (error["type"], error["param"]) == ("invalid_request_error", param), (case, error)
        assert svc.producer.sent == []


@run
async def test_the_native_api_takes_the_same_values_and_refuses_the_same(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc, svc.http() as http:
        asked = {"n": 3, "logprobs": True, "top_logprobs": 0}
        native = {"scenario": "realtime_chat", "messages": HI, "params": asked}
        accepted = await http.post("/v1/requests", json=native)
        assert accepted.status_code == 202, accepted.text
        assert dict((await svc.next_request(0)).params or {}) == {
            "n": "3",
            "logprobs": "true",
            "top_logprobs": "0",
        }
        for case, fields, param in HOSTILE:
            refused = await http.post("/v1/requests", json=native | {"params": fields})
            assert refused.status_code == 422, (case, refused.text)
            fields_named = [p["field"] for p in refused.json()["problems"]]
            assert any(f in (f"params.{param}", "params") for f in fields_named), (case, fields_named)
        assert len(svc.producer.sent) == 1


def test_a_result_record_carries_every_choice_through_the_codec() -> None:
    written = result(output="first", choices=TWO)
    back = result_codec().decode(result_codec().encode(written))
    assert back == written
    assert back.all_choices() == TWO
    plain: InferenceResult = result(choices=None)
    assert result_codec().decode(result_codec().encode(plain)).all_choices() == (
        Choice(0, "cut sh", "length", None),
    )
