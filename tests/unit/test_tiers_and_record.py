import pytest
from pydantic import ValidationError
from starlette.datastructures import Headers

from inferq.ingest.chat.body import ChatCompletionBody
from inferq.ingest.chat.record import chat_record
from inferq.ingest.deadlines import DeadlineInPastError
from inferq.ingest.record import RecordRules, submitted_record
from inferq.ingest.validation import SubmitRequest, describe
from inferq.messaging.codec import request_codec
from inferq.messaging.tiers import DEFAULT_DEADLINES_MS, Tier, TierPolicy
from inferq.messaging.topics import TopicNames

NOW = 1_700_000_000_000


@pytest.mark.parametrize(
    ("scenario", "explicit", "tier"),
    [
        ("realtime_chat", None, Tier.HIGH),
        ("emotion_analysis", None, Tier.MEDIUM),
        ("schedule_plan", None, Tier.MEDIUM),
        ("morning_brief", None, Tier.LOW),
        ("something_new", None, Tier.HIGH),  # unknown: a user may be waiting
        ("morning_brief", Tier.HIGH, Tier.HIGH),  # paid express
        ("emotion_analysis", Tier.LOW, Tier.MEDIUM),  # never below MEDIUM
        ("emotion_analysis", Tier.HIGH, Tier.HIGH),
    ],
)
def test_tier_policy(scenario, explicit, tier):
    assert TierPolicy().tier_for(scenario, explicit) is tier


RULES = RecordRules(
    policy=TierPolicy(),
    deadlines_ms=dict(DEFAULT_DEADLINES_MS),
    topics=TopicNames("t"),
    region="eu",
    clock_ms=lambda: NOW,
)


def record(**body):
    payload = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "hi"}]} | body
    return submitted_record(SubmitRequest.model_validate(payload), RULES)


def test_a_record_gets_its_tiers_deadline_and_goes_to_its_tiers_topic():
    r = record(scenario="morning_brief")
    assert r.tier is Tier.LOW
    assert RULES.topics.requests(r.tier) == "t.requests.low"
    assert r.expire_at_ms == NOW + 12 * 3_600_000
    assert record().expire_at_ms == NOW + 5_000
    assert record(scenario="emotion_analysis").expire_at_ms == NOW + 30_000


def test_a_record_is_keyed_by_session_so_a_users_chat_stays_in_order():
    assert record(session_id="s1").key == b"s1"
    assert record(session_id="s1", request_id="a").key == record(session_id="s1", request_id="b").key


def test_client_request_id_and_relative_deadline_are_kept():
    r = record(request_id="abc-1", deadline_ms=800)
    assert r.request_id == "abc-1"
    assert r.expire_at_ms == NOW + 800


def test_absolute_deadline_in_the_past_is_refused():
    with pytest.raises(DeadlineInPastError):
        record(expire_at_ms=NOW - 1)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"scenario": "realtime_chat"}, "messages"),
        ({"scenario": "realtime_chat", "messages": []}, "messages"),
        ({"scenario": "realtime_chat", "messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ({"scenario": "realtime_chat", "messages": [{"role": "user"}]}, "messages.0.content"),
        ({"messages": [{"role": "user", "content": "x"}]}, "scenario"),
        ({"scenario": "x", "messages": [{"role": "user", "content": "x"}], "priority": "URGENT"}, "priority"),
        ({"scenario": "x", "messages": [{"role": "user", "content": "x"}], "deadline_ms": -5}, "deadline_ms"),
        (
            {"scenario": "x", "messages": [{"role": "user", "content": "x"}], "request_id": "a b"},
            "request_id",
        ),
        ({"scenario": "x", "messages": [{"role": "user", "content": "x"}], "colour": "red"}, "colour"),
    ],
)
def test_validation_names_the_field(body, field):
    with pytest.raises(ValidationError) as info:
        SubmitRequest.model_validate(body)
    assert field in [p["field"] for p in describe(info.value)]


def test_a_per_tier_setting_given_for_one_tier_keeps_the_others():
    from inferq.dispatcher.settings import DispatcherSettings
    from inferq.ingest.settings import IngestSettings

    dispatcher = DispatcherSettings(typical_latency_s={Tier.HIGH: 0.05})
    assert dispatcher.typical_latency_s == {Tier.HIGH: 0.05, Tier.MEDIUM: 2.8, Tier.LOW: 5.0}
    ingest = IngestSettings(deadlines_ms={Tier.LOW: 60_000})
    assert ingest.deadlines_ms[Tier.HIGH] == 5_000 and ingest.deadlines_ms[Tier.LOW] == 60_000
    with pytest.raises(ValueError, match="must be > 0"):
        DispatcherSettings(typical_latency_s={Tier.LOW: 0})


def test_a_completion_and_a_submission_asking_the_same_get_the_same_record():
    asked = {"temperature": 1, "stop": "END", "max_tokens": 5, "response_format": {"type": "text"}}
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    native = record(
        scenario="emotion_analysis",
        messages=messages,
        request_id="r-1",
        priority="HIGH",
        deadline_ms=900,
        model="m1",
        params=asked,
        stream=True,
    )
    reordered = dict(reversed(asked.items()))
    body = ChatCompletionBody.model_validate(
        {"model": "m1", "messages": messages, "stream": True} | reordered
    )
    # The same choices as headers (the priority in any case), the parameters in another order.
    headers = {
        "x-inferq-scenario": "emotion_analysis",
        "x-inferq-priority": "high",
        "x-inferq-deadline-ms": "900",
    }
    chat = chat_record(
        body,
        Headers(headers),
        RULES,
        models=frozenset({"m1"}),
        default_scenario="realtime_chat",
        request_id="r-1",
        tenant="default",
        max_tier=None,
        max_deadline_ms=None,
    )
    assert chat == native
    assert request_codec().encode(chat) == request_codec().encode(native)
