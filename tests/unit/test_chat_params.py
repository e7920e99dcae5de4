"""The chat-completions fields besides sampling and function calling, at ingest with the official
openai SDK: each reaches the record (what the dispatcher sends the backend) unchanged; each hostile
value is a 400 naming the parameter; a tenant not entitled is refused (403); a field the API gained
later passes through only for the tenant that lists it by name.

The harness (ingest on loopback, a fake reply topic) is test_chat_completions'. The same through the
real broker, dispatcher and simulated backend: tests/e2e/test_openai_sdk.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from inferq.dispatcher.record_rules import RecordRules
from inferq.ingest.validation import SubmitRequest, describe
from inferq.messaging import limits
from inferq.messaging.records import ChatMessage, InferenceRequest
from inferq.messaging.tiers import Tier
from inferq.messaging.topics import TopicNames
from inferq.tenancy.entitlements import apply_entitlements
from inferq.tenancy.errors import TenantsFileError
from inferq.tenancy.keys import hash_key
from inferq.tenancy.loading import parse_tenants
from inferq.tenancy.model import Entitlements, NameSet
from tests.unit.test_chat_completions import (
    BETA,
    HI,
    NARROW,
    PASSTHROUGH,
    answered,
    assert_refused_400,
    ingest,
    run,
)

# A value within bounds for every field this slice forwards, as the SDK takes them.
FORWARDED: dict[str, Any] = {
    "logit_bias": {"50256": -100, "13": 7},
    "user": "end-user-42",
    "metadata": {"app": "companion", "persona": "ada"},
    "max_completion_tokens": 64,
    "reasoning_effort": "low",
    "modalities": ["text"],
    "store": False,
    "safety_identifier": "sid-7",
    "prompt_cache_key": "persona-ada",
    "prompt_cache_retention": "24h",
    "prompt_cache_options": {"mode": "implicit", "ttl": "30m"},
    "service_tier": "flex",
    "verbosity": "high",
    "prediction": {"type": "content", "content": "def greet(): return 'hi'"},
    "web_search_options": {
        "search_context_size": "medium",
        "user_location": {"type": "approximate", "approximate": {"city": "Oslo", "country": "NO"}},
    },
    "moderation": {"model": "omni-moderation-latest", "policy": {"output": {"mode": "block"}}},
}
TOPICS = TopicNames("unit")


def deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@run
async def test_every_field_reaches_the_record_unchanged(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        client = svc.sdk()
        metadata = FORWARDED["metadata"] | {"inferq_priority": "LOW"}
        others = {
            k: v for k, v in FORWARDED.items() if k not in ("metadata", "moderation", "prompt_cache_options")
        }
        completion = await answered(
            svc,
            client.chat.completions.create(
                model="inferq",
                messages=HI,  # type: ignore[arg-type]
                metadata=metadata,
                moderation=FORWARDED["moderation"],
                prompt_cache_options=FORWARDED["prompt_cache_options"],
                **others,
            ),
        )
        assert completion.choices[0].message.content == "hello there"
        request = await svc.next_request(0)
        # metadata without inferq's own key (it chose the tier); everything else as sent.
        assert request.decoded_params() == FORWARDED
        assert request.tier is Tier.LOW
        # `max_completion_tokens` is not renamed: the backend gets the name the caller used.
        assert "max_tokens" not in request.decoded_params()
        # The record passes the dispatcher's rules as it is (what it will send the backend).
        checked = RecordRules(TOPICS, 3, 1_000).check(
            request, source_topic=TOPICS.requests(request.tier), now_ms=request.created_at_ms
        )
        assert checked.params == FORWARDED
        await client.close()


@run
async def test_a_field_the_api_gained_later_passes_through_for_the_tenant_entitled_to_it(
    tmp_path: Path,
) -> None:
    value = {"level": "strict", "categories": ["self-harm", "violence"], "threshold": 0.4}
    async with ingest(tmp_path) as svc:
        client = svc.sdk()
        await answered(
            svc,
            client.chat.completions.create(model="inferq", messages=HI, extra_body={PASSTHROUGH: value}),  # type: ignore[arg-type]
        )
        request = await svc.next_request(0)
        assert request.decoded_params() == {PASSTHROUGH: value}
        assert RecordRules(TOPICS, 3, 1_000).check(
            request, source_topic=TOPICS.requests(request.tier), now_ms=request.created_at_ms
        ).params == {PASSTHROUGH: value}
        await client.close()


# (case, the body's fields besides model and messages, the parameter the 400 names, a phrase of it)
HOSTILE: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "logit_bias too many keys",
        {"logit_bias": {str(i): 1 for i in range(301)}},
        "logit_bias",
        "at most 300",
    ),
    ("logit_bias out of range", {"logit_bias": {"13": 101}}, "logit_bias", "-100 to 100"),
    ("logit_bias a float", {"logit_bias": {"13": 1.5}}, "logit_bias", "integer"),
    ("logit_bias a word key", {"logit_bias": {"hello": 1}}, "logit_bias", "token id"),
    ("logit_bias a list", {"logit_bias": [1, 2]}, "logit_bias", "must be an object"),
    ("metadata 17 pairs", {"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata", "16"),
    ("metadata a number value", {"metadata": {"k": 1}}, "metadata.k", "string"),
    ("metadata a long value", {"metadata": {"k": "v" * 513}}, "metadata.k", "512"),
    ("user a number", {"user": 42}, "user", "string"),
    ("user too long", {"user": "u" * 513}, "user", "512"),
    ("max_completion_tokens 0", {"max_completion_tokens": 0}, "max_completion_tokens", "integer from 1"),
    (
        "max_completion_tokens over the bound",
        {"max_completion_tokens": limits.MAX_COMPLETION_TOKENS + 1},
        "max_completion_tokens",
        "32768",
    ),
    ("max_completion_tokens text", {"max_completion_tokens": "64"}, "max_completion_tokens", "integer"),
    (
        "two different limits",
        {"max_tokens": 10, "max_completion_tokens": 20},
        "max_completion_tokens",
        "not two different values",
    ),
    ("reasoning_effort unknown", {"reasoning_effort": "extreme"}, "reasoning_effort", "must be one of"),
    ("modalities audio", {"modalities": ["text", "audio"]}, "modalities", "audio output is not supported"),
    ("modalities empty", {"modalities": []}, "modalities", "must be a list"),
    ("modalities image", {"modalities": ["image"]}, "modalities", '["text"]'),
    ("store a string", {"store": "yes"}, "store", "true or false"),
    ("service_tier unknown", {"service_tier": "gold"}, "service_tier", "must be one of"),
    ("verbosity a number", {"verbosity": 3}, "verbosity", "must be one of"),
    ("prompt_cache_key too long", {"prompt_cache_key": "k" * 513}, "prompt_cache_key", "512"),
    ("prompt_cache_retention unknown", {"prompt_cache_retention": "1y"}, "prompt_cache_retention", "one of"),
    (
        "prediction too long",
        {"prediction": {"type": "content", "content": "x" * 32_769}},
        "prediction",
        "32768",
    ),
    ("prediction another type", {"prediction": {"type": "file", "content": "x"}}, "prediction", '"content"'),
    (
        "web_search_options unknown size",
        {"web_search_options": {"search_context_size": "huge"}},
        "web_search_options",
        "search_context_size",
    ),
    (
        "web_search_options a long city",
        {
            "web_search_options": {
                "user_location": {"type": "approximate", "approximate": {"city": "c" * 129}}
            }
        },
        "web_search_options",
        "city",
    ),
    ("moderation without a model", {"moderation": {"policy": {}}}, "moderation", "moderation.model"),
    ("functions", {"functions": [{"name": "f"}]}, "functions", "give tools instead"),
    ("function_call", {"function_call": "auto"}, "function_call", "tool_choice"),
    ("audio", {"audio": {"voice": "alloy", "format": "wav"}}, "audio", "audio output is not supported"),
    (
        "a pass-through value too large",
        {PASSTHROUGH: "x" * (limits.MAX_PASSTHROUGH_BYTES + 1)},
        PASSTHROUGH,
        "over 8192 bytes",
    ),
    (
        "a pass-through value too deep",
        {PASSTHROUGH: deep(limits.MAX_PASSTHROUGH_DEPTH + 1)},
        PASSTHROUGH,
        "deeper",
    ),
    (
        "a field nobody is entitled to",
        {"safety_check": True},
        "safety_check",
        "Unrecognized request argument",
    ),
]


@pytest.mark.parametrize(("case", "fields", "param", "phrase"), HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_values_are_400_naming_the_parameter_and_nothing_is_queued(
    tmp_path: Path, case: str, fields: dict[str, Any], param: str, phrase: str
) -> None:
    del case  # the test's id
    assert_refused_400(tmp_path, fields, param, phrase)


@run
async def test_another_tenants_pass_through_entitlement_does_not_apply(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc, svc.http(BETA) as http:
        body = {"model": "inferq", "messages": HI, PASSTHROUGH: {"level": "strict"}}
        response = await http.post("/v1/chat/completions", json=body)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["message"] == f"Unrecognized request argument supplied: {PASSTHROUGH}"
        assert (error["param"], error["code"]) == (PASSTHROUGH, "unknown_parameter")
        assert svc.producer.sent == []


@run
async def test_a_tenant_not_entitled_to_a_field_is_403_naming_it(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        narrow = svc.sdk(NARROW)
        for name in ("logit_bias", "reasoning_effort", "max_completion_tokens", "prediction"):
            with pytest.raises(openai.PermissionDeniedError) as refused:
                await narrow.chat.completions.create(model="inferq", messages=HI, **{name: FORWARDED[name]})  # type: ignore[arg-type]
            assert name in str(refused.value)
        # The end user and the request's labels are every tenant's unless its file says false.
        await answered(
            svc,
            narrow.chat.completions.create(
                model="inferq", messages=HI, user="u-1", metadata={"a": "b"}, store=True
            ),  # type: ignore[arg-type]
        )
        assert (await svc.next_request(0)).decoded_params() == {
            "user": "u-1",
            "metadata": {"a": "b"},
            "store": True,
        }
        await narrow.close()


def a_record(params: dict[str, Any]) -> InferenceRequest:
    return InferenceRequest(
        request_id="r",
        scenario="realtime_chat",
        tier=Tier.HIGH,
        created_at_ms=1_000,
        expire_at_ms=31_000,
        messages=(ChatMessage("user", "hi"),),
        tenant="acme",
        params={k: json.dumps(v) for k, v in params.items()},
    )


def entitled(**params: float | None) -> Entitlements:
    return Entitlements(max_tier=Tier.HIGH, scenarios=NameSet.everything(), params=params)


def test_a_max_tokens_cap_caps_max_completion_tokens_and_is_not_added_beside_it() -> None:
    capped = entitled(max_tokens=100)
    over = apply_entitlements(a_record({"max_completion_tokens": 101}), capped, default_reply_topic="r")
    assert [(p.field, p.problem) for p in over.problems] == [
        ("params.max_completion_tokens", "over this tenant's cap, 100")
    ]
    within = apply_entitlements(a_record({"max_completion_tokens": 100}), capped, default_reply_topic="r")
    assert within.allowed and within.narrowed == ()
    assert within.request.decoded_params() == {"max_completion_tokens": 100}
    # Listed by its own name, it is still within the max_tokens cap.
    both = entitled(max_tokens=100, max_completion_tokens=None)
    assert not apply_entitlements(
        a_record({"max_completion_tokens": 500}), both, default_reply_topic="r"
    ).allowed


def test_a_records_pass_through_field_is_refused_for_a_tenant_that_does_not_list_it() -> None:
    record = a_record({"safety_checks": {"level": "strict"}})
    assert apply_entitlements(record, entitled(safety_checks=None), default_reply_topic="r").allowed
    verdict = apply_entitlements(record, entitled(other_field=None), default_reply_topic="r")
    assert [(p.field, p.problem) for p in verdict.problems] == [
        ("params.safety_checks", "not entitled to set this parameter")
    ]
    reserved = apply_entitlements(a_record({"functions": []}), entitled(), default_reply_topic="r")
    assert reserved.problems[0].problem == "not a parameter any request may set"


def tenants_file(params: str) -> str:
    return (
        f'[[tenants]]\nname = "acme"\nkeys = ["{hash_key("iq_test-key")}"]\nweight = 1\n'
        '[tenants.entitlements]\nmax_tier = "HIGH"\nscenarios = ["*"]\n'
        f"[tenants.entitlements.params]\n{params}\n"
    )


def test_the_tenants_file_lists_pass_through_names_and_takes_the_defaults_away_with_false() -> None:
    tenant = parse_tenants(tenants_file("safety_checks = true\nuser = false\nstore = false")).get("acme")
    assert tenant is not None
    e = tenant.entitlements
    assert e.passthrough == {"safety_checks"}
    assert "user" not in e.params and "store" not in e.params and "metadata" in e.params


@pytest.mark.parametrize(
    ("line", "phrase"),
    [
        ("Safety-Checks = true", "not a parameter any request may set"),
        ("stream_options = true", "not a parameter any request may set"),
        ("functions = true", "not a parameter any request may set"),
        ("safety_checks = 3", "must be true or false"),
    ],
)
def test_the_tenants_file_refuses_names_that_cannot_pass_through(line: str, phrase: str) -> None:
    with pytest.raises(TenantsFileError) as refused:
        parse_tenants(tenants_file(line))
    [problem] = refused.value.problems
    assert phrase in str(problem)
    with pytest.raises(ValueError, match="not allowed parameters"):
        entitled(**{"Safety-Checks": None})


def test_the_native_api_takes_the_same_fields_with_the_same_rules() -> None:
    body = SubmitRequest.model_validate({"scenario": "realtime_chat", "messages": HI, "params": FORWARDED})
    assert body.params is not None and body.params.as_json_values() == FORWARDED
    hostile = {
        "logit_bias": {str(i): 1 for i in range(301)},
        "metadata": {"inferq_priority": "HIGH"},
        "modalities": ["audio"],
        "max_completion_tokens": 0,
    }
    for name, value in hostile.items():
        with pytest.raises(ValueError) as refused:
            SubmitRequest.model_validate({"scenario": "x", "messages": HI, "params": {name: value}})
        [problem] = describe(refused.value)  # type: ignore[arg-type]
        assert problem["field"] == f"params.{name}", problem
    with pytest.raises(ValueError) as refused:
        SubmitRequest.model_validate(
            {"scenario": "x", "messages": HI, "params": {"max_tokens": 5, "max_completion_tokens": 6}}
        )
    assert "not two different values" in str(refused.value)
