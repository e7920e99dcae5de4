"""`apply_entitlements`: the one pure check of a request against its tenant's entitlements."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from inferq.messaging.records import ChatMessage, InferenceRequest
from inferq.messaging.tiers import Tier
from inferq.tenancy.entitlements import Problem, apply_entitlements
from inferq.tenancy.model import Entitlements, NameSet

RESULTS = "inferq.results"
NARROW = Entitlements(
    max_tier=Tier.MEDIUM,
    scenarios=NameSet.of(["realtime_chat", "batch"]),
    models=NameSet.of(["fast"]),
    params={"temperature": 1.0, "max_tokens": 256, "stop": None, "presence_penalty": 0.5},
    max_estimated_tokens=1_000,
    max_deadline_ms=60_000,
    reply_topics=NameSet.of(["inferq.results.eu"]),
)


def request(**fields: Any) -> InferenceRequest:
    params = fields.pop("params", None)
    base = InferenceRequest(
        request_id="r",
        scenario="batch",
        tier=Tier.LOW,
        created_at_ms=1_000,
        expire_at_ms=31_000,
        messages=(ChatMessage("user", "hi"),),
        tenant="acme",
        params=None if params is None else {k: json.dumps(v) for k, v in params.items()},
    )
    return replace(base, **fields)


def check(req: InferenceRequest, e: Entitlements = NARROW):
    return apply_entitlements(req, e, default_reply_topic=RESULTS)


def test_a_request_within_the_entitlements_is_allowed_unchanged():
    req = request(params={"temperature": 0.7, "max_tokens": 100, "stop": ["\n"]}, model="fast")
    verdict = check(req)
    assert verdict.allowed and verdict.request is req and verdict.narrowed == ()


def test_a_tier_above_max_tier_is_capped_not_refused():
    verdict = check(request(scenario="realtime_chat", tier=Tier.HIGH, params={"max_tokens": 5}))
    assert verdict.allowed
    assert verdict.request.tier is Tier.MEDIUM
    assert verdict.narrowed == ("tier",)


def test_a_max_tokens_cap_fills_a_request_that_sets_none():
    verdict = check(request())
    assert verdict.narrowed == ("params.max_tokens",)
    assert verdict.request.decoded_params() == {"max_tokens": 256}
    kept = check(request(params={"temperature": 0.1}))
    assert kept.request.decoded_params() == {"temperature": 0.1, "max_tokens": 256}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"scenario": "emotion_analysis"},
            [("scenario", "not entitled to this scenario (entitled: batch, realtime_chat)")],
        ),
        ({"model": "accurate"}, [("model", "not entitled to choose this model (entitled: fast)")]),
        (
            {
                "messages": (
                    ChatMessage("user", "a"),
                    ChatMessage("system", "b"),
                    ChatMessage("system", "c"),
                    ChatMessage("developer", "d"),
                )
            },
            [
                ("messages.1.role", "not entitled to 'system' messages (entitled: assistant, tool, user)"),
                ("messages.3.role", "not entitled to 'developer' messages (entitled: assistant, tool, user)"),
            ],
        ),
        ({"estimated_tokens": 1_001}, [("estimated_tokens", "over this tenant's maximum, 1000")]),
        ({"expire_at_ms": 61_001 + 1}, [("expire_at_ms", "deadline over this tenant's maximum, 60000 ms")]),
        (
            {"reply_to": "inferq.results.us"},
            [("reply_to", "not entitled to this reply topic (entitled: inferq.results.eu)")],
        ),
        ({"params": {"seed": 1}}, [("params.seed", "not entitled to set this parameter")]),
        ({"params": {"temperature": 1.5}}, [("params.temperature", "over this tenant's cap, 1")]),
        ({"params": {"max_tokens": 257}}, [("params.max_tokens", "over this tenant's cap, 256")]),
        (
            {"params": {"presence_penalty": -0.6}},
            [("params.presence_penalty", "over this tenant's cap, 0.5")],
        ),
        ({"params": {"temperature": "hot"}}, [("params.temperature", "over this tenant's cap, 1")]),
        ({"params": {"stream": True}}, [("params.stream", "not a parameter any request may set")]),
    ],
)
def test_each_field_outside_the_entitlements_is_one_problem(fields, expected):
    verdict = check(request(**fields))
    assert not verdict.allowed
    assert verdict.problems == tuple(Problem(f, p) for f, p in expected)
    assert verdict.request.tier is Tier.LOW and verdict.narrowed == ()


def test_the_default_and_the_entitled_reply_topics_are_allowed():
    assert check(request(reply_to=RESULTS)).allowed
    assert check(request(reply_to="inferq.results.eu")).allowed


def test_every_problem_is_reported_at_once_and_a_refused_request_is_not_narrowed():
    verdict = check(
        request(scenario="x", tier=Tier.HIGH, model="m", estimated_tokens=5_000, params={"seed": 3})
    )
    assert [p.field for p in verdict.problems] == ["scenario", "model", "estimated_tokens", "params.seed"]
    assert verdict.request.tier is Tier.HIGH


def test_params_that_are_not_json_are_one_problem():
    verdict = check(replace(request(), params={"temperature": "{nope"}))
    assert verdict.problems == (Problem("params", "not a map of JSON values"),)


def test_the_unrestricted_entitlements_allow_anything_the_global_rules_allow():
    everything = Entitlements.unrestricted()
    req = request(
        scenario="anything",
        tier=Tier.HIGH,
        model="any-model",
        messages=(ChatMessage("system", "s"), ChatMessage("developer", "d")),
        estimated_tokens=2_000_000,
        expire_at_ms=1_000 + 7 * 86_400_000,
        reply_to="inferq.results.ap",
        params={"temperature": 2, "top_p": 1, "max_tokens": 32_768, "seed": -5, "frequency_penalty": -2},
    )
    verdict = check(req, everything)
    assert verdict.allowed and verdict.request is req


def test_the_function_is_pure():
    req = request(scenario="realtime_chat", tier=Tier.HIGH)
    assert check(req) == check(req)
    assert req.tier is Tier.HIGH and req.params is None
