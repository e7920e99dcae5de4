"""Hostile records and hostile produce errors on fakes: every rule of record_rules.py and writer.py
seen from outside. Each record ends with its outcome (or a dead letter), no LLM call for what must
not run, and the partition's commit moves past it."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace

import pytest
from confluent_kafka import KafkaError

from inferq.dispatcher import offsets as offsets_module
from inferq.dispatcher.consumer import Partition
from inferq.dispatcher.errors import BackendError
from inferq.dispatcher.tokens.settings import RedisBudgetSettings
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.producer import ProduceError
from inferq.messaging.records import ChatMessage, Status
from inferq.messaging.tiers import Tier
from tests.support.clock import ManualClock
from tests.support.dispatcher_fakes import Rig, encoded, rig, running
from tests.support.kafka import a_request
from tests.support.loop import in_loop
from tests.support.waiting import eventually


def committed_to_end(r: Rig, partition: Partition) -> bool:
    return r.consumer.committed_offset(partition) == len(r.consumer.logs[partition])


@pytest.mark.parametrize("reply_to", ["bad/name", "unit.requests.high", "unit.dlq", "unit.retry"])
@in_loop
async def test_a_disallowed_reply_topic_is_dead_lettered_and_answered_failed_on_the_default(
    reply_to: str,
) -> None:
    bad = a_request("HIGH", reply_to=reply_to)
    good = a_request("HIGH")

    async with running(rig()) as r:
        high = r.partition("HIGH")
        r.consumer.produce(high, encoded(bad))
        r.consumer.produce(high, encoded(good))
        await eventually(lambda: len(r.results()) == 2, "both answered on the default topic")
        await eventually(lambda: committed_to_end(r, high), "the commit past both")
        result = r.results()[bad.request_id]
        assert result.status is Status.FAILED
        assert "reply_to" in (result.error or "")
        [letter] = r.dead_letters()
        assert letter.headers["inferq.request_id"] == bad.request_id.encode()
        assert b"reply_to" in letter.headers["inferq.error"]
        # One dead letter and two results on the default topic: nothing written where it asked.
        assert sorted(r.producer.attempts) == sorted([r.topics.dlq, r.topics.results, r.topics.results])
        assert len(r.backend.models) == 1  # the good one only


@in_loop
async def test_a_result_the_reply_topic_refuses_for_good_becomes_a_dead_letter_and_failed() -> None:
    regional = a_request("MEDIUM", reply_to="unit.results.eu")

    async with running(rig()) as r:
        r.producer.refuse("unit.results.eu", KafkaError.UNKNOWN_TOPIC_OR_PART)
        medium = r.partition("MEDIUM")
        r.consumer.produce(medium, encoded(regional))
        await eventually(lambda: regional.request_id in r.results(), "FAILED on the default topic")
        await eventually(lambda: committed_to_end(r, medium), "the commit")
        result = r.results()[regional.request_id]
        assert result.status is Status.FAILED
        assert "unit.results.eu" in (result.error or "")
        assert [b"result not writable" in d.headers["inferq.error"] for d in r.dead_letters()] == [True]
        assert r.producer.attempts.count("unit.results.eu") == 1  # not tried forever


@in_loop
async def test_a_result_too_large_for_its_topic_is_answered_failed_instead() -> None:
    chat = a_request("HIGH")

    async with running(rig()) as r:
        r.backend.output = "x" * 5_000
        r.producer.max_bytes = 2_000
        r.consumer.produce(r.partition("HIGH"), encoded(chat))
        await eventually(lambda: chat.request_id in r.results(), "an outcome")
        assert r.results()[chat.request_id].status is Status.FAILED
        assert "too large" in (r.results()[chat.request_id].error or "")
        await eventually(lambda: committed_to_end(r, r.partition("HIGH")), "the commit")


@in_loop
async def test_a_dead_letter_too_large_is_cut_and_one_the_dlq_refuses_is_given_up_not_looped() -> None:
    huge_garbage = b"\x00" * 200_000

    async with running(rig()) as r:
        r.producer.max_bytes = 100_000
        low = r.partition("LOW")
        r.consumer.produce(low, huge_garbage)
        await eventually(lambda: len(r.dead_letters()) == 1, "the dead letter, cut")
        [letter] = r.dead_letters()
        assert len(letter.value) == 64 * 1024
        assert letter.headers["inferq.truncated_from"] == b"200000"
        await eventually(lambda: committed_to_end(r, low), "the commit past it")

        r.producer.refuse(r.topics.dlq, KafkaError.TOPIC_AUTHORIZATION_FAILED)
        r.consumer.produce(low, b"more garbage")
        await eventually(lambda: committed_to_end(r, low), "the commit past the unwritable one")
        assert len(r.dead_letters()) == 1


@in_loop
async def test_a_retriable_produce_error_is_waited_out_and_a_fatal_one_stops_the_dispatcher() -> None:
    chat = a_request("HIGH")

    r = rig()
    task = asyncio.create_task(r.dispatcher.run())
    await eventually(lambda: r.dispatcher.health()["assigned"] != 0, "assignment")
    r.producer.refuse(r.topics.results, KafkaError._MSG_TIMED_OUT)  # an outage
    r.consumer.produce(r.partition("HIGH"), encoded(chat))
    await eventually(lambda: r.producer.attempts.count(r.topics.results) >= 2, "tried again")
    assert r.consumer.committed_offset(r.partition("HIGH")) in (None, 0)
    r.producer.refuse(r.topics.results, KafkaError._FATAL, fatal=True)
    async with asyncio.timeout(15):
        with pytest.raises(ProduceError):
            await task
    assert r.consumer.committed_offset(r.partition("HIGH")) in (None, 0)  # redone by the next owner


@in_loop
async def test_a_retry_record_claiming_a_million_attempts_is_exhausted_without_a_call() -> None:
    hostile = replace(a_request("MEDIUM", deadline_ms=60_000), attempt=1_000_000)

    async with running(rig(max_attempts=3)) as r:
        retries = Partition(r.topics.retry, 0)
        r.consumer.produce(retries, encoded(hostile))
        await eventually(lambda: hostile.request_id in r.results(), "an outcome")
        result = r.results()[hostile.request_id]
        assert (result.status, result.attempts) == (Status.FAILED, 3)
        assert "exhausted" in (result.error or "")
        assert r.backend.models == []
        await eventually(lambda: committed_to_end(r, retries), "the commit")


@in_loop
async def test_a_retry_not_due_for_ages_is_held_at_most_the_maximum_backoff() -> None:
    hostile = a_request("MEDIUM", deadline_ms=60_000).retry(not_before_ms=2**62)

    async with running(rig(retry_max_backoff_s=0.3, retry_base_backoff_s=0.1)) as r:
        retries = Partition(r.topics.retry, 0)
        sent = time.monotonic()
        r.consumer.produce(retries, encoded(hostile))
        await eventually(lambda: hostile.request_id in r.results(), "the retry served")
        assert 0.25 <= time.monotonic() - sent < 3.0
        assert r.results()[hostile.request_id].status is Status.OK


@in_loop
async def test_a_retry_claiming_high_for_a_low_scenario_is_served_as_low() -> None:
    brief = replace(a_request("LOW", deadline_ms=60_000), tier=Tier.HIGH).retry(not_before_ms=0)

    async with running(rig(schedule_pin="night")) as r:
        r.consumer.produce(Partition(r.topics.retry, 0), encoded(brief))
        await eventually(lambda: brief.request_id in r.results(), "served")
        assert r.results()[brief.request_id].tier is Tier.LOW
        assert r.backend.models == [r.settings.model_cheap]


@in_loop
async def test_a_created_at_in_the_future_is_clamped_to_now() -> None:
    now = int(time.time() * 1000)
    skewed = a_request("HIGH", created_at_ms=now + 10 * 3_600_000, expire_at_ms=now + 30_000)

    async with running(rig()) as r:
        r.consumer.produce(r.partition("HIGH"), encoded(skewed))
        await eventually(lambda: skewed.request_id in r.results(), "served")
        result = r.results()[skewed.request_id]
        assert result.status is Status.OK
        assert result.enqueued_at_ms <= result.completed_at_ms


@pytest.mark.parametrize(
    "params",
    [
        {"stream": "true"},
        {"n": "50"},
        {"model": '"gpt-huge"'},
        {"messages": "[]"},
        {"functions": "[]"},
        {"logit_bias": '{"1": 101}'},
        {"modalities": '["audio"]'},
    ],
)
@in_loop
async def test_params_the_backend_must_never_see_are_refused_before_any_call(params: dict[str, str]) -> None:
    hostile = a_request("HIGH", params=params)

    async with running(rig()) as r:
        r.consumer.produce(r.partition("HIGH"), encoded(hostile))
        await eventually(lambda: hostile.request_id in r.results(), "an outcome")
        assert r.results()[hostile.request_id].status is Status.FAILED
        assert r.backend.calls == []
        assert len(r.dead_letters()) == 1


@in_loop
async def test_allowed_params_reach_the_backend_decoded() -> None:
    chat = a_request("HIGH", params={"temperature": "0.5", "max_tokens": "64"})

    async with running(rig()) as r:
        r.consumer.produce(r.partition("HIGH"), encoded(chat))
        await eventually(lambda: chat.request_id in r.results(), "served")
        assert r.backend.calls[0][1] == {"temperature": 0.5, "max_tokens": 64}


@in_loop
async def test_a_message_with_an_unknown_role_is_refused_without_a_call() -> None:
    robot = a_request("HIGH", messages=[{"role": "robot", "content": "beep"}])

    async with running(rig()) as r:
        r.consumer.produce(r.partition("HIGH"), encoded(robot))
        await eventually(lambda: robot.request_id in r.results(), "an outcome")
        assert r.results()[robot.request_id].status is Status.FAILED
        assert r.backend.calls == []


@in_loop
async def test_poison_counts_against_the_read_ahead_while_dead_letters_cannot_be_written() -> None:
    async with running(rig(budget=1, readahead_per_tier=3)) as r:
        r.producer.hold()  # the broker acknowledges nothing
        high = r.partition("HIGH")
        for i in range(200):
            r.consumer.produce(high, b"garbage %d" % i)
        await asyncio.sleep(0.3)  # many fetch rounds
        # At most the tier's share (read-ahead + budget) of tasks: the rest waits in Kafka.
        assert r.dispatcher.health()["tasks"] <= 3 + 1
        assert high in r.consumer.paused()
        r.producer.release()
        await eventually(lambda: len(r.dead_letters()) == 200, "every dead letter", timeout_s=15)
        await eventually(lambda: committed_to_end(r, high), "the commit to the end")


@in_loop
async def test_expired_records_count_against_the_read_ahead_too() -> None:
    now = int(time.time() * 1000)
    late = [a_request("LOW", created_at_ms=now - 10_000, expire_at_ms=now - 1) for _ in range(50)]

    async with running(rig(budget=1, readahead_per_tier=2)) as r:
        r.producer.hold()
        low = r.partition("LOW")
        for request in late:
            r.consumer.produce(low, encoded(request))
        await asyncio.sleep(0.3)
        assert r.dispatcher.health()["tasks"] <= 2 + 1
        r.producer.release()
        await eventually(lambda: len(r.results()) == 50, "every EXPIRED answer", timeout_s=15)
        assert {res.status for res in r.results().values()} == {Status.EXPIRED}


@in_loop
async def test_a_partition_behind_one_slow_call_stops_at_its_window_of_uncommitted_offsets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(offsets_module, "MAX_UNCOMMITTED", 8)
    slow = a_request("LOW", deadline_ms=60_000, model="slow-model")
    quick = [a_request("LOW", deadline_ms=60_000) for _ in range(20)]

    async with running(rig(schedule_pin="night", budget=4)) as r:
        r.backend.hold("slow-model")
        low = r.partition("LOW")
        for request in [slow, *quick]:
            r.consumer.produce(low, encoded(request))
        await eventually(lambda: len(r.results()) == 7, "the window's quick ones answered")
        await asyncio.sleep(0.2)
        assert len(r.results()) == 7, "went past the window"
        assert low in r.consumer.paused()
        r.backend.release()
        await eventually(lambda: len(r.results()) == 21, "the rest once the head completed")
        await eventually(lambda: committed_to_end(r, low), "the commit to the end")


PRIVATE_PROMPT = "my-secret-prompt-7731"
PRIVATE_OUTPUT = "the-secret-answer-5519"
API_KEY = "sk-private-key-0042"
PASSWORD = "hunter2-private-8812"  # noqa: S105 - a test value, looked for in the logs


def test_logs_never_hold_prompts_outputs_or_keys(caplog: pytest.LogCaptureFixture) -> None:
    def prompt(tier: str, **overrides: object) -> object:
        return a_request(tier, messages=[{"role": "user", "content": PRIVATE_PROMPT}], **overrides)

    ok, failing = prompt("HIGH"), prompt("MEDIUM", model="failing-model")
    refused = prompt("HIGH", reply_to="bad/name")
    robot = a_request("HIGH", messages=[{"role": PRIVATE_PROMPT, "content": PRIVATE_PROMPT}])
    # A body that decodes up to a string that is not UTF-8: the decoder's error quotes the bytes.
    corrupt = encoded(ok).replace(PRIVATE_PROMPT.encode(), PRIVATE_PROMPT.encode()[:-1] + b"\xff")

    async def scenario() -> None:
        settings = {
            "backend_api_key": API_KEY,
            "max_attempts": 1,
            "kafka": KafkaSettings(topic_prefix="unit", sasl_username="u", sasl_password=PASSWORD),
            "redis": RedisBudgetSettings(password=PASSWORD),
        }
        async with running(rig(**settings)) as r:
            r.backend.output = PRIVATE_OUTPUT

            original = r.backend.complete

            async def complete(model: str, messages, params, *, timeout_s: float):  # type: ignore[no-untyped-def]
                if model == "failing-model":
                    raise BackendError(
                        "backend answered 400 (invalid_request_error)", retriable=False, status=400
                    )
                return await original(model, messages, params, timeout_s=timeout_s)

            r.backend.complete = complete  # type: ignore[method-assign]
            for request, tier in ((ok, "HIGH"), (failing, "MEDIUM"), (refused, "HIGH"), (robot, "HIGH")):
                r.consumer.produce(r.partition(tier), encoded(request))  # type: ignore[arg-type]
            r.consumer.produce(r.partition("LOW"), corrupt)
            r.consumer.produce(r.partition("LOW"), PRIVATE_PROMPT.encode())
            await eventually(lambda: len(r.results()) == 4, "four outcomes")
            await eventually(lambda: len(r.dead_letters()) == 5, "five dead letters")
            assert r.results()[ok.request_id].output == PRIVATE_OUTPUT  # it did pass through

    with caplog.at_level(logging.DEBUG):
        asyncio.run(scenario())
    assert caplog.records, "nothing logged: the test would prove nothing"
    for record in caplog.records:
        text = record.getMessage() + (record.exc_text or "")
        for secret in (PRIVATE_PROMPT, PRIVATE_OUTPUT, API_KEY, PASSWORD, PRIVATE_PROMPT[:-1]):
            assert secret not in text, f"{secret!r} logged: {text!r}"


@in_loop
async def test_a_dead_letter_reason_from_a_decoder_does_not_quote_the_record() -> None:
    chat = a_request("HIGH", messages=[{"role": "user", "content": PRIVATE_PROMPT}])
    corrupt = encoded(chat).replace(PRIVATE_PROMPT.encode(), PRIVATE_PROMPT.encode()[:-1] + b"\xff")

    async with running(rig()) as r:
        r.consumer.produce(r.partition("HIGH"), corrupt)
        await eventually(lambda: len(r.dead_letters()) == 1, "the dead letter")
        reason = r.dead_letters()[0].headers["inferq.error"]
        assert PRIVATE_PROMPT[:-1].encode() not in reason
        assert b"UnicodeDecodeError" in reason


@in_loop
async def test_messages_are_forwarded_unchanged() -> None:
    chat = replace(a_request("HIGH"), messages=(ChatMessage("system", "be brief"), ChatMessage("user", "hi")))

    async with running(rig()) as r:
        r.consumer.produce(r.partition("HIGH"), encoded(chat))
        await eventually(lambda: chat.request_id in r.results(), "served")
        assert r.backend.calls[0][0] == [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
        ]


@in_loop
async def test_a_held_back_retry_keeps_its_due_time_across_a_rebalance() -> None:
    clock = ManualClock()
    due_in_ms = 600
    retry = a_request("MEDIUM", deadline_ms=60_000).retry(not_before_ms=clock() + due_in_ms)

    async with running(rig(clock_ms=clock)) as r:
        retries = Partition(r.topics.retry, 0)
        r.consumer.produce(retries, encoded(retry))
        await eventually(lambda: retries in r.consumer.paused(), "held back")
        held_before = len(r.consumer.seeks)
        await r.consumer.rebalance(set(r.consumer.logs))  # handed straight back, read again
        # Read again after the rebalance while the clock stands still: held back again, not served.
        await eventually(lambda: (retries, 0) in r.consumer.seeks[held_before:], "held back again")
        assert retry.request_id not in r.results(), "served early after the rebalance"
        clock.advance(due_in_ms)
        await eventually(lambda: retry.request_id in r.results(), "served once due")
        dispatched_at_ms = r.results()[retry.request_id].dispatched_at_ms
        assert dispatched_at_ms is not None
        assert retry.not_before_ms is not None
        assert dispatched_at_ms >= retry.not_before_ms, "served early after the rebalance"


@in_loop
async def test_an_unknown_topic_answer_for_the_pipelines_own_topic_is_waited_out() -> None:
    chat = a_request("HIGH")

    async with running(rig()) as r:
        r.producer.refuse(r.topics.results, KafkaError.UNKNOWN_TOPIC_OR_PART)  # a broker loading up
        r.consumer.produce(r.partition("HIGH"), encoded(chat))
        await eventually(lambda: r.producer.attempts.count(r.topics.results) >= 2, "tried again")
        assert r.dead_letters() == []
        del r.producer.refusals[r.topics.results]
        await eventually(lambda: chat.request_id in r.results(), "written once the topic is known", 10)
        assert r.results()[chat.request_id].status is Status.OK
